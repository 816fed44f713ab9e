//! Every `gpu-vk.io` name the project reads or writes on Kubernetes objects: annotations,
//! labels, conditions, a scheduling gate and a webhook's name. `scripts/lint-house` refuses
//! such a string literal anywhere else in vk/src, so a name has one spelling.

/// Annotation prefix for everything the VK reads or writes on pods.
pub const PREFIX: &str = "gpu-vk.io/";
/// Pins the pod to one configured provider.
pub const ANN_PROVIDER: &str = "gpu-vk.io/provider";
/// Written by the VK: the provider chosen for this pod, so the choice survives restarts.
pub const ANN_ASSIGNED: &str = "gpu-vk.io/assigned-provider";
/// GPU type wanted (e.g. `A100-80GB`), or a comma-separated set of acceptable types in order
/// of preference (`H100,A100-80GB`); any type when absent.
pub const ANN_GPU_TYPE: &str = "gpu-vk.io/gpu-type";
/// The pod's dispatch policy (`preference` or `cheapest`), where `dispatch.podPolicy` allows.
pub const ANN_DISPATCH_POLICY: &str = "gpu-vk.io/dispatch-policy";
/// The pod's own start deadline in seconds (see `providers[].startDeadlineSeconds`).
pub const ANN_START_DEADLINE: &str = "gpu-vk.io/start-deadline-seconds";
/// Written by the VK: how many of the pod's workloads were given up at the start deadline
/// (see `providers[].startAttempts`), so the count survives restarts.
pub const ANN_START_ATTEMPTS: &str = "gpu-vk.io/start-attempts";
/// Written by the VK: how many pulls of the pod's image failed in a row and when the last did
/// (`3 2026-12-07T10:00:00Z`), which the image pull back-off counts from.
pub const ANN_PULL_FAILURES: &str = "gpu-vk.io/pull-failures";
/// Written by the VK: the dispatch decision and its inputs (policy, choice, prices).
pub const ANN_DISPATCH: &str = "gpu-vk.io/dispatch";
/// Containers and native sidecars the provider leaves out, comma-separated (`metrics,logs`):
/// a provider runs one container, and a chart's exporter or log shipper need not come along.
pub const ANN_OMIT_CONTAINERS: &str = "gpu-vk.io/omit-containers";
/// The pod annotation where a virtual kubelet of ours writes where a pod's container ports are
/// published when that is not the pod's own address (`pods::address`); the kubernetes provider
/// reads it on a remote pod run by another of ours.
pub const ANN_PUBLISHED_PORTS: &str = "gpu-vk.io/published-ports";
/// The ownership tag (`naming::Owner`: cluster id and node) of what a VK made: a label on
/// remote pods (the kubernetes provider's `list()` selects on it) and on EndpointSlices, an
/// annotation on the Node it registered.
pub const OWNER: &str = "gpu-vk.io/owner";
/// Label carrying the local pod's UID (for people and `kubectl -l`).
pub const POD_UID_LABEL: &str = "gpu-vk.io/pod-uid";
/// On a remote pod: the cluster id of the VK that made it. The remote pod's annotations are not
/// under `gpu-vk.io/`: a VK that is the remote cluster's node (offload chained on) refuses pods
/// with `gpu-vk.io/*` annotations it does not know, as it must for a user's typo.
pub const REMOTE_CLUSTER_ANNOTATION: &str = "offload.gpu-vk.io/cluster-id";
/// On a remote pod: the node name of the VK that made it.
pub const REMOTE_NODE_ANNOTATION: &str = "offload.gpu-vk.io/node";
/// On a remote pod: `namespace/name` of the local pod it runs for.
pub const REMOTE_SOURCE_POD_ANNOTATION: &str = "offload.gpu-vk.io/source-pod";
/// The label a pod (template) carries to opt in to overflow.
pub const OVERFLOW_LABEL: &str = "gpu-vk.io/overflow";
/// Annotation the webhook writes on an opted-in pod: `offload` when it may go to the virtual
/// node, or `refused: <why>` when it may not (it then stays in-cluster). Not under `gpu-vk.io/`:
/// the VK refuses pods with annotations of that prefix it does not know.
pub const OVERFLOW_DECISION_ANNOTATION: &str = "overflow.gpu-vk.io/decision";
/// The label a research pod carries to have production handed off before it schedules.
pub const HANDOFF_LABEL: &str = "gpu-vk.io/handoff";
/// The scheduling gate such a pod is admitted with.
pub const HANDOFF_GATE: &str = "gpu-vk.io/handoff";
/// Label of a stand-in (`true`).
pub const HANDOFF_STANDIN_LABEL: &str = "handoff.gpu-vk.io/standin";
/// On a stand-in: the UID of the gated pod it makes room for.
pub const HANDOFF_FOR_ANNOTATION: &str = "handoff.gpu-vk.io/for";
/// On a stand-in: the name of the replica it replaces.
pub const HANDOFF_REPLACES_ANNOTATION: &str = "handoff.gpu-vk.io/replaces";
/// On a pod template: how many warm replicas its ReplicaSet keeps on the virtual node while
/// research is active (overrides `overflow.handoff.warmReplicas`).
pub const WARM_REPLICAS_ANNOTATION: &str = "overflow.gpu-vk.io/warm-replicas";
/// On a warm stand-in: the UID of the ReplicaSet it stands by for.
pub const WARM_OF_ANNOTATION: &str = "handoff.gpu-vk.io/warm-of";
/// The label (with [`OVERFLOW_LABEL`]) that lets the controller move a pod back in-cluster.
pub const RECLAIM_LABEL: &str = "gpu-vk.io/reclaim";
/// Label the leader puts on its own pod (and every replica removes from its pod when it starts),
/// so a Service that selects it (the Helm chart's kubelet Service) sends the API server's logs,
/// exec and stats requests to the leader only.
pub const LEADER_LABEL: &str = "gpu-vk.io/leader";
/// Node condition type and label per provider: `gpu-vk.io/provider.<name>`.
pub const PROVIDER_PREFIX: &str = "gpu-vk.io/provider.";
/// The pod condition saying whether `status.podIP` is where the workload can be reached.
pub const POD_IP_ROUTABLE_CONDITION: &str = "gpu-vk.io/PodIPRoutable";
/// The value of `endpointslice.kubernetes.io/managed-by` on our slices (the Service controller
/// leaves slices of other managers alone).
pub const ENDPOINTSLICE_MANAGER: &str = "gpu-vk.io";
/// Label on the VK's ValidatingWebhookConfiguration naming its node.
pub const NODE_LABEL: &str = "gpu-vk.io/node";
/// The name of the VK's admission webhook inside its configuration.
pub const WEBHOOK_NAME: &str = "pods.gpu-vk.io";
