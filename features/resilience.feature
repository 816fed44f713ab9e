Feature: Resilience to provider incidents
  A provider's list is a report, not the truth: real APIs answer with empty or partial lists
  and fail for minutes during incidents. The virtual kubelet never deletes or replaces a
  healthy workload on that word alone (a workload is lost only after it is missing from
  several consecutive lists over a minimum time, longer still when most workloads vanish at
  once); a workload that is truly gone is replaced exactly once.

  Background:
    Given a virtual kubelet with the provider under test
    And the provider supports fault injection
    And a deployment "serve" with 3 GPU replicas is Running

  Scenario: An empty list leaves every pod Running
    When the provider answers the next 4 lists empty
    Then for 6 seconds every replica of deployment "serve" stays Running on its own workload
    And the provider saw no create and no delete since the incident began

  Scenario: A list missing one workload leaves every pod Running
    When the provider leaves the workload of one replica of deployment "serve" out of the next 3 lists
    Then for 6 seconds every replica of deployment "serve" stays Running on its own workload
    And the provider saw no create and no delete since the incident began

  Scenario: A list failing for several intervals leaves every pod Running
    When the provider's list fails for the next 6 calls
    Then for 6 seconds every replica of deployment "serve" stays Running on its own workload
    And the provider saw no create and no delete since the incident began

  Scenario: A workload truly gone is replaced exactly once
    When the provider loses the workload of one replica of deployment "serve"
    Then that replica becomes Failed with reason "ProviderLost"
    And deployment "serve" returns to 3 Running replicas, each with exactly one workload
    And the provider saw exactly 1 create and no delete since the incident began

  Scenario: A second workload for one pod is deleted and the first kept
    When the provider holds a second workload for one replica of deployment "serve"
    Then within 20 seconds that replica is back to exactly one workload, the one it had
    And that replica has an event "DuplicateWorkload"
    And for 3 seconds every replica of deployment "serve" stays Running on its own workload
