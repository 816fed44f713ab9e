//! The reclaim controller's I/O: the watched caches of nodes and pods, and the loop that looks
//! at them every interval, records gauges and Events, and evicts what [`super::State::step`]
//! says to move.

use std::collections::HashSet;
use std::time::Instant;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::EvictParams;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::{Candidate, Settings, Snapshot, State, Step, own_nodes, refused_and_pending, snapshot};
use crate::telemetry::{ErrorChain, Metrics, ProviderLabels, StateLabels};

/// Caches of every node and pod, shared by reclaim and the hand-off: one watch per kind.
pub fn caches(client: &Client) -> (reflector::Store<Node>, reflector::Store<Pod>) {
    (
        cache::<Node>(Api::all(client.clone())),
        cache::<Pod>(Api::all(client.clone())),
    )
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

/// Runs the controller until the process ends, on the caches of [`caches`].
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    instance: String,
    (nodes, pods): (reflector::Store<Node>, reflector::Store<Pod>),
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpu-vk-overflow".into(),
            instance: Some(instance),
        },
    );
    // Watches, not lists: each look reads the caches the watches keep current, so a large
    // cluster costs one watch per kind, not a list of every pod every interval.
    let mut state = State::default();
    // Pods already told why they stay where they are (by UID).
    let mut told = HashSet::<String>::new();
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
        gauges(&metrics, &snap);
        tell(&recorder, &p, &snap, &mut told).await;
        match state.step(&snap, &settings, Instant::now()) {
            Step::Wait => {}
            Step::Move(c, node) => {
                if !evict(&client, &recorder, &metrics, &p, &c, &node).await {
                    // 429: a PodDisruptionBudget allows no disruption now; try again later.
                    state.forget_move();
                }
            }
            Step::GiveUp(c, n) => gave_up(&recorder, &c, n).await,
        }
    }
}

fn gauges(metrics: &Metrics, snap: &Snapshot) {
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
}

/// Tells each pod once why it stays where it is: refused by the webhook (waits in-cluster), or
/// never fitting in-cluster (stays on the virtual node).
async fn tell(recorder: &Recorder, p: &[Pod], snap: &Snapshot, told: &mut HashSet<String>) {
    for (pod, why) in refused_and_pending(p) {
        if told.insert(pod.metadata.uid.clone().unwrap_or_default()) {
            let note = format!(
                "this pod cannot run on the virtual node, so it waits for in-cluster capacity: {why}"
            );
            let r = pod.object_ref(&());
            publish(recorder, r, EventType::Warning, "OverflowRefused", note).await;
        }
    }
    for (c, why) in snap.never_fit() {
        let Some(pod) = find(p, &c.namespace, &c.name) else {
            continue;
        };
        if told.insert(pod.metadata.uid.clone().unwrap_or_default()) {
            let note = format!(
                "stays on the virtual node: no in-cluster GPU node could take its replacement ({why})"
            );
            info!(namespace = %c.namespace, pod = %c.name, %why, "reclaim: a replica never fits in-cluster");
            let r = pod.object_ref(&());
            publish(recorder, r, EventType::Normal, "NotReclaimable", note).await;
        }
    }
    told.retain(|uid| p.iter().any(|x| x.metadata.uid.as_ref() == Some(uid)));
}

/// Evicts `c` so that its ReplicaSet replaces it on `node`; false when the eviction is refused.
async fn evict(
    client: &Client,
    recorder: &Recorder,
    metrics: &Metrics,
    p: &[Pod],
    c: &Candidate,
    node: &str,
) -> bool {
    let Some(pod) = find(p, &c.namespace, &c.name) else {
        return true;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
    match api.evict(&c.name, &EvictParams::default()).await {
        Ok(_) => {
            metrics.reclaim_moves.inc();
            info!(namespace = %c.namespace, pod = %c.name, node = %node, gpus = c.gpus, "reclaim: evicted an offloaded replica; its replacement fits in-cluster");
            let note = format!(
                "moving back in-cluster: node {node} has had {} free GPU(s) for the settle period; the ReplicaSet replaces this replica there",
                c.gpus
            );
            let r = pod.object_ref(&());
            publish(recorder, r, EventType::Normal, "Reclaimed", note).await;
            true
        }
        Err(e) => {
            warn!(namespace = %c.namespace, pod = %c.name, error = %ErrorChain(&e), "reclaim: eviction refused; trying again later");
            false
        }
    }
}

/// Says on the ReplicaSet of `c` that its replicas are no longer moved.
async fn gave_up(recorder: &Recorder, c: &Candidate, n: u32) {
    let note = format!(
        "stopped moving this ReplicaSet's replicas back in-cluster: {n} replacement(s) went to the virtual node again (something the reclaim controller does not judge, such as pod anti-affinity or topology spread, keeps them out); a new rollout starts afresh"
    );
    warn!(namespace = %c.namespace, replicaset = %c.owner_name, failed = n, "reclaim: gave up moving a ReplicaSet");
    let rs = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("ReplicaSet".into()),
        name: Some(c.owner_name.clone()),
        namespace: Some(c.namespace.clone()),
        uid: Some(c.owner.clone()),
        ..Default::default()
    };
    publish(recorder, rs, EventType::Warning, "ReclaimStopped", note).await;
}

fn find<'a>(pods: &'a [Pod], namespace: &str, name: &str) -> Option<&'a Pod> {
    pods.iter().find(|x| {
        x.metadata.name.as_deref() == Some(name)
            && x.metadata.namespace.as_deref() == Some(namespace)
    })
}

/// Records one reclaim Event on `on` (a failure to record is logged, never fatal).
async fn publish(
    recorder: &Recorder,
    on: ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reclaim".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &on).await {
        warn!(error = %ErrorChain(&e), reason, "reclaim: failed to record the event");
    }
}
