//! The Vast emulator against Vast's published schema (schemas/vast.json, from vast-ai/docs
//! `api-reference/openapi.yaml`): every route the adapter uses answers, in each state and with
//! each error the spec documents, a body valid against the spec's response for that status;
//! request bodies the spec refuses are refused with Vast's 400 shape, naming the field.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::*;
use mock_providers::ExecutionMode;
use mock_providers::schema;
use serde_json::{Value, json};

/// The status and body of `resp`, after checking the body against the spec's response of
/// `operation` for that status, which must be one the spec documents.
async fn checked(operation: &str, resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{operation} {status}: not JSON ({e}): {text}"));
    assert!(
        schema::vast().documents(operation, status),
        "{operation} answered {status}, which the spec does not document: {body}"
    );
    let errors = schema::vast().response_errors(operation, status, &body);
    assert!(
        errors.is_empty(),
        "{operation} {status} does not match the published schema: {errors:?}\n{body}"
    );
    (status, body)
}

const SEARCH: &str = "POST /api/v0/bundles";
const CREATE: &str = "PUT /api/v0/asks/{id}";
const LIST: &str = "GET /api/v1/instances";
const SHOW: &str = "GET /api/v0/instances/{id}";
const DESTROY: &str = "DELETE /api/v0/instances/{id}";
const LOGS: &str = "PUT /api/v0/instances/request_logs/{id}";

#[tokio::test]
async fn every_route_answers_as_the_schema_says() {
    let emu = start_vast(vast_config(ExecutionMode::simulated(300, 300, None))).await;

    let (status, found) = checked(
        SEARCH,
        emu.post("/api/v0/bundles/")
            .json(&json!({"num_gpus": {"eq": 1}, "rentable": {"eq": true},
                          "external": {"eq": false}, "order": [["dph_total", "asc"]],
                          "type": "ondemand", "limit": 5}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let offer = found["offers"][0]["id"].as_u64().unwrap();

    // A bad key: the offer search answers 404 "Invalid user key", as the spec documents.
    let (status, body) = checked(
        SEARCH,
        emu.client
            .post(emu.url("/api/v0/bundles/"))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["msg"].as_str()),
        (404, Some("Invalid user key"))
    );

    // Rented without a command: `onstart` is a string (the spec's type), not null.
    let (status, rented) = checked(
        CREATE,
        emu.put(&format!("/api/v0/asks/{offer}/"))
            .json(&json!({"image": "python:3.12", "label": "a", "disk": 10,
                          "runtype": "args", "target_state": "running", "cancel_unavail": true,
                          "env": {"K": "v", "-p 8080:8080": "1"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let id = rented["new_contract"].as_u64().unwrap();
    let (status, _) = checked(
        CREATE,
        emu.put("/api/v0/asks/999999999/")
            .json(&json!({"image": "python:3.12"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "an offer that does not exist");

    // Listed and shown while loading and running.
    for _ in 0..2 {
        let (status, page) = checked(
            LIST,
            emu.get("/api/v1/instances/?limit=25").send().await.unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(page["instances"][0]["onstart"], "");
        let (status, _) = checked(
            SHOW,
            emu.get(&format!("/api/v0/instances/{id}/"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }

    let (status, logs) = checked(
        LOGS,
        emu.put(&format!("/api/v0/instances/request_logs/{id}/"))
            .json(&json!({"tail": "10"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(logs["result_url"].is_string(), "{logs}");
    let (status, _) = checked(
        LOGS,
        emu.put("/api/v0/instances/request_logs/999999999/")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);

    let destroy = |id: u64| emu.delete(&format!("/api/v0/instances/{id}/")).send();
    let (status, _) = checked(DESTROY, destroy(id).await.unwrap()).await;
    assert_eq!(status, 200);
    let (status, _) = checked(DESTROY, destroy(id).await.unwrap()).await;
    assert_eq!(status, 404, "already destroyed");
}

/// Bodies the spec refuses are refused as Vast refuses them (400, `error` and `msg`), naming
/// the field and never echoing its value; nulls count as absent (vast-cli sends them).
#[tokio::test]
async fn bodies_the_schema_refuses_are_refused_with_vasts_400() {
    let emu = start_vast(vast_config(ExecutionMode::default())).await;
    let (_, found) = checked(
        SEARCH,
        emu.post("/api/v0/bundles/")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let offer = found["offers"][0]["id"].as_u64().unwrap();
    let rent = |body: Value| {
        emu.put(&format!("/api/v0/asks/{offer}/"))
            .json(&body)
            .send()
    };

    let (status, body) = checked(
        CREATE,
        rent(json!({"image": "python:3.12", "runtype": "docker", "label": 12345}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_args"))
    );
    let msg = body["msg"].as_str().unwrap();
    assert!(
        msg.contains("$.runtype") && msg.contains("$.label"),
        "{msg}"
    );
    assert!(!msg.contains("12345"), "a value is echoed: {msg}");

    let (status, body) = checked(
        SEARCH,
        emu.post("/api/v0/bundles/")
            .json(&json!({"limit": "many"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_request"))
    );

    // vast-cli's own create body: price, label and onstart null.
    let (status, _) = checked(
        CREATE,
        rent(
            json!({"image": "python:3.12", "price": null, "label": null, "onstart": null,
                    "disk": 10.0, "runtype": "args", "cancel_unavail": false}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
}
