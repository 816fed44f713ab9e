Feature: Logs and metrics through the kubelet API
  `kubectl logs`, `kubectl top` and CPU-based HorizontalPodAutoscalers work on offloaded pods
  exactly as on real nodes, where the provider offers logs and usage figures; where it does not,
  the answer says so and names the provider, never invented data.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: kubectl logs returns what the workload printed
    Given the provider supports logs
    And the provider supports fault injection
    And a GPU pod "talker" is Running
    When the workload of pod "talker" prints "hello from the provider"
    Then the logs of pod "talker" contain "hello from the provider"

  Scenario: kubectl logs --follow shows lines as the workload prints them
    Given the provider supports followed logs
    And the provider supports fault injection
    And a GPU pod "chatty" is Running
    When I follow the logs of pod "chatty"
    And the workload of pod "chatty" prints "first line"
    And the workload of pod "chatty" prints "second line"
    Then the followed logs show "first line" and then "second line", each once

  Scenario: kubectl logs on a provider without logs says so
    Given the provider does not support logs
    And a GPU pod "quiet" is Running
    Then the logs of pod "quiet" are refused as not supported by the provider

  Scenario: kubectl exec on a provider without exec says so
    Given the provider does not support exec
    And a GPU pod "sealed" is Running
    Then kubectl exec into pod "sealed" is refused as not supported by the provider

  @slow
  Scenario: An HPA scales a Deployment on the CPU the provider reports
    Given the provider supports metrics
    And the provider supports fault injection
    And a deployment "api" with 1 GPU replicas is Running
    And a HorizontalPodAutoscaler keeps deployment "api" at 50% CPU with 1 to 3 replicas
    When the provider reports 900m CPU for every replica of deployment "api"
    Then the metrics API shows about 900m CPU for a replica of deployment "api"
    And deployment "api" is scaled to 3 replicas
    When the provider reports 50m CPU for every replica of deployment "api"
    Then deployment "api" is scaled to 1 replica
