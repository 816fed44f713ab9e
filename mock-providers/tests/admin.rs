//! The shared `/_admin` API: workloads, injection, preemption, exits, failures, usage, lost
//! workloads, inventory, faults, counters and reset, on both emulators.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, Instant};

use helpers::*;
use mock_providers::ExecutionMode;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn runpod_pod(emu: &Emu, name: &str, count: u32) -> String {
    let r = emu
        .post("/v2/pods")
        .json(&json!({"name": name, "image": "img", "gpu": {"id": "A100-80GB", "count": count}, "env": {"K": "V"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn pod_status(emu: &Emu, id: &str) -> (StatusCode, Value) {
    let r = emu.get(&format!("/v2/pods/{id}")).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn workloads_show_what_clients_created() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let id = runpod_pod(&emu, "ns-pod-1", 2).await;
    let ws = emu.workloads().await;
    assert_eq!(ws.len(), 1);
    let w = &ws[0];
    assert_eq!(w["id"], id.as_str());
    assert_eq!(w["name"], "ns-pod-1");
    assert_eq!(w["state"], "RUNNING");
    assert_eq!(w["phase"], "running");
    assert_eq!(w["gpu_type"], "A100-80GB");
    assert_eq!(w["gpu_count"], 2);
    assert_eq!(w["image"], "img");
    assert_eq!(w["env"], json!({"K": "V"}));
    assert_eq!(w["exit_code"], Value::Null);
    assert!(w["cpu_millis"].as_u64().unwrap() > 0);
    assert!(w["memory_bytes"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn inject_creates_a_running_workload_that_takes_gpus() {
    let emu = start_runpod(config(ExecutionMode::simulated(10_000, 10_000, None))).await;
    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "orphan", "image": "img", "gpu_type": "A100-80GB", "gpu_count": 8}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Visible through the real API, already RUNNING despite the long provisioning time.
    let (status, pod) = pod_status(&emu, &id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pod["status"], "RUNNING");
    assert_eq!(pod["name"], "orphan");
    // It holds all A100s.
    let r = emu
        .post("/v2/pods")
        .json(&json!({"name": "x", "image": "i", "gpu": {"id": "A100-80GB"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "x", "gpu_type": "A100-80GB"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "x", "gpu_type": "nope"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu.admin_post("/_admin/workloads", json!({"bad": 1})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn preempt_exit_fail_on_runpod() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let a = runpod_pod(&emu, "a", 1).await;
    let b = runpod_pod(&emu, "b", 1).await;
    let c = runpod_pod(&emu, "c", 1).await;

    let r = emu
        .admin_post(&format!("/_admin/workloads/{a}/preempt"), json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(pod_status(&emu, &a).await.1["status"], "EXITED");
    let w = emu.workload(&a).await.unwrap();
    assert_eq!(w["phase"], "preempted");
    assert_eq!(w["exit_code"], Value::Null);
    // Preempting something that is not running is a conflict.
    let r = emu
        .admin_post(&format!("/_admin/workloads/{a}/preempt"), json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{b}/exit"),
            json!({"exit_code": 137}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // RunPod restarts an exited container in place: the pod stays RUNNING on its GPUs.
    assert_eq!(pod_status(&emu, &b).await.1["status"], "RUNNING");
    assert_eq!(emu.workload(&b).await.unwrap()["exit_code"], 137);
    let r = emu
        .admin_post(&format!("/_admin/workloads/{b}/exit"), json!({"code": 1}))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{c}/fail"),
            json!({"message": "CUDA error"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let pod = pod_status(&emu, &c).await.1;
    assert_eq!(pod["status"], "ERROR");
    assert_eq!(pod["actions"], json!(["start", "terminate"]));
    assert_eq!(emu.workload(&c).await.unwrap()["state"], "ERROR");

    // The preempted and the failed pod released their GPUs; the restarted one holds its own.
    let inv = emu.admin_get("/_admin/inventory").await;
    assert_eq!(inv["gpus"][0]["free"], 7);
    let r = emu
        .admin_post("/_admin/workloads/nope/exit", json!({"exit_code": 1}))
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn vast_exit_and_fail_states() {
    let emu = start_vast(config(ExecutionMode::simulated(0, 0, None))).await;
    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "v1", "gpu_type": "RTX4090", "gpu_count": 1, "interruptible": true}),
        )
        .await;
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(id.parse::<u64>().is_ok(), "vast ids are integers: {id}");
    let show = |id: String| {
        let emu = &emu;
        async move {
            let v: Value = emu
                .get(&format!("/api/v0/instances/{id}/"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["instances"].clone()
        }
    };
    assert_eq!(show(id.clone()).await["actual_status"], "running");
    assert_eq!(show(id.clone()).await["is_bid"], true);
    emu.admin_post(
        &format!("/_admin/workloads/{id}/exit"),
        json!({"exit_code": 2}),
    )
    .await;
    assert_eq!(show(id.clone()).await["actual_status"], "exited");
    assert_eq!(emu.workload(&id).await.unwrap()["state"], "exited");

    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "v2", "gpu_type": "RTX4090"}),
        )
        .await;
    let id2 = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    emu.admin_post(&format!("/_admin/workloads/{id2}/fail"), json!({}))
        .await;
    let inst = show(id2.clone()).await;
    assert_eq!(inst["actual_status"], "unknown");
    assert!(inst["status_msg"].as_str().unwrap().starts_with("Error"));
}

#[tokio::test]
async fn usage_override_shows_in_the_api() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let id = runpod_pod(&emu, "u", 1).await;
    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{id}/usage"),
            json!({"cpu_millis": 4000, "memory_bytes": 16u64 * 1024 * 1024 * 1024}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let w = emu.workload(&id).await.unwrap();
    assert_eq!(w["cpu_millis"], 4000);
    assert_eq!(w["memory_bytes"], 16u64 * 1024 * 1024 * 1024);
    // 1 GPU pod: 8 vCPUs and 32 GB -> 4000m is 50%, 16 GiB is 50%.
    let pod = pod_status(&emu, &id).await.1;
    assert_eq!(pod["runtime"]["cpu"]["util"], 50);
    assert_eq!(pod["runtime"]["memory"]["util"], 50);
    let r = emu
        .admin_post(&format!("/_admin/workloads/{id}/usage"), json!({"cpu": 1}))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn vanish_removes_silently() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let id = runpod_pod(&emu, "lost", 8).await;
    let r = emu
        .client
        .delete(emu.url(&format!("/_admin/workloads/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(pod_status(&emu, &id).await.0, StatusCode::NOT_FOUND);
    assert!(emu.workloads().await.is_empty());
    // GPUs are back.
    runpod_pod(&emu, "again", 8).await;
    // Vanishing does not count as a client call.
    assert_eq!(emu.counters().await["delete"], 0);
    let r = emu
        .client
        .delete(emu.url("/_admin/workloads/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn inventory_can_be_replaced() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    runpod_pod(&emu, "keep", 2).await;
    let r = emu
        .client
        .put(emu.url("/_admin/inventory"))
        .json(&json!({"gpus": [
            {"gpu_type": "A100-80GB", "count": 4, "price_per_hour": 2.5},
            {"gpu_type": "H100", "count": 16, "price_per_hour": 3.0}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let inv = emu.admin_get("/_admin/inventory").await;
    assert_eq!(
        inv,
        json!({"gpus": [
            {"gpu_type": "A100-80GB", "count": 4, "price_per_hour": 2.5, "free": 2},
            {"gpu_type": "H100", "count": 16, "price_per_hour": 3.0, "free": 16}
        ]})
    );
    // RTX4090 is gone: unknown GPU type now.
    let r = emu
        .post("/v2/pods")
        .json(&json!({"name": "x", "image": "i", "gpu": {"id": "RTX4090"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu
        .post("/v2/pods")
        .json(&json!({"name": "x", "image": "i", "gpu": {"id": "H100", "count": 8}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let pod: Value = r.json().await.unwrap();
    assert!((pod["cost"].as_f64().unwrap() - 24.0).abs() < 1e-9);
    let r = emu
        .client
        .put(emu.url("/_admin/inventory"))
        .json(&json!({"gpus": [{"gpu_type": "", "count": 1, "price_per_hour": 1.0}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn faults_fail_next_status_body_retry_after() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let r = emu
        .admin_post(
            "/_admin/faults",
            json!({"route": "create", "fail_next": 2, "status": 503, "retry_after_s": 7}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    for _ in 0..2 {
        let r = emu
            .post("/v2/pods")
            .json(&json!({"name": "f", "image": "i", "gpu": {"id": "A100-80GB"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "7");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], 503);
    }
    // Injected failures create nothing; the third call goes through.
    assert!(emu.workloads().await.is_empty());
    let id = runpod_pod(&emu, "ok", 1).await;
    // Other routes are unaffected.
    assert_eq!(pod_status(&emu, &id).await.0, StatusCode::OK);

    // A custom body on every list call until cleared.
    emu.admin_post(
        "/_admin/faults",
        json!({"route": "list", "status": 500, "body": {"oops": true}}),
    )
    .await;
    for _ in 0..3 {
        let r = emu.get("/v2/pods").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.json::<Value>().await.unwrap(), json!({"oops": true}));
    }
    let r = emu
        .client
        .delete(emu.url("/_admin/faults"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        emu.get("/v2/pods").send().await.unwrap().status(),
        StatusCode::OK
    );

    // Faults fire before authentication, like a failing load balancer.
    emu.admin_post(
        "/_admin/faults",
        json!({"route": "any", "fail_next": 1, "status": 502}),
    )
    .await;
    let r = emu.client.get(emu.url("/v2/pods")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let r = emu
        .admin_post("/_admin/faults", json!({"route": "nope"}))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu
        .admin_post("/_admin/faults", json!({"route": "any", "error_rate": 2.0}))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn faults_latency_and_error_rate() {
    let emu = start_vast(config(ExecutionMode::simulated(0, 0, None))).await;
    emu.admin_post(
        "/_admin/faults",
        json!({"route": "search", "latency_ms": 300}),
    )
    .await;
    let t = Instant::now();
    let r = emu
        .post("/api/v0/bundles/")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(t.elapsed() >= Duration::from_millis(300));
    let t = Instant::now();
    emu.get("/api/v1/instances").send().await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(300));

    emu.admin_post(
        "/_admin/faults",
        json!({"route": "get", "error_rate": 1.0, "status": 500}),
    )
    .await;
    let r = emu.get("/api/v0/instances/1/").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // Default body has the provider's error shape.
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["success"], false);
    assert!(body["error"].is_string());
    assert!(body["msg"].is_string());
}

#[tokio::test]
async fn counters_count_each_route_kind_and_reset_clears_everything() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let id = runpod_pod(&emu, "c", 1).await;
    emu.get("/v2/pods").send().await.unwrap();
    emu.get("/v2/pods").send().await.unwrap();
    emu.get(&format!("/v2/pods/{id}")).send().await.unwrap();
    emu.post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "stop"}))
        .send()
        .await
        .unwrap();
    emu.delete(&format!("/v2/pods/{id}")).send().await.unwrap();
    // Unauthenticated calls count too.
    emu.client.get(emu.url("/v2/pods")).send().await.unwrap();
    // A create the provider refuses (more GPUs than it has) is a call, not a workload.
    let refused = emu
        .post("/v2/pods")
        .json(
            &json!({"name": "too-big", "image": "img", "gpu": {"id": "A100-80GB", "count": 4096}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let c = emu.counters().await;
    assert_eq!(c["create"], 2);
    assert_eq!(c["created"], 1);
    assert_eq!(c["list"], 3);
    assert_eq!(c["get"], 1);
    assert_eq!(c["action"], 1);
    assert_eq!(c["delete"], 1);
    assert_eq!(c["logs"], 0);
    assert_eq!(c["total"], 8);

    runpod_pod(&emu, "d", 8).await;
    emu.admin_post("/_admin/faults", json!({"route": "list", "status": 500}))
        .await;
    let r = emu
        .client
        .post(emu.url("/_admin/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(emu.workloads().await.is_empty());
    let c = emu.counters().await;
    assert_eq!(c["total"], 0);
    assert_eq!(c["created"], 0);
    // Faults are gone and the GPUs are free again.
    assert_eq!(
        emu.get("/v2/pods").send().await.unwrap().status(),
        StatusCode::OK
    );
    runpod_pod(&emu, "e", 8).await;
}

#[tokio::test]
async fn a_keyed_admin_api_refuses_requests_without_the_key() {
    let router = mock_providers::runpod::router(mock_providers::runpod::State::new(config(
        ExecutionMode::simulated(0, 0, None),
    )));
    let router = mock_providers::admin::require_key(router, "admin-s3cret".into());
    let (addr, server) = mock_providers::spawn(router).await.unwrap();
    let http = client();
    let url = |p: &str| format!("http://{addr}{p}");
    let status = |r: reqwest::Response| r.status();
    // No key, a wrong key: refused, and nothing happens.
    let none = http.post(url("/_admin/reset")).send().await.unwrap();
    assert_eq!(status(none), StatusCode::UNAUTHORIZED);
    let wrong = http
        .get(url("/_admin/workloads"))
        .header(mock_providers::admin::ADMIN_KEY_HEADER, "admin-s3creT")
        .send()
        .await
        .unwrap();
    assert_eq!(status(wrong), StatusCode::UNAUTHORIZED);
    // The provider API keeps its own key and does not need the admin key.
    let pods = http
        .get(url("/v2/pods"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(status(pods), StatusCode::OK);
    let right = http
        .get(url("/_admin/workloads"))
        .header(mock_providers::admin::ADMIN_KEY_HEADER, "admin-s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(status(right), StatusCode::OK);
    server.abort();
}
