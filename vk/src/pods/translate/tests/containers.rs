//! Pods of several containers: containers the provider does not run, init containers, native
//! sidecars, and each container's own end where the provider observes it.

use super::*;

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
