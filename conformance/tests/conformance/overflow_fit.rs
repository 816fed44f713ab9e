//! Steps of the overflow feature's replica that no in-cluster node can take: the reclaim
//! controller leaves it on the virtual node however long in-cluster GPUs are free, and says why.

use std::time::{Duration, Instant};

use conformance::harness::*;
use cucumber::{then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::Vkw;
use crate::overflow::placement;

#[when(
    expr = "I create a reclaimable deployment {string} of 1 GPU replica with a node selector only the virtual node matches"
)]
async fn pinned(w: &mut Vkw, app: String) {
    let vnode = w.node();
    let labels = json!({"app": app, "gpu-vk.io/overflow": "true", "gpu-vk.io/reclaim": "true"});
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": labels}, "spec": {
                // As a team would pin a workload to the cloud: no worker carries this label.
                "nodeSelector": {"type": "virtual-kubelet"},
                "affinity": placement(&vnode),
                "containers": [{"name": "m", "image": crate::traffic::image("vk"),
                    "imagePullPolicy": "Never", "command": ["sleep", "infinity"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// GPUs free on the fake-GPU workers now: allocatable less what live pods there ask for.
async fn free_gpus(w: &Vkw) -> i64 {
    let nodes = Api::<Node>::all(w.c())
        .list(&ListParams::default().labels("gpu-vk.io/fake-gpu=true"))
        .await
        .unwrap()
        .items;
    let gpus = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| q.0.parse::<i64>().ok()).unwrap_or(0)
    };
    let mut free = 0;
    let pods = Api::<Pod>::all(w.c())
        .list(&Default::default())
        .await
        .unwrap();
    for n in &nodes {
        let name = n.metadata.name.as_deref();
        let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let used: i64 = pods
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == name)
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .flat_map(|p| p.spec.as_ref().unwrap().containers.iter())
            .map(|c| {
                gpus(
                    c.resources
                        .as_ref()
                        .and_then(|r| r.limits.as_ref())
                        .and_then(|l| l.get("nvidia.com/gpu")),
                )
            })
            .sum();
        free += gpus(alloc.and_then(|a| a.get("nvidia.com/gpu"))) - used;
    }
    free
}

#[then(
    expr = "the replica of {string} runs on the virtual node with a {string} event, and stays there while in-cluster GPUs are free for {int} seconds"
)]
async fn stays(w: &mut Vkw, app: String, reason: String, secs: u64) {
    let vnode = w.node();
    let pod = wait_seeing(
        Duration::from_secs(90),
        &format!("the replica of {app} Running on the virtual node"),
        || async {
            let pods = w.replicas(&app).await;
            match pods.as_slice() {
                [p] if phase(p) == "Running"
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&vnode) =>
                {
                    Ok(p.clone())
                }
                other => Err(format!(
                    "{:?}",
                    other
                        .iter()
                        .map(|p| (p.metadata.name.clone(), phase(p).to_owned()))
                        .collect::<Vec<_>>()
                )),
            }
        },
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.c(), &w.ns);
    let note = wait_for(
        Duration::from_secs(30),
        &format!("a {reason} event on {name}"),
        || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find_map(|e| {
                    let on = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&name);
                    (on && e.reason.as_deref() == Some(&reason))
                        .then_some(e.note.unwrap_or_default())
                })
        },
    )
    .await;
    assert!(
        note.contains("node selector type=virtual-kubelet does not match"),
        "the event says why: {note}"
    );
    // Other scenarios (research jobs) may hold the workers' GPUs for a while: watch until the
    // GPUs were free for `secs` seconds in all, long enough for several reclaim looks.
    let uid = pod.metadata.uid.clone();
    let mut free_for = Duration::ZERO;
    let started = Instant::now();
    while free_for < Duration::from_secs(secs) {
        assert!(
            started.elapsed() < Duration::from_secs(secs + 240),
            "in-cluster GPUs were free for only {free_for:?} in {:?}",
            started.elapsed()
        );
        let t = Instant::now();
        let free = free_gpus(w).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if free > 0 {
            free_for += t.elapsed();
        }
        let now: Vec<Pod> = w.replicas(&app).await;
        let same = now
            .iter()
            .any(|p| p.metadata.uid == uid && p.metadata.deletion_timestamp.is_none());
        assert!(
            same,
            "the replica {name} was evicted or replaced after {:?} ({free} in-cluster GPUs free): {:?}",
            started.elapsed(),
            now.iter()
                .map(|p| p.metadata.name.clone())
                .collect::<Vec<_>>()
        );
    }
    println!(
        "    reclaim: {name} stayed on the virtual node while in-cluster GPUs were free for {free_for:.0?}"
    );
}
