//! Vast.ai emulator: offer search, renting, instance states, bids and preemption, pagination,
//! logs through `result_url`, errors and rate limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::*;
use mock_providers::ExecutionMode;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn search(emu: &Emu, filters: Value) -> Vec<Value> {
    let r = emu
        .post("/api/v0/bundles/")
        .json(&filters)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    body["offers"].as_array().unwrap().clone()
}

async fn rent(emu: &Emu, offer: u64, body: Value) -> reqwest::Response {
    emu.put(&format!("/api/v0/asks/{offer}/"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn show(emu: &Emu, id: u64) -> Value {
    let r = emu
        .get(&format!("/api/v0/instances/{id}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    body["instances"].clone()
}

async fn first_offer(emu: &Emu, gpu: &str, n: u64) -> u64 {
    let offers = search(
        emu,
        json!({"gpu_name": {"in": [gpu]}, "num_gpus": {"eq": n}, "rentable": {"eq": true}}),
    )
    .await;
    offers[0]["id"].as_u64().unwrap()
}

#[tokio::test]
async fn search_filters_and_orders_offers() {
    let emu = start_vast(vast_config(ExecutionMode::default())).await;
    let all = search(&emu, json!({})).await;
    // A100: 1 machine of 8 -> sizes 1,2,4,8; RTX4090: 2 machines of 8 -> 8 offers.
    assert_eq!(all.len(), 12);
    let rtx = search(
        &emu,
        json!({"gpu_name": {"in": ["RTX 4090"]}, "num_gpus": {"gte": 4}, "order": [["dph_total", "desc"]]}),
    )
    .await;
    assert_eq!(rtx.len(), 4);
    assert!(rtx.iter().all(|o| o["gpu_name"] == "RTX 4090"));
    assert!(rtx.iter().all(|o| o["num_gpus"].as_u64().unwrap() >= 4));
    let prices: Vec<f64> = rtx
        .iter()
        .map(|o| o["dph_total"].as_f64().unwrap())
        .collect();
    assert!(prices.windows(2).all(|w| w[0] >= w[1]), "{prices:?}");
    assert!((prices[0] - 0.69 * 8.0).abs() < 1e-6);
    let cheap = search(&emu, json!({"dph_total": {"lte": 1.0}})).await;
    assert!(
        cheap
            .iter()
            .all(|o| o["dph_total"].as_f64().unwrap() <= 1.0)
    );
    assert!(!cheap.is_empty());
    let limited = search(&emu, json!({"limit": 2})).await;
    assert_eq!(limited.len(), 2);
    // Old clients wrap the query in "q".
    let wrapped = search(&emu, json!({"q": {"gpu_name": {"eq": "A100 SXM4"}}})).await;
    assert_eq!(wrapped.len(), 4);
    let r = emu
        .post("/api/v0/bundles")
        .body("[1]")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");
}

#[tokio::test]
async fn rent_offer_lifecycle_and_offer_disappears() {
    let emu = start_vast(vast_config(ExecutionMode::simulated(100, 100, None))).await;
    let offer = first_offer(&emu, "A100 SXM4", 8).await;
    let r = rent(
        &emu,
        offer,
        json!({
            "image": "pytorch/pytorch:2.4", "label": "ns/pod-uid-1", "disk": 20,
            "runtype": "args", "args": ["python", "train.py"],
            "env": "-e POD_UID=uid-1 -p 8000:8000", "target_state": "running"
        }),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["success"], true);
    let id = body["new_contract"].as_u64().unwrap();

    let inst = show(&emu, id).await;
    assert_eq!(inst["id"], id);
    assert_eq!(inst["actual_status"], Value::Null);
    assert_eq!(inst["intended_status"], "running");
    assert_eq!(inst["label"], "ns/pod-uid-1");
    assert_eq!(inst["is_bid"], false);
    assert_eq!(inst["num_gpus"], 8);
    assert_eq!(inst["extra_env"][0], json!(["POD_UID", "uid-1"]));
    assert_eq!(inst["ports"], Value::Null);

    eventually("loading", Duration::from_secs(5), || async {
        (show(&emu, id).await["actual_status"] == "loading").then_some(())
    })
    .await;
    let running = eventually("running", Duration::from_secs(5), || async {
        let i = show(&emu, id).await;
        (i["actual_status"] == "running").then_some(i)
    })
    .await;
    assert_eq!(running["cur_state"], "running");
    // Mapped to a random external port of the public address, where a listener answers
    // (docs.vast.ai, "Networking & Ports"), not to the internal port's own number.
    let external: u16 = running["ports"]["8000/tcp"][0]["HostPort"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .expect("an external port");
    assert_ne!(external, 8000);
    let host = running["public_ipaddr"].as_str().unwrap();
    tokio::net::TcpStream::connect((host, external))
        .await
        .expect("a listener at the external port");
    assert!(running["cpu_util"].as_f64().unwrap() > 0.0);
    assert!(running["mem_usage"].as_f64().unwrap() > 0.0);

    // The rented offer is gone: renting it again is 404 no_such_ask.
    let r = rent(&emu, offer, json!({"image": "x"})).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["success"], false);
    assert!(body["msg"].as_str().unwrap().contains("no_such_ask"));
    assert_eq!(body["ask_id"], offer);
    // ...and no A100 offers remain.
    assert!(
        search(&emu, json!({"gpu_name": {"eq": "A100 SXM4"}}))
            .await
            .is_empty()
    );

    // Stop and start through PUT {"state"}.
    let r = emu
        .put(&format!("/api/v0/instances/{id}/"))
        .json(&json!({"state": "stopped"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"success": true}));
    let stopped = show(&emu, id).await;
    assert_eq!(stopped["actual_status"], "stopped");
    assert_eq!(stopped["intended_status"], "stopped");
    // Stopping frees the GPUs: offers reappear (with new ids).
    let again = search(&emu, json!({"gpu_name": {"eq": "A100 SXM4"}})).await;
    assert_eq!(again.len(), 4);
    assert!(again.iter().all(|o| o["id"] != offer));
    let r = emu
        .put(&format!("/api/v0/instances/{id}"))
        .json(&json!({"state": "running", "label": "renamed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let started = show(&emu, id).await;
    assert_eq!(started["intended_status"], "running");
    assert_eq!(started["label"], "renamed");
    assert_ne!(started["actual_status"], "stopped");

    // Destroy: gone from show (null) and from the list; destroying again is 404.
    let r = emu
        .delete(&format!("/api/v0/instances/{id}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["success"], true);
    assert_eq!(show(&emu, id).await, Value::Null);
    let r = emu
        .delete(&format!("/api/v0/instances/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["success"], false);
    assert!(body["error"].is_string() && body["msg"].is_string());
}

#[tokio::test]
async fn outbid_interruptible_instance_is_preempted_and_rebid_resumes() {
    let emu = start_vast(vast_config(ExecutionMode::simulated(0, 0, None))).await;
    let offer = first_offer(&emu, "RTX 4090", 1).await;
    let r = rent(
        &emu,
        offer,
        json!({"image": "img", "price": 0.5, "label": "spot"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let id = r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    let inst = show(&emu, id).await;
    assert_eq!(inst["is_bid"], true);
    assert_eq!(inst["actual_status"], "running");
    assert!((inst["dph_total"].as_f64().unwrap() - 0.5).abs() < 1e-9);

    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{id}/preempt"),
            json!({"price": 0.6}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let inst = show(&emu, id).await;
    assert_eq!(inst["actual_status"], "stopped");
    assert_eq!(inst["intended_status"], "running");
    assert_eq!(inst["cur_state"], "stopped");
    assert_eq!(inst["is_bid"], true);
    assert_eq!(
        emu.workload(&id.to_string()).await.unwrap()["phase"],
        "preempted"
    );

    // Asking for running does not help while outbid.
    emu.put(&format!("/api/v0/instances/{id}/"))
        .json(&json!({"state": "running"}))
        .send()
        .await
        .unwrap();
    assert_eq!(show(&emu, id).await["actual_status"], "stopped");
    // A higher bid wins the GPUs back.
    let r = emu
        .put(&format!("/api/v0/instances/bid_price/{id}/"))
        .json(&json!({"client_id": "me", "price": 0.7}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(show(&emu, id).await["actual_status"], "running");

    // Bids below the offer's minimum are refused.
    let offer = first_offer(&emu, "A100 SXM4", 8).await;
    let r = rent(&emu, offer, json!({"image": "img", "price": 0.01})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_price");
    // On-demand instances cannot be outbid.
    let r = rent(&emu, offer, json!({"image": "img"})).await;
    let od = r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    let r = emu
        .admin_post(&format!("/_admin/workloads/{od}/preempt"), json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn create_validation_errors() {
    let emu = start_vast(vast_config(ExecutionMode::default())).await;
    let offer = first_offer(&emu, "RTX 4090", 1).await;
    for (body, error) in [
        (json!({}), "invalid_args"),
        (json!({"image": 3}), "invalid_args"),
        (json!({"image": "x", "disk": "big"}), "invalid_args"),
        (json!({"image": "x", "runtype": "teleport"}), "invalid_args"),
        (json!({"image": "x", "args": [1, 2]}), "invalid_args"),
        (json!({"image": "x", "env": [1]}), "invalid_args"),
        (json!({"image": "x", "price": 1000}), "invalid_price"),
    ] {
        let r = rent(&emu, offer, body.clone()).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["success"], false, "{body}");
        assert_eq!(b["error"], error, "{body}");
        assert!(b["msg"].is_string());
    }
    let r = emu
        .put("/api/v0/asks/not-a-number/")
        .json(&json!({"image": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = rent(&emu, 12345, json!({"image": "x"})).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(emu.workloads().await.is_empty());
}

#[tokio::test]
async fn auth_and_rate_limit_errors() {
    let emu = start_vast(vast_config(ExecutionMode::default()).with_rate_limit(2)).await;
    let r = emu
        .client
        .get(emu.url("/api/v1/instances/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"success": false, "error": "auth_error", "msg": "Invalid user key"})
    );
    let r = emu
        .client
        .get(emu.url(&format!("/api/v1/instances?api_key={KEY}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        emu.get("/api/v1/instances").send().await.unwrap().status(),
        StatusCode::OK
    );
    let r = emu.get("/api/v1/instances").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("API requests too frequent")
    );
}

#[tokio::test]
async fn target_state_stopped_creates_without_gpus() {
    let emu = start_vast(vast_config(ExecutionMode::simulated(0, 0, None))).await;
    let offer = first_offer(&emu, "A100 SXM4", 8).await;
    let r = rent(
        &emu,
        offer,
        json!({"image": "img", "target_state": "stopped"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let id = r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    let inst = show(&emu, id).await;
    assert_eq!(inst["actual_status"], "stopped");
    assert_eq!(inst["intended_status"], "stopped");
    // The machine's GPUs are free: someone else rents them.
    let other = first_offer(&emu, "A100 SXM4", 8).await;
    assert_eq!(
        rent(&emu, other, json!({"image": "img"})).await.status(),
        StatusCode::OK
    );
    // Starting now finds the GPUs taken: it stays stopped, waiting, intended running.
    emu.put(&format!("/api/v0/instances/{id}/"))
        .json(&json!({"state": "running"}))
        .send()
        .await
        .unwrap();
    let inst = show(&emu, id).await;
    assert_eq!(inst["actual_status"], "stopped");
    assert_eq!(inst["intended_status"], "running");
    assert!(
        inst["status_msg"]
            .as_str()
            .unwrap()
            .contains("Waiting for GPUs")
    );
}

/// The search matches `gpu_name` exactly (see `vast::query::matches`): vast-cli normalises
/// names on the client side before it searches.
#[tokio::test]
async fn gpu_names_match_exactly() {
    let emu = start_vast(vast_config(ExecutionMode::default())).await;
    let exact = search(&emu, json!({"gpu_name": {"in": ["RTX 4090"]}})).await;
    assert!(!exact.is_empty());
    assert!(exact.iter().all(|o| o["gpu_name"] == "RTX 4090"));
    for near in ["RTX_4090", "rtx 4090", "RTX4090", "RTX 4090 ", "Rtx_4090"] {
        let found = search(&emu, json!({"gpu_name": {"in": [near]}})).await;
        assert!(found.is_empty(), "{near:?} found {} offers", found.len());
        let found = search(&emu, json!({"gpu_name": {"eq": near}})).await;
        assert!(found.is_empty(), "{near:?} found {} offers", found.len());
    }
}

#[path = "vast/listing.rs"]
mod listing;
#[path = "vast/outage.rs"]
mod outage;
