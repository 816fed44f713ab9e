//! The job table's lifecycle, GPU accounting and output patterns.

use super::*;

fn jobs() -> Jobs {
    Jobs::new(
        Cluster {
            nodes: 1,
            gpus_per_node: 2,
            partitions: vec!["debug".into()],
        },
        ExecutionMode::simulated(0, 0, None),
    )
}

#[test]
fn lifecycle_and_gpu_accounting() {
    let mut j = jobs();
    let now = Instant::now();
    let a = j
        .submit(
            "u",
            NewJob {
                gpus: 2,
                ..NewJob::default()
            },
            now,
        )
        .unwrap();
    let b = j
        .submit(
            "u",
            NewJob {
                gpus: 1,
                ..NewJob::default()
            },
            now,
        )
        .unwrap();
    j.settle(now);
    assert_eq!(j.jobs[&a].state, JobState::Running);
    assert_eq!(j.jobs[&b].state, JobState::Pending);
    assert_eq!(j.jobs[&b].reason, "Resources");
    j.cancel(a, now).unwrap();
    assert_eq!(j.jobs[&a].exit_raw, 15);
    j.settle(now);
    assert_eq!(j.jobs[&b].state, JobState::Running);
    j.requeue(b, now).unwrap();
    assert_eq!(j.jobs[&b].restart_cnt, 1);
    assert_eq!(j.free_gpus(), 2);
    let err = j
        .submit(
            "u",
            NewJob {
                gpus: 3,
                ..NewJob::default()
            },
            now,
        )
        .unwrap_err();
    assert_eq!(err.number, E_NODE_CONFIG_UNAVAILABLE);
    let failed = j.jobs.values().last().unwrap();
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.reason, "BadConstraints");
    assert_eq!(j.cancel(999, now).unwrap_err().number, E_INVALID_JOB_ID);
}

#[test]
fn patterns_expand() {
    let mut j = jobs();
    let id = j
        .submit(
            "alice",
            NewJob {
                name: "n".into(),
                ..NewJob::default()
            },
            Instant::now(),
        )
        .unwrap();
    assert_eq!(
        expand_pattern("/o/%x-%j-%u.%%.log", &j.jobs[&id]),
        format!("/o/n-{id}-alice.%.log")
    );
}
