//! Warm standby: while research is active (a live research pod, [`Settings::gates`], gated or
//! placed), each opted-in ReplicaSet with replicas in-cluster keeps up to its
//! number of warm replicas ([`WARM_REPLICAS_ANNOTATION`] on its pod template, else
//! [`Settings::warm_replicas`]) running as stand-ins on the virtual node. The next research pod
//! that needs its GPUs claims a Ready warm stand-in instead of starting one, so the hand-off takes
//! seconds even on a provider whose start time exceeds the maximum research delay. A warm
//! stand-in matches its Service's selector, so it serves meanwhile; it is provider time, seen in
//! the virtual kubelet's `gpu_vk_spend_dollars_per_hour`. When research is over, or no replica of
//! the ReplicaSet is left in-cluster, the unclaimed ones are deleted. Pure: actions only.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::{
    Action, FOR_ANNOTATION, HASH_LABEL, Key, STANDIN_LABEL, Settings, annotation, gated, key,
    label, standin,
};
use crate::overflow::OPT_IN_LABEL;
use crate::overflow::reclaim::gpus;

/// On a warm stand-in: the UID of the ReplicaSet it stands by for.
pub use crate::vocab::names::WARM_OF_ANNOTATION;
/// On a pod template: how many warm replicas its ReplicaSet keeps on the virtual node while
/// research is active (overrides `overflow.handoff.warmReplicas`).
pub use crate::vocab::names::WARM_REPLICAS_ANNOTATION;

fn ns(p: &Pod) -> &str {
    p.metadata.namespace.as_deref().unwrap_or_default()
}

fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// The UID of the ReplicaSet that controls `p`.
pub fn owner(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "ReplicaSet" && o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// A warm stand-in no research pod has claimed yet, with the ReplicaSet it stands by for.
pub fn unclaimed(p: &Pod) -> Option<&str> {
    if label(&p.metadata, STANDIN_LABEL) != Some("true")
        || annotation(&p.metadata, FOR_ANNOTATION).is_some()
    {
        return None;
    }
    annotation(&p.metadata, WARM_OF_ANNOTATION)
}

/// Research is active: a live research pod of a listed namespace (by its PriorityClass or the
/// label) waits behind the gate or runs on a node. A label alone, on a pod that is never gated nor scheduled (Pending for
/// ever), keeps no stand-in running.
pub fn research_active(pods: &[Pod], s: &Settings) -> bool {
    pods.iter().any(|p| {
        let placed = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        s.gates(p, ns) && live(p) && (gated(p) || placed)
    })
}

/// A warm stand-in of `replica`: a stand-in for no pod yet, marked with its ReplicaSet.
fn warm_standin(replica: &Pod, rs: &str, virtual_node: &str) -> Pod {
    let mut p = standin(replica, "", virtual_node);
    let m = &mut p.metadata;
    let a = m.annotations.get_or_insert_with(Default::default);
    a.remove(FOR_ANNOTATION);
    a.remove(super::REPLACES_ANNOTATION);
    a.insert(WARM_OF_ANNOTATION.into(), rs.into());
    m.name = Some(format!(
        "{}-warm",
        replica.metadata.name.as_deref().unwrap_or_default()
    ));
    p
}

/// Starts and drops warm stand-ins so that each ReplicaSet has what it should now.
pub fn keep(pods: &[Pod], s: &Settings) -> Vec<Action> {
    let active = research_active(pods, s);
    // In-cluster replicas of opted-in ReplicaSets, oldest first, and their warm count.
    // Keyed by namespace and ReplicaSet UID: a stand-in is matched only within its own
    // namespace, so a pod elsewhere that names another team's ReplicaSet counts for nothing.
    let mut in_cluster: BTreeMap<(&str, &str), (Vec<&Pod>, u32)> = BTreeMap::new();
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    sorted.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    for p in sorted {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let (Some(rs), Some(node)) = (owner(p), node) else {
            continue;
        };
        if node == s.virtual_node
            || !live(p)
            || label(&p.metadata, OPT_IN_LABEL) != Some("true")
            || label(&p.metadata, HASH_LABEL).is_none()
            || gpus(p) == 0
        {
            continue;
        }
        // The operator's figure is a ceiling: a template may ask for fewer, never more.
        let want = annotation(&p.metadata, WARM_REPLICAS_ANNOTATION)
            .and_then(|v| v.parse().ok())
            .map_or(s.warm_replicas, |n: u32| n.min(s.warm_replicas));
        let e = in_cluster.entry((ns(p), rs)).or_insert((Vec::new(), want));
        e.0.push(p);
    }
    let mut warm: BTreeMap<(&str, &str), Vec<&Pod>> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(rs) = unclaimed(p) {
            warm.entry((ns(p), rs)).or_default().push(p);
        }
    }
    let existing: BTreeSet<Key> = pods.iter().map(key).collect();
    let mut actions = Vec::new();
    let owners: BTreeSet<(&str, &str)> = in_cluster.keys().chain(warm.keys()).copied().collect();
    for (namespace, rs) in owners {
        let rs_key = (namespace, rs);
        let (replicas, n) = in_cluster.get(&rs_key).cloned().unwrap_or_default();
        let want = if active {
            (n as usize).min(replicas.len())
        } else {
            0
        };
        let have = warm.get(&rs_key).cloned().unwrap_or_default();
        for extra in have.iter().skip(want) {
            actions.push(Action::Drop(key(extra)));
        }
        let mut missing = want.saturating_sub(have.len());
        for r in replicas {
            if missing == 0 {
                break;
            }
            let w = warm_standin(r, rs, &s.virtual_node);
            if !existing.contains(&key(&w)) {
                actions.push(Action::Start(Box::new(w)));
                missing -= 1;
            }
        }
    }
    actions
}
