//! Unit tests of [`super::decide`]: every restart policy, loss and failover case, and one
//! snapshot of the whole decision table.

use std::fmt::Write as _;
use std::time::Duration;

use super::*;
use crate::config::Timings;
use crate::pods::memory::{Listed, Memory};
use crate::pods::spec::{ANN_GPU_TYPE, ANN_PROVIDER};
use crate::provider::{Capabilities, FailureReason, WorkloadState};
use crate::test_support::{PodBuilder, observed, owner, ts};

mod fuzz;
mod restart;
mod start_deadline;

const NOW: &str = "2026-11-29T10:00:05Z";

fn offers() -> Vec<Offer> {
    let offer = |name: &str, types: &[&str], max: u32| Offer {
        name: name.into(),
        capabilities: Capabilities {
            gpu_types: types.iter().map(|s| s.to_string()).collect(),
            max_gpus_per_workload: max,
            ..Default::default()
        },
        secret_env: crate::config::SecretEnv::Allow,
        pull_secrets: crate::config::SecretEnv::Allow,
    };
    vec![
        offer("runpod", &["A100-80GB", "H100"], 8),
        offer("vast", &["RTX4090"], 4),
        offer("slurm", &[], 2),
    ]
}

fn timings() -> Timings {
    Timings {
        poll_interval_ms: 2000,
        restart_backoff_ms: 10_000,
        restart_backoff_max_ms: 300_000,
        ..Timings::default()
    }
}

/// Decides with the test offers and timings at [`NOW`].
fn step(pod: Option<&Pod>, found: Option<(usize, &Observed)>, memory: Memory) -> Step {
    with_rules(&[], |rules| {
        let found = found.map(|(provider, observed)| Found { provider, observed });
        decide(rules, pod, found, &memory, ts(NOW))
    })
}

/// Runs `f` with the test offers and timings, no admission rules, and these start deadlines
/// (parallel to the offers).
fn with_rules<T>(deadlines: &[crate::config::StartDeadline], f: impl FnOnce(&Rules<'_>) -> T) -> T {
    with_offers(&offers(), deadlines, f)
}

/// [`with_rules`] with these offers.
fn with_offers<T>(
    offers: &[Offer],
    deadlines: &[crate::config::StartDeadline],
    f: impl FnOnce(&Rules<'_>) -> T,
) -> T {
    let owner = owner();
    let timings = timings();
    let admission = Admission::default();
    f(&Rules {
        owner: &owner,
        offers,
        timings: &timings,
        admission: &admission,
        secret_failover: false,
        standing: &[],
        dispatch: &crate::config::DispatchConfig::default(),
        start_deadlines: deadlines,
        hold_retry: Duration::from_secs(60),
    })
}

/// Report the workload of `provider`: nothing to stop, no start deadline to come back for.
fn report(provider: usize) -> Step {
    Step::Report {
        provider,
        stop_finished: false,
        recheck: None,
    }
}

fn failed(exit_code: i32, reason: FailureReason) -> Observed {
    let mut o = observed(WorkloadState::Failed { exit_code, reason });
    o.finished_at = Some(ts("2026-11-29T10:00:04Z"));
    o
}

fn fresh() -> Memory {
    Memory::fresh()
}

// ----------------------------------------------------------------------------------------
// Pods that are gone, going or done

#[test]
fn a_pod_seen_deleted_has_its_workloads_deleted_and_an_unknown_one_is_left_to_gc() {
    let gone = Memory {
        gone: true,
        listed: None,
        ..fresh()
    };
    assert_eq!(step(None, None, gone), Step::DeleteOrphanedWorkloads);
    // Never seen by this process: the garbage collector's grace window decides.
    assert_eq!(step(None, None, fresh()), Step::Idle);
}

#[test]
fn a_deleting_pod_finishes_deletion_whatever_its_workload_does() {
    let pod = PodBuilder::new().running("runpod").deleting().build();
    let run = observed(WorkloadState::Running);
    assert_eq!(
        step(Some(&pod), Some((0, &run)), fresh()),
        Step::FinishDeletion
    );
    assert_eq!(step(Some(&pod), None, fresh()), Step::FinishDeletion);
}

#[test]
fn a_finished_pod_stops_a_workload_still_holding_resources_but_keeps_exited_ones() {
    let done = PodBuilder::new()
        .assigned("runpod")
        .phase("Succeeded")
        .build();
    let run = observed(WorkloadState::Running);
    assert_eq!(
        step(Some(&done), Some((0, &run)), fresh()),
        Step::StopWorkload { provider: 0 }
    );
    let preempted = observed(WorkloadState::Preempted);
    let failed_pod = PodBuilder::new().assigned("vast").phase("Failed").build();
    assert_eq!(
        step(Some(&failed_pod), Some((1, &preempted)), fresh()),
        Step::StopWorkload { provider: 1 }
    );
    let exited = observed(WorkloadState::Succeeded);
    assert_eq!(step(Some(&done), Some((0, &exited)), fresh()), Step::Idle);
    let crashed = failed(3, FailureReason::Error);
    assert_eq!(
        step(Some(&failed_pod), Some((1, &crashed)), fresh()),
        Step::Idle
    );
    assert_eq!(step(Some(&done), None, fresh()), Step::Idle);
}

#[test]
fn a_finished_pod_deletes_its_ended_workload_where_the_provider_keeps_billing_it() {
    // RunPod restarts an exited container in place and bills a stopped pod's disk.
    let owner = owner();
    let mut offers = offers();
    offers[0].capabilities.delete_finished = true;
    let timings = timings();
    let admission = Admission::default();
    let rules = Rules {
        owner: &owner,
        offers: &offers,
        timings: &timings,
        admission: &admission,
        secret_failover: false,
        standing: &[],
        dispatch: &crate::config::DispatchConfig::default(),
        start_deadlines: &[],
        hold_retry: Duration::from_secs(60),
    };
    let done = PodBuilder::new()
        .assigned("runpod")
        .phase("Succeeded")
        .build();
    for state in [
        WorkloadState::Succeeded,
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted,
        },
    ] {
        let o = observed(state);
        let found = Some(Found {
            provider: 0,
            observed: &o,
        });
        assert_eq!(
            decide(&rules, Some(&done), found, &fresh(), ts(NOW)),
            Step::StopWorkload { provider: 0 }
        );
    }
    // Other providers keep an exited workload (its logs stay readable).
    let o = observed(WorkloadState::Succeeded);
    let found = Some(Found {
        provider: 1,
        observed: &o,
    });
    assert_eq!(
        decide(&rules, Some(&done), found, &fresh(), ts(NOW)),
        Step::Idle
    );
}

#[test]
fn an_invalid_spec_fails_the_pod_even_with_a_workload() {
    let pod = PodBuilder::new()
        .spec(|s| {
            let second = s.containers[0].clone();
            s.containers.push(second);
        })
        .build();
    let Step::Fail {
        reason, message, ..
    } = step(Some(&pod), None, fresh())
    else {
        panic!("expected Fail");
    };
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("container"), "{message}");
}

// ----------------------------------------------------------------------------------------
// Vanished vs not listed yet

#[test]
fn a_workload_absent_from_a_list_begun_after_our_create_is_lost() {
    let pod = PodBuilder::new().running("vast").build();
    let memory = Memory {
        gone: false,
        listed: Some(Listed::SinceCreate),
        ..fresh()
    };
    assert_eq!(
        step(Some(&pod), None, memory),
        Step::Lost {
            provider: "vast".into()
        }
    );
}

#[test]
fn a_workload_created_after_the_last_list_began_is_not_lost_yet() {
    let pod = PodBuilder::new().running("vast").build();
    for listed in [Listed::NotSinceCreate, Listed::Never] {
        let memory = Memory {
            gone: false,
            listed: Some(listed),
            ..fresh()
        };
        assert_eq!(
            step(Some(&pod), None, memory),
            Step::Wait(Duration::from_secs(2)),
            "{listed:?}"
        );
    }
}

#[test]
fn a_pod_whose_recorded_provider_is_no_longer_configured_is_lost() {
    let pod = PodBuilder::new().running("gone-provider").build();
    let memory = Memory {
        gone: false,
        listed: None,
        ..fresh()
    };
    assert_eq!(
        step(Some(&pod), None, memory),
        Step::Lost {
            provider: "gone-provider".into()
        }
    );
}

#[test]
fn a_workload_we_created_is_not_created_again_before_the_pod_records_it() {
    // The first status write after a create waits for the provider's first report: until
    // then only the pipeline's memory says a workload exists.
    let pod = PodBuilder::new().gpus("1").build();
    let created = |listed| Memory {
        gone: false,
        listed: Some(listed),
        created_on: Some(1),
        ..fresh()
    };
    assert_eq!(
        step(Some(&pod), None, created(Listed::NotSinceCreate)),
        Step::Wait(Duration::from_secs(2))
    );
    assert_eq!(
        step(Some(&pod), None, created(Listed::SinceCreate)),
        Step::Lost {
            provider: "vast".into()
        }
    );
}

// ----------------------------------------------------------------------------------------
// Dispatch and failover

#[test]
fn a_new_pod_is_created_with_candidates_that_fit_in_configuration_order() {
    let pod = PodBuilder::new().gpus("1").build();
    assert!(matches!(
        step(Some(&pod), None, fresh()),
        Step::Create { plan, id, .. }
            if plan.providers() == vec![0, 1, 2] && id == crate::test_support::workload_id()
    ));
    let h100 = PodBuilder::new()
        .gpus("1")
        .annotation(ANN_GPU_TYPE, "H100")
        .build();
    assert!(matches!(
        step(Some(&h100), None, fresh()),
        Step::Create { plan, .. } if plan.providers() == vec![0, 2]
    ));
}

#[test]
fn the_provider_recorded_on_the_pod_is_tried_first() {
    let pod = PodBuilder::new().gpus("1").assigned("slurm").build();
    assert!(matches!(
        step(Some(&pod), None, fresh()),
        Step::Create { plan, .. } if plan.providers() == vec![2, 0, 1]
    ));
}

#[test]
fn a_pin_to_an_unknown_provider_or_an_unservable_request_fails_with_a_reason() {
    let unknown = PodBuilder::new()
        .gpus("1")
        .annotation(ANN_PROVIDER, "lambda")
        .build();
    assert!(matches!(
        step(Some(&unknown), None, fresh()),
        Step::Fail { reason: "UnknownProvider", message, .. } if message.contains("lambda")
    ));
    let too_big = PodBuilder::new()
        .gpus("16")
        .annotation(ANN_GPU_TYPE, "RTX4090")
        .build();
    assert!(matches!(
        step(Some(&too_big), None, fresh()),
        Step::Fail { reason: "InvalidSpec", message, .. } if message.contains("16 x RTX4090")
    ));
}

#[test]
fn a_pod_uid_that_is_not_a_uuid_fails_instead_of_creating_an_unaddressable_workload() {
    let pod = PodBuilder::new().uid("not-a-uuid").build();
    assert!(matches!(
        step(Some(&pod), None, fresh()),
        Step::Fail { reason: "InvalidSpec", message, .. } if message.contains("not a UUID")
    ));
}

// ----------------------------------------------------------------------------------------
// The whole table at a glance

#[test]
fn decision_table() {
    let mut out = String::new();
    let running = PodBuilder::new().running("runpod");
    let cases: Vec<(&str, Option<Pod>, Option<Observed>, Memory)> = vec![
        (
            "new pod",
            Some(PodBuilder::new().gpus("1").build()),
            None,
            fresh(),
        ),
        (
            "running, listed running",
            Some(running.build()),
            Some(observed(WorkloadState::Running)),
            fresh(),
        ),
        (
            "running, vanished",
            Some(PodBuilder::new().running("runpod").build()),
            None,
            fresh(),
        ),
        (
            "running, not listed since create",
            Some(PodBuilder::new().running("runpod").build()),
            None,
            Memory {
                gone: false,
                listed: Some(Listed::NotSinceCreate),
                ..fresh()
            },
        ),
        (
            "Never, exit 1",
            Some(
                PodBuilder::new()
                    .running("runpod")
                    .restart_policy("Never")
                    .build(),
            ),
            Some(failed(1, FailureReason::Error)),
            fresh(),
        ),
        (
            "Always, exit 1",
            Some(PodBuilder::new().running("runpod").build()),
            Some(failed(1, FailureReason::Error)),
            fresh(),
        ),
        (
            "deleting",
            Some(PodBuilder::new().running("runpod").deleting().build()),
            Some(observed(WorkloadState::Running)),
            fresh(),
        ),
        (
            "gone from the API",
            None,
            Some(observed(WorkloadState::Running)),
            Memory {
                gone: true,
                listed: None,
                ..fresh()
            },
        ),
    ];
    for (name, pod, obs, memory) in &cases {
        let s = step(pod.as_ref(), obs.as_ref().map(|o| (0, o)), memory.clone());
        let s = match s {
            Step::Create { plan, request, .. } => format!(
                "Create {{ candidates: {:?}, gpus: {:?} }}",
                plan.providers(),
                request.gpu.map(|g| g.count)
            ),
            Step::Restart {
                provider,
                restarts,
                delay,
                last,
            } => format!(
                "Restart {{ provider: {provider}, restarts: {restarts}, delay: {delay:?}, exit: {} }}",
                last.exit_code
            ),
            other => format!("{other:?}"),
        };
        let _ = writeln!(out, "{name:<34} -> {s}");
    }
    insta::assert_snapshot!(out);
}
