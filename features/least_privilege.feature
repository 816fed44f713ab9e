Feature: Least privilege
  The Helm chart gives the virtual kubelet's ServiceAccount what it needs for its own node and
  nothing more: RBAC names its Node and its Leases (it may list Nodes, for the cluster's own
  networks, but not get or write another one), Secrets and ConfigMaps are readable only in
  the namespaces whose pods may run on it (config.allowedNamespaces), and a
  ValidatingAdmissionPolicy lets it write only pods bound to its own node, which RBAC alone
  cannot say. Checked as that ServiceAccount (impersonated), with server-side dry runs. Its
  NetworkPolicy admits only the API server to the kubelet API port and the admission webhook.

  Scenario: The virtual kubelet's ServiceAccount reaches only its own node, its pods and its namespaces
    Given the virtual kubelet runs from the Helm chart
    And a virtual kubelet with the provider under test, serving only this scenario's namespace
    And a GPU pod "mine" is Running
    And a pod "elsewhere" bound to another node
    Then as the virtual kubelet, updating and deleting pod "mine" are allowed
    And as the virtual kubelet, updating and deleting pod "elsewhere" are refused: "writes only pods bound to that node"
    And as the virtual kubelet, its own Node and Lease can be read, another node's cannot
    And as the virtual kubelet, Secrets can be read and EndpointSlices written in this scenario's namespace, not in namespace "default"
    And as the virtual kubelet, only EndpointSlices labelled as its own can be written: "writes only EndpointSlices labelled"
    And as the virtual kubelet, its webhook cannot be made to fail closed, see Secrets or call another address: "judges pod creates only"
    And the chart's NetworkPolicy lets only the API server's addresses reach the kubelet API and the admission check
