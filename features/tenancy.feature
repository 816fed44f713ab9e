Feature: Tenancy
  Teams share the virtual node. What one of them may do in its own namespace (edit its pods,
  their annotations and Services) reaches no other team's traffic, pods or spend. The
  annotations the virtual kubelet writes on its pods are its own records: it never reads them
  back as a user's request (a Service's EndpointSlices come from what it observed of the
  workload), and where the chart runs, its ValidatingAdmissionPolicy refuses them to anyone
  else. The tenant here is a user bound to the `edit` role in the scenario's namespace.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: An annotation a tenant writes on a pod does not steer its Service
    When I create GPU pods "ip-a" and "ip-b" publishing port 8080, selected by a Service "ips"
    Then pods "ip-a" and "ip-b" are Running with the addresses their provider gives their workloads
    And the EndpointSlices of Service "ips" list "ip-a" and "ip-b" where they are reached
    And while a tenant points pod "ip-a" at the API server's Service every 100 ms, for 6 of the virtual kubelet's polls the EndpointSlices of Service "ips" list "ip-a" and "ip-b" where they are reached

  Scenario: The virtual kubelet's annotations are refused to tenants
    Given the virtual kubelet runs from the Helm chart
    And a GPU pod "mine" is Running
    Then a tenant is refused writing each annotation the virtual kubelet owns on pod "mine"
    And a tenant is refused creating a pod that carries "gpu-vk.io/published-ports"
