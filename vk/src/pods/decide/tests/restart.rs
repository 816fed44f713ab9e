//! Unit tests of [`super::super::decide`]: the restart policy.

use super::*;

/// The step for a pod with `policy` whose workload on runpod is in `state`.
fn with_policy(policy: Option<&str>, state: &Observed) -> Step {
    let mut b = PodBuilder::new().running("runpod");
    if let Some(p) = policy {
        b = b.restart_policy(p);
    }
    step(Some(&b.build()), Some((0, state)), fresh())
}

fn is_restart(s: &Step) -> bool {
    matches!(s, Step::Restart { .. })
}

#[test]
fn restart_policy_always_restarts_on_success_and_failure() {
    assert!(is_restart(&with_policy(
        None,
        &observed(WorkloadState::Succeeded)
    )));
    assert!(is_restart(&with_policy(
        Some("Always"),
        &failed(1, FailureReason::Error)
    )));
    assert!(is_restart(&with_policy(
        Some("Always"),
        &failed(137, FailureReason::OomKilled)
    )));
}

#[test]
fn restart_policy_on_failure_restarts_failures_only() {
    let s = with_policy(Some("OnFailure"), &observed(WorkloadState::Succeeded));
    assert_eq!(s, report(0));
    assert!(is_restart(&with_policy(
        Some("OnFailure"),
        &failed(2, FailureReason::Error)
    )));
}

#[test]
fn restart_policy_never_reports_the_end_as_it_is() {
    for o in [
        observed(WorkloadState::Succeeded),
        failed(1, FailureReason::Error),
        failed(137, FailureReason::OomKilled),
    ] {
        assert_eq!(with_policy(Some("Never"), &o), report(0), "{:?}", o.state);
    }
}

#[test]
fn an_evicted_workload_is_never_restarted_in_place() {
    for policy in ["Always", "OnFailure", "Never"] {
        assert_eq!(
            with_policy(Some(policy), &failed(143, FailureReason::Evicted)),
            report(0),
            "{policy}"
        );
    }
}

#[test]
fn preempted_lost_and_live_workloads_are_reported() {
    for state in [
        WorkloadState::Preempted,
        WorkloadState::Lost,
        WorkloadState::Running,
        WorkloadState::Starting,
        WorkloadState::Queued { reason: None },
        WorkloadState::Unknown {
            raw: "WEIRD".into(),
        },
    ] {
        assert_eq!(
            with_policy(Some("Always"), &observed(state.clone())),
            report(0),
            "{state:?}"
        );
    }
}

#[test]
fn a_restart_records_how_the_container_ended_and_backs_off_exponentially() {
    let pod = PodBuilder::new()
        .crash_looping("runpod", 3, "2026-11-29T09:00:00Z")
        .build();
    let mut o = failed(7, FailureReason::Error);
    o.message = Some("segfault".into());
    let Step::Restart {
        provider,
        restarts,
        delay,
        last,
    } = step(Some(&pod), Some((0, &o)), fresh())
    else {
        panic!("expected Restart");
    };
    assert_eq!(provider, 0);
    assert_eq!(restarts, 4);
    // Fourth restart: 10 s doubled three times.
    assert_eq!(delay, Duration::from_secs(80));
    assert_eq!(last.exit_code, 7);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert_eq!(last.message.as_deref(), Some("segfault"));
    assert_eq!(
        last.container_id,
        Some(format!("runpod://{}", crate::test_support::workload_id()))
    );
    assert_eq!(
        last.finished_at.map(|t| t.0),
        Some(ts("2026-11-29T10:00:04Z"))
    );
}

#[test]
fn a_success_without_a_finish_time_ends_now_with_exit_code_zero() {
    let Step::Restart { last, .. } = with_policy(None, &observed(WorkloadState::Succeeded)) else {
        panic!("expected Restart");
    };
    assert_eq!(last.exit_code, 0);
    assert_eq!(last.reason.as_deref(), Some("Completed"));
    assert_eq!(last.finished_at.map(|t| t.0), Some(ts(NOW)));
}

#[test]
fn a_pod_waiting_out_its_back_off_waits_then_is_created_again() {
    // Second restart ended at 10:00:00; 20 s back-off; now is 10:00:05.
    let pod = PodBuilder::new()
        .crash_looping("runpod", 2, "2026-11-29T10:00:00Z")
        .build();
    assert_eq!(
        step(Some(&pod), None, fresh()),
        Step::Wait(Duration::from_secs(15))
    );
    let due = PodBuilder::new()
        .crash_looping("runpod", 2, "2026-11-29T09:59:00Z")
        .build();
    assert!(matches!(
        step(Some(&due), None, fresh()),
        Step::Create { plan, .. } if plan.providers() == vec![0, 1, 2]
    ));
}

#[test]
fn a_running_workload_whose_liveness_probe_failed_is_killed_and_an_ended_one_is_not() {
    let unhealthy = Memory {
        liveness_failed: Some("HTTP probe failed with statuscode: 500".into()),
        ..fresh()
    };
    let pod = PodBuilder::new().running("runpod").build();
    let run = observed(WorkloadState::Running);
    assert_eq!(
        step(Some(&pod), Some((0, &run)), unhealthy.clone()),
        Step::KillUnhealthy {
            provider: 0,
            why: "HTTP probe failed with statuscode: 500".into()
        }
    );
    // Without the failure, the same workload is reported.
    assert_eq!(step(Some(&pod), Some((0, &run)), fresh()), report(0));
    // A workload that already ended is not killed again: its ending decides (here, Always
    // restarts it).
    let ended = failed(1, FailureReason::Error);
    assert!(is_restart(&step(
        Some(&pod),
        Some((0, &ended)),
        unhealthy.clone()
    )));
    // A pod being deleted finishes its deletion whatever its probes say.
    let deleting = PodBuilder::new().running("runpod").deleting().build();
    assert_eq!(
        step(Some(&deleting), Some((0, &run)), unhealthy),
        Step::FinishDeletion
    );
}
