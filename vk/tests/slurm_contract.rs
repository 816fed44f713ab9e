#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Contract tests of the Slurm adapter against a wiremock slurmrestd: the exact requests it
//! sends in both dialects (v0.0.38 and v0.0.41), how it reads job lists, and how it classifies
//! slurmrestd's errors (bodies as a real 22.05.8 answers them).

#[path = "support/workload.rs"]
mod workload_builder;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use vk::naming::Owner;
use vk::provider::{FailureReason, LogOptions, Provider, ProviderError, WorkloadState};
use vk::providers::slurm::{Dialect, Runtime, Slurm, SlurmConfig};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};
use workload_builder::WorkloadBuilder;

const USER: &str = "vkslurm";
const TOKEN: &str = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsInN1biI6InZrc2x1cm0ifQ.sig";
const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn owner() -> Owner {
    Owner::new("cluster-a", "vk-node")
}

/// The job of most tests: two GPUs of any type, 3.5 CPUs and 16 GiB for a training run in
/// `/scratch/run`.
fn workload() -> WorkloadBuilder {
    WorkloadBuilder::new(&owner(), UID)
        .pod("ml", "train-0")
        .image("ghcr.io/acme/train:1.2")
        .command(["python", "-m", "train"])
        .args(["--name", "it's big"])
        .working_dir("/scratch/run")
        .env("HF_TOKEN", "hf_fake")
        .any_gpu(2)
        .cpu_millis(3500)
        .memory_bytes(16 * 1024 * 1024 * 1024)
}

fn config(server: &MockServer, dialect: Dialect) -> SlurmConfig {
    SlurmConfig {
        base_url: server.uri(),
        dialect,
        user_name: USER.into(),
        partition: Some("gpu".into()),
        default_time_limit_minutes: Some(120),
        output_dir: Some(PathBuf::from("/shared/vk-logs")),
        ..SlurmConfig::default()
    }
    .with_api_key(TOKEN)
}

fn adapter_with(cfg: SlurmConfig) -> Slurm {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Slurm::new("slurm".into(), cfg, owner()).unwrap()
}

fn adapter(server: &MockServer, dialect: Dialect) -> Slurm {
    adapter_with(config(server, dialect))
}

fn prefix(dialect: Dialect) -> String {
    format!("/slurm/{dialect}")
}

fn meta() -> Value {
    json!({"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
           "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}})
}

/// A v0.0.38 job record (fields as a real 22.05.8 lists them).
fn job38(id: u64, name: &str, state: &str, exit: i64, reason: &str) -> Value {
    json!({
        "job_id": id, "name": name, "job_state": state, "state_reason": reason,
        "state_description": "", "exit_code": exit, "derived_exit_code": 0, "restart_cnt": 0,
        "nodes": if state == "PENDING" { "" } else { "vm" }, "batch_host": "vm",
        "submit_time": 1_795_969_228, "start_time": 1_795_969_231, "end_time": 1_795_969_240,
        "comment": "gpu-vk", "user_name": USER, "partition": "gpu", "tres_per_node": "gres:gpu:2",
        "standard_output": "/shared/vk-logs/slurm-%j.log", "current_working_directory": "/tmp"
    })
}

/// A v0.0.41 job record.
fn job41(id: u64, name: &str, states: Value, exit: Value) -> Value {
    let nv = |n: i64| json!({"set": true, "infinite": false, "number": n});
    json!({
        "job_id": id, "name": name, "job_state": states, "state_reason": "None",
        "exit_code": exit, "restart_cnt": 1, "nodes": "gpu01",
        "submit_time": nv(1_795_969_228), "start_time": nv(1_795_969_231),
        "end_time": nv(1_795_969_240), "time_limit": nv(120)
    })
}

async fn mount_jobs(server: &MockServer, dialect: Dialect, jobs: Value) {
    Mock::given(method("GET"))
        .and(path(format!("{}/jobs/", prefix(dialect))))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"meta": meta(), "errors": [], "jobs": jobs})),
        )
        .mount(server)
        .await;
}

fn slurm_error(number: i64, error: &str) -> Value {
    json!({"meta": meta(), "errors": [{"error_number": number, "error": error,
            "description": error, "source": "test"}]})
}

fn assert_no_token(err: &ProviderError) {
    assert!(
        !format!("{err} {err:?}").contains(TOKEN),
        "token leaked: {err:?}"
    );
}

#[tokio::test]
async fn submit_v0038_sends_the_documented_body_and_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.38/job/submit"))
        .and(header("x-slurm-user-name", USER))
        .and(header("x-slurm-user-token", TOKEN))
        .and(header("content-type", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"meta": meta(), "errors": [], "job_id": 42, "step_id": "BATCH", "job_submit_user_msg": ""}),
        ))
        .expect(1)
        .mount(&server)
        .await;

    adapter(&server, Dialect::V0038)
        .create(&workload().build())
        .await
        .unwrap();

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs.len(), 1, "one call per create");
    let body: Value = reqs[0].body_json().unwrap();
    assert_eq!(body["job"]["name"], workload().build().id.as_str());
    assert_eq!(body["job"]["gpus_per_node"], "2");
    assert_eq!(body["job"]["time_limit"], 120);
    assert_eq!(body["job"]["partition"], "gpu");
    assert_eq!(body["job"]["cpus_per_task"], 4);
    assert_eq!(body["job"]["memory_per_node"], 16384);
    assert!(
        body["job"]["environment"]["PATH"].is_string(),
        "22.05 refuses an empty environment"
    );
    assert!(
        body["job"]["comment"]
            .as_str()
            .unwrap()
            .contains(owner().tag())
    );
    insta::assert_json_snapshot!("slurm_submit_v0038", body);
}

#[tokio::test]
async fn submit_v0041_sends_the_documented_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.41/job/submit"))
        .and(header("x-slurm-user-name", USER))
        .and(header("x-slurm-user-token", TOKEN))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "job_id": 7, "step_id": "batch",
            "result": {"job_id": 7, "step_id": "batch", "error_code": 0, "error": "No error", "job_submit_user_msg": ""},
            "job_submit_user_msg": "", "meta": {}, "errors": [], "warnings": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    let w = workload()
        .option("partition", "short")
        .option("time_limit", "15")
        .option("qos", "high")
        .option("account", "proj1")
        .build();
    // Only values the operator allows; refused before any request otherwise.
    let strict = adapter(&server, Dialect::V0041);
    let err = strict.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("partition=\"short\"") && message.contains("allowed: gpu")),
        "{err:?}"
    );
    let allowing = adapter_with(SlurmConfig {
        allowed_partitions: vec!["short".into()],
        allowed_accounts: vec!["proj1".into()],
        allowed_qos: vec!["high".into()],
        ..config(&server, Dialect::V0041)
    });
    allowing.create(&w).await.unwrap();

    let reqs = server.received_requests().await.unwrap();
    let body: Value = reqs[0].body_json().unwrap();
    assert!(body.get("script").is_none(), "v0.0.41 nests the script");
    assert!(
        body["job"]["script"]
            .as_str()
            .unwrap()
            .starts_with("#!/bin/bash\n")
    );
    assert_eq!(body["job"]["tres_per_node"], "gres/gpu:2");
    assert_eq!(body["job"]["partition"], "short");
    assert_eq!(body["job"]["qos"], "high");
    assert_eq!(body["job"]["account"], "proj1");
    assert_eq!(
        body["job"]["time_limit"],
        json!({"set": true, "infinite": false, "number": 15})
    );
    assert!(
        body["job"]["environment"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("PATH="))
    );
    insta::assert_json_snapshot!("slurm_submit_v0041", body);
}

/// A Secret's value (the pod's `HF_TOKEN`) never appears in the batch script, which Slurm
/// sites archive (`AccountingStoreFlags=job_script`) and plugins read: it travels in the job's
/// `environment`, which the script reads it from, in both dialects.
#[tokio::test]
async fn secret_values_travel_in_the_environment_never_in_the_script() {
    const SECRET: &str = "hf_s3cr3t-Value-9c1e";
    for dialect in [Dialect::V0038, Dialect::V0041] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(format!("{}/job/submit", prefix(dialect))))
            .respond_with(ResponseTemplate::new(200).set_body_json(
                json!({"meta": meta(), "errors": [], "job_id": 42, "result": {"job_id": 42}}),
            ))
            .expect(1)
            .mount(&server)
            .await;
        let w = workload()
            .env("HF_TOKEN", SECRET)
            .env("my.key", SECRET)
            .build();
        adapter(&server, dialect).create(&w).await.unwrap();
        let body: Value = server.received_requests().await.unwrap()[0]
            .body_json()
            .unwrap();
        let script = match dialect {
            Dialect::V0038 => body["script"].as_str(),
            _ => body["job"]["script"].as_str(),
        }
        .unwrap();
        assert!(
            !script.contains(SECRET),
            "{dialect}: secret in the script:\n{script}"
        );
        assert!(
            script.contains("export HF_TOKEN=\"$_GPUVK_ENV_"),
            "{script}"
        );
        let env: Vec<(String, String)> = match dialect {
            Dialect::V0038 => body["job"]["environment"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect(),
            _ => body["job"]["environment"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| {
                    let (k, v) = kv.as_str().unwrap().split_once('=').unwrap();
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
        };
        let carrying: Vec<&str> = env
            .iter()
            .filter(|(_, v)| v == SECRET)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(carrying.len(), 2, "{dialect}: {env:?}");
        for k in carrying {
            assert!(k.starts_with("_GPUVK_ENV_") && script.contains(&format!("\"${k}\"")));
        }
        assert!(env.iter().any(|(k, _)| k == "PATH"), "{env:?}");
    }
}

#[tokio::test]
async fn typed_gpus_and_runtimes_shape_the_job() {
    let server = MockServer::start().await;
    let mut cfg = config(&server, Dialect::V0038);
    cfg.gpu_types = [("A100-80GB".to_owned(), "a100".to_owned())].into();
    cfg.runtime = Runtime::Apptainer;
    let slurm = adapter_with(cfg);
    let w = workload().gpu("A100-80GB", 1).build();
    let body = slurm.submit_body(&w).unwrap();
    assert_eq!(body["job"]["gpus_per_node"], "a100:1");
    assert!(
        body["script"]
            .as_str()
            .unwrap()
            .contains("exec --nv --pwd /scratch/run docker://ghcr.io/acme/train:1.2")
    );
    let w = workload().gpu("H100", 1).build();
    assert!(matches!(
        slurm.submit_body(&w),
        Err(ProviderError::Invalid { .. })
    ));
    let w = workload().any_gpu(9).build();
    assert!(matches!(
        slurm.submit_body(&w),
        Err(ProviderError::Invalid { .. })
    ));
    let w = workload().option("time_limit", "soon").build();
    assert!(matches!(
        slurm.submit_body(&w),
        Err(ProviderError::Invalid { .. })
    ));
}

#[tokio::test]
async fn delete_cancels_the_job_in_both_dialects() {
    for dialect in [Dialect::V0038, Dialect::V0041, Dialect::V0045] {
        let server = MockServer::start().await;
        Mock::given(method("DELETE"))
            .and(path(format!("{}/job/42", prefix(dialect))))
            .and(header("x-slurm-user-token", TOKEN))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(json!({"meta": meta(), "errors": []})),
            )
            .expect(1)
            .mount(&server)
            .await;
        let slurm = adapter(&server, dialect);
        slurm.delete("42").await.unwrap();
        let reqs = server.received_requests().await.unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            reqs[0].url.query(),
            None,
            "default signal: SIGKILL after SIGTERM"
        );
        assert!(matches!(
            slurm.delete("not-a-job").await,
            Err(ProviderError::Invalid { .. })
        ));
    }
}

#[path = "slurm_contract/dialects.rs"]
mod dialects;
#[path = "slurm_contract/errors.rs"]
mod errors;
#[path = "slurm_contract/listing.rs"]
mod listing;
