Feature: Pods with sidecars and init containers
  Charts add sidecars (a metrics exporter, a log shipper) and init containers (a model
  download). Sidecars listed in `gpu-vk.io/omit-containers` are left out everywhere, with a
  status saying so. Slurm runs every other container, each a step of the pod's job: init
  containers in order, then the containers side by side, a log per container. The container
  clouds run one container per pod: init containers of the main container's image run before
  its command in the same workload, and anything else fails the pod naming the container.

  Background:
    Given a virtual kubelet with the provider under test

  Scenario: Listed sidecars are left out, say so, and the pod serves
    When I create a GPU pod "chart" with a "metrics" container and a "logs" native sidecar, with the annotation "gpu-vk.io/omit-containers" set to "metrics,logs"
    Then pod "chart" becomes Running
    And pod "chart" becomes Ready
    And container "metrics" of pod "chart" is terminated with reason "NotRunOnProvider"
    And init container "logs" of pod "chart" is terminated with reason "NotRunOnProvider"
    And the provider runs exactly 1 workload of this node

  Scenario: A sidecar that is not listed fails the pod, naming it
    Given the provider runs one container per workload
    When I create a GPU pod "extra" with a "metrics" container and a "logs" native sidecar
    Then pod "extra" becomes Failed with reason "InvalidSpec"
    And the message of pod "extra" names "metrics" and "gpu-vk.io/omit-containers"
    And no workload exists for pod "extra"

  Scenario: An init container of the main image runs before the main command
    Given the provider runs one container per workload
    When I create a GPU pod "warm" with an init container of its image that prints "model fetched"
    Then pod "warm" becomes Running
    And init container "fetch" of pod "warm" is terminated with reason "Completed"
    And the workload of pod "warm" runs "model fetched" before "started"

  Scenario: An init container of another image fails the pod, naming it
    Given the provider runs one container per workload
    When I create a GPU pod "fetcher" with an init container of image "curlimages/curl:8.10.1"
    Then pod "fetcher" becomes Failed with reason "InvalidSpec"
    And the message of pod "fetcher" names "fetch" and "curlimages/curl:8.10.1"
    And no workload exists for pod "fetcher"

  Scenario: A pod with an init container and a sidecar on Slurm runs both in order with logs per container
    Given the provider supports containers as job steps
    And the provider executes the batch scripts
    When I create a GPU pod "steps" with an init container "fetch", a native sidecar "shipper" and a second container "metrics"
    Then pod "steps" becomes Succeeded
    And init container "fetch" of pod "steps" is terminated with reason "Completed"
    And the log of container "fetch" of pod "steps" is "fetch: init"
    And the log of container "shipper" of pod "steps" begins with "shipper: sidecar"
    And the log of container "main" of pod "steps" is "main: main after fetch"
    And the log of container "metrics" of pod "steps" is "metrics: second"
    And no workload was created twice

  Scenario: Each container of a pod on Slurm shows its own exit code
    Given the provider supports containers as job steps
    And the provider executes the batch scripts
    When I create a GPU pod "codes" with an init container "fetch" and a second container "worker" that exits 3
    Then pod "codes" becomes Failed
    And container "worker" of pod "codes" ended with exit code 3
    And container "main" of pod "codes" ended with exit code 0
    And init container "fetch" of pod "codes" ended with exit code 0
