#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of the Slurm adapter against a real slurmrestd: the host's Slurm 22.05
//! (dialect v0.0.38) started by `scripts/slurm/up` and named by the env file in
//! `SLURM_ENV_FILE`, or Slurm 24.11 / 26.05 from a release's image in `SLURM_IMAGE`, each test
//! in a container of its own started and removed through testcontainers (see `env` and
//! `container`; Slurm's commands then run through `docker exec`). The adapter detects the
//! dialect (`auto`); `SLURM_EXPECT_DIALECT` names the one it must find. Without either variable
//! these tests fail, on purpose, with a message saying how to start Slurm: they must never pass
//! without having run (`make test` runs them once per Slurm).
//!
//! The host's cluster is one node with 2 CPUs and 2 fake GPUs, so the tests take turns on it.

#[path = "support/workload.rs"]
mod workload_builder;

#[path = "slurm_real/container.rs"]
mod container;
#[path = "slurm_real/env.rs"]
mod env;

use std::time::{Duration, Instant};

use env::{Env, env};
use futures::StreamExt;
use serde_json::Value;
use vk::naming::{Owner, WorkloadId};
use vk::provider::{
    ContainerRole, FailureReason, LogOptions, Observed, Provider, ProviderError, WorkloadState,
};
use vk::providers::slurm::{Dialect, Slurm, SlurmConfig};
use workload_builder::WorkloadBuilder;

fn owner() -> Owner {
    Owner::new("slurm-real-test", "vk-node")
}

fn config(env: &Env) -> SlurmConfig {
    SlurmConfig {
        base_url: env.url.clone(),
        dialect: Dialect::Auto,
        user_name: env.user.clone(),
        token_file: Some(env.token_file.clone()),
        partition: Some(env.partition.clone()),
        default_time_limit_minutes: Some(10),
        output_dir: Some(env.output_dir.clone()),
        max_gpus_per_workload: 64,
        request_timeout_secs: 20,
        ..SlurmConfig::default()
    }
}

fn adapter(env: &Env) -> Slurm {
    adapter_with(config(env))
}

fn adapter_with(cfg: SlurmConfig) -> Slurm {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Slurm::new("slurm".into(), cfg, owner()).expect("adapter builds")
}

/// A job of a fresh pod running `script` in bash in `/tmp`, no GPU.
fn workload(script: &str) -> WorkloadBuilder {
    WorkloadBuilder::fresh(&owner())
        .pod("default", "slurm-real")
        .bash(script)
        .working_dir("/tmp")
        .env("GREETING", "it's \"quoted\" $HOME")
}

/// Polls `list()` until the workload satisfies `done` (or 90 s pass).
async fn wait_for(
    slurm: &Slurm,
    id: &WorkloadId,
    what: &str,
    done: impl Fn(&Observed) -> bool,
) -> Observed {
    wait_within(slurm, id, what, Duration::from_secs(90), done).await
}

/// Polls `list()` until the workload satisfies `done` (or `limit` passes).
async fn wait_within(
    slurm: &Slurm,
    id: &WorkloadId,
    what: &str,
    limit: Duration,
    done: impl Fn(&Observed) -> bool,
) -> Observed {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while Instant::now() < deadline {
        let listed = slurm.list().await.expect("list works");
        if let Some(o) = listed.into_iter().find(|o| &o.id == id) {
            if done(&o) {
                return o;
            }
            last = Some(o);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("workload {id} did not become {what} in {limit:?}; last seen: {last:?}");
}

fn scancel(env: &Env, job_id: &str) {
    let out = env
        .command("scancel")
        .arg(job_id)
        .output()
        .expect("scancel runs");
    assert!(
        out.status.success(),
        "scancel {job_id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The batch script slurmctld stores for `job_id` (`scontrol write batch_script ID -`).
fn batch_script(env: &Env, job_id: &str) -> String {
    let out = env
        .command("scontrol")
        .args(["write", "batch_script", job_id, "-"])
        .output()
        .expect("scontrol runs");
    assert!(
        out.status.success(),
        "scontrol write batch_script {job_id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn squeue_names(env: &Env) -> String {
    let out = env
        .command("squeue")
        .args(["-h", "-o", "%j %T"])
        .output()
        .expect("squeue runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_newest_served_dialect_is_detected() {
    let env = env().await;
    let slurm = adapter(&env);
    let expected = env
        .expect_dialect
        .expect("the env file names the dialect to expect (SLURM_EXPECT_DIALECT)");
    assert_eq!(slurm.dialect().await, Ok(expected));
    // Every call goes through it: a list in that dialect works.
    slurm.list().await.expect("list in the detected dialect");
}

/// This release's kept schema (mock-providers/schemas, derived from its own `/openapi/v3`) is
/// what it really takes and answers: the adapter's submission validates and is accepted without
/// a warning, and the job and node lists, with the job running, validate. 22.05's document
/// does not describe its own answers, so there only the submission is checked.
#[tokio::test]
async fn the_kept_schema_of_this_release_is_what_it_takes_and_answers() {
    use mock_providers::schema::{SlurmRelease, slurm as slurm_schema};
    let env = env().await;
    let _turn = env.turn().await;
    let dialect = adapter(&env).dialect().await.unwrap();
    let slurm = adapter_with(SlurmConfig {
        dialect,
        ..config(&env)
    });
    let release = match env.version.as_deref() {
        Some(v) if v.starts_with("24.11") => SlurmRelease::R2411,
        Some(v) if v.starts_with("26.05") => SlurmRelease::R2605,
        _ => SlurmRelease::R2205,
    };
    let spec = slurm_schema(release);
    let w = workload("sleep 60").build();
    let body = slurm.submit_body(&w).unwrap();
    let errors = spec.request_errors(&format!("POST /slurm/{dialect}/job/submit"), &body);
    assert!(errors.is_empty(), "{}: {errors:?}", spec.name());
    // The same body to the daemon: no warning (a dropped field would be one).
    let http = reqwest::Client::new();
    let token = std::fs::read_to_string(&env.token_file).unwrap();
    let call = |method: reqwest::Method, path: String| {
        http.request(method, format!("{}{path}", env.url))
            .header("X-SLURM-USER-NAME", &env.user)
            .header("X-SLURM-USER-TOKEN", token.trim())
    };
    let answer: Value = call(
        reqwest::Method::POST,
        format!("/slurm/{dialect}/job/submit"),
    )
    .json(&body)
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let job_id = answer["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"));
    let warnings = answer["warnings"].as_array().cloned().unwrap_or_default();
    assert!(warnings.is_empty(), "{dialect}: {warnings:?}");
    wait_for(&slurm, &w.id, "running", |o| {
        o.state == WorkloadState::Running
    })
    .await;
    if release.describes_answers() {
        for what in ["jobs", "nodes"] {
            let got: Value = call(reqwest::Method::GET, format!("/slurm/{dialect}/{what}/"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let op = format!("GET /slurm/{dialect}/{what}");
            let errors = spec.response_errors(&op, 200, &got);
            assert!(errors.is_empty(), "{op} of {}: {errors:?}", spec.name());
        }
    }
    slurm.delete(&job_id.to_string()).await.unwrap();
}

#[tokio::test]
async fn a_command_runs_and_its_exit_code_and_output_come_back() {
    let env = env().await;
    let _turn = env.turn().await;
    let slurm = adapter(&env);
    let w = workload("echo \"hello $GREETING\"; echo to-stderr >&2; exit 3").build();
    slurm.create(&w).await.expect("submitted");

    let o = wait_for(&slurm, &w.id, "finished", |o| o.state.is_terminal()).await;
    assert_eq!(
        o.state,
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        },
        "{o:?}"
    );
    assert!(o.started_at.is_some() && o.finished_at.is_some(), "{o:?}");

    let mut stream = slurm
        .logs(&o.provider_id, &LogOptions::default())
        .await
        .unwrap();
    let mut text = Vec::new();
    while let Some(chunk) = stream.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("hello it's \"quoted\" $HOME\n"),
        "stdout of the job, env quoted safely: {text:?}"
    );
    // The value came through the job's environment: the script slurmctld keeps (what
    // `scontrol write batch_script` and an archive of job scripts show) does not hold it.
    let stored = batch_script(&env, &o.provider_id);
    assert!(
        stored.contains("export GREETING=\"$_GPUVK_ENV_") && !stored.contains("quoted"),
        "the stored batch script holds the value: {stored}"
    );
    assert!(
        text.contains("to-stderr\n"),
        "stderr is in the log too: {text:?}"
    );
    let tail = slurm
        .logs(
            &o.provider_id,
            &LogOptions {
                tail_lines: Some(1),
                ..LogOptions::default()
            },
        )
        .await
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&tail[..], b"to-stderr\n");
    slurm
        .delete(&o.provider_id)
        .await
        .expect("deleting a finished job is fine");
}

/// The whole log of container `name` of job `job_id` (`None`: the job's own).
async fn log_of(slurm: &Slurm, job_id: &str, name: Option<&str>) -> String {
    let opts = LogOptions {
        container: name.map(str::to_owned),
        ..LogOptions::default()
    };
    let mut stream = slurm.logs(job_id, &opts).await.unwrap();
    let mut text = Vec::new();
    while let Some(chunk) = stream.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    String::from_utf8(text).unwrap()
}

#[tokio::test]
async fn each_container_of_a_pod_is_a_step_with_its_own_log_and_exit_code() {
    let env = env().await;
    let _turn = env.turn().await;
    let slurm = adapter(&env);
    let marker = "/tmp/gpu-vk-steps-test-$SLURM_JOB_ID";
    let w = workload("true")
        .step_container(
            "shipper",
            ContainerRole::Sidecar,
            "echo \"shipper $SLURM_STEP_ID\"; trap 'echo stopped; exit 0' TERM; while :; do sleep 0.2; done",
            &[],
        )
        .step_container(
            "fetch",
            ContainerRole::Init,
            &format!("sleep 1; echo fetched > {marker}; echo \"fetch $WHO\""),
            &[("WHO", "init")],
        )
        // "main" waits for a file "metrics" makes: they run side by side, or main times out.
        .step_container(
            "main",
            ContainerRole::Regular,
            &format!(
                "cat {marker}; timeout 30 bash -c 'until [ -f {marker}.up ]; do sleep 0.2; done' \
                 && echo \"main $WHO ${{TOKEN-none}}\"; rm -f {marker} {marker}.up; exit 4"
            ),
            &[("WHO", "server")],
        )
        .step_container(
            "metrics",
            ContainerRole::Regular,
            &format!("touch {marker}.up; echo \"metrics $WHO $TOKEN\""),
            &[("WHO", "exporter"), ("TOKEN", "s3cret-of-metrics")],
        )
        .build();
    slurm.create(&w).await.expect("submitted");
    let o = wait_for(&slurm, &w.id, "finished", |o| o.state.is_terminal()).await;
    let job = o.provider_id.clone();
    let job_log = log_of(&slurm, &job, None).await;
    assert_eq!(
        o.state,
        WorkloadState::Failed {
            exit_code: 4,
            reason: FailureReason::Error
        },
        "the job fails with the failing container's code: {o:?}; job output: {job_log}"
    );
    assert_eq!(log_of(&slurm, &job, Some("fetch")).await, "fetch init\n");
    assert_eq!(
        log_of(&slurm, &job, Some("main")).await,
        "fetched\nmain server none\n",
        "after the init container, beside metrics, its own env only"
    );
    assert_eq!(
        log_of(&slurm, &job, Some("metrics")).await,
        "metrics exporter s3cret-of-metrics\n"
    );
    // A real step (its id in SLURM_STEP_ID), sent SIGTERM once the containers ended (Slurm
    // adds its "STEP ... CANCELLED" line, and signals every process of the step).
    let shipper = log_of(&slurm, &job, Some("shipper")).await;
    let step_id = shipper
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("shipper "))
        .unwrap_or_default();
    assert!(
        step_id.parse::<u32>().is_ok(),
        "the sidecar is a job step: {shipper:?}"
    );
    assert!(
        shipper.contains("\nstopped\n"),
        "stopped by SIGTERM: {shipper:?}"
    );
    for (name, code) in [
        ("fetch", "0"),
        ("main", "4"),
        ("metrics", "0"),
        ("shipper", "0"),
    ] {
        let path = env.output_dir.join(format!("slurm-{job}.{name}.exit"));
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(got, format!("{code}\n"), "exit code of {name}");
    }
    // The adapter reports each container's own end, read from those files.
    let exits: Vec<(&str, i32)> = o
        .container_exits
        .iter()
        .map(|(n, e)| (n.as_str(), e.exit_code))
        .collect();
    assert_eq!(
        exits,
        [("fetch", 0), ("main", 4), ("metrics", 0), ("shipper", 0)],
        "{o:?}"
    );
    assert!(
        o.container_exits
            .values()
            .all(|e| e.finished_at >= o.started_at),
        "{o:?}"
    );
    let stored = batch_script(&env, &job);
    assert!(
        stored.contains("--overlap") && !stored.contains("s3cret"),
        "steps, no value in the stored script: {stored}"
    );
    slurm
        .delete(&job)
        .await
        .expect("deleting a finished job is fine");
}

#[path = "slurm_real/endings.rs"]
mod endings;
