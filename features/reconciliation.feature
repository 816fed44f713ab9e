Feature: Reconciliation
  The virtual kubelet holds no state of its own: at start-up it re-derives everything from the
  pods bound to its node and from one list of every provider, and at run time it carries
  provider-side changes to the pods' status.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: A restarted virtual kubelet adopts running pods, creates pending ones and cleans up deleted ones
    Given a GPU pod "keeps-running" is Running
    And a GPU pod "deleted-while-down" is Running
    When the virtual kubelet is stopped
    And I delete pod "deleted-while-down"
    And I create a GPU pod "created-while-down"
    And the virtual kubelet is started again
    Then pod "keeps-running" is Running with the same workload as before
    And pod "created-while-down" becomes Running
    And pod "deleted-while-down" is gone and so is its workload
    And every pod has exactly one workload at the provider
    And no workload was created twice

  Scenario: A replaced virtual kubelet touches nothing that did not change
    Given a GPU pod "steady" is Running
    And a GPU pod "also-steady" is Running
    When the virtual kubelet is replaced
    Then the new virtual kubelet has finished its start-up reconcile
    And pod "steady" is Running with the same workload as before
    And the provider saw no new create and no pod was written

  Scenario: A change at the provider reaches the pod's status
    Given the provider supports fault injection
    And a GPU pod "job" with restart policy "Never" is Running
    When the workload of pod "job" exits with code 0
    Then pod "job" becomes Succeeded
