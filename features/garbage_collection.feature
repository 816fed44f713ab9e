Feature: Garbage collection
  Provider workloads that belong to this virtual kubelet but have no pod any more are deleted,
  once the pod store is synced and after a grace period. Workloads of other nodes, other
  clusters or of nobody are never touched.

  Background:
    Given a virtual kubelet with the provider under test
    And the provider supports workloads created outside the virtual kubelet

  Scenario: An orphaned workload of this node is collected
    Given a workload owned by this node whose pod does not exist
    Then that workload is deleted within 20 seconds

  Scenario: Workloads of another node, another cluster and of nobody are left alone
    Given a workload owned by another node of this cluster
    And a workload owned by this node name in another cluster
    And a workload that no virtual kubelet created
    And a workload owned by this node whose pod does not exist
    When that workload is deleted within 20 seconds
    Then the other 3 workloads are still running
