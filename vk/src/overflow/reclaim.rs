//! Reclaim: offloaded replicas come back to in-cluster GPUs once those have been free for a
//! settle period, one replica at a time, through the Eviction API (so PodDisruptionBudgets hold:
//! "API-initiated Eviction" in the Kubernetes docs; a refused eviction answers 429),
//! and only when the replacement fits in-cluster ([`fit`]: GPUs, CPU, memory, taints, node
//! selector and affinity). Only pods labelled [`RECLAIM_LABEL`]`=true`
//! (as well as opted in to overflow) and owned by a ReplicaSet are moved: a Deployment's
//! ReplicaSet makes the replacement, which the webhook's preference puts in-cluster.
//!
//! Against flapping: a move waits for the settle period of continuously free GPUs, at most one
//! move is in flight (the next waits until the moved replica's replacement is scheduled), and a
//! replacement that lands on the virtual node again doubles the settle period (up to 8 times).
//! After `max_failed_moves` such failed moves of one ReplicaSet the controller stops moving its
//! replicas and says so in an Event on it; a replica that no in-cluster node could ever take is
//! never evicted, and says why in an Event.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use super::{GPU, OPT_IN_LABEL, VIRTUAL_NODE_LABEL};

pub mod fit;
mod run;
pub use run::{caches, run};

use fit::{Needs, Room};

/// The label (with [`OPT_IN_LABEL`]) that lets the controller move a pod back in-cluster.
pub use crate::vocab::names::RECLAIM_LABEL;

/// An offloaded replica that may be moved back.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub namespace: String,
    pub name: String,
    pub gpus: i64,
    /// UID of the ReplicaSet that will replace it.
    pub owner: String,
    /// That ReplicaSet's name.
    pub owner_name: String,
    /// What its replacement will need of an in-cluster node.
    pub needs: Needs,
}

/// In-cluster GPU capacity and the offloaded replicas, from one list of nodes and pods.
#[derive(Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Allocatable GPUs of schedulable, Ready, non-virtual nodes.
    pub allocatable: i64,
    /// GPUs requested by pods bound to those nodes.
    pub allocated: i64,
    /// Schedulable, Ready in-cluster GPU nodes with what is free on them.
    pub rooms: BTreeMap<String, Room>,
    /// Offloaded replicas that may be moved back, oldest first.
    pub candidates: Vec<Candidate>,
    /// Pods of each ReplicaSet (owner UID) waiting to be scheduled.
    pub pending_owners: Vec<String>,
    /// Offloaded replicas on virtual nodes, by ReplicaSet owner UID (all, reclaimable or not).
    pub offloaded_owners: Vec<String>,
    /// Offloaded replicas by provider (the VK's `gpu-vk.io/assigned-provider` annotation).
    pub offloaded_by_provider: BTreeMap<String, i64>,
}

/// GPUs a pod asks for (its containers' requests, a limit standing in for a missing request;
/// its largest init container's when that is more).
pub fn gpus(pod: &Pod) -> i64 {
    fit::requests(pod).gpus
}

fn label<'a>(labels: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.and_then(|l| l.get(key)).map(String::as_str)
}

fn is_virtual(node: &Node) -> bool {
    label(node.metadata.labels.as_ref(), VIRTUAL_NODE_LABEL.0) == Some(VIRTUAL_NODE_LABEL.1)
}

fn in_cluster_gpu_node(node: &Node) -> Option<i64> {
    if is_virtual(node) || node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return None;
    }
    let status = node.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let gpus = status
        .allocatable
        .as_ref()?
        .get(GPU)?
        .0
        .parse::<i64>()
        .ok()?;
    (ready && gpus > 0).then_some(gpus)
}

fn live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

fn replica_set(pod: &Pod) -> Option<(String, String)> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "ReplicaSet" && o.controller == Some(true))
        .map(|o| (o.uid.clone(), o.name.clone()))
}

/// What the nodes and pods say now.
pub fn snapshot(nodes: &[Node], pods: &[Pod]) -> Snapshot {
    let mut s = Snapshot::default();
    let virtual_nodes: Vec<&str> = nodes
        .iter()
        .filter(|n| is_virtual(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for n in nodes {
        if let (Some(name), Some(g)) = (n.metadata.name.clone(), in_cluster_gpu_node(n)) {
            s.allocatable += g;
            s.rooms.insert(name, Room::of(n));
        }
    }
    let mut candidates: Vec<(Option<jiff::Timestamp>, Candidate)> = Vec::new();
    for p in pods.iter().filter(|p| live(p)) {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let g = gpus(p);
        match node {
            None => {
                if let Some((o, _)) = replica_set(p) {
                    s.pending_owners.push(o);
                }
            }
            Some(n) if virtual_nodes.contains(&n) => {
                let labels = p.metadata.labels.as_ref();
                if label(labels, OPT_IN_LABEL) != Some("true") {
                    continue;
                }
                // Pods on their way out (evicted, scaled down) no longer count as offloaded.
                if p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let assigned = crate::pods::spec::ANN_ASSIGNED;
                let provider = label(p.metadata.annotations.as_ref(), assigned)
                    .unwrap_or("pending")
                    .to_owned();
                *s.offloaded_by_provider.entry(provider).or_default() += 1;
                let Some((owner, owner_name)) = replica_set(p) else {
                    continue;
                };
                s.offloaded_owners.push(owner.clone());
                let running =
                    p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running");
                if label(labels, RECLAIM_LABEL) == Some("true") && running && g > 0 {
                    candidates.push((
                        p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                        Candidate {
                            namespace: p.metadata.namespace.clone().unwrap_or_default(),
                            name: p.metadata.name.clone().unwrap_or_default(),
                            gpus: g,
                            owner,
                            owner_name,
                            needs: Needs::of(p),
                        },
                    ));
                }
            }
            Some(n) => {
                if let Some(room) = s.rooms.get_mut(n) {
                    room.free = room.free.minus(fit::requests(p));
                    s.allocated += g;
                }
            }
        }
    }
    candidates.sort_by_key(|(t, _)| *t);
    s.candidates = candidates.into_iter().map(|(_, c)| c).collect();
    s
}

impl Snapshot {
    /// The first candidate (of a ReplicaSet not in `stopped`) whose replacement fits an
    /// in-cluster node now, with that node.
    pub fn fit(&self, stopped: &BTreeSet<String>) -> Option<(&Candidate, &str)> {
        self.candidates
            .iter()
            .filter(|c| !stopped.contains(&c.owner))
            .find_map(|c| {
                self.rooms
                    .iter()
                    .find(|(_, room)| c.needs.misfit(room).is_none())
                    .map(|(n, _)| (c, n.as_str()))
            })
    }

    /// Candidates that no in-cluster GPU node could ever take, whatever ran there, with why
    /// (per node). Empty while there is no in-cluster GPU node to judge by.
    pub fn never_fit(&self) -> Vec<(&Candidate, String)> {
        if self.rooms.is_empty() {
            return Vec::new();
        }
        self.candidates
            .iter()
            .filter_map(|c| {
                let why: Option<Vec<String>> = self
                    .rooms
                    .iter()
                    .map(|(n, room)| c.needs.never_on(room).map(|w| format!("{n}: {w}")))
                    .collect();
                why.map(|w| (c, w.join("; ")))
            })
            .collect()
    }
}

/// Opted-in pods the webhook kept off the virtual node that wait unscheduled, with the reason
/// it recorded (`overflow.gpu-vk.io/decision: refused: <why>`).
pub fn refused_and_pending(pods: &[Pod]) -> Vec<(&Pod, &str)> {
    pods.iter()
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| s.node_name.is_none())
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
        })
        .filter_map(|p| {
            let d = label(p.metadata.annotations.as_ref(), super::DECISION_ANNOTATION)?;
            Some((p, d.strip_prefix("refused: ")?))
        })
        .collect()
}

/// Timing of the reclaim controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// In-cluster GPUs must have been free (for some candidate) this long before a move.
    pub settle: Duration,
    /// How often nodes and pods are looked at.
    pub interval: Duration,
    /// The virtual node whose replicas this controller moves back (its release's node); every
    /// virtual node's when `None`. Two releases' companions in one cluster each move only
    /// their own node's replicas, so their rate limits do not add up.
    pub virtual_node: Option<String>,
    /// Moves of one ReplicaSet whose replacement went to the virtual node again, after which
    /// its replicas are left there (until a rollout makes a new ReplicaSet).
    pub max_failed_moves: u32,
}

/// The nodes one controller looks at: every in-cluster node, and of the virtual nodes only
/// `own` (all of them when `None`). Pods on the other virtual nodes then count for nothing.
pub fn own_nodes(nodes: Vec<Node>, own: Option<&str>) -> Vec<Node> {
    nodes
        .into_iter()
        .filter(|n| !is_virtual(n) || own.is_none_or(|o| n.metadata.name.as_deref() == Some(o)))
        .collect()
}

/// The controller's memory between looks.
#[derive(Debug, Default)]
pub struct State {
    free_since: Option<Instant>,
    /// The last move, until its replacement is scheduled: the replica moved, how many of its
    /// ReplicaSet's replicas were offloaded before, and when.
    in_flight: Option<(Candidate, usize, Instant)>,
    /// Doublings of the settle period after a replacement went to the virtual node again.
    backoff: u32,
    /// Failed moves per ReplicaSet (owner UID).
    failed: BTreeMap<String, u32>,
    /// ReplicaSets whose replicas are no longer moved.
    pub stopped: BTreeSet<String>,
}

/// What to do after one look.
#[derive(Debug, PartialEq)]
pub enum Step {
    Wait,
    Move(Candidate, String),
    /// The move of this replica failed for the ReplicaSet's `max_failed_moves`-th time: its
    /// replicas stay where they are from now on.
    GiveUp(Candidate, u32),
}

impl State {
    /// Forgets the move in flight and the settle period so far (its eviction was refused); the
    /// failed moves and the ReplicaSets given up are kept.
    pub fn forget_move(&mut self) {
        self.in_flight = None;
        self.free_since = None;
        self.backoff = 0;
    }

    /// Decides after looking at `s` at `now` (pure: the controller loop does the I/O).
    pub fn step(&mut self, s: &Snapshot, settings: &Settings, now: Instant) -> Step {
        let offloaded = |owner: &str| s.offloaded_owners.iter().filter(|o| *o == owner).count();
        if let Some((moved, before, at)) = self.in_flight.clone() {
            let owner = &moved.owner;
            // Give the ReplicaSet time to create the replacement, then wait until it is placed.
            if now.duration_since(at) < settings.interval || s.pending_owners.contains(owner) {
                return Step::Wait;
            }
            self.in_flight = None;
            self.free_since = None;
            if offloaded(owner) >= before {
                // The replacement went to the virtual node again: the room was taken meanwhile,
                // or something reclaim does not judge kept it out. Wait longer before the next
                // move, and stop moving this ReplicaSet after too many.
                self.backoff = (self.backoff + 1).min(3);
                let failed = self.failed.entry(owner.clone()).or_default();
                *failed += 1;
                if *failed >= settings.max_failed_moves {
                    let n = *failed;
                    self.stopped.insert(owner.clone());
                    self.backoff = 0;
                    return Step::GiveUp(moved, n);
                }
            } else {
                self.backoff = 0;
                self.failed.remove(owner);
            }
        }
        let Some((c, node)) = s.fit(&self.stopped) else {
            self.free_since = None;
            return Step::Wait;
        };
        let since = *self.free_since.get_or_insert(now);
        if now.duration_since(since) < settings.settle * 2u32.pow(self.backoff) {
            return Step::Wait;
        }
        self.in_flight = Some((c.clone(), offloaded(&c.owner), now));
        self.free_since = None;
        Step::Move(c.clone(), node.to_owned())
    }
}

#[cfg(test)]
mod tests;
