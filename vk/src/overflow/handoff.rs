//! Make-before-break: production keeps serving while research takes its GPUs.
//!
//! Preemption kills production's replicas first and lets their ReplicaSet replace them, so a
//! Service has fewer replicas (none, when research takes every GPU) for as long as a provider
//! takes to start the replacements: minutes for a large inference image. Instead, a research pod
//! (a GPU pod of a research namespace whose PriorityClass the operator names, or that carries
//! [`PREEMPTOR_LABEL`]`=true`: [`Settings::gates`]) is admitted with the scheduling gate [`GATE`]
//! (the webhook's `/gate`), and while it waits this controller:
//! 1. chooses the opted-in production replicas the pod would displace (lower priority, on one
//!    in-cluster node whose free GPUs plus theirs fit it, fewest first);
//! 2. starts a stand-in for each on the virtual node: a copy of the replica without its
//!    `pod-template-hash` label, so no ReplicaSet counts it yet, which its Service already
//!    selects once Ready;
//! 3. when every stand-in is Ready, gives each replaced replica the lowest
//!    `controller.kubernetes.io/pod-deletion-cost` and adds the hash label to its stand-in: the
//!    ReplicaSet adopts the stand-in (a matching pod without a controller), has one replica too
//!    many, and deletes the one of lowest cost ("ReplicaSet", Pod deletion cost, in the Kubernetes
//!    docs), which leaves gracefully (its endpoint `terminating`) while the stand-in serves;
//! 4. releases the gate once the pod's GPUs are free, so it schedules without preempting.
//!
//! A pod still gated [`Settings::max_delay`] after its creation is released anyway (normal
//! preemption then), with its stand-ins not yet adopted deleted. Everything is recomputed from
//! the cluster at each look (the stand-ins carry what was chosen), so a restart loses nothing.
//! Pure: [`plan`] returns actions, `handoff/run.rs` carries them out.

mod gate;
pub mod run;
pub mod warm;

pub use gate::{Settings, gate_patch, gated};

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::OPT_IN_LABEL;
use super::reclaim::{gpus, snapshot};

/// On a stand-in: the UID of the gated pod it makes room for.
pub use crate::vocab::names::HANDOFF_FOR_ANNOTATION as FOR_ANNOTATION;
/// The scheduling gate such a pod is admitted with.
pub use crate::vocab::names::HANDOFF_GATE as GATE;
/// The label a research pod carries to have production handed off before it schedules.
pub use crate::vocab::names::HANDOFF_LABEL as PREEMPTOR_LABEL;
/// On a stand-in: the name of the replica it replaces.
pub use crate::vocab::names::HANDOFF_REPLACES_ANNOTATION as REPLACES_ANNOTATION;
/// Label of a stand-in (`true`).
pub use crate::vocab::names::HANDOFF_STANDIN_LABEL as STANDIN_LABEL;
/// The ReplicaSet controller deletes pods of lower cost first.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost given to a replaced replica (the lowest an int32 holds).
pub const LOWEST_COST: &str = "-2147483648";
const HASH_LABEL: &str = "pod-template-hash";

/// A pod by namespace and name.
pub type Key = (String, String);

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Remove the gate; `why` goes into an Event on the pod (a warning when `timed_out`).
    Release {
        pod: Key,
        why: String,
        timed_out: bool,
    },
    /// Create this stand-in.
    Start(Box<Pod>),
    /// Give `replaced` the lowest deletion cost, then label `standin` with `hash`.
    Adopt {
        standin: Key,
        replaced: Key,
        hash: String,
    },
    /// Delete a stand-in no longer needed (not adopted).
    Drop(Key),
    /// A warm stand-in ([`warm`]) takes the place of `replaces` for the gated pod `for_uid`.
    Claim {
        standin: Key,
        for_uid: String,
        replaces: String,
    },
}

impl Action {
    /// What the action is and which pods it names, for a log line: never a whole pod (a
    /// stand-in carries the replica's env values).
    pub fn summary(&self) -> String {
        match self {
            Action::Release { pod, .. } => format!("release {}/{}", pod.0, pod.1),
            Action::Start(p) => {
                let (ns, name) = key(p);
                format!("start stand-in {ns}/{name}")
            }
            Action::Adopt {
                standin, replaced, ..
            } => format!(
                "adopt stand-in {}/{} for {}",
                standin.0, standin.1, replaced.1
            ),
            Action::Drop(k) => format!("drop stand-in {}/{}", k.0, k.1),
            Action::Claim {
                standin, replaces, ..
            } => format!(
                "claim warm stand-in {}/{} for {replaces}",
                standin.0, standin.1
            ),
        }
    }
}

fn key(p: &Pod) -> Key {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

fn label<'a>(m: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    m.labels.as_ref()?.get(k).map(String::as_str)
}

fn annotation<'a>(m: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    m.annotations.as_ref()?.get(k).map(String::as_str)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn adopted(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

fn priority(p: &Pod) -> i32 {
    p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Opted-in production replicas `p` could displace, by in-cluster node: lower priority, owned
/// by a ReplicaSet, asking for GPUs, not leaving, not already replaced.
fn displaceable<'a>(
    p: &Pod,
    pods: &'a [Pod],
    free: &BTreeMap<String, i64>,
    taken: &BTreeSet<Key>,
) -> BTreeMap<String, Vec<&'a Pod>> {
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for v in pods {
        let Some(node) = v.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let rs = v
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ReplicaSet" && o.controller == Some(true));
        let phase = v.status.as_ref().and_then(|s| s.phase.as_deref());
        if free.contains_key(&node)
            && rs
            && label(&v.metadata, OPT_IN_LABEL) == Some("true")
            && label(&v.metadata, HASH_LABEL).is_some()
            && priority(v) < priority(p)
            && gpus(v) > 0
            && v.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded" | "Failed"))
            && !taken.contains(&key(v))
        {
            by_node.entry(node).or_default().push(v);
        }
    }
    // Lowest priority first, then the youngest (the ReplicaSet's own preference when scaling
    // down).
    for vs in by_node.values_mut() {
        vs.sort_by_key(|v| {
            let created = v.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (priority(v), std::cmp::Reverse(created))
        });
    }
    by_node
}

/// The fewest replicas whose GPUs, with a node's free ones, fit `need` on that node.
fn choose<'a>(
    need: i64,
    by_node: &BTreeMap<String, Vec<&'a Pod>>,
    free: &BTreeMap<String, i64>,
) -> Option<Vec<&'a Pod>> {
    let mut best: Option<Vec<&Pod>> = None;
    for (node, vs) in by_node {
        let mut have = free.get(node).copied().unwrap_or(0);
        let mut chosen = Vec::new();
        for v in vs {
            if have >= need {
                break;
            }
            have += gpus(v);
            chosen.push(*v);
        }
        if have >= need && best.as_ref().is_none_or(|b| chosen.len() < b.len()) {
            best = Some(chosen);
        }
    }
    best
}

/// A stand-in for `replaced`, for the gated pod `for_uid`, bound to the virtual node.
pub fn standin(replaced: &Pod, for_uid: &str, virtual_node: &str) -> Pod {
    let m = &replaced.metadata;
    let mut labels = m.labels.clone().unwrap_or_default();
    labels.remove(HASH_LABEL);
    labels.insert(STANDIN_LABEL.into(), "true".into());
    let mut annotations = m.annotations.clone().unwrap_or_default();
    annotations.remove(DELETION_COST);
    // The virtual kubelet's own records are its to write (the chart's policy refuses a pod
    // created with them); an in-cluster pod should carry none, a copied manifest might.
    for owned in crate::pods::spec::VK_OWNED {
        annotations.remove(owned);
    }
    annotations.insert(FOR_ANNOTATION.into(), for_uid.into());
    annotations.insert(
        REPLACES_ANNOTATION.into(),
        m.name.clone().unwrap_or_default(),
    );
    let name: String = format!("{}-handoff", m.name.as_deref().unwrap_or_default())
        .chars()
        .take(253)
        .collect();
    let mut spec = replaced.spec.clone().unwrap_or_default();
    spec.node_name = Some(virtual_node.into());
    spec.scheduling_gates = None;
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: m.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What to do now, for every gated pod, from the nodes and pods of the cluster.
pub fn plan(nodes: &[Node], pods: &[Pod], s: &Settings, now: Timestamp) -> Vec<Action> {
    let mut free: BTreeMap<String, i64> = snapshot(nodes, pods)
        .rooms
        .into_iter()
        .map(|(n, r)| (n, r.free.gpus))
        .collect();
    let mut actions = Vec::new();
    let standins: Vec<&Pod> = pods
        .iter()
        .filter(|p| label(&p.metadata, STANDIN_LABEL) == Some("true"))
        .collect();
    let of = |uid: &str| -> Vec<&Pod> {
        standins
            .iter()
            .copied()
            .filter(|x| annotation(&x.metadata, FOR_ANNOTATION) == Some(uid))
            .collect()
    };
    // Replicas already being replaced are not chosen twice.
    let mut taken: BTreeSet<Key> = standins
        .iter()
        .filter_map(|x| {
            let replaced = annotation(&x.metadata, REPLACES_ANNOTATION)?;
            Some((key(x).0, replaced.to_owned()))
        })
        .collect();
    let mut waiting: Vec<&Pod> = pods.iter().filter(|p| gated(p)).collect();
    waiting.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let mut live_uids = BTreeSet::new();
    let mut claimed: BTreeSet<Key> = BTreeSet::new();
    for p in waiting {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let mine = of(&uid);
        let need = gpus(p);
        let release = |why: String, timed_out: bool, actions: &mut Vec<Action>| {
            actions.push(Action::Release {
                pod: key(p),
                why,
                timed_out,
            });
            for x in mine.iter().filter(|x| !adopted(x)) {
                actions.push(Action::Drop(key(x)));
            }
        };
        if let Some((why, timed_out)) = release_now(p, s, &mut free, now) {
            release(why, timed_out, &mut actions);
            continue;
        }
        live_uids.insert(uid.clone());
        if mine.is_empty() {
            let by_node = displaceable(p, pods, &free, &taken);
            match choose(need, &by_node, &free) {
                Some(victims) => {
                    for v in victims {
                        taken.insert(key(v));
                        actions.push(replace(v, &uid, pods, &mut claimed, s));
                    }
                }
                None => release(
                    "no opted-in production replica of lower priority to hand off".into(),
                    false,
                    &mut actions,
                ),
            }
            continue;
        }
        if !mine.iter().all(|x| ready(x)) {
            continue;
        }
        actions.extend(adopt(&mine, pods));
    }
    actions.extend(orphans(&standins, &live_uids, pods));
    actions.extend(warm::keep(pods, s));
    actions.dedup();
    actions
}

/// Why the gated pod `p` is released now, if it is, and whether that is a warning: it is not
/// research the operator lists, its GPUs are free on a node (taken from `free`), or it waited
/// past [`Settings::max_delay`].
fn release_now(
    p: &Pod,
    s: &Settings,
    free: &mut BTreeMap<String, i64>,
    now: Timestamp,
) -> Option<(String, bool)> {
    // Research from anywhere else would move another team's production onto paid providers:
    // it schedules as usual (the webhook gates only the listed namespaces; a pod gated by
    // other means is released here).
    if !s.research(p) {
        let ns = key(p).0;
        return Some((
            format!(
                "namespace {ns} is not a research namespace \
                 (overflow.handoff.researchNamespaces): scheduling without the hand-off"
            ),
            true,
        ));
    }
    let need = gpus(p);
    if let Some(node) = free
        .iter()
        .find(|(_, f)| **f >= need)
        .map(|(n, _)| n.clone())
    {
        *free.entry(node.clone()).or_default() -= need;
        return Some((format!("{need} GPU(s) free on node {node}"), false));
    }
    let waited = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| now.duration_since(t.0).as_secs_f64())
        .unwrap_or(0.0);
    (waited >= s.max_delay.as_secs_f64()).then(|| {
        let why = format!(
            "production's stand-ins were not all Ready within {} s \
             (overflow.handoff.maxResearchDelaySeconds): scheduling without the hand-off",
            s.max_delay.as_secs()
        );
        (why, true)
    })
}

/// How `v` is replaced for the gated pod `uid`: a warm stand-in of its ReplicaSet claimed
/// (Ready ones first, each claimed once), else a new stand-in.
fn replace(v: &Pod, uid: &str, pods: &[Pod], claimed: &mut BTreeSet<Key>, s: &Settings) -> Action {
    let rs = warm::owner(v);
    let mut spare: Vec<&Pod> = pods
        .iter()
        .filter(|w| {
            w.metadata.deletion_timestamp.is_none()
                && key(w).0 == key(v).0
                && rs.is_some()
                && warm::unclaimed(w) == rs
                && !claimed.contains(&key(w))
        })
        .collect();
    spare.sort_by_key(|w| !ready(w));
    match spare.first() {
        Some(w) => {
            claimed.insert(key(w));
            Action::Claim {
                standin: key(w),
                for_uid: uid.to_owned(),
                replaces: key(v).1,
            }
        }
        None => Action::Start(Box::new(standin(v, uid, &s.virtual_node))),
    }
}

/// Adoption of a gated pod's stand-ins, all Ready: each by the ReplicaSet of the replica it
/// replaces (dropped when that replica left on its own: its ReplicaSet replaced it already).
fn adopt(mine: &[&Pod], pods: &[Pod]) -> Vec<Action> {
    mine.iter()
        .filter(|x| !adopted(x))
        .map(|x| {
            let ns = key(x).0;
            let replaced = annotation(&x.metadata, REPLACES_ANNOTATION).unwrap_or_default();
            let v = pods
                .iter()
                .find(|v| key(v) == (ns.clone(), replaced.to_owned()));
            match v.and_then(|v| label(&v.metadata, HASH_LABEL)) {
                Some(hash) => Action::Adopt {
                    standin: key(x),
                    replaced: (ns, replaced.to_owned()),
                    hash: hash.to_owned(),
                },
                None => Action::Drop(key(x)),
            }
        })
        .collect()
}

/// Stand-ins of pods no longer waiting, never adopted (warm ones wait for none): dropped.
fn orphans(standins: &[&Pod], live_uids: &BTreeSet<String>, pods: &[Pod]) -> Vec<Action> {
    standins
        .iter()
        .filter(|x| warm::unclaimed(x).is_none())
        .filter(|x| {
            let for_uid = annotation(&x.metadata, FOR_ANNOTATION).unwrap_or_default();
            let gone = !live_uids.contains(for_uid)
                && !pods
                    .iter()
                    .any(|p| p.metadata.uid.as_deref() == Some(for_uid) && gated(p));
            gone && !adopted(x) && x.metadata.deletion_timestamp.is_none()
        })
        .map(|x| Action::Drop(key(x)))
        .collect()
}

#[cfg(test)]
mod tests;
