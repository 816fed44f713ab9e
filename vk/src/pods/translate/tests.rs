//! Snapshot and unit tests of the status translation, one per workload state; pods of
//! several containers in `containers`, readiness probes in `readiness`.

use super::*;
use crate::provider::{FailureReason, Usage, WorkloadState};

use crate::test_support::{PodBuilder, ts};

mod containers;
mod readiness;

fn pod() -> Pod {
    PodBuilder::new().build()
}

fn observed(state: WorkloadState) -> Observed {
    Observed {
        usage: Some(Usage {
            cpu_usage_nanos: 1,
            cpu_millis: 1,
            memory_bytes: 1,
            timestamp: ts("2026-11-29T10:00:06Z"),
        }),
        ..crate::test_support::observed(state)
    }
}

fn cx() -> Context<'static> {
    Context {
        provider: "runpod",
        host_ip: "127.0.0.1",
        restart_count: 0,
        now: ts("2026-11-29T10:01:00Z"),
        readiness: Readiness::Unprobed,
        all_containers: false,
    }
}

fn translate(s: &Situation<'_>) -> PodStatus {
    pod_status(&pod(), s, &cx())
}

#[test]
fn snapshots_for_every_provider_state() {
    let states = [
        (
            "queued",
            WorkloadState::Queued {
                reason: Some("Resources".into()),
            },
        ),
        ("starting", WorkloadState::Starting),
        ("running", WorkloadState::Running),
        (
            "not_ready",
            WorkloadState::NotReady {
                reason: "Reallocating".into(),
            },
        ),
        ("succeeded", WorkloadState::Succeeded),
        (
            "failed_error",
            WorkloadState::Failed {
                exit_code: 3,
                reason: FailureReason::Error,
            },
        ),
        (
            "failed_oom",
            WorkloadState::Failed {
                exit_code: 137,
                reason: FailureReason::OomKilled,
            },
        ),
        (
            "failed_deadline",
            WorkloadState::Failed {
                exit_code: 0,
                reason: FailureReason::DeadlineExceeded,
            },
        ),
        (
            "failed_evicted",
            WorkloadState::Failed {
                exit_code: 143,
                reason: FailureReason::Evicted,
            },
        ),
        (
            "failed_provider",
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::ProviderError,
            },
        ),
        ("preempted", WorkloadState::Preempted),
        ("lost", WorkloadState::Lost),
        (
            "unknown",
            WorkloadState::Unknown {
                raw: "HIBERNATING".into(),
            },
        ),
    ];
    for (name, state) in states {
        let mut obs = observed(state);
        if obs.state.is_terminal() {
            obs.finished_at = Some(ts("2026-11-29T10:00:50Z"));
        }
        insta::assert_yaml_snapshot!(name, translate(&Situation::Observed(&obs)));
    }
}

#[test]
fn snapshots_for_framework_situations() {
    insta::assert_yaml_snapshot!(
        "waiting_capacity",
        translate(&Situation::Waiting {
            reason: reason::PROVIDER_CAPACITY,
            message: "no A100 anywhere".into()
        })
    );
    insta::assert_yaml_snapshot!(
        "failed_invalid_spec",
        translate(&Situation::Failed {
            reason: reason::INVALID_SPEC,
            message: "hostPath volumes are not supported".into()
        })
    );
    let last = ContainerStateTerminated {
        exit_code: 1,
        reason: Some("Error".into()),
        ..Default::default()
    };
    insta::assert_yaml_snapshot!(
        "backoff",
        pod_status(
            &pod(),
            &Situation::BackOff {
                last,
                message: "back-off 10s restarting".into()
            },
            &Context {
                restart_count: 2,
                ..cx()
            }
        )
    );
}

#[test]
fn translating_twice_is_stable_and_needs_no_write() {
    let obs = observed(WorkloadState::Running);
    let first = translate(&Situation::Observed(&obs));
    let mut p = pod();
    p.status = Some(first.clone());
    let later = Context {
        now: ts("2026-11-29T11:00:00Z"),
        ..cx()
    };
    let second = pod_status(&p, &Situation::Observed(&obs), &later);
    assert!(
        !status_changed(Some(&first), &second),
        "{first:?}\n{second:?}"
    );
}

#[test]
fn state_change_is_a_change_and_moves_transition_time() {
    let mut p = pod();
    p.status = Some(translate(&Situation::Observed(&observed(
        WorkloadState::Starting,
    ))));
    let later = Context {
        now: ts("2026-11-29T11:00:00Z"),
        ..cx()
    };
    let running = pod_status(
        &p,
        &Situation::Observed(&observed(WorkloadState::Running)),
        &later,
    );
    assert!(status_changed(p.status.as_ref(), &running));
    let ready = running
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(
        ready.last_transition_time,
        Some(Time(ts("2026-11-29T11:00:00Z")))
    );
}

/// What a provider says of a running workload (Vast: when its rental contract ends) is the
/// running pod's message, for `kubectl describe`.
#[test]
fn a_running_workloads_message_is_the_pods() {
    let mut obs = observed(WorkloadState::Running);
    obs.message = Some("the Vast rental contract ends at 2033-05-18T03:33:20Z".into());
    let st = translate(&Situation::Observed(&obs));
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(st.message, obs.message);
    let st = translate(&Situation::Observed(&observed(WorkloadState::Running)));
    assert_eq!(st.message, None);
}

#[test]
fn unknown_state_keeps_running_phase() {
    let mut p = pod();
    p.status = Some(translate(&Situation::Observed(&observed(
        WorkloadState::Running,
    ))));
    let st = pod_status(
        &p,
        &Situation::Observed(&observed(WorkloadState::Unknown { raw: "X".into() })),
        &cx(),
    );
    assert_eq!(st.phase.as_deref(), Some("Running"));
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert!(!cs.ready);
}

fn condition_of<'a>(st: &'a PodStatus, type_: &str) -> &'a PodCondition {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap()
}
