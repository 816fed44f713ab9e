Feature: Statelessness across crashes
  The virtual kubelet can be killed with SIGKILL at any instant. After a restart it converges
  with no workload created twice and none leaked.

  Background:
    Given a virtual kubelet with the provider under test

  @slow
  Scenario: Killed at random moments during a churn of creates and deletes
    Given the provider supports many concurrent workloads
    When 12 GPU pods are created and 5 of them deleted while the virtual kubelet is killed 3 times at random moments
    And the virtual kubelet is started again
    Then every remaining pod becomes Running
    And every pod has exactly one workload at the provider
    And no workload was created twice
    And the provider runs no workload without a pod
