Feature: Pod IPs
  Every Running pod has a pod IP, as on a real kubelet: the address its provider lists for the
  workload (RunPod's public IP, Vast's public_ipaddr, the Slurm node's address, the remote
  pod's IP), never loopback, link-local or the node's own. A provider that lists none, or one
  that cannot be a pod IP, gives the provider's configured fallback, and the pod's condition
  gpu-vk.io/PodIPRoutable says the address is not where the workload is reached.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: Running pods have the addresses their provider lists, and their Service's EndpointSlice lists them
    When I create GPU pods "ip-a" and "ip-b" publishing port 8080, selected by a Service "ips"
    Then pods "ip-a" and "ip-b" are Running with the pod IPs their provider lists for their workloads
    And pods "ip-a" and "ip-b" have different pod IPs where the provider gives each workload its own
    And the EndpointSlice of Service "ips" lists the pod IPs of "ip-a" and "ip-b"

  Scenario Outline: A provider that lists <what> for its workloads gives the fallback address, with the reason
    Given the provider supports setting the addresses it lists
    And the provider under test has the podIpFallback "192.0.2.77"
    And the provider lists "<listed>" as every workload's address
    When I create a GPU pod "fb" publishing port 8080
    Then pod "fb" is Running with pod IP "192.0.2.77", not routable: "<reason>"
    And pod "fb" has <events> "ProviderAddressRefused" event naming "<listed>"

    Examples:
      | what               | listed    | reason                 | events |
      | a loopback address | 127.0.0.1 | ProviderAddressRefused | one    |
      | no address         |           | ProviderGaveNoAddress  | no     |
