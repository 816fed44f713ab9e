#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every job submission the Slurm adapter can send, in every dialect it speaks, validated
//! against the `/openapi/v3` document of each real slurmrestd that serves the dialect
//! (mock-providers/schemas/slurm-<release>.json, `scripts/schemas/slurm`): 22.05's v0.0.38,
//! 24.11's v0.0.41/42 and 26.05's v0.0.42 to v0.0.45. The schemas are closed, because 22.05
//! refuses a field it does not know and the newer releases drop it with only a warning.

#[path = "support/workload.rs"]
mod workload_builder;

use std::path::PathBuf;

use mock_providers::schema::{SlurmRelease, slurm};
use serde_json::Value;
use vk::naming::Owner;
use vk::providers::slurm::{Dialect, Runtime, Slurm, SlurmConfig};
use workload_builder::WorkloadBuilder;

const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn adapter(dialect: Dialect, runtime: Runtime) -> Slurm {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = SlurmConfig {
        base_url: "http://127.0.0.1:1".into(),
        dialect,
        user_name: "vkslurm".into(),
        partition: Some("gpu".into()),
        default_time_limit_minutes: Some(120),
        output_dir: Some(PathBuf::from("/shared/vk-logs")),
        gpu_types: [("A100-80GB".to_owned(), "a100".to_owned())].into(),
        runtime,
        requeue: Some(false),
        allowed_partitions: vec!["short".into()],
        allowed_accounts: vec!["proj1".into()],
        allowed_qos: vec!["high".into()],
        ..SlurmConfig::default()
    }
    .with_api_key("eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJ2a3NsdXJtIn0.sig");
    Slurm::new("slurm".into(), cfg, Owner::new("cluster-a", "vk-node")).unwrap()
}

fn base() -> WorkloadBuilder {
    WorkloadBuilder::new(&Owner::new("cluster-a", "vk-node"), UID)
        .pod("ml", "train-0")
        .image("ghcr.io/acme/train:1.2")
        .command(["python", "-m", "serve"])
}

/// The shapes of pod whose submissions differ: with and without GPUs (typed or not), CPU and
/// memory or none, a command with arguments or a shell script, Secrets in the
/// environment, and the scheduling options a pod can set.
fn workloads() -> Vec<(&'static str, WorkloadBuilder)> {
    vec![
        (
            "training job",
            base()
                .command(["python", "-m", "train"])
                .args(["--name", "it's big"])
                .working_dir("/scratch/run")
                .env("HF_TOKEN", "hf_fake")
                .any_gpu(2)
                .cpu_millis(3500)
                .memory_bytes(16 * 1024 * 1024 * 1024),
        ),
        ("typed GPU", base().gpu("A100-80GB", 1).bash("nvidia-smi")),
        ("no GPU, no requests", base().no_gpu().no_cpu_memory()),
        (
            "scheduling options",
            base()
                .any_gpu(1)
                .option("partition", "short")
                .option("time_limit", "15")
                .option("qos", "high")
                .option("account", "proj1"),
        ),
    ]
}

const DIALECTS: [Dialect; 6] = [
    Dialect::V0038,
    Dialect::V0041,
    Dialect::V0042,
    Dialect::V0043,
    Dialect::V0044,
    Dialect::V0045,
];

#[test]
fn every_dialect_the_adapter_speaks_is_served_by_a_kept_release() {
    for d in DIALECTS {
        assert!(
            !SlurmRelease::serving(&d.to_string()).is_empty(),
            "{d}: no kept slurmrestd document serves it"
        );
    }
    assert_eq!(
        SlurmRelease::serving("v0.0.42"),
        vec![SlurmRelease::R2411, SlurmRelease::R2605]
    );
}

#[test]
fn every_submission_is_valid_for_every_release_that_serves_its_dialect() {
    let mut checked = 0;
    for dialect in DIALECTS {
        for runtime in [Runtime::Apptainer, Runtime::Enroot] {
            let vk_slurm = adapter(dialect, runtime);
            for (name, w) in workloads() {
                let body = vk_slurm.submit_body(&w.build()).unwrap();
                for release in SlurmRelease::serving(&dialect.to_string()) {
                    let spec = slurm(release);
                    let op = format!("POST /slurm/{dialect}/job/submit");
                    let errors = spec.request_errors(&op, &body);
                    assert!(
                        errors.is_empty(),
                        "{name} ({runtime:?}) in {dialect} is invalid for {}: {errors:?}",
                        spec.name()
                    );
                    checked += 1;
                }
            }
        }
    }
    // 6 dialects, v0.0.42 in two releases: 7 documents x 2 runtimes x 4 pods.
    assert_eq!(checked, 7 * 2 * 4);
}

/// The check can fail: a body of the old dialect sent to a new one, and a field the schema
/// does not list, are refused with the field's path.
#[test]
fn a_body_in_the_wrong_dialect_or_with_an_unknown_field_is_invalid() {
    let w = base().any_gpu(1).build();
    let old = adapter(Dialect::V0038, Runtime::Enroot)
        .submit_body(&w)
        .unwrap();
    let errors = slurm(SlurmRelease::R2605).request_errors("POST /slurm/v0.0.45/job/submit", &old);
    assert!(
        errors.iter().any(|e| e.starts_with("$.job.environment")),
        "{errors:?}"
    );
    let mut new = adapter(Dialect::V0045, Runtime::Enroot)
        .submit_body(&w)
        .unwrap();
    new["job"]["gpus_per_node"] = Value::from("a100:1");
    let errors = slurm(SlurmRelease::R2605).request_errors("POST /slurm/v0.0.45/job/submit", &new);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("$.job") && e.contains("gpus_per_node")),
        "{errors:?}"
    );
    let mut old = old;
    old["job"]["tres_per_node"] = Value::from("gres/gpu:1");
    let errors = slurm(SlurmRelease::R2205).request_errors("POST /slurm/v0.0.38/job/submit", &old);
    assert!(
        errors.iter().any(|e| e.contains("tres_per_node")),
        "{errors:?}"
    );
}
