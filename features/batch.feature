Feature: Batch pods and pods without GPUs
  A Job's pod ends the way its restart policy says, once, even on a provider that restarts a
  container whose command ended (RunPod does, and keeps billing). A pod that requests no GPU
  runs on a provider that accepts CPU-only pods.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario Outline: A Job with restart policy <policy> completes once and is not re-run
    Given the provider supports fault injection
    And a Job "<name>" with restart policy "<policy>" whose pod is Running
    When the command of Job "<name>" ends with code 0
    Then Job "<name>" completes with exactly one pod
    And the provider no longer runs the workload of Job "<name>"

    Examples:
      | name      | policy    |
      | never     | Never     |
      | onfailure | OnFailure |

  Scenario: A CPU pod runs
    Given the provider supports CPU-only pods
    When I create a CPU-only pod "cpu"
    Then pod "cpu" runs on the provider without a GPU
