Feature: The admission check
  With the virtual kubelet's admission webhook (on in the Helm chart), a pod that targets the
  virtual node and that the virtual kubelet would refuse is refused at create time, with the
  same reason: its controller records FailedCreate and backs off, and no pod exists to fail or
  to be replaced. Fixing the cause lets the controller create its pods.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario Outline: With the admission check, the pods the virtual kubelet would refuse are never created
    Given <setup>
    And the virtual kubelet checks pods at admission
    When I create a deployment "storm" of 2 GPU replicas with <problem>
    Then deployment "storm" has no pod, and its ReplicaSet cannot create one: "<reason>"
    When the cause is fixed: <fix>
    Then deployment "storm" has 2 Running replicas, each with exactly one workload

    Examples:
      | setup                                                 | problem                              | reason            | fix                                       |
      | the provider under test may not receive Secret values | an env var from the Secret "creds"   | SecretsNotAllowed | the provider may receive Secret values    |
      | the virtual kubelet allows only the namespace "prod"  | nothing wrong                        | NotAllowed        | the namespace is allowed                  |
      | the provider under test may receive Secret values     | a hostPath volume                    | InvalidSpec       | the deployment drops the hostPath volume  |
      | the provider under test may receive Secret values     | 64 GPUs each                         | InvalidSpec       | the deployment asks for 1 GPU             |
