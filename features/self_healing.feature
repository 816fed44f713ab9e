Feature: Self-healing through Kubernetes
  When a provider workload is preempted, fails or vanishes, the virtual kubelet reports the
  truth on the pod and the ReplicaSet machinery replaces it; an HPA over the replicas keeps its
  count, whether a replica is deleted with `kubectl delete pod` or its workload is lost.

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

  @slow
  Scenario: An HPA's replicas are replaced one for one, deleted or lost, and its count holds
    Given the provider supports metrics
    And a deployment "api" with 1 GPU replicas is Running
    And a HorizontalPodAutoscaler keeps deployment "api" at 50% CPU with 2 to 3 replicas
    Then deployment "api" is scaled to 2 replicas
    When I delete one replica of deployment "api"
    Then that replica is gone and so is its workload
    And the workloads of the other replicas are untouched
    And deployment "api" returns to 2 Running replicas, each with exactly one workload
    When the provider loses the workload of one replica of deployment "api"
    Then that replica becomes Failed with reason "ProviderLost"
    And deployment "api" returns to 2 Running replicas, each with exactly one workload
    And the HorizontalPodAutoscaler of deployment "api" holds 2 replicas on the CPU it reads
