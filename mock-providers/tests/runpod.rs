//! RunPod v2 emulator: lifecycle, actions, errors, capacity, rate limits and logs, checked over
//! HTTP as a client of the real API would see them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, Instant};

use helpers::*;
use mock_providers::ExecutionMode;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn pod_body(name: &str, gpu: &str, count: u32) -> Value {
    json!({
        "name": name,
        "image": "runpod/pytorch:2.4",
        "gpu": {"id": gpu, "count": count},
        "env": {"POD_UID": "uid-1"},
        "dataCenterIds": ["US-TX-3"],
        "cloud": "SECURE",
    })
}

async fn create(emu: &Emu, body: Value) -> reqwest::Response {
    emu.post("/v2/pods").json(&body).send().await.unwrap()
}

async fn status_of(emu: &Emu, id: &str) -> String {
    let pod: Value = emu
        .get(&format!("/v2/pods/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    pod["status"].as_str().unwrap().to_owned()
}

/// The names of the pods `GET /v2/pods` lists, in its order.
async fn listed_names(emu: &Emu) -> Vec<String> {
    let list: Value = emu
        .get("/v2/pods")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_problem(body: &Value, status: u16) {
    assert_eq!(body["status"], status, "{body}");
    assert!(body["title"].is_string(), "{body}");
    assert!(body["detail"].is_string(), "{body}");
}

#[tokio::test]
async fn lifecycle_provisioning_starting_running_exited() {
    let emu = start_runpod(config(ExecutionMode::simulated(150, 150, Some(300)))).await;
    let r = create(&emu, pod_body("train-1", "A100-80GB", 2)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let pod: Value = r.json().await.unwrap();
    let id = pod["id"].as_str().unwrap().to_owned();
    assert_eq!(pod["status"], "PROVISIONING");
    assert_eq!(pod["name"], "train-1");
    assert_eq!(pod["gpu"]["id"], "A100-80GB");
    assert_eq!(pod["gpu"]["count"], 2);
    assert_eq!(pod["env"]["POD_UID"], "uid-1");
    assert_eq!(pod["dataCenterId"], "US-TX-3");
    assert_eq!(pod["runtime"], Value::Null);
    assert_eq!(pod["startedAt"], Value::Null);
    assert_eq!(pod["actions"], json!(["stop", "terminate"]));
    assert!((pod["cost"].as_f64().unwrap() - 3.78).abs() < 1e-9);

    eventually("STARTING", Duration::from_secs(5), || async {
        (status_of(&emu, &id).await == "STARTING").then_some(())
    })
    .await;
    let running: Value = eventually("RUNNING", Duration::from_secs(5), || async {
        let pod: Value = emu
            .get(&format!("/v2/pods/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (pod["status"] == "RUNNING").then_some(pod)
    })
    .await;
    assert_eq!(running["actions"], json!(["stop", "restart", "terminate"]));
    assert!(running["runtime"].is_object(), "{running}");
    assert!(running["runtime"]["cpu"]["util"].as_u64().unwrap() > 0);
    assert!(running["runtime"]["memory"]["util"].as_u64().unwrap() > 0);
    assert_eq!(running["runtime"]["gpus"].as_array().unwrap().len(), 2);
    assert!(running["startedAt"].is_string());

    // run_ms elapses: the container exits with 0 and RunPod restarts it in place
    // (runpodctl#149, dstack#1142): still RUNNING, same `startedAt`, uptime from the restart.
    let w = eventually("an exit", Duration::from_secs(5), || async {
        emu.workload(&id).await.filter(|w| w["exit_code"] == 0)
    })
    .await;
    assert_eq!(w["state"], "RUNNING");
    let again = pod_json(&emu, &id).await;
    assert_eq!(again["status"], "RUNNING");
    assert_eq!(again["startedAt"], running["startedAt"]);
    assert!(again["cost"].as_f64().unwrap() > 0.0, "still billed");
    // The exit code is not part of the RunPod schema; only the admin API shows it.
    assert!(again.get("exitCode").is_none());

    // EXITED follows a stop: GPUs released, cost 0.
    let r = emu
        .post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "stop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let pod = pod_json(&emu, &id).await;
    assert_eq!(pod["status"], "EXITED");
    assert_eq!(pod["runtime"], Value::Null);
    assert_eq!(pod["cost"].as_f64(), Some(0.0));
    assert_eq!(pod["actions"], json!(["start", "terminate"]));
    let inv = emu.admin_get("/_admin/inventory").await;
    assert_eq!(inv["gpus"][0]["free"], 8);
}

async fn pod_json(emu: &Emu, id: &str) -> Value {
    emu.get(&format!("/v2/pods/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_exited_container_restarts_with_a_fresh_uptime() {
    // run 1.5 s, restart back-off 100 ms: the uptime read after a restart is below the
    // uptime before it plus the time between the reads.
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, Some(1500)))).await;
    let pod: Value = create(&emu, pod_body("loop", "RTX4090", 1))
        .await
        .json()
        .await
        .unwrap();
    let id = pod["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let before = pod_json(&emu, &id).await;
    assert_eq!(before["runtime"]["uptime"], 1);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = pod_json(&emu, &id).await;
    assert_eq!(after["status"], "RUNNING");
    assert_eq!(after["runtime"]["uptime"], 0, "{after}");
    assert_eq!(after["startedAt"], before["startedAt"]);
}

async fn account(emu: &Emu, v: Value) -> reqwest::Response {
    emu.put("/_admin/runpod/account")
        .json(&v)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn create_answers_403_for_a_closed_pool_and_402_without_balance() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let running: Value = create(&emu, pod_body("old", "RTX4090", 1))
        .await
        .json()
        .await
        .unwrap();
    let r = account(&emu, json!({"restrictedGpuTypes": ["A100-80GB"]})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = create(&emu, pod_body("a", "A100-80GB", 1)).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_problem(&r.json().await.unwrap(), 403);
    // Other pools stay open.
    assert_eq!(
        create(&emu, pod_body("b", "RTX4090", 1)).await.status(),
        StatusCode::CREATED
    );
    let mut with_volume = pod_body("kept", "RTX4090", 1);
    with_volume["mounts"] = json!({"network": [{"volumeId": "vol-1", "path": "/workspace"}]});
    let r = create(&emu, with_volume).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let kept: Value = r.json().await.unwrap();
    // At $0: creates answer 402; running pods with a network volume are stopped (EXITED),
    // the others terminated: gone from the list and from `GET /v2/pods/{id}`.
    let r = account(&emu, json!({"balanceExhausted": true})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = create(&emu, pod_body("c", "RTX4090", 1)).await;
    assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
    assert_problem(&r.json().await.unwrap(), 402);
    assert_eq!(
        status_of(&emu, kept["id"].as_str().unwrap()).await,
        "EXITED"
    );
    let id = running["id"].as_str().unwrap();
    let r = emu.get(&format!("/v2/pods/{id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "terminated at $0");
    let names = listed_names(&emu).await;
    assert_eq!(
        names,
        ["kept"],
        "only the pod with a network volume is left"
    );
}

#[tokio::test]
async fn cpu_pods_run_without_gpus() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let body = |flavor: &str, vcpus: u64| json!({"name": "cpu", "image": "python:3.12", "cpu": {"id": flavor, "vcpuCount": vcpus}});
    let r = create(&emu, body("cpu3c", 4)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let pod: Value = r.json().await.unwrap();
    // `cpu` present, `gpu` omitted for a CPU pod; memory from the flavor (2 GB per vCPU).
    assert_eq!(
        pod["cpu"],
        json!({"id": "cpu3c", "vcpuCount": 4, "memory": 8})
    );
    assert!(pod.get("gpu").is_none(), "{pod}");
    let id = pod["id"].as_str().unwrap().to_owned();
    eventually("RUNNING", Duration::from_secs(5), || async {
        (status_of(&emu, &id).await == "RUNNING").then_some(())
    })
    .await;
    // No GPU was taken.
    let inv = emu.admin_get("/_admin/inventory").await;
    assert_eq!(inv["gpus"][0]["free"], 8);
    // The handler's rules: a known flavor, a power-of-two vCPU count.
    for bad in [body("cpu9z", 4), body("cpu3c", 6)] {
        let r = create(&emu, bad).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    // Neither gpu nor cpu: a schema-level rule.
    let r = create(&emu, json!({"name": "x", "image": "python:3.12"})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn args_follow_the_image_entrypoint() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let mut body = pod_body("serve", "RTX4090", 1);
    body["image"] = json!("vllm/vllm-openai:v0.9.0");
    body["args"] = json!("--model facebook/opt-125m");
    let pod: Value = create(&emu, body).await.json().await.unwrap();
    let id = pod["id"].as_str().unwrap();
    // ENTRYPOINT ["vllm", "serve"] stays; `args` replace the CMD.
    assert_eq!(
        emu.workload(id).await.unwrap()["command"],
        "vllm serve --model facebook/opt-125m"
    );
    let mut body = pod_body("py", "RTX4090", 1);
    body["image"] = json!("python:3.12");
    let pod: Value = create(&emu, body).await.json().await.unwrap();
    let id = pod["id"].as_str().unwrap();
    // No args: the image's CMD.
    assert_eq!(emu.workload(id).await.unwrap()["command"], "python3");
}

#[tokio::test]
async fn auth_failures_are_401_problems() {
    let emu = start_runpod(config(ExecutionMode::default())).await;
    let r = emu.client.get(emu.url("/v2/pods")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"title": "Unauthorized", "status": 401, "detail": "missing bearer token"})
    );

    let r = emu
        .client
        .post(emu.url("/v2/pods"))
        .bearer_auth("wrong-key")
        .json(&pod_body("x", "A100-80GB", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["detail"], "invalid bearer token");
    // A refused create must not create anything.
    assert!(emu.workloads().await.is_empty());

    let r = emu
        .client
        .get(emu.url("/v2/pods"))
        .header("authorization", format!("Basic {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn capacity_exhaustion_is_400_with_only_a_detail() {
    let emu = start_runpod(config(ExecutionMode::default())).await;
    for i in 0..2 {
        let r = create(&emu, pod_body(&format!("p{i}"), "A100-80GB", 4)).await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let r = create(&emu, pod_body("p3", "A100-80GB", 1)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_problem(&body, 400);
    assert!(body.get("errors").is_none(), "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("no longer any instances available")
    );
    // More GPUs than one machine carries never fit.
    let r = create(&emu, pod_body("big", "RTX4090", 9)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Terminating frees capacity again.
    let pods: Value = emu
        .get("/v2/pods")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = pods["pods"][0]["id"].as_str().unwrap().to_owned();
    let r = emu.delete(&format!("/v2/pods/{id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = create(&emu, pod_body("p4", "A100-80GB", 4)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn unknown_gpu_and_schema_errors() {
    let emu = start_runpod(config(ExecutionMode::default())).await;
    let r = create(&emu, pod_body("x", "H200-NOPE", 1)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_problem(&body, 400);
    assert!(body["errors"][0].as_str().unwrap().contains("$.gpu.id"));

    let r = create(
        &emu,
        json!({"name": "", "gpu": {"id": "A100-80GB", "count": 0}, "bogus": 1}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = r.json().await.unwrap();
    assert_problem(&body, 422);
    let errors: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    // One entry per violation, by path, in the words of the schema validator.
    let has = |path: &str, word: &str| {
        errors
            .iter()
            .any(|e| e.starts_with(&format!("{path}: ")) && e.contains(word))
    };
    assert!(has("$", "bogus"), "{errors:?}");
    assert!(has("$", "image"), "{errors:?}");
    assert!(has("$.gpu.count", "1"), "{errors:?}");
    assert!(has("$.name", "1"), "{errors:?}");

    // Neither gpu nor cpu: a cross-field rule, 400.
    let r = create(&emu, json!({"name": "x", "image": "i"})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Not JSON.
    let r = emu.post("/v2/pods").body("{not json").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(emu.workloads().await.is_empty());
}

#[tokio::test]
async fn actions_stop_start_restart_terminate_and_conflicts() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    let pod: Value = create(&emu, pod_body("a", "RTX4090", 8))
        .await
        .json()
        .await
        .unwrap();
    let id = pod["id"].as_str().unwrap().to_owned();
    let action = |a: &'static str| {
        let emu = &emu;
        let id = id.clone();
        async move {
            emu.post(&format!("/v2/pods/{id}/action"))
                .json(&json!({ "action": a }))
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(status_of(&emu, &id).await, "RUNNING");
    // start is not valid while RUNNING.
    let r = action("start").await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_problem(&r.json().await.unwrap(), 409);

    let r = action("stop").await;
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "EXITED");
    assert_eq!(body["actions"], json!(["start", "terminate"]));
    // Stopping released the GPUs: another 8-GPU pod fits on that machine now.
    let other: Value = create(&emu, pod_body("b", "RTX4090", 8))
        .await
        .json()
        .await
        .unwrap();
    let other_id = other["id"].as_str().unwrap().to_owned();
    let other2 = create(&emu, pod_body("c", "RTX4090", 8)).await;
    assert_eq!(other2.status(), StatusCode::CREATED);
    // Both machines are full, so start fails for capacity (the pod keeps its machine).
    let r = action("start").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(status_of(&emu, &id).await, "EXITED");
    let r = emu
        .delete(&format!("/v2/pods/{other_id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = action("start").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(status_of(&emu, &id).await, "RUNNING");

    let r = action("restart").await;
    assert_eq!(r.status(), StatusCode::OK);

    let r = emu
        .post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "explode"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let r = action("terminate").await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.bytes().await.unwrap().len(), 0);
    // Terminated pods disappear from list and get.
    let r = emu.get(&format!("/v2/pods/{id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_problem(&r.json().await.unwrap(), 404);
    let pods: Value = emu
        .get("/v2/pods")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        pods["pods"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != id.as_str())
    );
    let r = action("stop").await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = emu.delete(&format!("/v2/pods/{id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[path = "runpod/limits.rs"]
mod limits;
#[path = "runpod/private_images.rs"]
mod private_images;
