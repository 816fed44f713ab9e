#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every request body the Vast adapter sends, for every shape of pod, validated against Vast's
//! published schema (mock-providers/schemas/vast.json, derived from vast-ai/docs
//! `api-reference/openapi.yaml` with its errata): the offer search, the rent of an offer and the
//! log request, with the fields the service's own CLI sends by default.

#[path = "support/workload.rs"]
mod workload_builder;

use serde_json::{Value, json};
use vk::naming::Owner;
use vk::provider::{LogOptions, Provider};
use vk::providers::vast::{MinIntervals, Vast, VastConfig};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};
use workload_builder::WorkloadBuilder;

const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn adapter(server: &MockServer) -> Vast {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = VastConfig {
        base_url: server.uri(),
        gpu_names: [("RTX4090".to_owned(), "RTX 4090".to_owned())].into(),
        log_fetch_interval_ms: 10,
        rate_limits: MinIntervals {
            list: 0.0,
            search: 0.0,
            rent: 0.0,
            destroy: 0.0,
            logs: 0.0,
        },
        ..VastConfig::default()
    }
    .with_api_key("vast-test-key-0123456789");
    Vast::new("vast".into(), cfg, Owner::new("cluster-a", "vk-node")).unwrap()
}

/// A Vast account with one offer to rent and one instance whose logs are ready.
async fn vast() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex("^/api/v1/instances/?$"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"success": true, "instances": [], "next_token": null})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path_regex("^/api/v0/bundles/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"offers": [
            {"id": 41, "gpu_name": "RTX 4090", "num_gpus": 2, "dph_total": 0.6, "min_bid": 0.2}
        ]})))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/api/v0/asks/41/?$"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"success": true, "new_contract": 7})),
        )
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/api/v0/instances/request_logs/7/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"success": true, "result_url": format!("{}/logs/7.txt", server.uri())}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/logs/7.txt$"))
        .respond_with(ResponseTemplate::new(200).set_body_string("hello\n"))
        .mount(&server)
        .await;
    server
}

/// Each request `server` received with a JSON body, as (operation in the schema, body).
async fn bodies(server: &MockServer) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    for r in server.received_requests().await.unwrap() {
        let p = r.url.path();
        let op = match r.method.as_str() {
            "POST" if p.starts_with("/api/v0/bundles") => "POST /api/v0/bundles",
            "PUT" if p.starts_with("/api/v0/asks/") => "PUT /api/v0/asks/{id}",
            "PUT" if p.starts_with("/api/v0/instances/request_logs/") => {
                "PUT /api/v0/instances/request_logs/{id}"
            }
            _ => continue,
        };
        out.push((op, serde_json::from_slice(&r.body).unwrap()));
    }
    out
}

fn assert_valid(op: &str, body: &Value, shape: &str) {
    let errors = mock_providers::schema::vast().request_errors(op, body);
    assert!(
        errors.is_empty(),
        "{shape}: Vast's schema refuses {op} {body}: {errors:?}"
    );
}

#[tokio::test]
async fn every_request_body_is_valid_against_the_published_schema() {
    let base = || {
        WorkloadBuilder::new(&Owner::new("cluster-a", "vk-node"), UID)
            .pod("ml", "train-0")
            .image("ghcr.io/acme/train:1.2")
            .gpu("RTX4090", 2)
    };
    let shapes = [
        ("the image as is", base()),
        (
            "command, args, env and a port",
            base()
                .command(["python", "-m", "train"])
                .args(["--name", "it's big"])
                .env("HF_TOKEN", "hf_fake")
                .port(8000),
        ),
        ("args only", base().args(["--epochs", "3"])),
        (
            "an interruptible bid at the offer's minimum",
            base().option("interruptible", "true"),
        ),
        (
            "a private image with its registry login",
            base().image("registry.example.com/acme/train:1.2").login(
                "registry.example.com",
                "robot",
                "pa ss'word",
            ),
        ),
        (
            "an explicit bid, region, disk and price ceiling",
            base()
                .option("interruptible", "true")
                .option("bid_price", "0.25")
                .option("region", "US,CA")
                .option("disk_gb", "40")
                .option("max_price_per_hour", "1.5"),
        ),
    ];
    for (shape, w) in shapes {
        let server = vast().await;
        let vast = adapter(&server);
        vast.create(&w.build()).await.unwrap();
        let sent = bodies(&server).await;
        let ops: Vec<&str> = sent.iter().map(|(op, _)| *op).collect();
        assert_eq!(
            ops,
            ["POST /api/v0/bundles", "PUT /api/v0/asks/{id}"],
            "{shape}"
        );
        for (op, body) in &sent {
            assert_valid(op, body, shape);
        }
        let (_, search) = &sent[0];
        assert_eq!(
            search["external"],
            json!({"eq": false}),
            "{shape}: vast-cli's default"
        );
        // The reliability floor of Vast's own tools, and a direct port per published port.
        assert_eq!(search["reliability"], json!({"gte": 0.9}), "{shape}");
        let ports = if shape.contains("a port") {
            json!({"gte": 1})
        } else {
            Value::Null
        };
        assert_eq!(search["direct_port_count"], ports, "{shape}");
        let (_, rent) = &sent[1];
        assert_eq!(
            rent["cancel_unavail"], true,
            "{shape}: refused, not stopped"
        );
        if shape.starts_with("a private image") {
            assert_eq!(
                rent["image_login"],
                r"-u robot -p 'pa ss'\''word' registry.example.com"
            );
        } else {
            assert!(rent.get("image_login").is_none(), "{shape}: {rent}");
        }
    }

    // The inventory's search and both forms of the log request.
    let server = vast().await;
    let vast = adapter(&server);
    vast.inventory().await.unwrap();
    for tail in [Some(20), None] {
        let opts = LogOptions {
            tail_lines: tail,
            ..LogOptions::default()
        };
        drop(vast.logs("7", &opts).await.unwrap());
    }
    let sent = bodies(&server).await;
    let ops: Vec<&str> = sent.iter().map(|(op, _)| *op).collect();
    assert_eq!(
        ops,
        [
            "POST /api/v0/bundles",
            "PUT /api/v0/instances/request_logs/{id}",
            "PUT /api/v0/instances/request_logs/{id}"
        ]
    );
    for (op, body) in &sent {
        assert_valid(op, body, "inventory and logs");
    }
}

/// The validator the test relies on refuses what Vast's schema refuses: a create body with a
/// number where the spec has a string, and a runtype the spec does not list.
#[test]
fn the_schema_refuses_what_vast_refuses() {
    let spec = mock_providers::schema::vast();
    let bad = json!({"image": "x", "label": 7, "runtype": "docker", "cancel_unavail": "yes"});
    let errors = spec.request_errors("PUT /api/v0/asks/{id}", &bad);
    for field in ["$.label", "$.runtype", "$.cancel_unavail"] {
        assert!(
            errors.iter().any(|e| e.starts_with(field)),
            "{field}: {errors:?}"
        );
    }
}
