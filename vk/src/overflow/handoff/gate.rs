//! Who waits behind the hand-off's gate: the controller's settings (which namespaces and
//! PriorityClasses are research), the gate webhook's decision and its patch.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::{GATE, PREEMPTOR_LABEL, label};
use crate::overflow::reclaim::gpus;

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long a research pod may wait for its hand-off.
    pub max_delay: Duration,
    /// The virtual node stand-ins run on.
    pub virtual_node: String,
    /// Warm replicas per opted-in ReplicaSet while research is active ([`warm`]): a ceiling
    /// that a pod template's annotation may lower, never raise.
    pub warm_replicas: u32,
    /// The namespaces whose research pods may take production's GPUs through the hand-off
    /// (`--handoff-research-namespaces`); a gated pod elsewhere is released at once, and only
    /// these count for warm standby. None listed: no research at all.
    pub research_namespaces: Vec<String>,
    /// The PriorityClasses that make a GPU pod of those namespaces research
    /// (`--handoff-research-priority-classes`): such a pod is gated without asking its users for
    /// the [`PREEMPTOR_LABEL`], which stays for research of other classes.
    pub research_priority_classes: Vec<String>,
}

impl Settings {
    /// `p` is a research pod of a namespace the operator lists.
    pub fn research(&self, p: &Pod) -> bool {
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        self.research_namespaces.iter().any(|n| n == ns)
    }

    /// Whether the gate webhook gives `p` (a pod being created in `namespace`; the request's
    /// pod may not carry it yet) the hand-off's gate: a GPU pod of a research namespace that is
    /// research by its PriorityClass or opts in with the label. A pod that then needs no
    /// production moved is released at the controller's next look ([`plan`]).
    pub fn gates(&self, p: &Pod, namespace: &str) -> bool {
        if !self.research_namespaces.iter().any(|n| n == namespace) || gpus(p) == 0 {
            return false;
        }
        let class = p
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref());
        label(&p.metadata, PREEMPTOR_LABEL) == Some("true")
            || class.is_some_and(|c| self.research_priority_classes.iter().any(|r| r == c))
    }
}

/// The JSON patch that gives `pod` the [`GATE`] (empty when it has it): the pod with its gate
/// added, diffed against the pod as sent.
pub fn gate_patch(pod: &Pod) -> json_patch::Patch {
    let mut gated = pod.clone();
    let spec = gated.spec.get_or_insert_with(Default::default);
    let gates = spec.scheduling_gates.get_or_insert_with(Vec::new);
    if !gates.iter().any(|g| g.name == GATE) {
        gates.push(k8s_openapi::api::core::v1::PodSchedulingGate {
            name: GATE.to_owned(),
        });
    }
    match (serde_json::to_value(pod), serde_json::to_value(&gated)) {
        (Ok(before), Ok(after)) => json_patch::diff(&before, &after),
        _ => json_patch::Patch(Vec::new()),
    }
}

/// The pod waits behind [`GATE`].
pub fn gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == GATE))
}

#[cfg(test)]
mod tests;
