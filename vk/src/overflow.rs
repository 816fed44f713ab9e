//! Overflow to the virtual node, and back: the offload policy for in-cluster GPU clusters.
//!
//! Pods opt in with the label [`OPT_IN_LABEL`]`=true` (on the pod template). The mutating
//! admission webhook ([`webhook`], decisions in [`mutate`]) gives an opted-in pod the toleration
//! of the virtual node's taint and a strong node-affinity preference for nodes that are not
//! virtual, so the scheduler puts it on an in-cluster GPU node whenever one fits and on the
//! virtual node only when none does (for example after a higher-priority research job preempted
//! it). The reclaim controller ([`reclaim`]) moves offloaded replicas back, one at a time through
//! the Eviction API (PodDisruptionBudgets respected), once in-cluster GPUs have been free for a
//! settle period. With a maximum research delay set, research pods that opt in wait behind a
//! scheduling gate while production's replicas are handed off to the virtual node first
//! ([`handoff`]: make-before-break). All run in `vk overflow`, a companion of the virtual kubelet (the Helm chart's
//! `overflow` values), so a VK outage never stops admission and the other way round.

pub mod certs;
pub mod handoff;
pub mod mutate;
pub mod reclaim;
pub mod webhook;

/// Annotation the webhook writes on an opted-in pod: `offload` when it may go to the virtual
/// node, or `refused: <why>` when it may not (it then stays in-cluster). Not under `gpu-vk.io/`:
/// the VK refuses pods with annotations of that prefix it does not know.
pub use crate::vocab::names::OVERFLOW_DECISION_ANNOTATION as DECISION_ANNOTATION;
/// The label a pod (template) carries to opt in to overflow.
pub use crate::vocab::names::OVERFLOW_LABEL as OPT_IN_LABEL;
/// Label of virtual nodes (the VK's Node carries `type=virtual-kubelet`).
pub const VIRTUAL_NODE_LABEL: (&str, &str) = crate::vocab::TYPE_LABEL;
/// The GPU resource.
pub use crate::vocab::GPU_RESOURCE as GPU;
