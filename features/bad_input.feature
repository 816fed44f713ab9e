Feature: Bad input
  A pod the virtual kubelet cannot run ends with a reason a user can act on and an Event; the
  virtual kubelet keeps running and no provider workload leaks.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario Outline: Pods that can never run fail with a reason
    When I create a GPU pod "bad" with <problem>
    Then pod "bad" becomes Failed with reason "<reason>"
    And pod "bad" has an event "<reason>"
    And no workload exists for pod "bad"

    Examples:
      | problem                                          | reason          |
      | the annotation "gpu-vk.io/provider" set to "nimbus" | UnknownProvider |
      | the annotation "gpu-vk.io/bid-price" set to "cheap" | InvalidSpec     |
      | the annotation "gpu-vk.io/colour" set to "blue"     | InvalidSpec     |
      | a hostPath volume                                | InvalidSpec     |
      | an nfs volume                                    | InvalidSpec     |
      | a privileged container                           | InvalidSpec     |
      | hostNetwork                                      | InvalidSpec     |
      | spec.nodeName set and no toleration of the node's taint | NotAllowed |

  Scenario Outline: A missing mandatory source keeps the pod pending, as the kubelet does
    When I create a GPU pod "needs-config" with an env var from the missing <kind> "absent"
    Then pod "needs-config" is Pending with container reason "CreateContainerConfigError"
    And pod "needs-config" has an event "Failed"
    And no workload exists for pod "needs-config"
    When the <kind> "absent" is created
    Then pod "needs-config" becomes Running

    Examples:
      | kind      |
      | Secret    |
      | ConfigMap |

  Scenario: A missing optional source does not block the pod
    When I create a GPU pod "optional" with an optional env var from the missing Secret "absent"
    Then pod "optional" becomes Running

  Scenario: A provider that may not receive Secrets is sent none
    Given the provider under test may not receive Secret values
    When the Secret "creds" is created
    And I create a GPU pod "secretive" with an env var from the Secret "creds"
    Then pod "secretive" becomes Failed with reason "SecretsNotAllowed"
    And pod "secretive" has an event "SecretsNotAllowed"
    And no workload exists for pod "secretive"
