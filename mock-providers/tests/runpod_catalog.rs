//! RunPod v2 emulator: the GPU catalogue (`GET /v2/catalog/gpus`), its prices per GPU and
//! cloud, availability that follows what is rented, and the parameter rules of the spec.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use helpers::*;
use mock_providers::ExecutionMode;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn catalog(emu: &Emu, query: &str) -> (StatusCode, Value) {
    let r = emu
        .get(&format!("/v2/catalog/gpus{query}"))
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

fn entry<'a>(body: &'a Value, id: &str) -> &'a Value {
    body["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {body}"))
}

#[tokio::test]
async fn prices_per_gpu_and_availability_that_follows_rentals() {
    let emu = start_runpod(config(ExecutionMode::simulated(50, 50, None))).await;
    let (status, body) = catalog(&emu, "").await;
    assert_eq!(status, StatusCode::OK);
    let a100 = entry(&body, "A100-80GB");
    assert_eq!(a100["price"]["secure"], 1.89);
    assert_eq!(a100["price"]["community"], 1.32);
    assert_eq!(a100["maxCount"]["secure"], 8);
    assert!(
        a100.get("availability").is_none(),
        "only with include=AVAILABILITY"
    );

    let q = "?include=AVAILABILITY&product=POD&count=8";
    let (_, body) = catalog(&emu, q).await;
    assert_eq!(entry(&body, "A100-80GB")["availability"], "HIGH");
    // Rent all eight A100s: the catalogue says none is free.
    let r = emu
        .post("/v2/pods")
        .json(&json!({"name": "big", "image": "runpod/pytorch:2.4",
                      "gpu": {"id": "A100-80GB", "count": 8}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let (_, body) = catalog(&emu, q).await;
    let a100 = entry(&body, "A100-80GB");
    assert_eq!(a100["availability"], "NONE");
    assert!(
        a100.get("dataCenters").is_none(),
        "omitted when unavailable everywhere"
    );
    assert_eq!(entry(&body, "RTX4090")["availability"], "HIGH");
}

#[tokio::test]
async fn parameters_follow_the_spec() {
    let emu = start_runpod(config(ExecutionMode::simulated(50, 50, None))).await;
    // product is required with include=AVAILABILITY, and count is valid only with it.
    let (status, body) = catalog(&emu, "?include=AVAILABILITY").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["status"], 400);
    let (status, _) = catalog(&emu, "?count=2").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = catalog(&emu, "?include=PRICES").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Without the key: 401 like every route.
    let r = reqwest::Client::new()
        .get(format!("http://{}/v2/catalog/gpus", emu.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}
