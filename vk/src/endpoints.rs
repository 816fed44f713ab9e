//! Service traffic to offloaded pods: EndpointSlices for the pods whose container ports their
//! provider publishes elsewhere (RunPod's public ports, Vast's port mappings).
//!
//! Such a pod has no pod IP (`pods::address`), so the Service controller leaves it out of its
//! slices; this writer adds one slice per Service and pod with the published address and port
//! (`desired.rs`), labelled with its own `endpointslice.kubernetes.io/managed-by`, so
//! kube-proxy and CoreDNS send the Service's traffic there as to any other endpoint. It runs on
//! the leader only, looks at the pods when a published one changes (and every second), and does
//! nothing while none is published; Services are re-read every [`RESYNC`]. A Service port whose
//! container port the provider does not publish is a Warning Event on the pod, once per pod,
//! Service and port.

pub mod desired;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use tracing::{info, warn};

use crate::config::Config;
use crate::pods::PodController;
use crate::pods::events::EventType;
use desired::{Unreachable, Writer, desired, ours};

/// How often Services and our slices are read again while pods are published (a Service
/// created or changed after its pods is picked up within this).
pub const RESYNC: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_secs(1);
/// The least time between two passes, however often published pods change.
const SPACING: Duration = Duration::from_millis(200);
/// The field manager of our server-side applies.
const FIELD_MANAGER: &str = "gpu-vk-endpoints";

/// Writes the slices until the process ends; errors are logged and retried at the next tick.
pub async fn run(fw: Arc<PodController>, cfg: Arc<Config>, client: Client) {
    let w = Writer {
        node: cfg.node_name.clone(),
        owner_tag: fw.owner().tag().to_owned(),
    };
    let mut state = State::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_pass = Instant::now();
    loop {
        // A published pod's change (one that began deleting, above all) is written at once,
        // not at the next tick: its workload stops after its preStop sleep, and kube-proxy must
        // have let go of it by then. At most one pass per SPACING all the same.
        tokio::select! {
            _ = tick.tick() => {}
            _ = fw.published_changed() => {}
        }
        tokio::time::sleep(SPACING.saturating_sub(last_pass.elapsed())).await;
        last_pass = Instant::now();
        let pods = fw.published_pods();
        let input = digest(&pods);
        let due = state.last.is_none_or(|t| t.elapsed() >= RESYNC);
        // Nothing published and nothing of ours left: no request at all.
        if pods.is_empty() && state.owned_namespaces.is_empty() && state.last.is_some() {
            continue;
        }
        if state.input == Some(input) && !due {
            continue;
        }
        match pass(&client, &cfg, &w, &pods, &mut state).await {
            Ok(unreachable) => {
                state.input = Some(input);
                state.last = Some(Instant::now());
                let live: HashSet<&str> = pods
                    .iter()
                    .filter_map(|p| p.metadata.uid.as_deref())
                    .collect();
                state
                    .reported
                    .retain(|(uid, _, _)| live.contains(uid.as_str()));
                for u in unreachable {
                    report(&fw, &pods, &u, &mut state.reported);
                }
            }
            Err(e) => {
                warn!(error = %e, "writing EndpointSlices for offloaded pods failed; retrying")
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// Digest of the published pods at the last pass that succeeded.
    input: Option<u64>,
    last: Option<Instant>,
    /// Namespaces holding slices of ours after the last pass.
    owned_namespaces: BTreeSet<String>,
    /// (pod uid, Service, port) already reported unreachable.
    reported: HashSet<(String, String, String)>,
}

fn digest(pods: &[Pod]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in pods {
        // The published ports too: they come from what the VK observed of the workload
        // (`PodController::published_pods`) and may change before the pod does.
        let published = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::pods::spec::ANN_PUBLISHED));
        (&p.metadata.uid, &p.metadata.resource_version, published).hash(&mut h);
    }
    h.finish()
}

/// Reads Services and our slices, then creates, changes and deletes slices until they are
/// what [`desired`] says. Returns the Service ports that cannot reach a pod.
async fn pass(
    client: &Client,
    cfg: &Config,
    w: &Writer,
    pods: &[Pod],
    state: &mut State,
) -> Result<Vec<Unreachable>, kube::Error> {
    let selector = ListParams::default().labels(&w.selector());
    let mut actual: BTreeMap<(String, String), EndpointSlice> = BTreeMap::new();
    let listed = if cfg.allowed_namespaces.is_empty() {
        Api::<EndpointSlice>::all(client.clone())
            .list(&selector)
            .await?
            .items
    } else {
        let mut all = Vec::new();
        for ns in &cfg.allowed_namespaces {
            all.extend(
                Api::<EndpointSlice>::namespaced(client.clone(), ns)
                    .list(&selector)
                    .await?
                    .items,
            );
        }
        all
    };
    for s in listed {
        let key = (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        );
        actual.insert(key, s);
    }
    let namespaces: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.metadata.namespace.clone())
        .collect();
    let mut services: Vec<Service> = Vec::new();
    for ns in &namespaces {
        services.extend(
            Api::<Service>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items,
        );
    }
    let (want, unreachable) = desired(&services, pods, w);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for ((ns, name), slice) in &want {
        if actual.get(&(ns.clone(), name.clone())).map(ours) == Some(ours(slice)) {
            continue;
        }
        let mut body = serde_json::to_value(slice).unwrap_or_default();
        body["apiVersion"] = "discovery.k8s.io/v1".into();
        body["kind"] = "EndpointSlice".into();
        Api::<EndpointSlice>::namespaced(client.clone(), ns)
            .patch(name, &apply, &Patch::Apply(&body))
            .await?;
        info!(namespace = %ns, slice = %name, "wrote the EndpointSlice of an offloaded pod");
    }
    for (ns, name) in actual.keys().filter(|k| !want.contains_key(*k)) {
        match Api::<EndpointSlice>::namespaced(client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                info!(namespace = %ns, slice = %name, "deleted the EndpointSlice of a pod no longer offloaded there")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    state.owned_namespaces = want.keys().map(|(ns, _)| ns.clone()).collect();
    Ok(unreachable)
}

/// A Warning Event on the pod, once per pod, Service and port.
fn report(
    fw: &PodController,
    pods: &[Pod],
    u: &Unreachable,
    reported: &mut HashSet<(String, String, String)>,
) {
    let Some(pod) = pods.iter().find(|p| {
        p.metadata.name.as_deref() == Some(&u.pod)
            && p.metadata.namespace.as_deref() == Some(&u.namespace)
    }) else {
        return;
    };
    let key = (
        pod.metadata.uid.clone().unwrap_or_default(),
        u.service.clone(),
        u.port.clone(),
    );
    if !reported.insert(key) {
        return;
    }
    fw.event(
        pod,
        EventType::Warning,
        "PortNotPublished",
        "Publish",
        &format!(
            "Service {} port {} targets a container port the provider does not publish: the \
             Service cannot reach this pod on it",
            u.service, u.port
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_follows_the_observed_ports_even_when_the_pod_is_unchanged() {
        let pod = |ports: &str| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {
                "uid": "u1", "resourceVersion": "7",
                "annotations": {crate::pods::spec::ANN_PUBLISHED: ports}}}))
            .unwrap()
        };
        let a = digest(&[pod("8080=198.18.0.2:43210")]);
        assert_eq!(a, digest(&[pod("8080=198.18.0.2:43210")]));
        assert_ne!(a, digest(&[pod("8080=198.18.0.9:43210")]));
    }
}
