Feature: Self-healing through Kubernetes
  When a provider workload is preempted, fails or vanishes, the virtual kubelet reports the
  truth on the pod and the ReplicaSet machinery replaces it.

  Background:
    Given a virtual kubelet with the provider under test
    And the provider supports fault injection

  Scenario: A preempted replica is replaced
    Given the provider supports preemption
    And a deployment "serve" with 2 interruptible GPU replicas is Running
    When the provider preempts the workload of one replica of deployment "serve"
    Then that replica becomes Failed with reason "Preempted"
    And deployment "serve" returns to 2 Running replicas, each with exactly one workload

  Scenario: A replica whose workload vanished is replaced
    Given a deployment "serve" with 2 GPU replicas is Running
    When the provider loses the workload of one replica of deployment "serve"
    Then that replica becomes Failed with reason "ProviderLost"
    And deployment "serve" returns to 2 Running replicas, each with exactly one workload
