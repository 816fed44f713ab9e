//! Reclaim: offloaded replicas come back to in-cluster GPUs once those have been free for a
//! settle period, one replica at a time, through the Eviction API (so PodDisruptionBudgets hold:
//! "API-initiated Eviction" in the Kubernetes docs; a refused eviction answers 429),
//! and only when the replacement fits in-cluster. Only pods labelled [`RECLAIM_LABEL`]`=true`
//! (as well as opted in to overflow) and owned by a ReplicaSet are moved: a Deployment's
//! ReplicaSet makes the replacement, which the webhook's preference puts in-cluster.
//!
//! Against flapping: a move waits for the settle period of continuously free GPUs, at most one
//! move is in flight (the next waits until the moved replica's replacement is scheduled), and a
//! replacement that lands on the virtual node again doubles the settle period (up to 8 times).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::EvictParams;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::{GPU, OPT_IN_LABEL, VIRTUAL_NODE_LABEL};
use crate::telemetry::{ErrorChain, Metrics, ProviderLabels, StateLabels};

/// The label (with [`OPT_IN_LABEL`]) that lets the controller move a pod back in-cluster.
pub const RECLAIM_LABEL: &str = "gpu-vk.io/reclaim";

/// An offloaded replica that may be moved back.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub namespace: String,
    pub name: String,
    pub gpus: i64,
    /// UID of the ReplicaSet that will replace it.
    pub owner: String,
}

/// In-cluster GPU capacity and the offloaded replicas, from one list of nodes and pods.
#[derive(Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Allocatable GPUs of schedulable, Ready, non-virtual nodes.
    pub allocatable: i64,
    /// GPUs requested by pods bound to those nodes.
    pub allocated: i64,
    /// Free GPUs per in-cluster node.
    pub free: BTreeMap<String, i64>,
    /// Offloaded replicas that may be moved back, oldest first.
    pub candidates: Vec<Candidate>,
    /// Pods of each ReplicaSet (owner UID) waiting to be scheduled.
    pub pending_owners: Vec<String>,
    /// Offloaded replicas on virtual nodes, by ReplicaSet owner UID (all, reclaimable or not).
    pub offloaded_owners: Vec<String>,
    /// Offloaded replicas by provider (the VK's `gpu-vk.io/assigned-provider` annotation).
    pub offloaded_by_provider: BTreeMap<String, i64>,
}

/// GPUs a pod asks for (the larger of its containers' limits and requests).
pub fn gpus(pod: &Pod) -> i64 {
    let q =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.and_then(|m| m.get(GPU))
                .and_then(|q| q.0.parse::<i64>().ok())
                .unwrap_or(0)
        };
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| {
                    let r = c.resources.as_ref();
                    q(r.and_then(|r| r.limits.as_ref())).max(q(r.and_then(|r| r.requests.as_ref())))
                })
                .sum()
        })
        .unwrap_or(0)
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

fn replica_set(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "ReplicaSet" && o.controller == Some(true))
        .map(|o| o.uid.clone())
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
            s.free.insert(name, g);
        }
    }
    let mut candidates: Vec<(Option<jiff::Timestamp>, Candidate)> = Vec::new();
    for p in pods.iter().filter(|p| live(p)) {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let g = gpus(p);
        match node {
            None => {
                if let Some(o) = replica_set(p) {
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
                let Some(owner) = replica_set(p) else {
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
                        },
                    ));
                }
            }
            Some(n) => {
                if let Some(free) = s.free.get_mut(n) {
                    *free -= g;
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
    /// The first candidate whose GPUs fit on one in-cluster node now, with that node.
    pub fn fit(&self) -> Option<(&Candidate, &str)> {
        self.candidates.iter().find_map(|c| {
            self.free
                .iter()
                .find(|(_, free)| **free >= c.gpus)
                .map(|(n, _)| (c, n.as_str()))
        })
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
    /// The last move, until its replacement is scheduled: the ReplicaSet, how many of its
    /// replicas were offloaded before, and when.
    in_flight: Option<(String, usize, Instant)>,
    /// Doublings of the settle period after a replacement went to the virtual node again.
    backoff: u32,
}

/// What to do after one look.
#[derive(Debug, PartialEq)]
pub enum Step {
    Wait,
    Move(Candidate, String),
}

impl State {
    /// Decides after looking at `s` at `now` (pure: the controller loop does the I/O).
    pub fn step(&mut self, s: &Snapshot, settings: &Settings, now: Instant) -> Step {
        let offloaded = |owner: &str| s.offloaded_owners.iter().filter(|o| *o == owner).count();
        if let Some((owner, before, at)) = self.in_flight.clone() {
            // Give the ReplicaSet time to create the replacement, then wait until it is placed.
            if now.duration_since(at) < settings.interval || s.pending_owners.contains(&owner) {
                return Step::Wait;
            }
            self.in_flight = None;
            self.free_since = None;
            if offloaded(&owner) >= before {
                // The replacement went to the virtual node again: the free GPUs were taken
                // meanwhile. Wait longer before the next move.
                self.backoff = (self.backoff + 1).min(3);
            } else {
                self.backoff = 0;
            }
        }
        let Some((c, node)) = s.fit() else {
            self.free_since = None;
            return Step::Wait;
        };
        let since = *self.free_since.get_or_insert(now);
        if now.duration_since(since) < settings.settle * 2u32.pow(self.backoff) {
            return Step::Wait;
        }
        self.in_flight = Some((c.owner.clone(), offloaded(&c.owner), now));
        self.free_since = None;
        Step::Move(c.clone(), node.to_owned())
    }
}

/// A cache of every `K`, kept current by a watch (re-listing with back-off after errors);
/// managed fields are dropped to keep it small.
fn cache<K>(api: Api<K>) -> reflector::Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(r) = stream.next().await {
            if let Err(e) = r {
                warn!(error = %ErrorChain(&e), "reclaim: watch error; retrying");
            }
        }
    });
    store
}

/// Runs the controller until the process ends.
pub async fn run(client: Client, settings: Settings, metrics: Metrics, instance: String) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpu-vk-overflow".into(),
            instance: Some(instance),
        },
    );
    // Watches, not lists: each look reads the caches the watches keep current, so a large
    // cluster costs one watch per kind, not a list of every pod every interval.
    let nodes = cache::<Node>(Api::all(client.clone()));
    let pods = cache::<Pod>(Api::all(client.clone()));
    let mut state = State::default();
    // Pods already told why they stay in-cluster (by UID).
    let mut told = std::collections::HashSet::<String>::new();
    loop {
        tokio::time::sleep(settings.interval).await;
        if nodes.wait_until_ready().await.is_err() || pods.wait_until_ready().await.is_err() {
            warn!("reclaim: the node and pod watches ended");
            return;
        }
        let n: Vec<Node> = nodes.state().iter().map(|x| (**x).clone()).collect();
        let p: Vec<Pod> = pods.state().iter().map(|x| (**x).clone()).collect();
        let n = own_nodes(n, settings.virtual_node.as_deref());
        let snap = snapshot(&n, &p);
        let state_label = |s: &str| StateLabels {
            state: s.to_owned(),
        };
        metrics
            .in_cluster_gpus
            .get_or_create(&state_label("allocatable"))
            .set(snap.allocatable);
        metrics
            .in_cluster_gpus
            .get_or_create(&state_label("allocated"))
            .set(snap.allocated);
        metrics.offloaded_replicas.clear();
        for (provider, count) in &snap.offloaded_by_provider {
            let l = ProviderLabels {
                provider: provider.clone(),
            };
            metrics.offloaded_replicas.get_or_create(&l).set(*count);
        }
        for (pod, why) in refused_and_pending(&p) {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if !told.insert(uid) {
                continue;
            }
            let ev = Event {
                type_: EventType::Warning,
                reason: "OverflowRefused".into(),
                note: Some(format!(
                    "this pod cannot run on the virtual node, so it waits for in-cluster capacity: {why}"
                )),
                action: "Admit".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &pod.object_ref(&())).await {
                warn!(error = %ErrorChain(&e), "overflow: failed to record the event");
            }
        }
        told.retain(|uid| p.iter().any(|x| x.metadata.uid.as_ref() == Some(uid)));
        let Step::Move(c, node) = state.step(&snap, &settings, Instant::now()) else {
            continue;
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
        let Some(pod) = p.iter().find(|x| {
            x.metadata.name.as_deref() == Some(&c.name)
                && x.metadata.namespace.as_deref() == Some(&c.namespace)
        }) else {
            continue;
        };
        let reference = pod.object_ref(&());
        match api.evict(&c.name, &EvictParams::default()).await {
            Ok(_) => {
                metrics.reclaim_moves.inc();
                info!(namespace = %c.namespace, pod = %c.name, node = %node, gpus = c.gpus, "reclaim: evicted an offloaded replica; its replacement fits in-cluster");
                let note = format!(
                    "moving back in-cluster: node {node} has had {} free GPU(s) for the settle period; the ReplicaSet replaces this replica there",
                    c.gpus
                );
                let ev = Event {
                    type_: EventType::Normal,
                    reason: "Reclaimed".into(),
                    note: Some(note),
                    action: "Evict".into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, &reference).await {
                    warn!(error = %ErrorChain(&e), "reclaim: failed to record the event");
                }
            }
            Err(e) => {
                // 429: a PodDisruptionBudget allows no disruption now; try again later.
                state = State::default();
                warn!(namespace = %c.namespace, pod = %c.name, error = %ErrorChain(&e), "reclaim: eviction refused; trying again later");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, gpus: i64, virtual_: bool) -> Node {
        let labels = if virtual_ {
            json!({"type": "virtual-kubelet"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, gpus: i64, labels: Value, owner: &str, age: i64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "prod", "labels": labels,
                "creationTimestamp": format!("2026-12-01T00:00:{age:02}Z"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": owner, "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "m", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
        }))
        .unwrap()
    }
    use serde_json::Value;

    fn both() -> Value {
        json!({"gpu-vk.io/overflow": "true", "gpu-vk.io/reclaim": "true"})
    }

    const SETTINGS: Settings = Settings {
        settle: Duration::from_secs(30),
        interval: Duration::from_secs(5),
        virtual_node: None,
    };

    #[test]
    fn a_controller_moves_only_the_replicas_of_its_own_virtual_node() {
        let nodes = vec![
            node("w1", 2, false),
            node("vk-a", 1000, true),
            node("vk-b", 1000, true),
        ];
        let pods = [
            pod("serve-a", Some("vk-a"), 1, both(), "rs1", 2),
            pod("serve-b", Some("vk-b"), 1, both(), "rs2", 1),
        ];
        let mine = snapshot(&own_nodes(nodes.clone(), Some("vk-a")), &pods);
        let names: Vec<&str> = mine.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["serve-a"],
            "only vk-a's replica is this controller's"
        );
        assert_eq!(mine.offloaded_owners, ["rs1"]);
        let all = snapshot(&own_nodes(nodes, None), &pods);
        let names: Vec<&str> = all.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["serve-b", "serve-a"],
            "oldest first, on every virtual node"
        );
    }

    #[test]
    fn free_gpus_and_candidates_come_from_nodes_and_pods() {
        let nodes = [
            node("w1", 2, false),
            node("w2", 2, false),
            node("vk", 1000, true),
        ];
        let pods = [
            pod("research-0", Some("w1"), 2, json!({}), "job", 1),
            pod("serve-a", Some("w2"), 1, both(), "rs1", 2),
            pod("serve-b", Some("vk"), 1, both(), "rs1", 3),
            pod(
                "serve-c",
                Some("vk"),
                1,
                json!({"gpu-vk.io/overflow": "true"}),
                "rs1",
                4,
            ),
        ];
        let s = snapshot(&nodes, &pods);
        assert_eq!((s.allocatable, s.allocated), (4, 3));
        assert_eq!(s.free, BTreeMap::from([("w1".into(), 0), ("w2".into(), 1)]));
        // serve-c did not opt in to reclaim: it is offloaded but never moved.
        assert_eq!(
            s.candidates
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["serve-b"]
        );
        assert_eq!(s.offloaded_owners.len(), 2);
        assert_eq!(
            s.fit().map(|(c, n)| (c.name.as_str(), n)),
            Some(("serve-b", "w2"))
        );
    }

    #[test]
    fn pods_refused_by_the_webhook_that_wait_unscheduled_are_found_with_the_reason() {
        let mut waiting = pod(
            "big",
            None,
            3,
            json!({"gpu-vk.io/overflow": "true"}),
            "rs2",
            1,
        );
        waiting.metadata.annotations = Some(BTreeMap::from([(
            super::super::DECISION_ANNOTATION.to_owned(),
            "refused: hostNetwork, hostPID and hostIPC are not supported".to_owned(),
        )]));
        let mut admitted = waiting.clone();
        admitted.metadata.name = Some("ok".into());
        admitted.metadata.annotations = Some(BTreeMap::from([(
            super::super::DECISION_ANNOTATION.to_owned(),
            "offload".to_owned(),
        )]));
        let mut running = waiting.clone();
        running.metadata.name = Some("placed".into());
        running.spec.as_mut().unwrap().node_name = Some("w1".into());
        let pods = [waiting, admitted, running];
        let found = refused_and_pending(&pods);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.metadata.name.as_deref(), Some("big"));
        assert_eq!(
            found[0].1,
            "hostNetwork, hostPID and hostIPC are not supported"
        );
    }

    #[test]
    fn nothing_moves_while_in_cluster_gpus_are_full() {
        let nodes = [node("w1", 1, false), node("vk", 1000, true)];
        let pods = [
            pod("research", Some("w1"), 1, json!({}), "job", 1),
            pod("serve-b", Some("vk"), 1, both(), "rs1", 2),
        ];
        let s = snapshot(&nodes, &pods);
        assert!(s.fit().is_none());
        let mut st = State::default();
        let t0 = Instant::now();
        assert_eq!(
            st.step(&s, &SETTINGS, t0 + Duration::from_secs(600)),
            Step::Wait
        );
    }

    #[test]
    fn a_move_waits_for_the_settle_period_and_then_one_at_a_time() {
        let nodes = [node("w1", 2, false), node("vk", 1000, true)];
        let pods = [
            pod("serve-b", Some("vk"), 1, both(), "rs1", 2),
            pod("serve-c", Some("vk"), 1, both(), "rs1", 3),
        ];
        let s = snapshot(&nodes, &pods);
        let mut st = State::default();
        let t0 = Instant::now();
        assert_eq!(st.step(&s, &SETTINGS, t0), Step::Wait);
        assert_eq!(
            st.step(&s, &SETTINGS, t0 + Duration::from_secs(29)),
            Step::Wait
        );
        let Step::Move(c, n) = st.step(&s, &SETTINGS, t0 + Duration::from_secs(30)) else {
            panic!("expected a move after the settle period")
        };
        assert_eq!(
            (c.name.as_str(), n.as_str()),
            ("serve-b", "w1"),
            "the oldest replica first"
        );
        // Its replacement is pending: no second move, however long GPUs stay free.
        let mut pending = pods.to_vec();
        pending[0] = pod("serve-b2", None, 1, both(), "rs1", 9);
        let s2 = snapshot(&nodes, &pending);
        assert_eq!(
            st.step(&s2, &SETTINGS, t0 + Duration::from_secs(90)),
            Step::Wait
        );
    }

    #[test]
    fn a_replacement_that_lands_on_the_virtual_node_again_doubles_the_settle_period() {
        let nodes = [node("w1", 1, false), node("vk", 1000, true)];
        let pods = [pod("serve-b", Some("vk"), 1, both(), "rs1", 2)];
        let s = snapshot(&nodes, &pods);
        let mut st = State::default();
        let t0 = Instant::now();
        st.step(&s, &SETTINGS, t0);
        assert!(matches!(
            st.step(&s, &SETTINGS, t0 + Duration::from_secs(30)),
            Step::Move(..)
        ));
        // The replacement went to the virtual node again (someone took w1's GPU meanwhile),
        // and w1 is free again right after: the next move needs 60 s, not 30.
        let again = [pod("serve-b2", Some("vk"), 1, both(), "rs1", 9)];
        let s2 = snapshot(&nodes, &again);
        let t1 = t0 + Duration::from_secs(40);
        assert_eq!(st.step(&s2, &SETTINGS, t1), Step::Wait);
        assert_eq!(
            st.step(&s2, &SETTINGS, t1 + Duration::from_secs(59)),
            Step::Wait
        );
        assert!(matches!(
            st.step(&s2, &SETTINGS, t1 + Duration::from_secs(60)),
            Step::Move(..)
        ));
    }
}
