#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Contract tests of the Vast.ai adapter against a wiremock server: offer search and renting,
//! the exact requests it sends, and how it reads every documented answer.

#[path = "support/workload.rs"]
mod workload_builder;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use vk::naming::Owner;
use vk::provider::{FailureReason, LogOptions, Provider, ProviderError, Workload, WorkloadState};
use vk::providers::vast::{MinIntervals, Vast, VastConfig};
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};
use workload_builder::WorkloadBuilder;

const KEY: &str = "vast-test-key-0123456789";
const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn owner() -> Owner {
    Owner::new("cluster-a", "vk-node")
}

/// The pod of most tests: two RTX 4090s for a training run serving on port 8000.
fn workload() -> WorkloadBuilder {
    WorkloadBuilder::new(&owner(), UID)
        .pod("ml", "train-0")
        .image("ghcr.io/acme/train:1.2")
        .command(["python", "-m", "train"])
        .args(["--name", "it's big"])
        .env("HF_TOKEN", "hf_fake")
        .env("MODE", "fast")
        .gpu("RTX4090", 2)
        .port(8000)
}

fn config(server: &MockServer) -> VastConfig {
    VastConfig {
        base_url: server.uri(),
        gpu_names: [("RTX4090".to_owned(), "RTX 4090".to_owned())].into(),
        disk_gb: 32.0,
        log_fetch_interval_ms: 10,
        // Pacing is tested on its own (`calls_are_paced_per_endpoint_and_429s_retried`).
        rate_limits: MinIntervals {
            list: 0.0,
            search: 0.0,
            rent: 0.0,
            destroy: 0.0,
            logs: 0.0,
        },
        ..VastConfig::default()
    }
    .with_api_key(KEY)
}

fn adapter_with(cfg: VastConfig) -> Vast {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Vast::new("vast".into(), cfg, owner()).unwrap()
}

fn adapter(server: &MockServer) -> Vast {
    adapter_with(config(server))
}

fn id() -> String {
    workload().build().id.as_str().to_owned()
}

fn page(instances: Value, next: Option<&str>) -> Value {
    json!({
        "success": true, "instances_found": instances.as_array().map_or(0, Vec::len),
        "total_instances": instances.as_array().map_or(0, Vec::len), "label_counts": {},
        "next_token": next, "instances": instances
    })
}

/// An instance as `GET /api/v1/instances/` returns it (a subset of the documented fields).
fn instance(id: u64, label: &str, actual: Value, intended: &str, is_bid: bool) -> Value {
    json!({
        "id": id, "label": label, "actual_status": actual, "intended_status": intended,
        "cur_state": intended, "next_state": intended, "status_msg": null, "is_bid": is_bid,
        "image_uuid": "ghcr.io/acme/train:1.2", "start_date": 1_780_000_000.4,
        "public_ipaddr": "203.0.113.7", "gpu_name": "RTX 4090", "num_gpus": 2,
        "dph_total": 0.61, "extra_env": [["HF_TOKEN", "hf_fake"]]
    })
}

fn offer(id: u64, dph_total: f64, min_bid: f64) -> Value {
    json!({"id": id, "ask_contract_id": id, "gpu_name": "RTX 4090", "num_gpus": 2,
           "dph_total": dph_total, "min_bid": min_bid, "rentable": true, "verified": true})
}

async fn mount_lookup(server: &MockServer, instances: Value) {
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(instances, None)))
        .mount(server)
        .await;
}

async fn mount_offers(server: &MockServer, offers: Value) {
    Mock::given(method("POST"))
        .and(path("/api/v0/bundles/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "offers": offers })))
        .mount(server)
        .await;
}

fn rented() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"success": true, "new_contract": 777}))
}

fn calls(reqs: &[Request]) -> Vec<String> {
    reqs.iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

fn assert_no_key(err: &ProviderError) {
    assert!(
        !format!("{err} {err:?}").contains(KEY),
        "API key leaked: {err:?}"
    );
}

#[tokio::test]
async fn create_searches_and_rents_the_cheapest_offer_without_a_list() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(json!([]), None)))
        .expect(0)
        .mount(&server)
        .await;
    mount_offers(
        &server,
        json!([
            offer(31, 0.9, 0.4),
            offer(32, 0.61, 0.3),
            offer(33, 0.75, 0.2)
        ]),
    )
    .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/32/"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;

    adapter(&server).create(&workload().build()).await.unwrap();

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(
        calls(&reqs),
        ["POST /api/v0/bundles/", "PUT /api/v0/asks/32/"]
    );
    let search: Value = reqs[0].body_json().unwrap();
    insta::assert_json_snapshot!("vast_offer_search_body", search);
    let rent: Value = reqs[1].body_json().unwrap();
    assert_eq!(rent["label"], id());
    assert!(
        rent.get("price").is_none(),
        "on-demand rents carry no bid: {rent}"
    );
    insta::assert_json_snapshot!("vast_rent_body", rent);
}

#[tokio::test]
async fn gone_offers_are_skipped_cheapest_first() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(
        &server,
        json!([offer(3, 0.8, 0.1), offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)]),
    )
    .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "success": false, "error": "invalid_args",
            "msg": "error 404/3603: no_such_ask Instance type by id 1 is not available.", "ask_id": 1})))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(ResponseTemplate::new(410).set_body_json(json!({
            "success": false, "error": "no_such_ask",
            "msg": "error 410/3907: no_such_ask Instance type 2 is no longer available.", "ask_id": 2})))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/3/"))
        .respond_with(rented())
        .mount(&server)
        .await;

    adapter(&server).create(&workload().build()).await.unwrap();

    let puts: Vec<_> = calls(&server.received_requests().await.unwrap())
        .into_iter()
        .filter(|c| c.starts_with("PUT"))
        .collect();
    assert_eq!(
        puts,
        [
            "PUT /api/v0/asks/1/",
            "PUT /api/v0/asks/2/",
            "PUT /api/v0/asks/3/"
        ]
    );
}

#[tokio::test]
async fn no_offer_or_only_gone_offers_is_capacity() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([])).await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .expect(0)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Capacity { .. }), "{err:?}");

    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(
            ResponseTemplate::new(410)
                .set_body_json(json!({"success": false, "error": "no_such_ask"})),
        )
        .expect(2)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Capacity { .. }), "{err:?}");
}

#[tokio::test]
async fn the_price_ceiling_is_enforced_even_if_the_search_ignores_it() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.9, 0.1), offer(2, 0.35, 0.1)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .expect(0)
        .mount(&server)
        .await;

    let cfg = VastConfig {
        max_price_per_hour: Some(0.4),
        ..config(&server)
    };
    adapter_with(cfg).create(&workload().build()).await.unwrap();

    let reqs = server.received_requests().await.unwrap();
    let search: Value = reqs[0].body_json().unwrap();
    assert_eq!(search["dph_total"], json!({"lte": 0.4}));
}

#[tokio::test]
async fn interruptible_pods_bid() {
    // Bid at the offer's minimum.
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(5, 0.3, 0.12)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/5/"))
        .and(body_partial_json(json!({"price": 0.12})))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    let w = workload().option("interruptible", "true").build();
    adapter(&server).create(&w).await.unwrap();
    let search: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(search["type"], "bid");

    // An explicit bid skips offers whose minimum bid is higher.
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(6, 0.2, 0.3), offer(7, 0.4, 0.2)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/7/"))
        .and(body_partial_json(json!({"price": 0.25})))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/6/"))
        .respond_with(rented())
        .expect(0)
        .mount(&server)
        .await;
    let w = workload()
        .option("interruptible", "true")
        .option("bid_price", "0.25")
        .build();
    adapter(&server).create(&w).await.unwrap();
}

#[tokio::test]
async fn a_second_create_of_a_rented_workload_looks_the_label_up_and_rents_nothing() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .and(query_param(
            "select_filters",
            json!({"label": {"eq": id()}}).to_string().as_str(),
        ))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(
            json!([instance(900, &id(), json!("running"), "running", false)]),
            None,
        )))
        .expect(1)
        .mount(&server)
        .await;
    mount_offers(&server, json!([offer(5, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    vast.create(&workload().build()).await.unwrap();
    // The framework's list may predate the rent: the same create again rents nothing.
    vast.create(&workload().build()).await.unwrap();
}

#[tokio::test]
async fn a_lookup_that_ignores_the_filter_is_still_checked_by_label() {
    // An API that returned every instance must not make the adapter think the workload exists.
    let server = MockServer::start().await;
    mount_lookup(
        &server,
        json!([instance(
            1,
            "someone-else",
            json!("running"),
            "running",
            false
        )]),
    )
    .await;
    mount_offers(&server, json!([offer(2, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    // A failed rent may have happened: the retry looks the label up first.
    assert!(vast.create(&workload().build()).await.is_err());
    vast.create(&workload().build()).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    assert!(calls(&reqs).contains(&"GET /api/v1/instances/".to_owned()));
}

#[tokio::test]
async fn invalid_workloads_fail_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let no_gpu = workload().no_gpu().build();
    let bad_bid = workload().option("bid_price", "-1").build();
    let bad_flag = workload().option("interruptible", "maybe").build();
    // Vast reads env keys as docker options: a name that is not a variable name never leaves.
    let docker_option = workload().env("-v /:/host", "1").build();
    for w in [no_gpu, bad_bid, bad_flag, docker_option] {
        let err = vast.create(&w).await.unwrap_err();
        assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    }
    let capped = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        ..config(&server)
    });
    let greedy = workload()
        .option("interruptible", "yes")
        .option("bid_price", "5")
        .build();
    let err = capped.create(&greedy).await.unwrap_err();
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // Annotations narrow the operator's ceilings, never widen them.
    let ceilings = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        max_disk_gb: Some(100),
        ..config(&server)
    });
    for (key, value) in [("max_price_per_hour", "2.5"), ("disk_gb", "500")] {
        let w = workload().option(key, value).build();
        let err = ceilings.create(&w).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Invalid { message } if message.contains("ceiling") && message.contains(key)),
            "{key}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_lower_price_or_disk_than_the_operators_is_honoured() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        max_disk_gb: Some(100),
        ..config(&server)
    });
    let w = workload()
        .option("max_price_per_hour", "0.6")
        .option("disk_gb", "40")
        .build();
    vast.create(&w).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    let search: Value = reqs
        .iter()
        .find(|r| r.url.path().contains("bundles"))
        .map(|r| r.body_json().unwrap())
        .expect("an offer search");
    assert_eq!(search["dph_total"], json!({"lte": 0.6}), "{search}");
    assert_eq!(search["disk_space"], json!({"gte": 40.0}), "{search}");
}

/// Runs a create whose rent (`PUT /asks`) answers `resp`.
async fn rent_error(resp: ResponseTemplate) -> ProviderError {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(resp)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_key(&err);
    // Errors other than "offer gone" stop at the first offer.
    let puts = calls(&server.received_requests().await.unwrap())
        .iter()
        .filter(|c| c.starts_with("PUT"))
        .count();
    assert_eq!(puts, 1, "{err:?}");
    err
}

#[tokio::test]
async fn rent_errors_are_classified() {
    let invalid = rent_error(ResponseTemplate::new(400).set_body_json(json!({
        "success": false, "error": "invalid_args",
        "msg": "error 400/3467: Invalid args: 'image' is required", "ask_id": 1})))
    .await;
    match invalid {
        ProviderError::Invalid { message } => {
            assert!(message.contains("'image' is required"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let auth = rent_error(ResponseTemplate::new(401).set_body_json(json!({
        "success": false, "error": "auth_error", "msg": format!("Invalid user key {KEY}")})))
    .await;
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    let broke = rent_error(ResponseTemplate::new(402).set_body_json(json!({
        "success": false, "error": "insufficient_credit", "msg": "Insufficient credit"})))
    .await;
    assert!(matches!(broke, ProviderError::Capacity { .. }), "{broke:?}");
    let conflict = rent_error(ResponseTemplate::new(409).set_body_json(json!({
        "success": false, "error": "conflict", "msg": "conflict"})))
    .await;
    assert!(
        matches!(conflict, ProviderError::Invalid { .. }),
        "{conflict:?}"
    );
    let limited = rent_error(
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "7")
            .set_body_json(json!({"detail": "API requests too frequent endpoint threshold=4.5"})),
    )
    .await;
    assert_eq!(
        limited,
        ProviderError::Transient {
            message: "Vast HTTP 429: API requests too frequent endpoint threshold=4.5".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    let down =
        rent_error(ResponseTemplate::new(500).set_body_string("Internal Server Error")).await;
    assert!(matches!(down, ProviderError::Transient { .. }), "{down:?}");
    let unreadable =
        rent_error(ResponseTemplate::new(200).set_body_string("<html>ok?</html>")).await;
    assert!(
        matches!(unreadable, ProviderError::Transient { .. }),
        "{unreadable:?}"
    );
    let refused = rent_error(ResponseTemplate::new(200).set_body_json(json!({
        "success": false, "error": "invalid_price", "msg": "bid too low"})))
    .await;
    assert!(
        matches!(refused, ProviderError::Invalid { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn an_invalid_key_reported_as_404_on_search_is_auth() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/api/v0/bundles/"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_json(json!({"error": "auth_error", "msg": "Invalid user key"})),
        )
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn delete_destroys_the_instance() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/api/v0/instances/4242/"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"success": true, "msg": "destroyed"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v0/instances/1/"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "success": false, "error": "not_found", "msg": "Instance not found"})))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v0/instances/2/"))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({
            "success": false, "error": "rate_limit_exceeded", "msg": "API requests too frequent endpoint threshold=3.0"})))
        .mount(&server)
        .await;
    let vast = adapter(&server);

    vast.delete("4242").await.unwrap();
    assert_eq!(vast.delete("1").await.unwrap_err(), ProviderError::NotFound);
    assert!(matches!(
        vast.delete("2").await.unwrap_err(),
        ProviderError::Transient { .. }
    ));
    assert!(matches!(
        vast.delete("../x").await.unwrap_err(),
        ProviderError::Invalid { .. }
    ));
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        3 + vk::providers::vast::MAX_429_RETRIES as usize,
        "a 429 is retried; a non-numeric id sends nothing"
    );
}

#[tokio::test]
async fn list_is_one_call_per_page_and_maps_every_state() {
    let server = MockServer::start().await;
    let ours = |uid: &str| owner().workload_id(uid).unwrap().as_str().to_owned();
    let other_vk = Owner::new("cluster-b", "vk-node")
        .workload_id(UID)
        .unwrap()
        .as_str()
        .to_owned();
    let mut exited_bad = instance(
        105,
        &ours("00000000-0000-4000-8000-000000000005"),
        json!("exited"),
        "running",
        false,
    );
    exited_bad["status_msg"] = json!("Error response from daemon: pull access denied");
    let page1 = json!([
        instance(
            101,
            &ours("00000000-0000-4000-8000-000000000001"),
            Value::Null,
            "running",
            false
        ),
        instance(
            102,
            &ours("00000000-0000-4000-8000-000000000002"),
            json!("loading"),
            "running",
            false
        ),
        instance(
            103,
            &ours("00000000-0000-4000-8000-000000000003"),
            json!("running"),
            "running",
            true
        ),
        instance(
            104,
            &ours("00000000-0000-4000-8000-000000000004"),
            json!("exited"),
            "running",
            false
        ),
        exited_bad,
        instance(
            106,
            &ours("00000000-0000-4000-8000-000000000006"),
            json!("stopped"),
            "running",
            true
        ),
        instance(
            107,
            &ours("00000000-0000-4000-8000-000000000007"),
            json!("offline"),
            "running",
            false
        ),
    ]);
    let page2 = json!([
        instance(
            108,
            &ours("00000000-0000-4000-8000-000000000008"),
            json!("unknown"),
            "running",
            false
        ),
        instance(
            109,
            &ours("00000000-0000-4000-8000-000000000009"),
            json!("defrosting"),
            "running",
            false
        ),
        instance(
            110,
            &ours("00000000-0000-4000-8000-00000000000a"),
            json!(17),
            "running",
            false
        ),
        instance(111, &other_vk, json!("running"), "running", false),
        instance(112, "my-notebook", json!("running"), "running", false),
        json!({"id": 113, "label": null, "actual_status": "running"}),
        json!("garbage"),
    ]);
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .and(query_param("after_token", "tok-2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(page2, None)))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .and(query_param("limit", "25"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(page1, Some("tok-2"))))
        .expect(1)
        .mount(&server)
        .await;

    let observed = adapter(&server).list().await.unwrap();

    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "one call per page"
    );
    let by_id = |pid: &str| {
        observed
            .iter()
            .find(|o| o.provider_id == pid)
            .map(|o| o.state.clone())
    };
    assert_eq!(by_id("106"), Some(WorkloadState::Preempted));
    assert_eq!(
        by_id("105"),
        Some(WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        })
    );
    // An offline host may come back ("Instance back online"): not lost, not ready.
    assert!(matches!(by_id("107"), Some(WorkloadState::NotReady { .. })));
    assert_eq!(
        by_id("109"),
        Some(WorkloadState::Unknown {
            raw: "defrosting".into()
        })
    );
    assert_eq!(
        by_id("110"),
        Some(WorkloadState::Unknown { raw: "17".into() })
    );
    assert!(
        by_id("111").is_some(),
        "any VK's workloads are listed; the framework filters"
    );
    assert_eq!(by_id("112"), None);
    assert_eq!(by_id("113"), None);
    insta::assert_json_snapshot!("vast_list_observed", observed);
}

#[tokio::test]
async fn a_single_page_list_is_exactly_one_call() {
    let server = MockServer::start().await;
    mount_lookup(
        &server,
        json!([instance(1, &id(), json!("running"), "running", false)]),
    )
    .await;
    let observed = adapter(&server).list().await.unwrap();
    assert_eq!(observed.len(), 1);
    assert_eq!(observed[0].ip.as_deref(), Some("203.0.113.7"));
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn malformed_or_failed_lists() {
    for body in ["not json", "[1,2]"] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let err = adapter(&server).list().await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Transient { .. }),
            "{body}: {err:?}"
        );
    }
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "success": false, "error": "auth_error", "msg": "Invalid user key"})))
        .mount(&server)
        .await;
    assert!(matches!(
        adapter(&server).list().await.unwrap_err(),
        ProviderError::Auth { .. }
    ));
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "30"))
        .mount(&server)
        .await;
    match adapter(&server).list().await.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(30)))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn logs_request_an_upload_then_download_it_without_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/instances/request_logs/4242/"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "success": true, "result_url": format!("{}/instance_logs/abc.log", server.uri()),
            "msg": "uploading"})))
        .expect(2)
        .mount(&server)
        .await;
    // Not uploaded yet on the first try, as S3 answers.
    Mock::given(method("GET"))
        .and(path("/instance_logs/abc.log"))
        .respond_with(ResponseTemplate::new(404))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/instance_logs/abc.log"))
        .respond_with(ResponseTemplate::new(200).set_body_string("epoch 1\nepoch 2\n"))
        .mount(&server)
        .await;
    let vast = adapter(&server);

    let opts = LogOptions {
        tail_lines: Some(50),
        ..LogOptions::default()
    };
    let chunks: Vec<_> = vast.logs("4242", &opts).await.unwrap().collect().await;
    let text: Vec<u8> = chunks
        .into_iter()
        .flat_map(|c| c.unwrap().to_vec())
        .collect();
    assert_eq!(text, b"epoch 1\nepoch 2\n");

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs[0].body_json::<Value>().unwrap(), json!({"tail": "50"}));
    let downloads: Vec<_> = reqs
        .iter()
        .filter(|r| r.url.path() == "/instance_logs/abc.log")
        .collect();
    assert_eq!(downloads.len(), 2, "retried until the upload landed");
    assert!(
        downloads
            .iter()
            .all(|r| r.headers.get("authorization").is_none()),
        "key sent to the log host"
    );

    let limited = LogOptions {
        limit_bytes: Some(7),
        ..LogOptions::default()
    };
    let chunks: Vec<_> = vast.logs("4242", &limited).await.unwrap().collect().await;
    assert_eq!(chunks[0].as_ref().unwrap().as_ref(), b"epoch 1");

    let previous = LogOptions {
        previous: true,
        ..LogOptions::default()
    };
    assert!(matches!(
        vast.logs("4242", &previous).await.err(),
        Some(ProviderError::Unsupported { .. })
    ));
}

#[tokio::test]
async fn logs_of_an_unknown_instance_are_not_found() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_json(json!({"error": "invalid_id", "msg": "Invalid instance id."})),
        )
        .mount(&server)
        .await;
    assert_eq!(
        adapter(&server)
            .logs("9", &LogOptions::default())
            .await
            .err(),
        Some(ProviderError::NotFound)
    );
}

#[tokio::test]
async fn secrets_stay_out_of_debug_and_settings_parse() {
    let server = MockServer::start().await;
    assert!(!format!("{:?}", adapter(&server)).contains(KEY));
    assert!(!format!("{:?}", config(&server)).contains(KEY));
    let caps = adapter(&server).capabilities();
    assert!(caps.logs && !caps.follow_logs && !caps.exec && caps.metrics);
    assert_eq!(caps.gpu_types, ["RTX4090"]);

    let yaml: serde_yaml::Value = serde_yaml::from_str(
        "baseUrl: http://127.0.0.1:9001\ndiskGb: 40\nmaxPricePerHour: 1.5\ninterruptible: true\n\
         gpuNames: {RTX4090: RTX 4090}\n",
    )
    .unwrap();
    let cfg = VastConfig::from_settings(&yaml).unwrap();
    assert!(cfg.interruptible && cfg.verified_only);
    assert_eq!(cfg.max_price_per_hour, Some(1.5));
    assert!(VastConfig::from_settings(&serde_yaml::from_str("bogus: 1").unwrap()).is_err());
    let _ = rustls::crypto::ring::default_provider().install_default();
    assert!(
        Vast::new("v".into(), VastConfig::default(), owner()).is_err(),
        "an empty key is refused"
    );
}

/// The standard workload under another pod UID.
fn workload_n(n: usize) -> Workload {
    workload()
        .pod_uid(&format!("00000000-0000-4000-8000-{n:012x}"))
        .build()
}

/// Offer ids of the rents (`PUT /api/v0/asks/{id}/`) the server received, in order.
async fn rents(server: &MockServer) -> Vec<u64> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "PUT")
        .filter_map(|r| {
            r.url
                .path()
                .strip_prefix("/api/v0/asks/")?
                .trim_end_matches('/')
                .parse()
                .ok()
        })
        .collect()
}

/// The `limit` of every offer search the server received, in order.
async fn search_limits(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| r.body_json::<Value>().unwrap()["limit"].clone())
        .collect()
}

#[tokio::test]
async fn concurrent_creates_rent_different_offers_on_the_first_try() {
    const N: u64 = 8;
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    // Equally cheap offers: every create would pick the first one.
    mount_offers(
        &server,
        Value::Array((1..=N).map(|i| offer(100 + i, 0.5, 0.1)).collect()),
    )
    .await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_millis(100)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..N as usize).map(workload_n).collect();

    let results = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut rented = rents(&server).await;
    assert_eq!(rented.len() as u64, N, "one rent per create: {rented:?}");
    rented.sort_unstable();
    assert_eq!(rented, (101..=100 + N).collect::<Vec<_>>());
}

#[tokio::test]
async fn every_offer_being_rented_by_other_creates_is_transient_not_capacity() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..3).map(workload_n).collect();

    let (first, second, third) = futures::join!(
        vast.create(&workloads[0]),
        vast.create(&workloads[1]),
        async {
            // Once both offers are being rented.
            while rents(&server).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            vast.create(&workloads[2]).await
        }
    );

    first.unwrap();
    second.unwrap();
    match third.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => assert_eq!(
            retry_after,
            Some(vk::providers::vast::CONTENDED_RETRY),
            "retried shortly"
        ),
        other => panic!("expected transient, got {other:?}"),
    }
    let mut rented = rents(&server).await;
    rented.sort_unstable();
    assert_eq!(rented, [1, 2], "no offer is rented twice");
}

#[tokio::test]
async fn a_create_waits_out_contention_and_rents_the_offer_another_create_released() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    // Offer 1: the first rent fails after a while (its claim is released), later ones work.
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({"success": false, "error": "server_error"}))
                .set_delay(Duration::from_millis(250)),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(rented().set_delay(Duration::from_millis(250)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..3).map(workload_n).collect();
    let (first, second, third) = futures::join!(
        vast.create(&workloads[0]),
        vast.create(&workloads[1]),
        async {
            while rents(&server).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            vast.create(&workloads[2]).await
        }
    );
    assert!(first.is_err(), "the failed rent is reported: {first:?}");
    second.unwrap();
    // No transient error for contention inside this process: the third create searched again
    // and rented the offer the failed rent gave back.
    third.unwrap();
    let mut rented = rents(&server).await;
    rented.sort_unstable();
    assert_eq!(rented, [1, 1, 2]);
}

#[tokio::test]
async fn rented_and_gone_offers_stay_claimed_and_failed_rents_release_theirs() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(
        &server,
        json!([
            offer(1, 0.5, 0.1),
            offer(2, 0.6, 0.1),
            offer(3, 0.7, 0.1),
            offer(4, 0.8, 0.1)
        ]),
    )
    .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(410)
                .set_body_json(json!({"success": false, "error": "no_such_ask"})),
        )
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/3/"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);

    // 1 is gone, 2 rented.
    vast.create(&workload_n(1)).await.unwrap();
    // 1 and 2 are skipped; 3 fails transiently...
    let err = vast.create(&workload_n(2)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    // ... which frees it for the next create.
    vast.create(&workload_n(3)).await.unwrap();
    vast.create(&workload_n(4)).await.unwrap();
    // Everything listed was rented or found gone a moment ago: no rent tried, and a new
    // search shortly, not "no capacity".
    let err = vast.create(&workload_n(5)).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Transient {
                retry_after: Some(_),
                ..
            }
        ),
        "{err:?}"
    );

    assert_eq!(rents(&server).await, [1, 2, 3, 3, 4]);
}

#[tokio::test]
async fn a_cancelled_rent_releases_its_offer() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_secs(5)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);

    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), vast.create(&workload_n(1))).await;
    assert!(cancelled.is_err(), "the slow rent was cut short");
    vast.create(&workload_n(2)).await.unwrap();

    assert_eq!(rents(&server).await, [1, 1]);
}

#[tokio::test]
async fn the_search_widens_for_creates_renting_meanwhile() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented().set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let (first, second) = (workload_n(1), workload_n(2));

    let (a, b) = futures::join!(vast.create(&first), async {
        // Start once the first create is renting.
        while rents(&server).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        vast.create(&second).await
    });

    a.unwrap();
    b.unwrap();
    assert_eq!(search_limits(&server).await, [json!(20), json!(21)]);
    assert_eq!(rents(&server).await, [1, 2]);
    // Alone again: the default limit.
    vast.create(&workload_n(3)).await.unwrap_err();
    assert_eq!(search_limits(&server).await[2], json!(20));
}

// ---- issue 15: input limits, entrypoint, usage, host states ------------------------------

#[tokio::test]
async fn an_env_value_over_the_vast_entry_limit_fails_naming_it_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let w = workload().env("PROMPT", &"x".repeat(300)).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message }
            if message.contains("PROMPT") && message.contains("256") && message.contains("env")),
        "{err:?}"
    );
    let long_args: Vec<String> = (0..50).map(|_| "a".repeat(100)).collect();
    let w = workload().args(long_args).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("4096")),
        "{err:?}"
    );
    let w = workload().option("disk_gb", "4").build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("8 GB")),
        "{err:?}"
    );
}

#[tokio::test]
async fn command_overrides_the_entrypoint_and_args_replace_the_cmd() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.2)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .mount(&server)
        .await;
    // Only `args`: the image ENTRYPOINT stays (no `onstart`), `args` replace its CMD.
    let w = WorkloadBuilder::new(&owner(), UID)
        .pod("ml", "serve-0")
        .image("vllm/vllm-openai:v0.6")
        .args(["--model", "m"])
        .gpu("RTX4090", 2)
        .build();
    adapter(&server).create(&w).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    let rent: Value = reqs
        .iter()
        .rev()
        .find(|r| r.method.as_str() == "PUT")
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(rent["runtype"], "args");
    assert!(rent.get("onstart").is_none(), "{rent}");
    assert!(rent.get("args_str").is_none(), "{rent}");
    assert_eq!(rent["args"], json!(["--model", "m"]));
}

#[tokio::test]
async fn running_instances_carry_usage_for_the_kubelet_stats() {
    let server = MockServer::start().await;
    let mut running = instance(1, &id(), json!("running"), "running", false);
    running["cpu_util"] = json!(150.0);
    running["mem_usage"] = json!(2.0);
    running["mem_limit"] = json!(64.0);
    running["gpu_util"] = json!(80.0);
    running["uptime_mins"] = json!(1.0);
    mount_lookup(&server, json!([running.clone()])).await;
    let vast = adapter(&server);
    let observed = vast.list().await.unwrap();
    let usage = observed[0]
        .usage
        .clone()
        .expect("usage of a running instance");
    assert_eq!(usage.cpu_millis, 1500);
    assert_eq!(usage.memory_bytes, 2_000_000_000);
    assert_eq!(usage.cpu_usage_nanos, 1500 * 60 * 1_000_000);
    // A minute later at 10 % of a core: the counter goes on at the new rate (rate times
    // uptime would fall to 100m * 120 s, and metrics-server would drop the sample).
    running["cpu_util"] = json!(10.0);
    running["uptime_mins"] = json!(2.0);
    server.reset().await;
    mount_lookup(&server, json!([running])).await;
    let later = vast.list().await.unwrap()[0].usage.clone().unwrap();
    assert_eq!(later.cpu_millis, 100);
    assert_eq!(
        later.cpu_usage_nanos,
        (1500 * 60 + 100 * 60) * 1_000_000,
        "integrated, never falling"
    );
}

#[tokio::test]
async fn an_offline_or_silent_host_is_not_ready_not_lost() {
    let server = MockServer::start().await;
    let other = WorkloadBuilder::new(&owner(), "00000000-0000-4000-8000-00000000000a")
        .gpu("RTX4090", 1)
        .build();
    mount_lookup(
        &server,
        json!([
            instance(1, &id(), json!("offline"), "running", false),
            instance(2, other.id.as_str(), json!("unknown"), "running", false),
        ]),
    )
    .await;
    let observed = adapter(&server).list().await.unwrap();
    assert_eq!(observed.len(), 2);
    for o in observed {
        assert!(
            matches!(o.state, WorkloadState::NotReady { .. }),
            "{:?}",
            o.state
        );
        assert!(o.usage.is_none());
    }
}

#[tokio::test]
async fn calls_are_paced_per_endpoint_and_429s_retried() {
    let server = MockServer::start().await;
    // The documented 429 of the rent endpoint, with no Retry-After, once.
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(
                json!({"detail": "API requests too frequent endpoint threshold=4.5"}),
            ),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .mount(&server)
        .await;
    mount_offers(&server, json!([offer(1, 0.5, 0.2)])).await;
    let vast = adapter_with(VastConfig {
        rate_limits: MinIntervals {
            search: 0.2,
            rent: 0.0,
            list: 0.0,
            destroy: 0.0,
            logs: 0.0,
        },
        ..config(&server)
    });
    vast.create(&workload().build())
        .await
        .expect("a 429 is retried, not surfaced");
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(
        calls(&reqs),
        [
            "POST /api/v0/bundles/",
            "PUT /api/v0/asks/1/",
            "PUT /api/v0/asks/1/"
        ]
    );
}

#[tokio::test]
async fn a_429_that_persists_is_transient() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(
                json!({"detail": "API requests too frequent endpoint threshold=3.0"}),
            ),
        )
        .expect(u64::from(vk::providers::vast::MAX_429_RETRIES) + 1)
        .mount(&server)
        .await;
    let err = adapter(&server).delete("42").await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
}

/// Time scale of the rate-limit tests against the emulator: the adapter is paced at this
/// fraction of Vast's documented intervals and the emulator enforces the same fraction (as
/// the conformance harness does at a tenth), so the test stays short.
const EMULATED_SCALE: f64 = 0.05;

/// A Vast emulator enforcing Vast's per-endpoint intervals at [`EMULATED_SCALE`], stocked with
/// 64 RTX 4090s (8 machines of 8) under Vast's exact name; the adapter maps the neutral
/// `RTX4090` to it through its built-in table (no `gpuNames`).
async fn rate_limited_emulator() -> (
    String,
    mock_providers::vast::State,
    tokio::task::JoinHandle<()>,
) {
    use mock_providers::{EmulatorConfig, ExecutionMode, GpuStock};
    let cfg = EmulatorConfig::new(KEY, vec![GpuStock::new("RTX 4090", 64, 0.69)])
        .with_mode(ExecutionMode::simulated(0, 0, None))
        .with_endpoint_limits(EMULATED_SCALE);
    let state = mock_providers::vast::State::new(cfg);
    let (addr, task) = mock_providers::spawn(mock_providers::vast::router(state.clone()))
        .await
        .unwrap();
    (format!("http://{addr}"), state, task)
}

fn emulator_config(base_url: String, paced: bool) -> VastConfig {
    let real = MinIntervals::default();
    let s = if paced { EMULATED_SCALE } else { 0.0 };
    VastConfig {
        base_url,
        rate_limits: MinIntervals {
            list: real.list * s,
            search: real.search * s,
            rent: real.rent * s,
            destroy: real.destroy * s,
            logs: real.logs * s,
        },
        ..VastConfig::default()
    }
    .with_api_key(KEY)
}

fn rate_limited(state: &mock_providers::vast::State) -> u64 {
    state.engine().lock().gate.counters()["rate_limited"]
}

#[tokio::test]
async fn thirty_creates_at_once_against_the_rate_limited_emulator_surface_no_error() {
    let (url, state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, true));
    let workloads: Vec<Workload> = (0..30).map(workload_n).collect();
    let results = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        errors.is_empty(),
        "{} creates failed ({} requests refused as too frequent): {errors:?}",
        errors.len(),
        rate_limited(&state)
    );
    let listed = vast.list().await.unwrap();
    assert_eq!(listed.len(), 30);
    let mut ids: Vec<String> = listed.iter().map(|o| o.id.as_str().to_owned()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "one instance per workload");
}

#[tokio::test]
async fn an_unpaced_adapter_is_refused_by_the_rate_limited_emulator() {
    let (url, state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, false));
    let workloads: Vec<Workload> = (0..4).map(workload_n).collect();
    let _ = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;
    assert!(
        rate_limited(&state) > 0,
        "four rents at once break the rent interval"
    );
}

/// Vast matches `gpu_name` exactly: a type neither mapped nor built in is searched as written
/// and finds nothing, even one letter off a real name's neutral spelling.
#[tokio::test]
async fn an_unmapped_gpu_type_finds_no_offer_on_the_emulator() {
    let (url, _state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, true));
    let w = workload().gpu("RTX4090X", 2).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Capacity { .. }),
        "no offer is capacity: {err:?}"
    );
    assert!(err.to_string().contains("RTX4090X"), "{err}");
    // The same pod with the neutral name rents.
    vast.create(&workload().build()).await.unwrap();
}
