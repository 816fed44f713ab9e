//! The rows from objects as a virtual kubelet writes them: a Node with two provider conditions,
//! pods assigned to each (one held, one finished, one unpriced), a fixed clock.

use super::*;
use serde_json::json;

const NOW: &str = "2026-12-07T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "gpu-offload", "labels": {"type": "virtual-kubelet"}},
        "status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "gpu-vk.io/provider.runpod", "status": "True", "reason": "ProviderHealthy", "message": "calls succeed"},
            {"type": "gpu-vk.io/provider.vast", "status": "False", "reason": "CircuitOpen",
             "message": "no new pods for 30s: 5 failures in a row"}
        ]}
    }))
    .unwrap()
}

fn pod(
    ns: &str,
    name: &str,
    provider: &str,
    phase: &str,
    decision: Option<&str>,
    gpus: u32,
) -> Pod {
    let mut ann = json!({"gpu-vk.io/assigned-provider": provider});
    if let Some(d) = decision {
        ann["gpu-vk.io/dispatch"] = json!(d);
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "annotations": ann},
        "spec": {"nodeName": "gpu-offload", "containers": [{"name": "m", "image": "m",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": phase, "startTime": "2026-12-07T10:00:00Z"}
    }))
    .unwrap()
}

fn held() -> Pod {
    let mut p = pod("team-a", "waiting", "", "Pending", None, 8);
    p.metadata.annotations = None;
    p.status = serde_json::from_value(json!({"phase": "Pending", "containerStatuses": [{
        "name": "m", "image": "m", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ProviderCapacity",
            "message": "no provider can run it now: runpod: no A100-80GB available; vast: circuit open"}}}]}))
    .unwrap();
    p
}

/// Finished after 90 minutes at $1.00/h.
fn done() -> Pod {
    let mut p = pod(
        "team-b",
        "done",
        "runpod",
        "Succeeded",
        Some("policy preference: chose runpod A100-80GB $1.00/h"),
        1,
    );
    p.status = serde_json::from_value(json!({"phase": "Succeeded", "startTime": "2026-12-07T10:00:00Z",
        "containerStatuses": [{"name": "m", "image": "m", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-12-07T11:30:00Z"}}}]}))
    .unwrap();
    p
}

fn snapshot() -> Snapshot {
    Snapshot {
        nodes: vec![node()],
        pods: vec![
            pod(
                "team-a",
                "serve-1",
                "runpod",
                "Running",
                Some(
                    "policy cheapest: chose runpod A100-80GB $1.89/h; also considered vast A100-80GB $2.10/h",
                ),
                1,
            ),
            pod(
                "team-a",
                "train",
                "vast",
                "Running",
                Some("policy preference: chose vast RTX4090 $0.40/h"),
                2,
            ),
            pod(
                "team-b",
                "batch",
                "runpod",
                "Running",
                Some("policy preference: chose runpod unpriced"),
                1,
            ),
            done(),
            held(),
        ],
        now: Some(now()),
    }
}

#[test]
fn the_chosen_price_is_read_from_the_decision_and_unpriced_is_none() {
    assert_eq!(
        chosen_price(
            "policy cheapest: chose vast A100-80GB $0.95/h; also considered rp A100-80GB $1.89/h"
        ),
        Some(0.95)
    );
    assert_eq!(
        chosen_price("policy preference: chose runpod $2.00/h"),
        Some(2.0)
    );
    assert_eq!(
        chosen_price("policy preference: chose slurm unpriced; also considered rp $9.00/h"),
        None
    );
    assert_eq!(chosen_price("garbage"), None);
}

#[test]
fn pods_show_provider_status_price_cost_and_the_choice() {
    let rows = pods(&snapshot());
    insta::assert_snapshot!(crate::render::pods(&rows));
    let serve = rows.iter().find(|r| r.name == "serve-1").unwrap();
    // Two hours at $1.89/h.
    assert_eq!(serve.cost_so_far, Dollars::Known(1.89 * 2.0));
    let batch = rows.iter().find(|r| r.name == "batch").unwrap();
    assert_eq!(
        batch.cost_so_far.text(""),
        "unknown",
        "an unpriced pod's cost is never 0"
    );
    let done = rows.iter().find(|r| r.name == "done").unwrap();
    assert_eq!(
        done.cost_so_far,
        Dollars::Known(1.5),
        "a finished pod costs its run only"
    );
    let waiting = rows.iter().find(|r| r.name == "waiting").unwrap();
    assert_eq!(
        (waiting.price_per_hour, waiting.cost_so_far),
        (None, Dollars::Known(0.0))
    );
}

#[test]
fn providers_show_health_and_what_their_live_pods_use() {
    let rows = providers(&snapshot());
    insta::assert_snapshot!(crate::render::providers(&rows));
    let runpod = rows.iter().find(|r| r.provider == "runpod").unwrap();
    // serve-1 and batch are live (done is finished); batch is unpriced, so the sum is unknown.
    assert_eq!((runpod.pods, runpod.gpus), (2, 2));
    assert_eq!(runpod.spend_per_hour.text("/h"), "unknown");
    let vast = rows.iter().find(|r| r.provider == "vast").unwrap();
    assert_eq!(vast.healthy, Some(false));
    assert_eq!(vast.spend_per_hour, Dollars::Known(0.40));
}

#[test]
fn spend_counts_live_pods_from_the_period_start_and_says_unknown() {
    let start: Timestamp = "2026-12-07T11:00:00Z".parse().unwrap();
    let rows = spend(&snapshot(), start);
    insta::assert_snapshot!(crate::render::spend(&rows, "day"));
    let a = rows.iter().find(|r| r.namespace == "team-a").unwrap();
    // From 11:00 (the period) not 10:00 (the start): one hour of $1.89 + $0.40.
    assert_eq!(a.cost_in_period.text(""), "$2.29");
    assert_eq!(a.spend_per_hour.text("/h"), "$2.29/h");
    assert_eq!(
        a.unpriced_pods, 0,
        "a pod not dispatched yet is not unpriced"
    );
    let b = rows.iter().find(|r| r.namespace == "team-b").unwrap();
    assert_eq!(
        (b.pods, b.unpriced_pods),
        (1, 1),
        "the finished pod is not live"
    );
    assert_eq!(b.cost_in_period.text(""), "unknown");
    let json = serde_json::to_value(&rows).unwrap();
    assert_eq!(json[1]["spend_per_hour"], "unknown");
    assert!((json[0]["spend_per_hour"].as_f64().unwrap() - 2.29).abs() < 1e-9);
}

#[test]
fn why_a_held_pod_waits_names_every_provider_and_is_held() {
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e1", "namespace": "team-a"},
        "involvedObject": {"kind": "Pod", "name": "waiting"},
        "type": "Warning", "reason": "ProviderCapacity",
        "message": "no provider can run it now", "lastTimestamp": "2026-12-07T11:59:00Z"
    }))
    .unwrap();
    let w = why(&held(), &[event], now());
    assert!(w.held);
    insta::assert_snapshot!(crate::render::why(&w));
    let running = why(&snapshot().pods[0], &[], now());
    assert!(!running.held, "a running pod is not held");
}
