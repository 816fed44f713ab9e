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

async fn submit_error(dialect: Dialect, resp: ResponseTemplate) -> (ProviderError, Vec<String>) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("{}/job/submit", prefix(dialect))))
        .respond_with(resp)
        .mount(&server)
        .await;
    mount_jobs(&server, dialect, json!([])).await;
    let err = adapter(&server, dialect)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_token(&err);
    let calls = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect();
    (err, calls)
}

#[tokio::test]
async fn submit_errors_are_classified() {
    // 22.05's answer to an impossible GPU count: 500 with error_code 2014.
    let (err, calls) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(500).set_body_json(json!({"meta": meta(), "errors": [
            {"error_code": 2014, "error": "Requested node configuration is not available"}]})),
    )
    .await;
    match &err {
        ProviderError::Invalid { message } => {
            assert!(
                message.contains("Requested node configuration is not available"),
                "{message}"
            );
            assert!(message.contains("2014"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(
        calls,
        ["POST /slurm/v0.0.38/job/submit", "GET /slurm/v0.0.38/jobs/"],
        "a refused submission looks for a leftover job to cancel"
    );

    for (status, body, want) in [
        (
            500,
            json!({"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error": "environment must be set", "error_code": 2127}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error_number": 9001, "error": "Failure parsing"}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error_number": 2016, "error": "Requested nodes are busy"}]}),
            "capacity",
        ),
        (
            500,
            json!({"errors": [{"error_number": -1, "error": "Unspecified error", "description": "Failed while looking for jobs"}]}),
            "auth",
        ),
        (
            500,
            json!({"errors": [{"error_number": 1800, "error": "Unable to contact slurm controller (connect failure)"}]}),
            "transient",
        ),
        (502, json!({}), "transient"),
    ] {
        let (err, _) = submit_error(
            Dialect::V0038,
            ResponseTemplate::new(status).set_body_json(body.clone()),
        )
        .await;
        let got = match err {
            ProviderError::Invalid { .. } => "invalid",
            ProviderError::Capacity { .. } => "capacity",
            ProviderError::Auth { .. } => "auth",
            ProviderError::Transient { .. } => "transient",
            ProviderError::Unsupported { .. } => "unsupported",
            ProviderError::Malformed { .. } => "malformed",
            ProviderError::NotFound => "notfound",
        };
        assert_eq!(got, want, "{status} {body}");
    }
    // v0.0.41 repeats the code under `result`.
    let (err, _) = submit_error(
        Dialect::V0041,
        ResponseTemplate::new(500).set_body_json(json!({"result": {"job_id": 0, "error_code": 2072,
            "error": "Invalid generic resource (gres) specification"}, "errors": [{"error_number": 2072,
            "error": "Invalid generic resource (gres) specification", "description": "", "source": "slurm_submit_batch_job()"}]})),
    )
    .await;
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // Plain-text answers: 401 and 400 of slurmrestd itself.
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(401).set_body_string("Authentication failure"),
    )
    .await;
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(400).set_body_string("Unable to parse query."),
    )
    .await;
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // A URL slurmrestd does not serve (wrong dialect) is not a reason to fail the pod.
    let (err, _) = submit_error(
        Dialect::V0041,
        ResponseTemplate::new(404).set_body_string("Unable find requested URL"),
    )
    .await;
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    // Retry-After is honoured.
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(503).insert_header("retry-after", "7"),
    )
    .await;
    assert_eq!(
        err,
        ProviderError::Transient {
            message: "slurmrestd HTTP 503: Service Unavailable".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
}

#[tokio::test]
async fn a_refused_submission_cancels_its_active_leftover() {
    let server = MockServer::start().await;
    let id = workload().build().id;
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.38/job/submit"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"errors": [
            {"error_code": 2014, "error": "Requested node configuration is not available"}]})))
        .mount(&server)
        .await;
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(5, id.as_str(), "PENDING", 0, "BadConstraints"),
            job38(6, id.as_str(), "FAILED", 1, "BadConstraints")
        ]),
    )
    .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/5"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"meta": meta(), "errors": []})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Invalid { .. }));
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

#[tokio::test]
async fn delete_errors_are_classified() {
    let server = MockServer::start().await;
    // A real 22.05 answers an unknown job with 500 and error 2017.
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/999"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"meta": meta(), "errors": [{
            "description": "unable to kill JobId=999 with signal 9: Invalid job id specified",
            "error_number": 2017, "error": "Invalid job id specified", "source": "slurm_kill_job"}]})))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/998"))
        .respond_with(ResponseTemplate::new(500).set_body_json(slurm_error(
            2021,
            "Job/step already completing or completed",
        )))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/997"))
        .respond_with(ResponseTemplate::new(500).set_body_json(slurm_error(
            1800,
            "Unable to contact slurm controller (connect failure)",
        )))
        .mount(&server)
        .await;
    let slurm = adapter(&server, Dialect::V0038);
    assert_eq!(slurm.delete("999").await, Err(ProviderError::NotFound));
    assert_eq!(slurm.delete("998").await, Ok(()));
    assert!(matches!(
        slurm.delete("997").await,
        Err(ProviderError::Transient { .. })
    ));
}

#[tokio::test]
async fn list_is_one_call_and_maps_v0038_jobs() {
    let server = MockServer::start().await;
    let id = |n: u32| {
        owner()
            .workload_id(&format!("00000000-0000-4000-8000-{n:012}"))
            .unwrap()
    };
    let foreign = Owner::new("cluster-b", "vk-node").workload_id(UID).unwrap();
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(1, id(1).as_str(), "PENDING", 0, "Resources"),
            job38(2, id(2).as_str(), "RUNNING", 0, "None"),
            job38(3, id(3).as_str(), "COMPLETED", 0, "None"),
            job38(4, id(4).as_str(), "FAILED", 768, "NonZeroExitCode"),
            job38(5, id(5).as_str(), "CANCELLED", 15, "None"),
            job38(6, id(6).as_str(), "TIMEOUT", 15, "TimeLimit"),
            job38(7, id(7).as_str(), "OUT_OF_MEMORY", 0, "OutOfMemory"),
            job38(8, id(8).as_str(), "PREEMPTED", 0, "None"),
            job38(9, id(9).as_str(), "NODE_FAIL", 0, "NodeDown"),
            job38(10, id(10).as_str(), "SUSPENDED", 0, "None"),
            job38(11, "my-interactive-job", "RUNNING", 0, "None"),
            job38(12, foreign.as_str(), "RUNNING", 0, "None"),
            {"job_id": 13, "name": id(13).as_str(), "job_state": "PENDING", "state_reason": "BeginTime", "restart_cnt": 1, "exit_code": "odd"},
            "not an object"
        ]),
    )
    .await;
    Mock::given(method("GET"))
        .and(path(format!("{}/nodes/", prefix(Dialect::V0038))))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"meta": meta(),
            "errors": [], "nodes": [{"name": "vm", "hostname": "vm", "address": "198.51.100.4"}]})),
        )
        .mount(&server)
        .await;
    let slurm = adapter(&server, Dialect::V0038);
    let observed = slurm.list().await.unwrap();
    let calls = |reqs: Vec<wiremock::Request>| -> Vec<String> {
        reqs.iter().map(|r| r.url.path().to_owned()).collect()
    };
    assert_eq!(
        calls(server.received_requests().await.unwrap()),
        ["/slurm/v0.0.38/jobs/", "/slurm/v0.0.38/nodes/"],
        "one list call for all pods, and the node records for their addresses"
    );
    // The node records are remembered: the next list is one call.
    slurm.list().await.unwrap();
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    let ip = |n: u32| {
        observed
            .iter()
            .find(|o| o.id == id(n))
            .and_then(|o| o.ip.clone())
    };
    assert_eq!(
        ip(2).as_deref(),
        Some("198.51.100.4"),
        "a running job: its node's address"
    );
    assert_eq!(ip(1), None, "a pending job runs nowhere yet");
    let state = |n: u32| {
        observed
            .iter()
            .find(|o| o.id == id(n))
            .map(|o| o.state.clone())
            .unwrap()
    };
    assert_eq!(observed.len(), 11, "foreign and unnamed jobs are left out");
    assert_eq!(
        state(1),
        WorkloadState::Queued {
            reason: Some("Resources".into())
        }
    );
    assert_eq!(state(2), WorkloadState::Running);
    assert_eq!(state(3), WorkloadState::Succeeded);
    assert_eq!(
        state(4),
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert_eq!(
        state(5),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::Evicted
        }
    );
    assert_eq!(
        state(6),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::DeadlineExceeded
        }
    );
    assert_eq!(
        state(7),
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::OomKilled
        }
    );
    assert_eq!(state(8), WorkloadState::Preempted);
    assert_eq!(state(9), WorkloadState::Lost);
    assert!(matches!(state(10), WorkloadState::NotReady { .. }));
    let requeued = observed.iter().find(|o| o.id == id(13)).unwrap();
    assert_eq!(requeued.provider_restarts, 1);
    assert_eq!(requeued.provider_id, "13");
    let snap: Vec<Value> = observed
        .iter()
        .filter(|o| o.id == id(1) || o.id == id(4))
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    insta::assert_json_snapshot!("slurm_list_observed_v0038", snap);
}

#[tokio::test]
async fn list_maps_v0041_jobs() {
    let server = MockServer::start().await;
    let id = |n: u32| {
        owner()
            .workload_id(&format!("00000000-0000-4000-8000-{n:012}"))
            .unwrap()
    };
    let ok = json!({"status": ["SUCCESS"], "return_code": {"set": true, "infinite": false, "number": 0}});
    let three =
        json!({"status": ["ERROR"], "return_code": {"set": true, "infinite": false, "number": 3}});
    let killed = json!({"status": ["SIGNALED"], "return_code": {"set": true, "number": 0},
                        "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}});
    mount_jobs(
        &server,
        Dialect::V0041,
        json!([
            job41(1, id(1).as_str(), json!(["RUNNING"]), ok.clone()),
            job41(2, id(2).as_str(), json!(["FAILED"]), three),
            job41(
                3,
                id(3).as_str(),
                json!(["PENDING", "REQUEUED"]),
                ok.clone()
            ),
            job41(4, id(4).as_str(), json!(["COMPLETED"]), ok),
            job41(5, id(5).as_str(), json!(["CANCELLED"]), killed),
        ]),
    )
    .await;
    let observed = adapter(&server, Dialect::V0041).list().await.unwrap();
    let get = |n: u32| observed.iter().find(|o| o.id == id(n)).unwrap();
    assert_eq!(get(1).state, WorkloadState::Running);
    assert_eq!(get(1).provider_restarts, 1);
    assert!(get(1).started_at.is_some());
    assert_eq!(
        get(2).state,
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert!(get(2).finished_at.is_some());
    assert!(matches!(get(3).state, WorkloadState::Queued { .. }));
    assert_eq!(get(4).state, WorkloadState::Succeeded);
    assert_eq!(
        get(5).state,
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted
        }
    );
}

#[tokio::test]
async fn jobs_sharing_a_workload_id_are_all_listed() {
    // Collapsing them here would hide a duplicate that bills; the pipeline picks one.
    let server = MockServer::start().await;
    let id = workload().build().id;
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(8, id.as_str(), "RUNNING", 0, "None"),
            job38(3, id.as_str(), "FAILED", 256, "None")
        ]),
    )
    .await;
    let observed = adapter(&server, Dialect::V0038).list().await.unwrap();
    let mut ids: Vec<&str> = observed.iter().map(|o| o.provider_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["3", "8"]);
    assert!(observed.iter().all(|o| o.id == id));
}

#[tokio::test]
async fn list_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>proxy</html>"))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"meta": {}})))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038).list().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Transient { .. }),
        "no jobs field is not an empty list: {err:?}"
    );
}

#[tokio::test]
async fn an_expired_token_is_named_in_the_error() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"errors": [{
            "description": "Failed while looking for jobs", "error_number": -1,
            "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []})))
        .mount(&server)
        .await;
    // exp = 1 (1970)
    let expired = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjEsInN1biI6InZrc2x1cm0ifQ.sig";
    let slurm = adapter_with(config(&server, Dialect::V0038).with_api_key(expired));
    match slurm.list().await.unwrap_err() {
        ProviderError::Auth { message } => {
            assert!(message.contains("expired at 1970-01-01"), "{message}");
            assert!(!message.contains(expired));
        }
        other => panic!("expected Auth, got {other:?}"),
    }
}

#[tokio::test]
async fn the_token_file_is_reread_when_it_changes() {
    let server = MockServer::start().await;
    for (token, status) in [("old-token-value", 401), ("new-token-value", 200)] {
        Mock::given(method("GET"))
            .and(path("/slurm/v0.0.38/jobs/"))
            .and(header("x-slurm-user-token", token))
            .respond_with(if status == 200 {
                ResponseTemplate::new(200).set_body_json(json!({"errors": [], "jobs": []}))
            } else {
                ResponseTemplate::new(401).set_body_string("Authentication failure")
            })
            .mount(&server)
            .await;
    }
    let dir = std::env::temp_dir().join(format!("vk-slurm-contract-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "SLURM_JWT=old-token-value\n").unwrap();
    let mut cfg = config(&server, Dialect::V0038);
    cfg.api_key = String::new();
    cfg.token_file = Some(file.clone());
    let slurm = adapter_with(cfg);

    let err = slurm.list().await.unwrap_err();
    match &err {
        ProviderError::Auth { message } => {
            assert!(message.contains(&file.display().to_string()), "{message}");
            assert!(!message.contains("old-token-value"), "{message}");
        }
        other => panic!("expected Auth, got {other:?}"),
    }
    // A renewed token is used without restarting anything (the length changes too, so the
    // change is seen even on file systems with coarse timestamps).
    std::fs::write(&file, "SLURM_JWT=new-token-value-renewed\n").unwrap();
    let err = slurm.list().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Transient { .. }),
        "unmatched token: {err:?}"
    );
    std::fs::write(&file, "new-token-value\n").unwrap();
    assert_eq!(slurm.list().await.unwrap(), vec![]);
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(
        slurm.list().await,
        Err(ProviderError::Auth { .. })
    ));
}

#[tokio::test]
async fn logs_come_from_the_output_file() {
    let server = MockServer::start().await;
    let dir = std::env::temp_dir().join(format!("vk-slurm-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("slurm-42.log"), "one\ntwo\nthree\n").unwrap();
    let mut cfg = config(&server, Dialect::V0038);
    cfg.output_dir = Some(dir.clone());
    let slurm = adapter_with(cfg);
    assert!(slurm.capabilities().logs && slurm.capabilities().follow_logs);

    let read = |opts: LogOptions| {
        let slurm = &slurm;
        async move {
            use futures::StreamExt;
            let mut s = slurm.logs("42", &opts).await.unwrap();
            let mut out = Vec::new();
            while let Some(chunk) = s.next().await {
                out.extend_from_slice(&chunk.unwrap());
            }
            String::from_utf8(out).unwrap()
        }
    };
    assert_eq!(read(LogOptions::default()).await, "one\ntwo\nthree\n");
    assert_eq!(
        read(LogOptions {
            tail_lines: Some(2),
            ..LogOptions::default()
        })
        .await,
        "two\nthree\n"
    );
    assert_eq!(
        read(LogOptions {
            limit_bytes: Some(5),
            ..LogOptions::default()
        })
        .await,
        "one\nt"
    );
    // Following a job that has ended returns what is there, then ends.
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/job/42"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"errors": [], "jobs": [job38(42, "x", "COMPLETED", 0, "None")]}),
            ),
        )
        .mount(&server)
        .await;
    let followed = tokio::time::timeout(
        Duration::from_secs(10),
        read(LogOptions {
            follow: true,
            tail_lines: Some(1),
            ..LogOptions::default()
        }),
    )
    .await
    .expect("follow ends when the job has ended");
    assert_eq!(followed, "three\n");
    assert!(matches!(
        slurm
            .logs(
                "42",
                &LogOptions {
                    previous: true,
                    ..LogOptions::default()
                }
            )
            .await,
        Err(ProviderError::Unsupported { .. })
    ));

    let mut cfg = config(&server, Dialect::V0038);
    cfg.output_dir = None;
    let no_logs = adapter_with(cfg);
    assert!(!no_logs.capabilities().logs && !no_logs.capabilities().follow_logs);
    assert!(matches!(
        no_logs.logs("42", &LogOptions::default()).await,
        Err(ProviderError::Unsupported { .. })
    ));
}

#[tokio::test]
async fn connection_failures_are_transient() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = SlurmConfig {
        base_url: "http://127.0.0.1:9".into(),
        user_name: USER.into(),
        request_timeout_secs: 2,
        ..SlurmConfig::default()
    }
    .with_api_key(TOKEN);
    let slurm = Slurm::new("slurm".into(), cfg, owner()).unwrap();
    let err = slurm.list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    assert_no_token(&err);
}

#[test]
fn settings_parse_from_yaml_and_are_checked() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let yaml = r#"
baseUrl: http://slurm.example:6820
dialect: v0.0.41
userName: vkslurm
tokenFile: /run/secrets/slurm-token
partition: gpu
account: proj1
qos: normal
defaultTimeLimitMinutes: 60
runtime: enroot
outputDir: /shared/vk-logs
workDir: /scratch
gpuTypes: {A100-80GB: a100}
"#;
    // slurmrestd over plain http to another host: only when the operator says so.
    let cfg: SlurmConfig = serde_yaml::from_str(yaml).unwrap();
    let refused = Slurm::new("slurm".into(), cfg, owner())
        .err()
        .map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("only allowed to loopback")),
        "{refused:?}"
    );
    let yaml = format!("{yaml}allowInsecureHttp: true\n");
    let cfg: SlurmConfig = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(cfg.dialect, Dialect::V0041);
    assert_eq!(cfg.runtime, Runtime::Enroot);
    let slurm = Slurm::new("slurm".into(), cfg.clone(), owner()).unwrap();
    assert_eq!(slurm.capabilities().gpu_types, vec!["A100-80GB".to_owned()]);
    assert!(!format!("{cfg:?}").contains("secret-value"));

    assert!(serde_yaml::from_str::<SlurmConfig>("dialect: v0.0.99\nuserName: u").is_err());
    assert!(serde_yaml::from_str::<SlurmConfig>("userName: u\nbogus: 1").is_err());
    let no_user = SlurmConfig {
        token_file: Some("/x".into()),
        ..SlurmConfig::default()
    };
    assert!(Slurm::new("s".into(), no_user, owner()).is_err());
    let no_token = SlurmConfig {
        user_name: "u".into(),
        ..SlurmConfig::default()
    };
    assert!(Slurm::new("s".into(), no_token, owner()).is_err());
    let debug = format!(
        "{:?}",
        SlurmConfig {
            user_name: "u".into(),
            ..SlurmConfig::default()
        }
        .with_api_key("secret-value")
    );
    assert!(!debug.contains("secret-value"), "{debug}");
}

/// What 24.11.5's slurmrestd lists in `/openapi/v3` (paths only; v0.0.99 stands for a future
/// dialect the adapter does not speak).
fn openapi(versions: &[&str]) -> Value {
    let mut paths = serde_json::Map::new();
    for v in versions {
        for p in ["job/submit", "jobs/", "job/{job_id}", "ping/"] {
            paths.insert(format!("/slurm/{v}/{p}"), json!({}));
        }
    }
    paths.insert("/openapi/v3".into(), json!({}));
    json!({"openapi": "3.0.2", "info": {"version": "Slurm-24.11.5&openapi/slurmctld"}, "paths": paths})
}

async fn mount_openapi(server: &MockServer, versions: &[&str], times: Option<u64>) {
    let mock = Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .and(header("x-slurm-user-name", USER))
        .and(header("x-slurm-user-token", TOKEN))
        .respond_with(ResponseTemplate::new(200).set_body_json(openapi(versions)));
    match times {
        Some(n) => mock.up_to_n_times(n).mount(server).await,
        None => mock.mount(server).await,
    }
}

fn openapi_fetches(reqs: &[wiremock::Request]) -> usize {
    reqs.iter()
        .filter(|r| r.url.path() == "/openapi/v3")
        .count()
}

#[tokio::test]
async fn auto_detects_the_newest_served_dialect_once_and_submits_in_it() {
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.99"], None).await;
    // 24.11.5's submission answer in v0.0.42: no `result` any more.
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.42/job/submit"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "job_id": 9, "step_id": "batch", "job_submit_user_msg": "", "meta": {},
            "errors": [], "warnings": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    mount_jobs(&server, Dialect::V0042, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    slurm.create(&workload().build()).await.unwrap();
    assert_eq!(slurm.list().await.unwrap(), vec![]);
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0042));

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(openapi_fetches(&reqs), 1, "detected once, then remembered");
    let body: Value = reqs
        .iter()
        .find(|r| r.url.path() == "/slurm/v0.0.42/job/submit")
        .unwrap()
        .body_json()
        .unwrap();
    assert!(body.get("script").is_none(), "v0.0.42 nests the script");
    assert_eq!(body["job"]["tres_per_node"], "gres/gpu:2");
    insta::assert_json_snapshot!("slurm_submit_v0042", body);

    // 26.05.5 serves v0.0.42 to v0.0.45: the newest wins.
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"], None).await;
    mount_jobs(&server, Dialect::V0045, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    slurm.list().await.unwrap();
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0045));
    // 22.05.8 serves only v0.0.38 (and its dbv0.0.38 when slurmdbd runs).
    let server = MockServer::start().await;
    let mut doc = openapi(&["v0.0.38"]);
    doc["paths"]["/slurmdb/v0.0.38/jobs/"] = json!({});
    Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .respond_with(ResponseTemplate::new(200).set_body_json(doc))
        .mount(&server)
        .await;
    assert_eq!(
        adapter(&server, Dialect::Auto).dialect().await,
        Ok(Dialect::V0038)
    );
}

#[tokio::test]
async fn auto_without_a_dialect_the_adapter_speaks_is_transient_and_submits_nothing() {
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.39", "v0.0.99"], None).await;
    let slurm = adapter(&server, Dialect::Auto);
    let err = slurm.create(&workload().build()).await.unwrap_err();
    match &err {
        ProviderError::Transient { message, .. } => {
            assert!(message.contains("[v0.0.39, v0.0.99]"), "{message}")
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    assert_no_token(&err);
    let reqs = server.received_requests().await.unwrap();
    assert!(
        reqs.iter().all(|r| r.url.path() == "/openapi/v3"),
        "{reqs:?}"
    );

    // A slurmrestd without /openapi/v3 asks for the setting; a rejected token is Auth.
    let server = MockServer::start().await;
    let err = adapter(&server, Dialect::Auto).list().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transient { message, .. } if message.contains("settings.dialect")),
        "{err:?}"
    );
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .respond_with(ResponseTemplate::new(401).set_body_string("Authentication failure"))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::Auto).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn a_url_no_longer_served_makes_auto_detect_again() {
    let server = MockServer::start().await;
    // slurmrestd served v0.0.45, then restarted with 24.11 (up to v0.0.42).
    mount_openapi(&server, &["v0.0.43", "v0.0.44", "v0.0.45"], Some(1)).await;
    mount_openapi(&server, &["v0.0.40", "v0.0.41", "v0.0.42"], None).await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.45/jobs/"))
        .respond_with(ResponseTemplate::new(404).set_body_string("Not Found"))
        .mount(&server)
        .await;
    mount_jobs(&server, Dialect::V0042, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    let err = slurm.list().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transient { message, .. } if message.contains("v0.0.45")),
        "{err:?}"
    );
    slurm.list().await.expect("detected again: v0.0.42");
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0042));
    assert_eq!(
        openapi_fetches(&server.received_requests().await.unwrap()),
        2
    );
}

/// v0.0.42 on answer a cancellation with HTTP 200 and the job's outcome in `status[]`
/// (bodies as 24.11.5 and 26.05.5 send them).
#[tokio::test]
async fn delete_v0042_reads_the_outcome_of_each_job() {
    let status = |code: i64, text: &str| {
        json!({"status": [{"error": {"string": text, "code": code, "message": text},
                "step_id": "42", "job_id": {"set": code != 2017, "infinite": false, "number": 42},
                "federation": {"sibling": ""}}], "meta": {}, "errors": [], "warnings": []})
    };
    for (answer, expected) in [
        (
            json!({"status": [], "meta": {}, "errors": [], "warnings": []}),
            Ok(()),
        ),
        (
            status(2017, "Invalid job id specified"),
            Err(ProviderError::NotFound),
        ),
        (
            status(2021, "Job/step already completing or completed"),
            Ok(()),
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("DELETE"))
            .and(path("/slurm/v0.0.42/job/42"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
            .mount(&server)
            .await;
        assert_eq!(
            adapter(&server, Dialect::V0042).delete("42").await,
            expected,
            "{answer}"
        );
    }
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.42/job/42"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(status(2002, "Access/permission denied")),
        )
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0042)
        .delete("42")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Auth { message } if message.contains("Access/permission denied")),
        "{err:?}"
    );
}
