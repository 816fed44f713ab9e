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
                .option("min_cuda", "12.8")
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
        .option("min_cuda", "12.8")
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
        json!({"id": "NVIDIA GeForce RTX 4090", "count": 2, "minCudaVersion": "12.8"})
    );
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
    let yaml: serde_json::Value = serde_saphyr::from_str(
        "baseUrl: http://127.0.0.1:9000/v2\ncloud: COMMUNITY\ndataCenterIds: [EU-RO-1]\n\
         defaultGpuType: RTX4090\ngpuIds: {RTX4090: NVIDIA GeForce RTX 4090}\ncontainerDiskGb: 40\n",
    )
    .unwrap();
    let cfg = RunPodConfig::from_settings(&yaml).unwrap();
    assert_eq!(cfg.cloud, Cloud::Community);
    assert_eq!(cfg.container_disk_gb, 40);
    assert_eq!(cfg.gpu_ids["RTX4090"], "NVIDIA GeForce RTX 4090");
    assert!(cfg.api_key.is_blank(), "keys never come from settings");
    let defaults = RunPodConfig::from_settings(&serde_json::Value::Null).unwrap();
    assert_eq!(defaults.base_url, "https://api.runpod.io/v2");
    assert!(
        RunPodConfig::from_settings(
            &serde_saphyr::from_str::<serde_json::Value>("apiKey: x").unwrap()
        )
        .is_err()
    );
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

#[path = "runpod_contract/errors.rs"]
mod errors;
#[path = "runpod_contract/logs_and_exits.rs"]
mod logs_and_exits;
#[path = "runpod_contract/registries.rs"]
mod registries;
