Feature: No pod storms
  A pod that a controller would replace is held Pending when the virtual kubelet refuses it, with
  its reason and an Event, instead of failing: a Failed pod is replaced at once by another that
  is refused again, as fast as the API server takes them. Fixing the cause lets the controller's
  pods run with nothing deleted by hand.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario Outline: A Deployment whose pods are refused keeps two held pods, and rolls out once fixed
    Given <setup>
    When I create a deployment "storm" of 2 GPU replicas with <problem>
    Then deployment "storm" has 2 pods held Pending with container reason "<reason>", and no more for a while
    When the cause is fixed: <fix>
    Then deployment "storm" has 2 Running replicas, each with exactly one workload
    And no pod of deployment "storm" ever failed

    Examples:
      | setup                                                 | problem                              | reason            | fix                                       |
      | the provider under test may not receive Secret values | an env var from the Secret "creds"   | SecretsNotAllowed | the provider may receive Secret values    |
      | the virtual kubelet allows only the namespace "prod"  | nothing wrong                        | NotAllowed        | the namespace is allowed                  |
      | the provider under test may receive Secret values     | a hostPath volume                    | InvalidSpec       | the deployment drops the hostPath volume  |
      | the provider under test may receive Secret values     | 64 GPUs each                        | InvalidSpec       | the deployment asks for 1 GPU             |
