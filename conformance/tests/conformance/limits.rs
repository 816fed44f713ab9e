//! Steps of `provider_limits.feature`: a burst of pods against a provider's per-endpoint rate
//! limits, and a pod over a provider's input limit.

use std::time::Duration;

use conformance::harness::*;
use cucumber::{then, when};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;

use super::Vkw;

/// The names of a burst: `<prefix>-0` .. `<prefix>-<n-1>`.
fn burst_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[when(expr = "I create {int} GPU pods {string} at once")]
async fn create_burst(w: &mut Vkw, n: usize, prefix: String) {
    let node = w.node();
    let api = w.pods();
    let creates = burst_names(&prefix, n).into_iter().map(|name| {
        let api = api.clone();
        let pod = gpu_pod(&name, &node, 1, &[]);
        async move { api.create(&PostParams::default(), &pod).await.unwrap() }
    });
    for p in futures::future::join_all(creates).await {
        w.uids.insert(p.metadata.name.clone().unwrap(), uid(&p));
        w.all_uids.insert(uid(&p));
    }
}

#[then(expr = "all {int} pods {string} become Running within {int} seconds")]
async fn burst_running(w: &mut Vkw, n: usize, prefix: String, secs: u64) {
    let names = burst_names(&prefix, n);
    wait_for(
        Duration::from_secs(secs),
        &format!("{n} pods {prefix}-* Running"),
        || async {
            let pods = w.pods().list(&Default::default()).await.ok()?.items;
            let running = names
                .iter()
                .filter(|name| {
                    pods.iter().any(|p| {
                        p.metadata.name.as_deref() == Some(name.as_str()) && phase(p) == "Running"
                    })
                })
                .count();
            (running == n).then_some(())
        },
    )
    .await;
}

/// Every place a pod can carry the `ProviderError` reason: its status, a condition, a
/// container state.
fn provider_error_in_status(p: &Pod) -> Option<String> {
    const REASON: &str = "ProviderError";
    let st = p.status.as_ref()?;
    if st.reason.as_deref() == Some(REASON) {
        return Some(format!("status reason, message {:?}", st.message));
    }
    for c in st.conditions.iter().flatten() {
        if c.reason.as_deref() == Some(REASON) {
            return Some(format!("condition {} ({:?})", c.type_, c.message));
        }
    }
    for cs in st.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        let waiting = state.and_then(|s| s.waiting.as_ref());
        let terminated = state.and_then(|s| s.terminated.as_ref());
        if waiting.and_then(|s| s.reason.as_deref()) == Some(REASON)
            || terminated.and_then(|s| s.reason.as_deref()) == Some(REASON)
        {
            return Some(format!("container {} state {:?}", cs.name, cs.state));
        }
    }
    None
}

#[then(expr = "no pod {string} has a ProviderError event or condition")]
async fn no_provider_error(w: &mut Vkw, prefix: String) {
    let (c, ns) = (w.c(), w.ns.clone());
    let pods = w.pods().list(&Default::default()).await.unwrap().items;
    let burst: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{prefix}-")))
        })
        .collect();
    assert!(!burst.is_empty(), "no pod {prefix}-* found");
    let mut problems = Vec::new();
    for p in burst {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(what) = provider_error_in_status(p) {
            problems.push(format!("{name}: {what}"));
        }
        for (reason, note) in events_for(&c, &ns, &name).await {
            if reason == "ProviderError" {
                problems.push(format!("{name}: event {reason}: {note}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "rate limiting reached the pods: {problems:#?}"
    );
}

#[when(expr = "I create a GPU pod {string} with an env var {string} of {int} characters")]
async fn create_long_env(w: &mut Vkw, name: String, var: String, len: usize) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": var, "value": "x".repeat(len)})).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[then(expr = "the message of pod {string} names {string} and {string}")]
async fn message_names(w: &mut Vkw, name: String, a: String, b: String) {
    let p = w.get(&name).await.expect("the pod exists");
    let message = p.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains(&a) && message.contains(&b),
        "the message should name {a} and {b}: {message:?}"
    );
}
