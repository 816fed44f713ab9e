#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Slurm adapter against the slurmrestd emulator of `mock-providers`, in both dialects
//! (v0.0.38 and v0.0.41), in process mode: batch scripts really run, so exit codes and logs
//! are real; the admin API injects what a cluster does on its own (preemption, node failure,
//! time limit, requeue, `scancel`, faults).

#[path = "support/workload.rs"]
mod workload_builder;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mock_providers::config::ExecutionMode;
use mock_providers::slurm as emu;
use serde_json::json;
use vk::naming::{Owner, WorkloadId};
use vk::provider::{FailureReason, LogOptions, Observed, Provider, ProviderError, WorkloadState};
use vk::providers::slurm::{Dialect, Slurm, SlurmConfig};
use workload_builder::WorkloadBuilder;

const TOKEN: &str = "emulated-jwt-0123456789";
const USER: &str = "vkslurm";

struct Setup {
    slurm: Slurm,
    admin: String,
    client: reqwest::Client,
    out: PathBuf,
    _server: Server,
}

struct Server(tokio::task::JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.out);
    }
}

/// The tests take turns: each runs real processes under its own emulator, and one of them
/// (`jobs_run_...`) was seen to miss a job's end when all ran at once on a loaded machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn owner() -> Owner {
    Owner::new("emulator-test", "vk-node")
}

async fn setup(dialect: Dialect, token_file: Option<PathBuf>) -> Setup {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = emu::SlurmConfig::new(TOKEN, USER)
        .with_mode(ExecutionMode::process())
        .with_cluster(2, 4);
    let (addr, handle) = mock_providers::spawn(emu::router(emu::State::new(cfg)))
        .await
        .unwrap();
    let out = std::env::temp_dir().join(format!(
        "vk-slurm-emu-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&out).unwrap();
    let mut cfg = SlurmConfig {
        base_url: format!("http://{addr}"),
        dialect,
        user_name: USER.into(),
        output_dir: Some(out.clone()),
        default_time_limit_minutes: Some(30),
        // So a pod can ask for a partition the cluster does not have (the emulator refuses).
        allowed_partitions: vec!["nope".into()],
        ..SlurmConfig::default()
    };
    match token_file {
        Some(f) => cfg.token_file = Some(f),
        None => cfg = cfg.with_api_key(TOKEN),
    }
    Setup {
        slurm: Slurm::new("slurm".into(), cfg, owner()).unwrap(),
        admin: format!("http://{addr}/_admin"),
        client: reqwest::Client::new(),
        out,
        _server: Server(handle),
    }
}

/// A one-GPU batch job of a fresh pod running `script` in bash.
fn workload(script: &str) -> WorkloadBuilder {
    WorkloadBuilder::fresh(&owner())
        .bash(script)
        .env("WHO", "the 'emulator'")
        .any_gpu(1)
}

impl Setup {
    async fn wait(&self, id: &WorkloadId, done: impl Fn(&Observed) -> bool) -> Observed {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = self
                .slurm
                .list()
                .await
                .unwrap()
                .into_iter()
                .find(|o| &o.id == id);
            if let Some(o) = &found
                && done(o)
            {
                return o.clone();
            }
            assert!(Instant::now() < deadline, "gave up waiting; last {found:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn admin(&self, job: &str, action: &str) {
        let r = self
            .client
            .post(format!("{}/workloads/{job}/{action}", self.admin))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{action}: {}", r.text().await.unwrap());
    }

    async fn running(&self, script: &str) -> Observed {
        let w = workload(script).build();
        self.slurm.create(&w).await.unwrap();
        self.wait(&w.id, |o| o.state == WorkloadState::Running)
            .await
    }
}

#[tokio::test]
async fn jobs_run_exit_codes_and_logs_come_back_in_both_dialects() {
    let _turn = SERIAL.lock().await;
    // Auto: the emulator's /openapi/v3 lists v0.0.38 and v0.0.41; the newer one is taken.
    for dialect in [Dialect::V0038, Dialect::V0041, Dialect::Auto] {
        let s = setup(dialect, None).await;
        if dialect == Dialect::Auto {
            assert_eq!(s.slurm.dialect().await, Ok(Dialect::V0041));
        }
        let w = workload("echo \"hello $WHO\"; exit 3").build();
        s.slurm.create(&w).await.unwrap();
        let o = s.wait(&w.id, |o| o.state.is_terminal()).await;
        assert_eq!(
            o.state,
            WorkloadState::Failed {
                exit_code: 3,
                reason: FailureReason::Error
            },
            "{dialect}"
        );
        let mut logs = s
            .slurm
            .logs(&o.provider_id, &LogOptions::default())
            .await
            .unwrap();
        let chunk = logs.next().await.unwrap().unwrap();
        assert_eq!(&chunk[..], b"hello the 'emulator'\n", "{dialect}");

        let w = workload("true").build();
        s.slurm.create(&w).await.unwrap();
        let o = s.wait(&w.id, |o| o.state.is_terminal()).await;
        assert_eq!(o.state, WorkloadState::Succeeded, "{dialect}");
    }
}

#[tokio::test]
async fn follow_streams_until_the_job_ends() {
    let _turn = SERIAL.lock().await;
    let s = setup(Dialect::V0038, None).await;
    let o = s
        .running("for i in 1 2 3; do echo line$i; sleep 0.3; done")
        .await;
    let mut stream = s
        .slurm
        .logs(
            &o.provider_id,
            &LogOptions {
                follow: true,
                ..LogOptions::default()
            },
        )
        .await
        .unwrap();
    let mut text = Vec::new();
    let collected = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = stream.next().await {
            text.extend_from_slice(&chunk.unwrap());
        }
    })
    .await;
    assert!(collected.is_ok(), "follow did not end with the job");
    assert_eq!(String::from_utf8(text).unwrap(), "line1\nline2\nline3\n");
}

#[tokio::test]
async fn cluster_events_map_to_pod_states() {
    let _turn = SERIAL.lock().await;
    for dialect in [Dialect::V0038, Dialect::V0041] {
        let s = setup(dialect, None).await;
        for (action, want) in [
            ("preempt", WorkloadState::Preempted),
            ("node_fail", WorkloadState::Lost),
            (
                "timeout",
                WorkloadState::Failed {
                    exit_code: 143,
                    reason: FailureReason::DeadlineExceeded,
                },
            ),
            (
                "oom",
                WorkloadState::Failed {
                    exit_code: 137,
                    reason: FailureReason::OomKilled,
                },
            ),
            (
                "cancel",
                WorkloadState::Failed {
                    exit_code: 143,
                    reason: FailureReason::Evicted,
                },
            ),
        ] {
            let o = s.running("sleep 300").await;
            s.admin(&o.provider_id, action).await;
            let got = s.wait(&o.id, |x| x.state.is_terminal()).await;
            assert_eq!(got.state, want, "{dialect} {action}");
        }
        // Requeue: pending again, restart counted, then running again.
        let o = s.running("sleep 300").await;
        s.admin(&o.provider_id, "requeue").await;
        let q = s
            .wait(&o.id, |x| matches!(x.state, WorkloadState::Queued { .. }))
            .await;
        assert_eq!(q.provider_restarts, 1, "{dialect}");
        assert_eq!(
            q.state,
            WorkloadState::Queued {
                reason: Some("BeginTime".into())
            }
        );
        let again = s.wait(&o.id, |x| x.state == WorkloadState::Running).await;
        assert_eq!(again.provider_restarts, 1);
        // Delete cancels exactly this job.
        let other = s.running("sleep 300").await;
        s.slurm.delete(&o.provider_id).await.unwrap();
        s.wait(&o.id, |x| x.state.is_terminal()).await;
        let still = s.wait(&other.id, |_| true).await;
        assert_eq!(
            still.state,
            WorkloadState::Running,
            "only one job is cancelled"
        );
        // 22.05 names the unknown job; 24.11's v0.0.41 answers its cancel as a success.
        let gone = match dialect {
            Dialect::V0038 => Err(ProviderError::NotFound),
            _ => Ok(()),
        };
        assert_eq!(s.slurm.delete("424242").await, gone, "{dialect}");
    }
}

#[tokio::test]
async fn impossible_requests_are_invalid_and_leave_no_active_job() {
    let _turn = SERIAL.lock().await;
    for dialect in [Dialect::V0038, Dialect::V0041] {
        let s = setup(dialect, None).await;
        let w = workload("true").any_gpu(6).build();
        match s.slurm.create(&w).await {
            Err(ProviderError::Invalid { message }) => assert!(
                message.contains("Requested node configuration is not available"),
                "{message}"
            ),
            other => panic!("{dialect}: expected Invalid, got {other:?}"),
        }
        let listed = s.slurm.list().await.unwrap();
        assert!(
            listed
                .iter()
                .filter(|o| o.id == w.id)
                .all(|o| o.state.is_terminal()),
            "{listed:?}"
        );
        let w = workload("true").option("partition", "nope").build();
        assert!(matches!(
            s.slurm.create(&w).await,
            Err(ProviderError::Invalid { .. })
        ));
    }
}

#[tokio::test]
async fn a_wrong_token_recovers_when_the_file_is_fixed() {
    let _turn = SERIAL.lock().await;
    for dialect in [Dialect::V0038, Dialect::V0041] {
        let file = std::env::temp_dir().join(format!(
            "vk-slurm-emu-token-{}-{}",
            std::process::id(),
            dialect
        ));
        std::fs::write(&file, "SLURM_JWT=expired-or-wrong\n").unwrap();
        let s = setup(dialect, Some(file.clone())).await;
        assert!(
            matches!(s.slurm.list().await, Err(ProviderError::Auth { .. })),
            "{dialect}"
        );
        std::fs::write(&file, format!("SLURM_JWT={TOKEN}\n")).unwrap();
        assert_eq!(s.slurm.list().await.unwrap(), vec![]);
        std::fs::remove_file(&file).unwrap();
    }
}

#[tokio::test]
async fn injected_faults_are_transient_with_retry_after() {
    let _turn = SERIAL.lock().await;
    let s = setup(Dialect::V0038, None).await;
    let r = s
        .client
        .post(format!("{}/faults", s.admin))
        .json(&json!({"route": "create", "fail_next": 1, "status": 503, "retry_after_s": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let w = workload("true").build();
    match s.slurm.create(&w).await {
        Err(ProviderError::Transient { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    s.slurm.create(&w).await.unwrap();
    let counters: serde_json::Value = s
        .client
        .get(format!("{}/counters", s.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counters["create"], 2);
}
