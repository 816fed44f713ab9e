#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Contract tests of the RunPod v2 adapter against a wiremock server: the exact requests it
//! sends, and how it reads every documented answer (including the odd ones).

#[path = "support/workload.rs"]
mod workload_builder;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use vk::naming::Owner;
use vk::provider::{FailureReason, LogOptions, Provider, ProviderError, Vanished, WorkloadState};
use vk::providers::runpod::{Cloud, RunPod, RunPodConfig};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};
use workload_builder::WorkloadBuilder;

const KEY: &str = "rp-test-key-0123456789";
const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn owner() -> Owner {
    Owner::new("cluster-a", "vk-node")
}

/// The pod of most tests: two RTX 4090s, 8 CPUs and 32 GB for a training run serving on
/// port 8080.
fn workload() -> WorkloadBuilder {
    WorkloadBuilder::new(&owner(), UID)
        .pod("ml", "train-0")
        .image("ghcr.io/acme/train:1.2")
        .command(["python", "-m", "train"])
        .args(["--epochs", "3", "--name", "it's big"])
        .env("HF_TOKEN", "hf_fake")
        .env("MODE", "fast")
        .gpu("RTX4090", 2)
        .cpu_millis(8000)
        .memory_bytes(32_000_000_000)
        .port(8080)
}

fn config(server: &MockServer) -> RunPodConfig {
    RunPodConfig {
        base_url: format!("{}/v2", server.uri()),
        gpu_ids: [("RTX4090".to_owned(), "NVIDIA GeForce RTX 4090".to_owned())].into(),
        data_center_ids: vec!["US-TX-3".into()],
        // What RunPod's console shows for the type: v2 lists no vCPUs or RAM for GPU pods.
        gpu_pod_resources: [(
            "RTX4090".to_owned(),
            vk::providers::runpod::PerGpu {
                vcpus: 8,
                memory_gb: 32,
            },
        )]
        .into(),
        ..RunPodConfig::default()
    }
    .with_api_key(KEY)
}

fn adapter(server: &MockServer) -> RunPod {
    let _ = rustls::crypto::ring::default_provider().install_default();
    RunPod::new("runpod".into(), config(server), owner()).unwrap()
}

/// Asserts that `body` is a valid `POST /v2/pods` body under RunPod's published v2 schema
/// (mock-providers/schemas/runpod-v2.json, derived from runpod/docs' OpenAPI document).
fn assert_valid_create(body: &Value) {
    let errors = mock_providers::schema::runpod().request_errors("POST /v2/pods", body);
    assert!(errors.is_empty(), "RunPod would refuse {body}: {errors:?}");
}

/// Every create body the adapter sends, one per shape of pod.
#[tokio::test]
async fn every_create_body_is_valid_against_the_published_schema() {
    let shapes = [
        ("GPU, CPU and memory requests", workload().build()),
        ("no CPU or memory", workload().no_cpu_memory().build()),
        (
            "the image's entrypoint",
            workload().image_entrypoint().build(),
        ),
        (
            "pod options",
            workload()
                .option("cloud", "secure")
                .option("data_center", "EU-RO-1, EU-SE-1")
                .option("disk_gb", "75")
                .build(),
        ),
        ("CPU only", workload().no_gpu().cpu_millis(3000).build()),
    ];
    for (shape, w) in shapes {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v2/pods"))
            .respond_with(ResponseTemplate::new(201).set_body_json(pod("n1", "x", "PROVISIONING")))
            .mount(&server)
            .await;
        adapter(&server).create(&w).await.unwrap();
        let reqs = server.received_requests().await.unwrap();
        let body: Value = reqs[0].body_json().unwrap();
        let errors = mock_providers::schema::runpod().request_errors("POST /v2/pods", &body);
        assert!(
            errors.is_empty(),
            "{shape}: RunPod would refuse {body}: {errors:?}"
        );
    }
}

/// A pod as `GET /v2/pods` returns it (fields as in the v2 schema).
fn pod(id: &str, name: &str, status: &str) -> Value {
    json!({
        "id": id, "name": name, "status": status, "actions": ["terminate"],
        "image": "ghcr.io/acme/train:1.2", "args": "", "disk": 20, "mounts": {},
        "ports": ["8080/tcp"], "env": {"HF_TOKEN": "hf_fake"}, "registry": null,
        "cloud": "SECURE", "dataCenterId": "US-TX-3", "cudaVersion": "12.8",
        "ssh": {"proxy": null, "direct": null}, "template": null, "cost": 0.88, "locked": false,
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 2},
        "runtime": null, "createdAt": "2026-06-01T12:00:00Z", "startedAt": null,
        "globalNetworking": {"enabled": false}
    })
}

fn problem(status: u16, detail: &str) -> Value {
    json!({"title": "Error", "status": status, "detail": detail})
}

async fn mount_list(server: &MockServer, pods: Value) {
    Mock::given(method("GET"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "pods": pods })))
        .mount(server)
        .await;
}

fn assert_no_key(err: &ProviderError) {
    assert!(
        !format!("{err} {err:?}").contains(KEY),
        "API key leaked: {err:?}"
    );
}

#[tokio::test]
async fn create_posts_the_documented_body_without_a_lookup_first() {
    let server = MockServer::start().await;
    mount_list(&server, json!([pod("other1", "my-notebook", "RUNNING")])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("content-type", "application/json"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("new1", "x", "PROVISIONING")))
        .expect(1)
        .mount(&server)
        .await;

    adapter(&server).create(&workload().build()).await.unwrap();

    let reqs = server.received_requests().await.unwrap();
    let calls: Vec<_> = reqs
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect();
    assert_eq!(
        calls,
        ["POST /v2/pods"],
        "one call per create: the framework guarantees no duplicate"
    );
    for r in &reqs {
        assert_eq!(
            r.headers.get("authorization").unwrap(),
            &format!("Bearer {KEY}")
        );
    }
    let body: Value = reqs[0].body_json().unwrap();
    assert_valid_create(&body);
    assert_eq!(body["name"], workload().build().id.as_str());
    // The pod's 8 CPUs and 32 GB are not sent: `CreateGpuConfig` has no field for them.
    assert_eq!(
        body["gpu"],
        json!({"id": "NVIDIA GeForce RTX 4090", "count": 2})
    );
    insta::assert_json_snapshot!("runpod_create_body", body);
}

#[tokio::test]
async fn create_applies_pod_options() {
    let server = MockServer::start().await;
    mount_list(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("new1", "x", "PROVISIONING")))
        .mount(&server)
        .await;
    let w = workload()
        .image_entrypoint()
        .no_cpu_memory()
        .option("cloud", "community")
        .option("data_center", "EU-RO-1, EU-SE-1")
        .option("disk_gb", "75")
        .build();

    // The operator allows COMMUNITY besides the configured SECURE.
    let rp = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            allowed_clouds: vec![Cloud::Community],
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    rp.create(&w).await.unwrap();

    let reqs = server.received_requests().await.unwrap();
    let body: Value = reqs[0].body_json().unwrap();
    assert_valid_create(&body);
    assert_eq!(body["cloud"], "COMMUNITY");
    assert_eq!(body["dataCenterIds"], json!(["EU-RO-1", "EU-SE-1"]));
    assert_eq!(body["disk"], 75);
    assert!(
        body.get("args").is_none(),
        "no args means the image's own CMD: {body}"
    );
    assert_eq!(
        body["gpu"],
        json!({"id": "NVIDIA GeForce RTX 4090", "count": 2})
    );
}

#[tokio::test]
async fn invalid_workloads_fail_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let rp = adapter(&server);

    let bad_cloud = workload().option("cloud", "MOON").build();
    // Not allowed by the operator (only the configured SECURE), or above the disk ceiling.
    let other_cloud = workload().option("cloud", "community").build();
    let capped = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            max_disk_gb: Some(100),
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    for (w, want) in [
        (other_cloud, "not allowed by the operator"),
        (workload().option("disk_gb", "101").build(), "ceiling"),
    ] {
        let err = capped.create(&w).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Invalid { message } if message.contains(want)),
            "{err:?}"
        );
    }
    let too_many = workload().any_gpu(16).build();
    let foreign = workload()
        .owner(&Owner::new("cluster-b", "vk-node"))
        .build();

    let no_cpu_flavor = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            cpu_flavor_id: None,
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    let err = no_cpu_flavor
        .create(&workload().no_gpu().build())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("cpuFlavorId")),
        "{err:?}"
    );
    assert!(no_cpu_flavor.capabilities().gpu_only);

    for w in [bad_cloud, too_many, foreign] {
        let err = rp.create(&w).await.unwrap_err();
        assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    }
}

/// Runs a create whose POST answers `resp`.
async fn create_error(resp: ResponseTemplate) -> ProviderError {
    let server = MockServer::start().await;
    mount_list(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(resp)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_key(&err);
    err
}

/// RunPod's v2 API has no balance; at $0 it terminates pods without a network volume
/// (billing docs) and refuses creates with 402. A 402 since the last successful create makes
/// vanished pods "balance exhausted"; without one, the message names the causes.
#[tokio::test]
async fn vanished_pods_are_put_down_to_the_balance_after_a_402() {
    let server = MockServer::start().await;
    mount_list(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(
            ResponseTemplate::new(402).set_body_json(problem(402, "insufficient balance")),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("p-1", "x", "PROVISIONING")))
        .mount(&server)
        .await;
    let rp = adapter(&server);
    match rp.vanished_cause() {
        Some(Vanished::Hint(h)) => assert!(h.contains("balance at $0"), "{h}"),
        other => panic!("before any 402: {other:?}"),
    }
    rp.create(&workload().build()).await.unwrap_err();
    match rp.vanished_cause() {
        Some(Vanished::BalanceExhausted(m)) => assert!(m.contains("insufficient balance"), "{m}"),
        other => panic!("after a 402: {other:?}"),
    }
    rp.create(&workload().build()).await.unwrap();
    assert!(
        matches!(rp.vanished_cause(), Some(Vanished::Hint(_))),
        "a create that succeeds says the account is paid up again"
    );
}

#[tokio::test]
async fn create_errors_are_classified() {
    let capacity = create_error(ResponseTemplate::new(400).set_body_json(problem(
        400,
        "There are no longer any instances available with the requested specifications.",
    )))
    .await;
    assert!(
        matches!(capacity, ProviderError::Capacity { .. }),
        "{capacity:?}"
    );

    let invalid = create_error(ResponseTemplate::new(400).set_body_json(problem(
        400,
        "gpu.allowedCudaVersions and gpu.minCudaVersion are exclusive",
    )))
    .await;
    match invalid {
        ProviderError::Invalid { message } => {
            assert!(message.contains("are exclusive"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let schema = create_error(ResponseTemplate::new(422).set_body_json(json!({
        "title": "Unprocessable Entity", "status": 422, "detail": "Request validation failed.",
        "errors": ["$: additional properties 'bogus' not allowed"]
    })))
    .await;
    match schema {
        ProviderError::Invalid { message } => {
            assert!(message.contains("'bogus' not allowed"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let auth = create_error(
        ResponseTemplate::new(401).set_body_json(problem(401, &format!("bad token {KEY}"))),
    )
    .await;
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    // v2 create: 403 "Your account cannot access the requested pool. Skip this candidate,
    // keep going" -- the next provider is tried, as after a capacity error.
    let forbidden =
        create_error(ResponseTemplate::new(403).set_body_json(problem(403, "access denied"))).await;
    assert!(
        matches!(&forbidden, ProviderError::Capacity { message }
            if message.contains("access denied") && message.contains("Read Only")),
        "{forbidden:?}: the refusal names both causes of RunPod's 403"
    );

    let broke = create_error(
        ResponseTemplate::new(402).set_body_json(problem(402, "insufficient balance")),
    )
    .await;
    assert!(matches!(broke, ProviderError::Capacity { .. }), "{broke:?}");

    let limited = create_error(
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "12")
            .set_body_json(problem(429, "rate limit exceeded for the minute window")),
    )
    .await;
    assert_eq!(
        limited,
        ProviderError::Transient {
            message: "RunPod HTTP 429: rate limit exceeded for the minute window".into(),
            retry_after: Some(Duration::from_secs(12)),
        }
    );

    let down =
        create_error(ResponseTemplate::new(500).set_body_json(problem(500, "upstream failed")))
            .await;
    assert!(
        matches!(
            down,
            ProviderError::Transient {
                retry_after: None,
                ..
            }
        ),
        "{down:?}"
    );
    let html =
        create_error(ResponseTemplate::new(502).set_body_string("<html>bad gateway</html>")).await;
    match html {
        ProviderError::Transient { message, .. } => {
            assert!(message.contains("bad gateway"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delete_uses_the_documented_delete() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/abc123"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    adapter(&server).delete("abc123").await.unwrap();
}

#[tokio::test]
async fn delete_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(problem(404, "pod not found")))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/member"))
        .respond_with(ResponseTemplate::new(409).set_body_json(problem(
            409,
            "Pod belongs to a cluster and cannot be terminated via the pod endpoints.",
        )))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/busy"))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "3"))
        .mount(&server)
        .await;
    let rp = adapter(&server);

    assert_eq!(
        rp.delete("gone").await.unwrap_err(),
        ProviderError::NotFound
    );
    assert!(matches!(
        rp.delete("member").await.unwrap_err(),
        ProviderError::Invalid { .. }
    ));
    match rp.delete("busy").await.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("{other:?}"),
    }
    // Path segments are encoded: an id can never escape its segment.
    let err = rp.delete("../pods").await.unwrap_err();
    assert!(
        matches!(err, ProviderError::NotFound | ProviderError::Invalid { .. }),
        "{err:?}"
    );
    let paths: Vec<_> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        paths.contains(&"/v2/pods/..%2Fpods".to_owned()),
        "{paths:?}"
    );
}

#[tokio::test]
async fn list_is_one_call_and_maps_every_state() {
    let server = MockServer::start().await;
    let ours = |uid: &str| owner().workload_id(uid).unwrap().as_str().to_owned();
    let other_vk = Owner::new("cluster-a", "another-node")
        .workload_id(UID)
        .unwrap()
        .as_str()
        .to_owned();
    let mut running = pod(
        "p-run",
        &ours("00000000-0000-4000-8000-000000000001"),
        "RUNNING",
    );
    running["startedAt"] = json!("2026-06-01T12:02:00Z");
    running["runtime"] = json!({
        "uptime": 100, "cpu": {"util": 50}, "memory": {"util": 25},
        "gpus": [{"util": 94, "memoryUtil": 78}],
        "ports": [{"private": 8080, "public": 43210, "type": "tcp", "ip": "45.23.12.1"}]
    });
    let mut odd = pod(
        "p-odd",
        &ours("00000000-0000-4000-8000-000000000007"),
        "RUNNING",
    );
    odd["runtime"] = json!("not an object");
    odd["createdAt"] = json!(12);
    let mut no_status = pod(
        "p-nostatus",
        &ours("00000000-0000-4000-8000-000000000008"),
        "x",
    );
    no_status.as_object_mut().unwrap().remove("status");
    mount_list(
        &server,
        json!([
            running,
            pod("p-prov", &ours("00000000-0000-4000-8000-000000000002"), "PROVISIONING"),
            pod("p-start", &ours("00000000-0000-4000-8000-000000000003"), "STARTING"),
            pod("p-exit", &ours("00000000-0000-4000-8000-000000000004"), "EXITED"),
            pod("p-err", &ours("00000000-0000-4000-8000-000000000005"), "ERROR"),
            pod("p-term", &ours("00000000-0000-4000-8000-000000000006"), "TERMINATED"),
            pod("p-new", &ours("00000000-0000-4000-8000-00000000000a"), "HIBERNATING"),
            odd,
            no_status,
            pod("p-other-vk", &other_vk, "RUNNING"),
            pod("p-notebook", "my-notebook", "RUNNING"),
            pod("p-lookalike", "vk-12345678-not-a-uid", "RUNNING"),
            42,
            {"name": "vk-nothing"}
        ]),
    )
    .await;

    let observed = adapter(&server).list().await.unwrap();

    assert_eq!(
        server.received_requests().await.unwrap().len(),
        1,
        "list must be one call"
    );
    let by_id = |pid: &str| {
        observed
            .iter()
            .find(|o| o.provider_id == pid)
            .map(|o| o.state.clone())
    };
    assert_eq!(by_id("p-run"), Some(WorkloadState::Running));
    // EXITED follows a stop the VK never makes: not a completion.
    assert_eq!(
        by_id("p-exit"),
        Some(WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted
        })
    );
    assert_eq!(
        by_id("p-err"),
        Some(WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::ProviderError
        })
    );
    assert_eq!(
        by_id("p-new"),
        Some(WorkloadState::Unknown {
            raw: "HIBERNATING".into()
        })
    );
    assert_eq!(by_id("p-term"), None, "terminated pods are gone");
    assert_eq!(by_id("p-notebook"), None);
    assert_eq!(by_id("p-lookalike"), None);
    assert!(
        by_id("p-other-vk").is_some(),
        "any VK's workloads are listed; the framework filters"
    );
    let run = observed.iter().find(|o| o.provider_id == "p-run").unwrap();
    // 50% of 2 x 8 vCPUs and 25% of 2 x 32 GB: the configured per-GPU figures.
    let usage = run.usage.as_ref().unwrap();
    assert_eq!(
        (usage.cpu_millis, usage.memory_bytes),
        (8000, 16_000_000_000)
    );

    let mut snap = serde_json::to_value(&observed).unwrap();
    for o in snap.as_array_mut().unwrap() {
        if let Some(u) = o.get_mut("usage").and_then(Value::as_object_mut) {
            u.insert("timestamp".into(), json!("[now]"));
        }
    }
    insta::assert_json_snapshot!("runpod_list_observed", snap);
}

#[tokio::test]
async fn malformed_list_answers_are_transient() {
    for body in ["not json", r#"{"pods": "nope"}"#, r#"[]"#] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/pods"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let err = adapter(&server).list().await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Transient { .. }),
            "{body}: {err:?}"
        );
    }
}

/// A pod of ours listed without its `id` (the v2 schema requires it) makes the list malformed:
/// an error naming the field, so the pipeline judges nothing on it, rather than a list without
/// the workload, which would be taken for lost. Someone else's pod without an id is skipped.
#[tokio::test]
async fn a_listed_pod_of_ours_without_its_id_is_a_malformed_answer_not_a_lost_workload() {
    let w = workload().build();
    let mut ours = pod("p1", w.id.as_str(), "RUNNING");
    ours.as_object_mut().unwrap().remove("id");
    let mut foreign = pod("p2", "my-notebook", "RUNNING");
    foreign["id"] = Value::Null;

    let server = MockServer::start().await;
    mount_list(&server, json!([foreign.clone(), ours])).await;
    let err = adapter(&server).list().await.unwrap_err();
    match &err {
        ProviderError::Malformed {
            provider,
            field,
            message,
        } => {
            assert_eq!((provider.as_str(), field.as_str()), ("runpod", "Pod.id"));
            assert!(message.contains(w.id.as_str()), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let server = MockServer::start().await;
    mount_list(&server, json!([foreign])).await;
    assert_eq!(adapter(&server).list().await.unwrap(), Vec::new());
}

#[tokio::test]
async fn list_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(problem(401, "missing bearer token")),
        )
        .mount(&server)
        .await;
    let err = adapter(&server).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn connection_failures_are_transient() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let cfg = RunPodConfig {
        base_url: format!("http://{addr}/v2"),
        ..RunPodConfig::default()
    }
    .with_api_key(KEY);
    let rp = RunPod::new("runpod".into(), cfg, owner()).unwrap();
    let err = rp.list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    assert_no_key(&err);
}

#[tokio::test]
async fn secrets_stay_out_of_debug_and_config_is_checked() {
    let server = MockServer::start().await;
    let rp = adapter(&server);
    assert!(!format!("{rp:?}").contains(KEY));
    assert!(!format!("{:?}", config(&server)).contains(KEY));

    let empty = RunPodConfig::default();
    assert!(
        RunPod::new("rp".into(), empty, owner()).is_err(),
        "an empty key is refused"
    );
    let bad_url = RunPodConfig {
        base_url: "ftp://x".into(),
        ..RunPodConfig::default()
    }
    .with_api_key(KEY);
    assert!(RunPod::new("rp".into(), bad_url, owner()).is_err());
}

#[test]
fn settings_parse_from_yaml() {
    let yaml: serde_yaml::Value = serde_yaml::from_str(
        "baseUrl: http://127.0.0.1:9000/v2\ncloud: COMMUNITY\ndataCenterIds: [EU-RO-1]\n\
         defaultGpuType: RTX4090\ngpuIds: {RTX4090: NVIDIA GeForce RTX 4090}\ncontainerDiskGb: 40\n",
    )
    .unwrap();
    let cfg = RunPodConfig::from_settings(&yaml).unwrap();
    assert_eq!(cfg.cloud, Cloud::Community);
    assert_eq!(cfg.container_disk_gb, 40);
    assert_eq!(cfg.gpu_ids["RTX4090"], "NVIDIA GeForce RTX 4090");
    assert!(cfg.api_key.is_empty(), "keys never come from settings");
    let defaults = RunPodConfig::from_settings(&serde_yaml::Value::Null).unwrap();
    assert_eq!(defaults.base_url, "https://api.runpod.io/v2");
    assert!(RunPodConfig::from_settings(&serde_yaml::from_str("apiKey: x").unwrap()).is_err());
}

#[tokio::test]
async fn capabilities_reflect_the_config() {
    let server = MockServer::start().await;
    let caps = adapter(&server).capabilities();
    assert_eq!(caps.gpu_types, ["RTX4090"]);
    assert!(caps.logs && caps.follow_logs && !caps.exec && caps.metrics);
    // CPU pods are offered (default flavor) and finished pods are deleted, not kept billing.
    assert!(!caps.gpu_only && caps.delete_finished);
    // RunPod keeps one log per pod: there is no previous container's.
    let previous = LogOptions {
        previous: true,
        ..Default::default()
    };
    assert!(matches!(
        adapter(&server).logs("p1", &previous).await.err(),
        Some(ProviderError::Unsupported { .. })
    ));
}

/// A log stream as `GET /v2/pods/{id}/logs` sends it: container and system events.
const LOG_STREAM: &str = "id: 2026-12-01T10:00:00Z\n\
    data: {\"source\":\"system\",\"line\":\"pulling image\",\"ts\":\"2026-12-01T10:00:00Z\"}\n\n\
    : keepalive\n\n\
    id: 2026-12-01T10:00:01Z\n\
    data: {\"source\":\"container\",\"line\":\"loading model\",\"ts\":\"2026-12-01T10:00:01Z\"}\n\n\
    id: 2026-12-01T10:00:02Z\n\
    data: {\"source\":\"container\",\"line\":\"serving on 8080\",\"ts\":\"2026-12-01T10:00:02Z\"}\n\n";

async fn read_logs(rp: &RunPod, opts: &LogOptions) -> Result<String, ProviderError> {
    let mut s = rp.logs("p1", opts).await?;
    let mut out = String::new();
    while let Some(chunk) = s.next().await {
        out.push_str(&String::from_utf8_lossy(&chunk?));
    }
    Ok(out)
}

#[tokio::test]
async fn logs_read_the_documented_event_stream_of_the_container() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("source", "container"))
        .and(query_param("tail", "5000"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("accept", "text/event-stream"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(LOG_STREAM),
        )
        .expect(2)
        .mount(&server)
        .await;
    let rp = adapter(&server);
    // Without --tail: the most the API replays; system narration is not the container's log.
    let text = read_logs(&rp, &LogOptions::default()).await.unwrap();
    assert_eq!(text, "loading model\nserving on 8080\n");
    let opts = LogOptions {
        timestamps: true,
        limit_bytes: Some(30),
        ..Default::default()
    };
    let text = read_logs(&rp, &opts).await.unwrap();
    assert_eq!(text, "2026-12-01T10:00:01Z loading m");
}

#[tokio::test]
async fn logs_ask_for_tail_or_since_as_kubectl_does() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("tail", "5000"))
        .respond_with(ResponseTemplate::new(200).set_body_string(""))
        .expect(1)
        .named("tail above the API's maximum is capped")
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("since", "2026-12-01T10:00:00Z"))
        .respond_with(ResponseTemplate::new(200).set_body_string(""))
        .expect(1)
        .mount(&server)
        .await;
    let rp = adapter(&server);
    let tail = LogOptions {
        tail_lines: Some(9000),
        ..Default::default()
    };
    assert_eq!(read_logs(&rp, &tail).await.unwrap(), "");
    let since = LogOptions {
        since: Some("2026-12-01T10:00:00Z".parse().unwrap()),
        ..Default::default()
    };
    assert_eq!(read_logs(&rp, &since).await.unwrap(), "");
}

#[tokio::test]
async fn log_refusals_are_the_providers_errors_without_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/gone/logs"))
        .respond_with(ResponseTemplate::new(404).set_body_json(problem(404, "pod not found")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(problem(401, &format!("bad key {KEY}"))),
        )
        .mount(&server)
        .await;
    let rp = adapter(&server);
    let gone = rp.logs("gone", &Default::default()).await.err().unwrap();
    assert!(matches!(gone, ProviderError::NotFound), "{gone:?}");
    let auth = rp.logs("p1", &Default::default()).await.err().unwrap();
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    assert_no_key(&auth);
}

#[tokio::test]
async fn a_cpu_only_pod_is_created_as_a_cpu_pod() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("c1", "x", "PROVISIONING")))
        .expect(1)
        .mount(&server)
        .await;
    adapter(&server)
        .create(&workload().no_gpu().cpu_millis(3000).build())
        .await
        .unwrap();
    let reqs = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert_valid_create(&body);
    // `CreateCpuConfig`: flavor id and a power-of-two vCPU count; never a `gpu` block.
    assert_eq!(body["cpu"], json!({"id": "cpu3c", "vcpuCount": 4}));
    assert!(body.get("gpu").is_none(), "{body}");
}

/// A RUNNING pod of ours with this uptime.
fn running_for(uptime: u64) -> Value {
    let name = owner().workload_id(UID).unwrap().as_str().to_owned();
    let mut p = pod("p1", &name, "RUNNING");
    p["startedAt"] = json!("2026-06-01T12:02:00Z");
    p["runtime"] = json!({"uptime": uptime});
    p
}

#[tokio::test]
async fn a_container_exit_is_seen_through_a_falling_uptime() {
    // RunPod restarts an exited container in place and the pod stays RUNNING
    // (runpodctl#149, dstack#1142): only `runtime.uptime` tells.
    let server = MockServer::start().await;
    let rp = adapter(&server);
    let list_once = |uptime: u64| {
        let server = &server;
        async move {
            server.reset().await;
            mount_list(server, json!([running_for(uptime)])).await;
        }
    };
    list_once(40).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Running);
    list_once(41).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Running);
    // The command ended; RunPod started it again a moment ago.
    list_once(1).await;
    let o = rp.list().await.unwrap().remove(0);
    assert_eq!(o.state, WorkloadState::Succeeded);
    assert!(o.message.unwrap().contains("no exit code"));
    // It stays ended while RunPod keeps re-running it: the framework must stop it.
    list_once(2).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Succeeded);
}

#[tokio::test]
async fn unknown_exits_can_be_reported_as_failures() {
    let server = MockServer::start().await;
    let rp = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            unknown_exit_as: vk::providers::runpod::UnknownExit::Failed,
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    mount_list(&server, json!([running_for(500)])).await;
    rp.list().await.unwrap();
    server.reset().await;
    mount_list(&server, json!([running_for(3)])).await;
    assert_eq!(
        rp.list().await.unwrap()[0].state,
        WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        }
    );
    let yaml = "unknownExitAs: Failed\ncpuFlavorId: null";
    let cfg = RunPodConfig::from_settings(&serde_yaml::from_str(yaml).unwrap()).unwrap();
    assert_eq!(
        cfg.unknown_exit_as,
        vk::providers::runpod::UnknownExit::Failed
    );
    assert_eq!(cfg.cpu_flavor_id, None);
}
