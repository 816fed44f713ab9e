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
async fn secrets_stay_out_of_debug_and_settings_parse() {
    let server = MockServer::start().await;
    assert!(!format!("{:?}", adapter(&server)).contains(KEY));
    assert!(!format!("{:?}", config(&server)).contains(KEY));
    let caps = adapter(&server).capabilities();
    assert!(caps.logs && !caps.follow_logs && !caps.exec && caps.metrics);
    assert_eq!(caps.gpu_types, ["RTX4090"]);

    let yaml: serde_json::Value = serde_saphyr::from_str(
        "baseUrl: http://127.0.0.1:9001\ndiskGb: 40\nmaxPricePerHour: 1.5\ninterruptible: true\n\
         gpuNames: {RTX4090: RTX 4090}\n",
    )
    .unwrap();
    let cfg = VastConfig::from_settings(&yaml).unwrap();
    assert!(cfg.interruptible && cfg.verified_only);
    assert_eq!(cfg.max_price_per_hour, Some(1.5));
    assert!(
        VastConfig::from_settings(
            &serde_saphyr::from_str::<serde_json::Value>("bogus: 1").unwrap()
        )
        .is_err()
    );
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

#[path = "vast_contract/concurrency.rs"]
mod concurrency;
#[path = "vast_contract/listing.rs"]
mod listing;
#[path = "vast_contract/pacing.rs"]
mod pacing;
#[path = "vast_contract/rent_errors.rs"]
mod rent_errors;
#[path = "vast_contract/requests.rs"]
mod requests;
