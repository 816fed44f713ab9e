//! Readiness: a failing probe keeps a running pod not ready, one write per change; a probe
//! that cannot be evaluated falls back to the provider's state.

use super::*;

#[test]
fn a_failing_readiness_probe_keeps_a_running_pod_not_ready_and_each_change_is_one_write() {
    let obs = observed(WorkloadState::Running);
    let probed = |ready| Context {
        readiness: Readiness::Probed { ready },
        ..cx()
    };
    let mut p = pod();
    let not_ready = pod_status(&p, &Situation::Observed(&obs), &probed(false));
    assert_eq!(not_ready.phase.as_deref(), Some("Running"));
    let cond = condition_of(&not_ready, "Ready");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("False", Some("ContainersNotReady"))
    );
    assert!(
        cond.message
            .as_deref()
            .unwrap()
            .contains("unready status: [trainer]")
    );
    let cs = &not_ready.container_statuses.as_ref().unwrap()[0];
    assert!(!cs.ready && cs.started == Some(true) && cs.state.as_ref().unwrap().running.is_some());
    // Unchanged result: no write.
    p.status = Some(not_ready.clone());
    let again = pod_status(&p, &Situation::Observed(&obs), &probed(false));
    assert!(!status_changed(p.status.as_ref(), &again));
    // The probe passes: one change, Ready, no message left.
    let later = Context {
        now: ts("2026-11-29T10:05:00Z"),
        ..probed(true)
    };
    let ready = pod_status(&p, &Situation::Observed(&obs), &later);
    assert!(status_changed(p.status.as_ref(), &ready));
    let cond = condition_of(&ready, "Ready");
    assert_eq!(
        (cond.status.as_str(), cond.message.as_deref()),
        ("True", None)
    );
    assert_eq!(cond.last_transition_time, Some(Time(later.now)));
    assert!(ready.container_statuses.as_ref().unwrap()[0].ready);
}

#[test]
fn a_probe_that_cannot_be_evaluated_falls_back_to_the_provider_state_and_says_so() {
    let obs = observed(WorkloadState::Running);
    let cx = Context {
        readiness: Readiness::NotEvaluable {
            message: "readiness probe cannot be evaluated on provider vast".into(),
        },
        ..cx()
    };
    let st = pod_status(&pod(), &Situation::Observed(&obs), &cx);
    let cond = condition_of(&st, "Ready");
    assert_eq!(cond.status, "True");
    assert!(cond.message.as_deref().unwrap().contains("provider vast"));
    // While the provider says not ready, the probe does not matter.
    let nr = observed(WorkloadState::NotReady {
        reason: "Reallocating".into(),
    });
    let st = pod_status(&pod(), &Situation::Observed(&nr), &cx);
    assert_eq!(condition_of(&st, "Ready").status, "False");
}
