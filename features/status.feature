Feature: Status translation
  Every provider state ends in the documented phase and reason on the pod, and every failure is
  also an Event on the pod.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: A running workload is a Running, Ready pod
    Given a GPU pod "ok" is Running
    Then pod "ok" is Ready with a started container whose id names the provider

  Scenario: A workload that ends cleanly completes the pod
    Given the provider supports fault injection
    And a GPU pod "done" with restart policy "Never" is Running
    When the workload of pod "done" exits with code 0
    Then pod "done" becomes Succeeded
    And the container of pod "done" is terminated with exit code 0 and reason "Completed"

  Scenario: A workload that vanishes fails the pod as lost
    Given the provider supports fault injection
    And a GPU pod "gone" with restart policy "Never" is Running
    When the provider loses the workload of pod "gone"
    Then pod "gone" becomes Failed with reason "ProviderLost"
    And pod "gone" has an event "ProviderLost"

  Scenario: A workload whose host stays silent past the provider's deadline is replaced
    Given the provider supports hosts that go silent
    And a GPU pod "silent" is Running
    When the host of the workload of pod "silent" goes silent
    Then pod "silent" runs again on a new workload, its container restarted
    And pod "silent" has an event "BackOff"

  Scenario: A provider out of capacity keeps the pod pending with a reason
    Given the provider supports fault injection
    And the provider has no GPUs left
    When I create a GPU pod "waits"
    Then pod "waits" is Pending with container reason "ProviderCapacity"
    And pod "waits" has an event "ProviderCapacity"
