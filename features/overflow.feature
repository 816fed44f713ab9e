Feature: Overflow to the virtual node, and back
  Research and production share the cluster's GPUs; research has priority. Production pods that
  opt in (label gpu-vk.io/overflow=true) run on in-cluster GPUs while they fit; when a research
  job of higher priority needs their GPUs (research as its users write it: a PriorityClass the
  operator named once in overflow.handoff.researchPriorityClasses, no label of ours), it waits while their stand-ins start on a provider through the virtual node (60 s, as a
  large image on a GPU cloud; one of them never starts, as one start in 20 does on the
  emulators' realistic profile, and is made again at its start deadline unless the hand-off no
  longer needs it), and takes the GPUs
  once those serve (make-before-break); when the
  in-cluster GPUs are free again for the settle period, the reclaim
  controller moves them back one at a time (label gpu-vk.io/reclaim=true), and the provider is
  left with nothing. Production is written as a new user writes it, without a preStop hook: the
  companion's webhook adds the drain. Throughout, a client in the cluster asks production's Service every 200 ms:
  the replicas on the virtual node answer it where their provider publishes them. Only research
  of the namespaces the operator lists (overflow.handoff.researchNamespaces) is gated: research
  elsewhere preempts as usual and moves no team's production onto paid providers. Runs on kind,
  whose workers carry fake GPUs (2 each).

  Scenario: Production keeps serving while research takes its GPUs, and comes back when they free up
    Given the cluster has in-cluster GPU nodes
    And a virtual kubelet with the overflow companion handing off within 240 seconds, settling for 10 seconds, its provider taking 60 seconds to start a workload and never starting its create number 2, given up after 75 seconds
    Then a research pod of this scenario's namespace is admitted behind the hand-off's gate, and one of another namespace is not
    Given a production deployment "serve" of 4 GPU replicas with an HPA and a PodDisruptionBudget of 3, Running in-cluster
    When a research job of higher priority takes every in-cluster GPU for 40 seconds
    Then every replica of "serve" runs again within 240 seconds, the preempted ones on the virtual node
    And no stand-in is left starting at the provider
    And Service "serve" answers from its replicas on the virtual node
    And "serve" never had fewer than 4 ready replicas
    When the research job has completed
    Then within 150 seconds every replica of "serve" is back in-cluster, each move with a "Reclaimed" event
    And the moves were at least 5 seconds apart
    And Service "serve" answers from in-cluster replicas only
    And every request to Service "serve" was answered
    And the provider runs exactly 0 workloads of this node

  Scenario: A replica that no in-cluster node can take stays on the virtual node and says why
    Given the cluster has in-cluster GPU nodes
    And a virtual kubelet with the provider under test and the overflow companion, settling for 2 seconds
    When I create a reclaimable deployment "pinned" of 1 GPU replica with a node selector only the virtual node matches
    Then the replica of "pinned" runs on the virtual node with a "NotReclaimable" event, and stays there while in-cluster GPUs are free for 15 seconds

  Scenario: An opted-in pod the virtual kubelet cannot run stays Pending in-cluster and says why
    Given the cluster has in-cluster GPU nodes
    And a virtual kubelet with the provider under test and the overflow companion, settling for 10 seconds
    When I create an opted-in pod "too-big" with host networking that asks for 3 GPUs
    Then pod "too-big" stays Pending and unscheduled for 10 seconds
    And pod "too-big" has an event "OverflowRefused"
