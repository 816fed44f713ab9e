//! Unit tests of [`super::super::decide`]: the start deadline.

use super::*;

/// Runs `f` with rules where RunPod's start deadline is 1800 s (ceiling 3600 s, one attempt)
/// and the other providers have none.
fn with_deadline_rules<T>(f: impl FnOnce(&Rules<'_>) -> T) -> T {
    with_attempts_rules(1, f)
}

/// [`with_deadline_rules`] with `attempts` workloads per pod at RunPod.
fn with_attempts_rules<T>(attempts: u32, f: impl FnOnce(&Rules<'_>) -> T) -> T {
    let s = |n| Some(Duration::from_secs(n));
    let deadlines = [crate::config::StartDeadline {
        default: s(1800),
        max: s(3600),
        attempts,
    }];
    with_rules(&deadlines, f)
}

/// A workload in `state` at `provider`, created at `created`, still pulling its image.
fn created_at(state: WorkloadState, created: &str) -> Observed {
    Observed {
        created_at: Some(ts(created)),
        message: Some("pulling image".into()),
        ..observed(state)
    }
}

/// Decides for a workload at `provider` created at `created` under [`with_deadline_rules`].
fn with_deadline(pod: &Pod, provider: usize, state: WorkloadState, created: &str) -> Step {
    let obs = created_at(state, created);
    with_deadline_rules(|rules| {
        let found = Some(Found {
            provider,
            observed: &obs,
        });
        decide(rules, Some(pod), found, &Memory::fresh(), ts(NOW))
    })
}

#[test]
fn a_workload_still_starting_at_its_deadline_fails_the_pod_naming_it() {
    let pod = PodBuilder::new().gpus("1").assigned("runpod").build();
    let stuck = with_deadline(&pod, 0, WorkloadState::Starting, "2026-11-29T09:30:05Z");
    assert!(
        matches!(&stuck, Step::Fail { reason, message, .. }
            if *reason == "StartDeadlineExceeded" && message.contains("still starting at provider runpod (pulling image) 1800s")),
        "{stuck:?}"
    );
    let queued = with_deadline(
        &pod,
        0,
        WorkloadState::Queued { reason: None },
        "2026-11-29T09:00:00Z",
    );
    assert!(matches!(
        queued,
        Step::Fail {
            reason: "StartDeadlineExceeded",
            ..
        }
    ));
    // One second short, running, or on a provider without a deadline: reported as usual.
    let early = with_deadline(&pod, 0, WorkloadState::Starting, "2026-11-29T09:30:06Z");
    // ... and looked at again when the deadline is due, a second from now.
    assert_eq!(
        early,
        Step::Report {
            provider: 0,
            stop_finished: false,
            recheck: Some(Duration::from_secs(1)),
        }
    );
    let running = with_deadline(&pod, 0, WorkloadState::Running, "2026-11-29T05:00:00Z");
    assert_eq!(running, report(0));
    let slurm = with_deadline(&pod, 2, WorkloadState::Starting, "2026-11-29T05:00:00Z");
    assert_eq!(slurm, report(2));
}

#[test]
fn a_pod_sets_its_own_start_deadline_within_the_providers_ceiling() {
    let short = PodBuilder::new()
        .gpus("1")
        .assigned("runpod")
        .annotation(crate::pods::spec::ANN_START_DEADLINE, "60")
        .build();
    let s = with_deadline(&short, 0, WorkloadState::Starting, "2026-11-29T09:59:00Z");
    assert!(
        matches!(
            s,
            Step::Fail {
                reason: "StartDeadlineExceeded",
                ..
            }
        ),
        "{s:?}"
    );
    let long = PodBuilder::new()
        .gpus("1")
        .assigned("runpod")
        .annotation(crate::pods::spec::ANN_START_DEADLINE, "7200")
        .build();
    let s = with_deadline(&long, 0, WorkloadState::Starting, "2026-11-29T09:59:00Z");
    assert!(
        matches!(&s, Step::Fail { reason: "InvalidSpec", message, .. } if message.contains("3600s")),
        "{s:?}"
    );
}

#[test]
fn a_huge_start_deadline_is_never_due_and_never_panics() {
    // On a provider without a ceiling (slurm, index 2) any deadline is taken; the provider says
    // the workload was created in the future (a clock ahead of ours).
    for secs in [
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        let pod = PodBuilder::new()
            .gpus("1")
            .assigned("slurm")
            .annotation(crate::pods::spec::ANN_START_DEADLINE, secs)
            .build();
        let obs = created_at(WorkloadState::Starting, "2026-11-29T10:05:00Z");
        let due = with_deadline_rules(|rules| {
            let f = Found {
                provider: 2,
                observed: &obs,
            };
            start_deadline_due_in(rules, &pod, f, ts(NOW))
        });
        assert_eq!(due, None, "{secs}");
        let step = with_deadline(&pod, 2, WorkloadState::Starting, "2026-11-29T10:05:00Z");
        assert_eq!(step, report(2), "{secs}");
    }
}

#[test]
fn a_starting_workload_is_looked_at_again_when_its_deadline_is_due() {
    let pod = PodBuilder::new().gpus("1").assigned("runpod").build();
    let due = |state: WorkloadState| {
        let obs = created_at(state, "2026-11-29T09:59:05Z");
        with_deadline_rules(|rules| {
            let f = Found {
                provider: 0,
                observed: &obs,
            };
            start_deadline_due_in(rules, &pod, f, ts(NOW))
        })
    };
    assert_eq!(
        due(WorkloadState::Starting),
        Some(Duration::from_secs(1740))
    );
    assert_eq!(due(WorkloadState::Running), None);
}

#[test]
fn a_failed_pod_stops_its_live_workload_and_leaves_an_ended_one() {
    let pod = PodBuilder::new().gpus("1").assigned("runpod").build();
    // Past its deadline and still starting: still billing, so it is stopped.
    let live = with_deadline(&pod, 0, WorkloadState::Starting, "2026-11-29T09:00:00Z");
    assert!(
        matches!(
            live,
            Step::Fail {
                reason: "StartDeadlineExceeded",
                stop: Some(0),
                ..
            }
        ),
        "{live:?}"
    );
    // A pod that can never run, whose workload already ended: nothing to stop.
    let bad = PodBuilder::new()
        .gpus("1")
        .assigned("runpod")
        .annotation(crate::pods::spec::ANN_START_DEADLINE, "soon")
        .build();
    let ended = with_deadline(&bad, 0, WorkloadState::Succeeded, "2026-11-29T09:00:00Z");
    assert!(
        matches!(
            ended,
            Step::Fail {
                reason: "InvalidSpec",
                stop: None,
                ..
            }
        ),
        "{ended:?}"
    );
}

#[test]
fn an_ended_workload_is_stopped_after_the_report_only_where_it_keeps_billing() {
    let pod = PodBuilder::new()
        .gpus("1")
        .restart_policy("Never")
        .assigned("vast")
        .build();
    let obs = observed(WorkloadState::Succeeded);
    let mut offers = offers();
    offers[1].capabilities.delete_finished = true;
    let decided = |offers: &[Offer]| {
        with_offers(offers, &[], |rules| {
            let found = Some(Found {
                provider: 1,
                observed: &obs,
            });
            decide(rules, Some(&pod), found, &Memory::fresh(), ts(NOW))
        })
    };
    let billed = decided(&offers);
    assert_eq!(
        billed,
        Step::Report {
            provider: 1,
            stop_finished: true,
            recheck: None,
        }
    );
    assert_eq!(decided(&super::offers()), report(1));
}

#[test]
fn a_start_past_its_deadline_is_retried_while_attempts_remain_then_fails_the_pod() {
    let obs = created_at(WorkloadState::Starting, "2026-11-29T09:00:00Z");
    let step = |pod: &Pod, attempts: u32| {
        with_attempts_rules(attempts, |rules| {
            let found = Some(Found {
                provider: 0,
                observed: &obs,
            });
            decide(rules, Some(pod), found, &Memory::fresh(), ts(NOW))
        })
    };
    let first = PodBuilder::new().gpus("1").assigned("runpod").build();
    // Three attempts, none given up yet: the first is retried, as attempt 2 of 3.
    let retried = step(&first, 3);
    assert!(
        matches!(&retried, Step::RetryStart { provider: 0, attempt: 1, message }
            if message.contains("still starting at provider runpod (pulling image) 1800s")
                && message.contains("attempt 2 of 3")),
        "{retried:?}"
    );
    // Two given up already (the annotation the VK wrote): the third fails the pod.
    let third = PodBuilder::new()
        .gpus("1")
        .assigned("runpod")
        .annotation(crate::pods::spec::ANN_START_ATTEMPTS, "2")
        .build();
    let failed = step(&third, 3);
    assert!(
        matches!(&failed, Step::Fail { reason: "StartDeadlineExceeded", stop: Some(0), message }
            if message.contains("the last of 3 attempts")),
        "{failed:?}"
    );
    // The second of three is retried once more.
    let second = PodBuilder::new()
        .gpus("1")
        .assigned("runpod")
        .annotation(crate::pods::spec::ANN_START_ATTEMPTS, "1")
        .build();
    assert!(matches!(
        step(&second, 3),
        Step::RetryStart { attempt: 2, .. }
    ));
    // One attempt (and 0, read as one): no retry.
    for one in [0, 1] {
        assert!(matches!(
            step(&first, one),
            Step::Fail {
                reason: "StartDeadlineExceeded",
                ..
            }
        ));
    }
}

#[test]
fn a_start_past_its_deadline_is_judged_on_a_list_from_after_the_deadline() {
    let pod = PodBuilder::new().gpus("1").assigned("runpod").build();
    // Created 1810 s ago: 10 s past the deadline of 1800 s.
    let obs = created_at(WorkloadState::Starting, "2026-11-29T09:29:50Z");
    let step = |age: Option<u64>| {
        let memory = Memory {
            last_list_age: age.map(Duration::from_secs),
            ..Memory::fresh()
        };
        with_deadline_rules(|rules| {
            let found = Some(Found {
                provider: 0,
                observed: &obs,
            });
            decide(rules, Some(&pod), found, &memory, ts(NOW))
        })
    };
    // The last list answered 60 s ago, before the deadline (lists backing off after an
    // outage): the workload may have started since; looked at again after a poll.
    assert!(
        matches!(
            step(Some(60)),
            Step::Report {
                provider: 0,
                recheck: Some(_),
                ..
            }
        ),
        "{:?}",
        step(Some(60))
    );
    // A list from after the deadline still shows it starting: given up.
    assert!(matches!(
        step(Some(5)),
        Step::Fail {
            reason: "StartDeadlineExceeded",
            ..
        }
    ));
}
