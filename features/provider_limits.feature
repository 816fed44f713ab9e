Feature: Provider API limits
  A provider's documented limits are the adapter's business: a burst of pods is paced to the
  provider's per-endpoint rate limits without any pod seeing a rate-limit error, and a pod the
  provider would refuse for an input limit fails at once with a reason naming the limit.
  Vast only (capability steps): its API enforces a minimum interval per endpoint (rent 4.5 s,
  instance list 1 s, destroy 3 s, offer search 10 a minute; the emulator at a tenth, as the
  VK is paced) and limits each env entry to 256 characters.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: A burst of 30 pods is paced, and no rate-limit answer reaches a pod
    Given the provider supports per-endpoint rate limits
    When I create 30 GPU pods "burst" at once
    Then all 30 pods "burst" become Running within 180 seconds
    And no pod "burst" has a ProviderError event or condition
    And the provider runs exactly 30 workloads of this node

  Scenario: An env value over the provider's entry limit fails naming the limit
    Given the provider supports a 256-character limit per env entry
    When I create a GPU pod "big-env" with an env var "PROMPT" of 300 characters
    Then pod "big-env" becomes Failed with reason "InvalidSpec"
    And the message of pod "big-env" names "PROMPT" and "256"
    And pod "big-env" has an event "InvalidSpec"
    And no workload exists for pod "big-env"
