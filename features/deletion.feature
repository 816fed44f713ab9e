Feature: Per-pod deletion
  Every pod is addressable on the provider side by its UID, so deleting one pod, or scaling a
  workload down, removes exactly the matching provider workloads and nothing else.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: Graceful deletion removes exactly the pod's workload
    Given the provider supports many concurrent workloads
    And a deployment "web" with 3 GPU replicas is Running
    When I delete one replica of deployment "web"
    Then that replica is gone and so is its workload
    And the workloads of the other replicas are untouched
    And deployment "web" returns to 3 Running replicas, each with exactly one workload

  Scenario: Force deletion still removes the workload
    Given a GPU pod "forced" is Running
    When I force delete pod "forced"
    Then pod "forced" is gone and so is its workload

  Scenario: Scaling down removes one workload per removed replica
    Given the provider supports many concurrent workloads
    And a deployment "batch" with 4 GPU replicas is Running
    When I scale deployment "batch" to 1 replica
    Then deployment "batch" has 1 Running replica, with exactly one workload
    And the provider runs exactly 1 workload of this node
