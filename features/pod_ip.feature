Feature: Pod IPs
  Every Running pod is reached where its provider serves it, as on a real kubelet. Where the
  provider serves the container ports at the address it lists for the workload (a Slurm job's
  node), that address is the pod IP, and the Service controller lists the pod by it. Where it
  publishes them at other port numbers (RunPod's public ports, Vast's port mappings, and so a
  remote cluster whose pods run there), nothing answers at that address on the container port:
  the pod has no IP, its condition gpu-vk.io/PodIPRoutable says where the ports are, and the
  virtual kubelet writes its Services' EndpointSlices with the published address and port. Never
  loopback, link-local, the node's own address or one inside the cluster's own networks (its pod
  and Service ranges and node addresses, which would point a Service at another tenant's pod or
  a cluster Service); a provider that lists none, or one that cannot be a pod IP, gives the
  provider's configured fallback, and the condition says why.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: Running pods are in their Service's EndpointSlices where they are reached
    When I create GPU pods "ip-a" and "ip-b" publishing port 8080, selected by a Service "ips"
    Then pods "ip-a" and "ip-b" are Running with the addresses their provider gives their workloads
    And the EndpointSlices of Service "ips" list "ip-a" and "ip-b" where they are reached

  Scenario: A Service answers from each of its pods where their workloads serve
    Given the provider supports serving its workloads' ports
    When I create GPU pods "ip-a" and "ip-b" publishing port 8080, selected by a Service "ips"
    Then pods "ip-a" and "ip-b" are Running with the addresses their provider gives their workloads
    And the EndpointSlices of Service "ips" list "ip-a" and "ip-b" where they are reached
    And Service "ips" answers from "ip-a" and "ip-b"

  Scenario: Each workload that has an address of its own gives its pod that address
    Given the provider supports serving its workloads' ports
    And the test address range is routed to this machine
    When I create GPU pods "ip-a" and "ip-b" publishing port 8080, selected by a Service "ips"
    Then pods "ip-a" and "ip-b" are Running with the addresses their provider gives their workloads
    And pods "ip-a" and "ip-b" have different addresses

  Scenario Outline: A provider that lists <what> for its workloads gives the fallback address, with the reason
    Given the provider supports setting the addresses it lists
    And the provider under test has the podIpFallback "192.0.2.77"
    And the provider lists "<listed>" as every workload's address
    When I create a GPU pod "fb" publishing port 8080
    Then pod "fb" is Running with pod IP "192.0.2.77", not routable: "<reason>"
    And pod "fb" has <events> "ProviderAddressRefused" event naming "<listed>"

    Examples:
      | what                                 | listed                           | reason                 | events |
      | a loopback address                   | 127.0.0.1                        | ProviderAddressRefused | one    |
      | an address of the cluster's Services | the API server's Service address | ProviderAddressRefused | one    |
      | no address                           |                                  | ProviderGaveNoAddress  | no     |
