Feature: One node, many providers, chosen well
  With several providers behind one virtual node, each pod goes to the cheapest provider that
  can run it now (prices from each provider's own API: RunPod's GPU catalogue, Vast's offer
  search), never to a provider that is failing, and never past the operator's spend limit. The
  decision and its inputs are written on the pod, and a restart of the virtual kubelet keeps
  every decision. `kubectl gpu-vk` (the workspace's kubectl plugin, run with the suite's
  kubeconfig) shows the same: where each pod runs and at what price, which provider is
  unhealthy, and why a held pod waits.

  These scenarios test the virtual kubelet, not one provider: they run once per run, with a
  RunPod and a Vast emulator side by side, on the local testbed.

  Background:
    Given the provider is the first of this run
    And the virtual kubelet runs as a process

  Scenario: The cheapest provider gets the pod and the decision is recorded
    Given a virtual kubelet dispatching to "rp" at 1.89 and "vast" at 0.95 dollars per GPU-hour, cheapest first
    When I create a dispatched pod "cheap"
    Then pod "cheap" runs on provider "vast"
    And pod "cheap" records the decision: "vast" at "$0.95/h", "rp" at "$1.89/h"
    And kubectl gpu-vk pods lists pod "cheap" on provider "vast" at "$0.95/h"

  Scenario: A failing provider gets no new pods while its breaker is open, and gets them again once it recovers
    Given a virtual kubelet dispatching to "rp" at 1.89 and "vast" at 0.95 dollars per GPU-hour, cheapest first
    When provider "vast" fails every call
    Then the node reports provider "vast" unhealthy
    And kubectl gpu-vk providers shows provider "vast" unhealthy
    When I create a dispatched pod "detour"
    Then pod "detour" runs on provider "rp"
    And provider "vast" saw no create while it was failing
    When provider "vast" recovers
    Then the node reports provider "vast" healthy
    When I create a dispatched pod "back"
    Then pod "back" runs on provider "vast"

  Scenario: A spend limit holds a pod Pending and releases it when another pod ends
    Given a spend limit of 1.00 dollars per hour
    And a virtual kubelet dispatching to "rp" at 1.89 and "vast" at 0.95 dollars per GPU-hour, cheapest first
    When I create a dispatched pod "first"
    Then pod "first" runs on provider "vast"
    When I create a dispatched pod "second"
    Then pod "second" waits Pending with reason "LimitReached" naming "maxSpendPerHour"
    And kubectl gpu-vk why "second" exits 4 naming "maxSpendPerHour"
    And no provider saw a create for pod "second"
    When pod "first" is deleted
    Then pod "second" runs on provider "vast"

  Scenario: A restart of the virtual kubelet keeps every decision
    Given a virtual kubelet dispatching to "rp" at 1.89 and "vast" at 0.95 dollars per GPU-hour, cheapest first
    When I create a dispatched pod "one"
    And I create a dispatched pod "two" pinned to "rp"
    Then pod "one" runs on provider "vast"
    And pod "two" runs on provider "rp"
    When the dispatching virtual kubelet is killed and started again
    Then after it has reconciled, it made no create and no pod status write
    And pods "one" and "two" keep their provider and their decision
