//! Snapshot and unit tests of the status translation, one per workload state.

use super::*;
use crate::provider::{FailureReason, Usage};

use crate::test_support::{PodBuilder, ts};

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

/// A pod running `main`, with a `metrics` container and a `logs` native sidecar left out and
/// a `fetch` init container run before the main command.
fn pod_with_sidecars() -> Pod {
    use k8s_openapi::api::core::v1::Container;
    let mut p = PodBuilder::new()
        .annotation(crate::pods::spec::ANN_OMIT_CONTAINERS, "metrics,logs")
        .build();
    let spec = p.spec.as_mut().unwrap();
    let main = spec.containers[0].clone();
    spec.containers.insert(
        0,
        Container {
            name: "metrics".into(),
            image: Some("exporter".into()),
            ..Default::default()
        },
    );
    spec.init_containers = Some(vec![
        Container {
            name: "fetch".into(),
            command: Some(vec!["fetch".into()]),
            ..main
        },
        Container {
            name: "logs".into(),
            image: Some("shipper".into()),
            restart_policy: Some("Always".into()),
            ..Default::default()
        },
    ]);
    p
}

fn condition_of<'a>(st: &'a PodStatus, type_: &str) -> &'a PodCondition {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn containers_left_out_say_so_and_init_containers_follow_the_workload() {
    let p = pod_with_sidecars();
    let main = crate::pods::spec::main_container(&p).unwrap().name.clone();
    let starting = observed(WorkloadState::Starting);
    let st = pod_status(&p, &Situation::Observed(&starting), &cx());
    let names: Vec<&str> = st
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["metrics", main.as_str()],
        "one status per container, in spec order"
    );
    let metrics = &st.container_statuses.as_ref().unwrap()[0];
    let t = metrics.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.reason.as_deref(), Some(reason::NOT_RUN_ON_PROVIDER));
    assert!(t.message.as_deref().unwrap().contains("runpod"), "{t:?}");
    assert!(!metrics.ready);
    let inits = st.init_container_statuses.as_ref().unwrap();
    assert_eq!(inits.len(), 2);
    let waiting = inits[0].state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some(reason::POD_INITIALIZING));
    let logs = inits[1]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(logs.reason.as_deref(), Some(reason::NOT_RUN_ON_PROVIDER));
    assert_eq!(condition_of(&st, "Initialized").status, "False");
    assert_eq!(condition_of(&st, "Ready").status, "False");

    // Running: initialized, and Ready on the main container alone.
    let running = observed(WorkloadState::Running);
    let mut p = p;
    p.status = Some(st);
    let st = pod_status(&p, &Situation::Observed(&running), &cx());
    let cs = st.container_statuses.as_ref().unwrap();
    assert!(cs[1].ready && cs[1].state.as_ref().unwrap().running.is_some());
    assert!(!cs[0].ready);
    let fetch = &st.init_container_statuses.as_ref().unwrap()[0];
    let done = fetch.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (done.exit_code, done.reason.as_deref()),
        (0, Some("Completed"))
    );
    assert!(fetch.ready);
    assert_eq!(condition_of(&st, "Initialized").status, "True");
    assert_eq!(condition_of(&st, "Ready").status, "True");
    // And stable: the same situation again is no write.
    p.status = Some(st.clone());
    assert!(!status_changed(
        p.status.as_ref(),
        &pod_status(&p, &Situation::Observed(&running), &cx())
    ));
}

#[test]
fn a_pod_without_init_containers_is_initialized_from_the_start() {
    let st = translate(&Situation::Waiting {
        reason: reason::CREATING,
        message: String::new(),
    });
    assert_eq!(condition_of(&st, "Initialized").status, "True");
    assert!(st.init_container_statuses.is_none());
}

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

/// [`pod_with_sidecars`] with nothing left out, translated for a provider that runs every
/// container (Slurm), with the containers' own ends as the provider observed them.
fn all_run(state: WorkloadState, exits: &[(&str, i32)], old: Option<PodStatus>) -> PodStatus {
    let mut p = pod_with_sidecars();
    p.metadata.annotations = None;
    p.status = old;
    let mut obs = observed(state);
    obs.started_at = Some(ts("2026-11-29T10:00:00Z"));
    obs.container_exits = exits
        .iter()
        .map(|(n, code)| {
            let exit = crate::provider::ContainerExit {
                exit_code: *code,
                finished_at: Some(ts("2026-11-29T10:00:30Z")),
            };
            ((*n).to_owned(), exit)
        })
        .collect();
    let cx = Context {
        all_containers: true,
        ..cx()
    };
    pod_status(&p, &Situation::Observed(&obs), &cx)
}

fn status_of<'a>(st: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    st.container_statuses
        .iter()
        .chain(st.init_container_statuses.iter())
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status of {name}: {st:?}"))
}

fn ended_with<'a>(st: &'a PodStatus, name: &str) -> (i32, Option<&'a str>, Option<Timestamp>) {
    let s = status_of(st, name);
    let t = s.state.as_ref().and_then(|s| s.terminated.as_ref());
    let t = t.unwrap_or_else(|| panic!("{name} has not ended: {s:?}"));
    (
        t.exit_code,
        t.reason.as_deref(),
        t.finished_at.as_ref().map(|f| f.0),
    )
}

#[test]
fn each_container_of_a_failed_job_shows_its_own_exit_code() {
    let exits = [("fetch", 0), ("logs", 143), ("trainer", 4), ("metrics", 0)];
    let failed = WorkloadState::Failed {
        exit_code: 4,
        reason: FailureReason::Error,
    };
    let st = all_run(failed, &exits, None);
    let at = Some(ts("2026-11-29T10:00:30Z"));
    assert_eq!(ended_with(&st, "trainer"), (4, Some("Error"), at));
    assert_eq!(
        ended_with(&st, "metrics"),
        (0, Some("Completed"), at),
        "not the job's 4"
    );
    assert_eq!(ended_with(&st, "fetch"), (0, Some("Completed"), at));
    assert_eq!(ended_with(&st, "logs"), (143, Some("Error"), at));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(condition_of(&st, "Initialized").status, "True");
}

#[test]
fn a_container_that_ended_while_the_others_run_makes_the_pod_not_ready() {
    let st = all_run(
        WorkloadState::Running,
        &[("fetch", 0), ("trainer", 0)],
        None,
    );
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(ended_with(&st, "trainer").0, 0);
    let metrics = status_of(&st, "metrics");
    assert!(
        metrics.state.as_ref().unwrap().running.is_some() && metrics.ready,
        "{metrics:?}"
    );
    let ready = condition_of(&st, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [trainer]")
    );
    // Once every regular container runs again (a new run of the job), Ready again.
    let again = all_run(WorkloadState::Running, &[("fetch", 0)], Some(st));
    assert_eq!(condition_of(&again, "Ready").status, "True");
    assert!(status_of(&again, "trainer").ready);
}

#[test]
fn after_a_failed_init_container_the_others_never_ran() {
    let failed = WorkloadState::Failed {
        exit_code: 2,
        reason: FailureReason::Error,
    };
    let st = all_run(failed, &[("fetch", 2)], None);
    assert_eq!(ended_with(&st, "fetch").0, 2);
    for name in ["trainer", "metrics", "logs"] {
        let s = status_of(&st, name);
        let waiting = s.state.as_ref().and_then(|s| s.waiting.as_ref());
        assert_eq!(
            waiting.and_then(|w| w.reason.as_deref()),
            Some(reason::POD_INITIALIZING),
            "{name}: {s:?}"
        );
    }
    assert_eq!(condition_of(&st, "Initialized").status, "False");
    assert_eq!(st.phase.as_deref(), Some("Failed"));
}
