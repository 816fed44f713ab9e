Feature: Two replicas, one leader
  Two replicas of the virtual kubelet serve one node. They elect a leader through a Lease: only
  the leader registers the node, reconciles pods, writes their status and serves the kubelet
  API; the other stands by and takes over within a lease duration when the leader dies. Killing
  the leader again and again while pods come and go never gives a pod a second workload and
  never leaks one. The election does not depend on the provider: the scenario runs for the
  first provider of a run only (skipped for the others), which keeps the suite's load and time
  down.

  Scenario: The leader killed 20 times during churn leaves every pod with exactly one workload
    Given a virtual kubelet of 2 replicas electing a leader, with the provider under test
    And the provider supports many concurrent workloads
    And the provider is the first of this run
    And a deployment "serve" with 3 GPU replicas is Running
    When the leader is killed 20 times while deployment "serve" scales between 1 and 4 replicas
    Then each time a standby led within 12 seconds of the old leader's last renewal (lease duration 4 s)
    And no pod ever had two live workloads at once, and no replica reported a "DuplicateWorkload"
    When I scale deployment "serve" to 3 replicas
    Then deployment "serve" has 3 Running replicas, each with exactly one workload
    And the provider runs exactly 3 workloads of this node
    And the node is Ready
    And the node's kubelet API answers a logs request for a replica of deployment "serve"
