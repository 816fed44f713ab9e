//! The RunPod emulator against RunPod's published v2 schema (schemas/runpod-v2.json): every
//! route it serves, in every state a client can see and with every error it answers, gives a
//! body valid against the schema's response for that operation and status; request bodies the
//! schema refuses are refused with 422 and the documented error shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::*;
use mock_providers::ExecutionMode;
use mock_providers::schema;
use serde_json::{Value, json};

/// The body of `resp`, after checking it against the schema's response of `operation` for its
/// status.
async fn checked(operation: &str, resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    if status == 204 {
        assert!(text.is_empty(), "{operation} {status}: a body: {text}");
        return (status, Value::Null);
    }
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{operation} {status}: not JSON ({e}): {text}"));
    let errors = schema::runpod().response_errors(operation, status, &body);
    assert!(
        errors.is_empty(),
        "{operation} {status} does not match the published schema: {errors:?}\n{body}"
    );
    (status, body)
}

fn gpu_pod(name: &str, gpu: &str) -> Value {
    json!({"name": name, "image": "runpod/pytorch:2.4", "gpu": {"id": gpu, "count": 1},
           "ports": ["8080/tcp", "8888/http"], "env": {"K": "V"}})
}

#[tokio::test]
async fn every_route_answers_as_the_schema_says() {
    let emu = start_runpod(config(ExecutionMode::simulated(200, 200, None))).await;
    const CREATE: &str = "POST /v2/pods";
    const GET: &str = "GET /v2/pods/{id}";
    const LIST: &str = "GET /v2/pods";
    const ACTION: &str = "POST /v2/pods/{id}/action";

    // Created, then seen PROVISIONING, STARTING and RUNNING, alone and in the list.
    let (status, pod) = checked(
        CREATE,
        emu.post("/v2/pods")
            .json(&gpu_pod("a", "A100-80GB"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let id = pod["id"].as_str().unwrap().to_owned();
    let cpu = json!({"name": "c", "image": "python:3.12", "cpu": {"id": "cpu3c", "vcpuCount": 4}});
    assert_eq!(
        checked(
            CREATE,
            emu.post("/v2/pods").json(&cpu).send().await.unwrap()
        )
        .await
        .0,
        201
    );
    let mut seen = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("RUNNING") && std::time::Instant::now() < deadline {
        let (_, p) = checked(
            GET,
            emu.get(&format!("/v2/pods/{id}")).send().await.unwrap(),
        )
        .await;
        seen.insert(p["status"].as_str().unwrap().to_owned());
        checked(LIST, emu.get("/v2/pods").send().await.unwrap()).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(seen.contains("RUNNING"), "states seen: {seen:?}");

    // Actions: stop (EXITED), start, an action the state does not allow, terminate.
    let act = |a: &str| {
        emu.post(&format!("/v2/pods/{id}/action"))
            .json(&json!({"action": a}))
    };
    assert_eq!(
        checked(ACTION, act("stop").send().await.unwrap()).await.0,
        200
    );
    let (_, p) = checked(
        GET,
        emu.get(&format!("/v2/pods/{id}")).send().await.unwrap(),
    )
    .await;
    assert_eq!(p["status"], "EXITED");
    assert_eq!(
        checked(ACTION, act("stop").send().await.unwrap()).await.0,
        409
    );
    assert_eq!(
        checked(ACTION, act("start").send().await.unwrap()).await.0,
        200
    );
    assert_eq!(
        checked(ACTION, act("terminate").send().await.unwrap())
            .await
            .0,
        204
    );

    // Delete: 204 without a body, then 404.
    const DELETE: &str = "DELETE /v2/pods/{id}";
    let (_, other) = checked(
        CREATE,
        emu.post("/v2/pods")
            .json(&gpu_pod("d", "A100-80GB"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let gone = format!("/v2/pods/{}", other["id"].as_str().unwrap());
    assert_eq!(
        checked(DELETE, emu.delete(&gone).send().await.unwrap())
            .await
            .0,
        204
    );
    assert_eq!(
        checked(DELETE, emu.delete(&gone).send().await.unwrap())
            .await
            .0,
        404
    );

    // Errors: not found, no key, refused bodies, a closed pool, no balance.
    assert_eq!(
        checked(GET, emu.get("/v2/pods/nope").send().await.unwrap())
            .await
            .0,
        404
    );
    let anonymous = emu.client.get(emu.url("/v2/pods")).send().await.unwrap();
    assert_eq!(checked(LIST, anonymous).await.0, 401);
    let mut old = gpu_pod("old", "A100-80GB");
    old["gpu"]["minRamPerGpu"] = json!(32);
    let (status, problem) = checked(
        CREATE,
        emu.post("/v2/pods").json(&old).send().await.unwrap(),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem["errors"].to_string().contains("minRamPerGpu"),
        "{problem}"
    );
    let neither = json!({"name": "n", "image": "i"});
    assert_eq!(
        checked(
            CREATE,
            emu.post("/v2/pods").json(&neither).send().await.unwrap()
        )
        .await
        .0,
        400
    );
    let account = |v: Value| emu.put("/_admin/runpod/account").json(&v).send();
    account(json!({"restrictedGpuTypes": ["A100-80GB"]}))
        .await
        .unwrap();
    assert_eq!(
        checked(
            CREATE,
            emu.post("/v2/pods")
                .json(&gpu_pod("b", "A100-80GB"))
                .send()
                .await
                .unwrap()
        )
        .await
        .0,
        403
    );
    account(json!({"balanceExhausted": true})).await.unwrap();
    assert_eq!(
        checked(
            CREATE,
            emu.post("/v2/pods")
                .json(&gpu_pod("b", "RTX4090"))
                .send()
                .await
                .unwrap()
        )
        .await
        .0,
        402
    );

    // The GPU catalogue.
    assert_eq!(
        checked(
            "GET /v2/catalog/gpus",
            emu.get("/v2/catalog/gpus").send().await.unwrap()
        )
        .await
        .0,
        200
    );
}

#[test]
fn the_schema_names_its_source() {
    let src = schema::runpod().source();
    assert_eq!(src["repository"], "runpod/docs");
    assert_eq!(src["path"], "api-reference-v2/openapi.json");
    assert_eq!(src["commit"].as_str().map(str::len), Some(40));
    // Not vacuous: a pod missing the fields the schema requires is refused.
    let errors = schema::runpod().response_errors("GET /v2/pods/{id}", 200, &json!({"id": "x"}));
    assert!(errors.iter().any(|e| e.contains("status")), "{errors:?}");
    let ops = schema::runpod().operations();
    for op in [
        "POST /v2/pods",
        "GET /v2/pods",
        "GET /v2/pods/{id}",
        "POST /v2/pods/{id}/action",
    ] {
        assert!(ops.iter().any(|o| o == op), "{op} missing from {ops:?}");
    }
}
