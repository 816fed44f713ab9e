//! Status translation: one pure function from (pod, what the provider reports) to `PodStatus`.
//!
//! The framework decides *what is true* (a [`Situation`]); this module only says how that truth
//! looks in Kubernetes terms: phase, conditions, container statuses, reasons, exit codes and
//! times. Times already on the pod are kept when the state did not change, so translating the
//! same situation twice gives the same status and no write.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::provider::{Observed, WorkloadState};

/// Pod-level reasons the framework sets; documented for users in docs/status.md.
pub mod reason {
    pub const PROVIDER_CAPACITY: &str = "ProviderCapacity";
    pub const PROVIDER_ERROR: &str = "ProviderError";
    pub const PROVIDER_LOST: &str = "ProviderLost";
    pub const PROVIDER_QUEUED: &str = "ProviderQueued";
    pub const PREEMPTED: &str = "Preempted";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const UNKNOWN_PROVIDER: &str = "UnknownProvider";
    pub const CONFIG_ERROR: &str = "CreateContainerConfigError";
    pub const CREATING: &str = "ContainerCreating";
    pub const CRASH_LOOP: &str = "CrashLoopBackOff";
    pub const STATE_UNKNOWN: &str = "ProviderStateUnknown";
}

/// What is true about the pod's workload, as decided by the framework.
#[derive(Clone, Debug)]
pub enum Situation<'a> {
    /// No workload yet; the container waits with this reason (ContainerCreating,
    /// ProviderCapacity, CreateContainerConfigError...).
    Waiting { reason: &'a str, message: String },
    /// The provider reports the workload in this state.
    Observed(&'a Observed),
    /// Terminal failure decided by the framework (InvalidSpec, ProviderLost, UnknownProvider).
    Failed { reason: &'a str, message: String },
    /// The container ended and waits for its restart back-off; `last` is how it ended.
    BackOff {
        last: ContainerStateTerminated,
        message: String,
    },
}

/// Context of one translation.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// Provider name, used in container ids (`<provider>://<workload id>`).
    pub provider: &'a str,
    /// The node's address, reported as hostIP.
    pub host_ip: &'a str,
    /// Container restarts so far (ours plus the provider's own).
    pub restart_count: i32,
    pub now: Timestamp,
}

/// Translates a situation into the pod's status, keeping fields the VK does not own.
pub fn pod_status(pod: &Pod, situation: &Situation<'_>, cx: &Context<'_>) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let container = pod.spec.as_ref().and_then(|s| s.containers.first());
    let container_name = container.map(|c| c.name.clone()).unwrap_or_default();
    let image = container.and_then(|c| c.image.clone()).unwrap_or_default();
    let old_cs = old
        .container_statuses
        .as_ref()
        .and_then(|v| v.first())
        .cloned();

    let now = Time(cx.now);
    let mut cs = ContainerStatus {
        name: container_name,
        image,
        image_id: String::new(),
        restart_count: cx.restart_count,
        last_state: old_cs.as_ref().and_then(|c| c.last_state.clone()),
        ..Default::default()
    };

    let waiting = |reason: &str, message: String| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message: (!message.is_empty()).then_some(message),
        }),
        ..Default::default()
    };

    let (phase, pod_reason, message, ready, ready_reason, pod_ip);
    match situation {
        Situation::Waiting { reason, message: m } => {
            cs.state = Some(waiting(reason, m.clone()));
            phase = "Pending";
            pod_reason = None;
            message = None;
            ready = false;
            ready_reason = "ContainersNotReady";
            pod_ip = None;
        }
        Situation::Failed { reason, message: m } => {
            cs.state = Some(waiting(reason, m.clone()));
            phase = "Failed";
            pod_reason = Some((*reason).to_owned());
            message = Some(m.clone());
            ready = false;
            ready_reason = "PodFailed";
            pod_ip = None;
        }
        Situation::BackOff { last, message: m } => {
            cs.state = Some(waiting(reason::CRASH_LOOP, m.clone()));
            cs.last_state = Some(ContainerState {
                terminated: Some(last.clone()),
                ..Default::default()
            });
            phase = "Running";
            pod_reason = None;
            message = None;
            ready = false;
            ready_reason = "ContainersNotReady";
            pod_ip = None;
        }
        Situation::Observed(obs) => {
            cs.container_id = Some(format!("{}://{}", cx.provider, obs.id));
            pod_ip = obs.ip.clone();
            let started = obs.started_at.map(Time);
            let finished = obs.finished_at.map(Time);
            let terminated = |exit_code: i32, reason: &str| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code,
                    reason: Some(reason.to_owned()),
                    message: obs.message.clone(),
                    started_at: started.clone(),
                    finished_at: finished.clone().or_else(|| Some(now.clone())),
                    container_id: Some(format!("{}://{}", cx.provider, obs.id)),
                    signal: None,
                }),
                ..Default::default()
            };
            match &obs.state {
                WorkloadState::Queued { reason: r } => {
                    let msg = r
                        .clone()
                        .or_else(|| obs.message.clone())
                        .unwrap_or_default();
                    cs.state = Some(waiting(reason::PROVIDER_QUEUED, msg));
                    phase = "Pending";
                    (pod_reason, message, ready, ready_reason) =
                        (None, None, false, "ContainersNotReady");
                }
                WorkloadState::Starting => {
                    cs.state = Some(waiting(
                        reason::CREATING,
                        obs.message.clone().unwrap_or_default(),
                    ));
                    phase = "Pending";
                    (pod_reason, message, ready, ready_reason) =
                        (None, None, false, "ContainersNotReady");
                }
                WorkloadState::Running | WorkloadState::NotReady { .. } => {
                    cs.state = Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: started.or_else(|| Some(now.clone())),
                        }),
                        ..Default::default()
                    });
                    cs.started = Some(true);
                    phase = "Running";
                    pod_reason = None;
                    message = None;
                    if let WorkloadState::NotReady { reason: r } = &obs.state {
                        ready = false;
                        ready_reason = "ProviderNotReady";
                        cs.ready = false;
                        let _ = r;
                    } else {
                        ready = true;
                        ready_reason = "";
                    }
                }
                WorkloadState::Succeeded => {
                    cs.state = Some(terminated(0, "Completed"));
                    phase = "Succeeded";
                    (pod_reason, message, ready, ready_reason) =
                        (None, None, false, "PodCompleted");
                }
                WorkloadState::Failed {
                    exit_code,
                    reason: r,
                } => {
                    cs.state = Some(terminated(*exit_code, r.as_str()));
                    phase = "Failed";
                    pod_reason = (r.as_str() != "Error").then(|| r.as_str().to_owned());
                    message = obs.message.clone();
                    (ready, ready_reason) = (false, "PodFailed");
                }
                WorkloadState::Preempted => {
                    cs.state = Some(terminated(137, reason::PREEMPTED));
                    phase = "Failed";
                    pod_reason = Some(reason::PREEMPTED.to_owned());
                    message = Some(
                        obs.message
                            .clone()
                            .unwrap_or_else(|| format!("preempted by provider {}", cx.provider)),
                    );
                    (ready, ready_reason) = (false, "PodFailed");
                }
                WorkloadState::Lost => {
                    cs.state = Some(terminated(137, reason::PROVIDER_LOST));
                    phase = "Failed";
                    pod_reason = Some(reason::PROVIDER_LOST.to_owned());
                    message =
                        Some(obs.message.clone().unwrap_or_else(|| {
                            format!("provider {} lost the workload", cx.provider)
                        }));
                    (ready, ready_reason) = (false, "PodFailed");
                }
                WorkloadState::Unknown { raw } => {
                    // Never invent progress: keep the last known container state and phase.
                    cs.state = old_cs.as_ref().and_then(|c| c.state.clone()).or_else(|| {
                        Some(waiting(
                            reason::STATE_UNKNOWN,
                            format!("provider state {raw:?}"),
                        ))
                    });
                    phase = match old.phase.as_deref() {
                        Some("Running") => "Running",
                        _ => "Pending",
                    };
                    (pod_reason, message, ready, ready_reason) =
                        (None, None, false, reason::STATE_UNKNOWN);
                }
            }
        }
    }
    cs.ready = ready;
    if cs.started.is_none() {
        cs.started = Some(false);
    }
    keep_times(&mut cs, old_cs.as_ref());

    let mut st = old.clone();
    st.phase = Some(phase.to_owned());
    st.reason = pod_reason;
    st.message = message;
    st.host_ip = Some(cx.host_ip.to_owned());
    st.host_ips = Some(vec![k8s_openapi::api::core::v1::HostIP {
        ip: cx.host_ip.to_owned(),
    }]);
    st.pod_ip = pod_ip.clone();
    st.pod_ips = pod_ip.map(|ip| vec![PodIP { ip }]);
    st.start_time = old.start_time.clone().or_else(|| Some(now.clone()));
    st.container_statuses = Some(vec![cs]);

    let initialized = true;
    let containers_ready = ready;
    let not_ready_reason = (!ready).then_some(ready_reason);
    let conds = vec![
        condition("PodReadyToStartContainers", true, None),
        condition("Initialized", initialized, None),
        condition("Ready", ready, not_ready_reason),
        condition("ContainersReady", containers_ready, not_ready_reason),
        condition("PodScheduled", true, None),
    ];
    st.conditions = Some(merge_conditions(
        old.conditions.as_deref().unwrap_or_default(),
        conds,
        &now,
    ));
    st
}

fn condition(type_: &str, status: bool, reason: Option<&str>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.filter(|r| !r.is_empty()).map(str::to_owned),
        ..Default::default()
    }
}

/// Keeps transition times of conditions whose status did not change, and conditions the VK
/// does not own (set by others, e.g. readiness gates, DisruptionTarget).
fn merge_conditions(old: &[PodCondition], new: Vec<PodCondition>, now: &Time) -> Vec<PodCondition> {
    let mut out: Vec<PodCondition> = new
        .into_iter()
        .map(|mut c| {
            let prev = old.iter().find(|o| o.type_ == c.type_);
            c.last_transition_time = match prev {
                Some(p) if p.status == c.status => p.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
            c.observed_generation = prev.and_then(|p| p.observed_generation);
            c
        })
        .collect();
    for o in old {
        if !out.iter().any(|c| c.type_ == o.type_) {
            out.push(o.clone());
        }
    }
    out
}

/// Keeps the timestamps already on the pod when the container state kind did not change, so a
/// repeated translation is byte-identical.
fn keep_times(cs: &mut ContainerStatus, old: Option<&ContainerStatus>) {
    let Some(old_state) = old.and_then(|o| o.state.as_ref()) else {
        return;
    };
    let Some(state) = cs.state.as_mut() else {
        return;
    };
    if let (Some(new), Some(prev)) = (state.running.as_mut(), old_state.running.as_ref())
        && prev.started_at.is_some()
    {
        new.started_at = prev.started_at.clone();
    }
    if let (Some(new), Some(prev)) = (state.terminated.as_mut(), old_state.terminated.as_ref())
        && new.exit_code == prev.exit_code
        && new.reason == prev.reason
    {
        new.finished_at = prev.finished_at.clone().or(new.finished_at.clone());
        new.started_at = new.started_at.clone().or(prev.started_at.clone());
    }
}

/// True when writing `new` would change what the pod shows.
pub fn status_changed(old: Option<&PodStatus>, new: &PodStatus) -> bool {
    match old {
        None => true,
        Some(old) => old != new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Owner;
    use crate::provider::{FailureReason, Usage};
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod() -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("train-0".into()),
                namespace: Some("research".into()),
                uid: Some(UID.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "trainer".into(),
                    image: Some("ghcr.io/acme/train:1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn observed(state: WorkloadState) -> Observed {
        Observed {
            id: Owner::new("c1", "vk-gpu").workload_id(UID).unwrap(),
            provider_id: "rp-123".into(),
            state,
            message: None,
            created_at: Some(ts("2026-11-29T10:00:00Z")),
            started_at: Some(ts("2026-11-29T10:00:05Z")),
            finished_at: None,
            ip: Some("10.1.2.3".into()),
            provider_restarts: 0,
            usage: Some(Usage {
                cpu_usage_nanos: 1,
                cpu_millis: 1,
                memory_bytes: 1,
                timestamp: ts("2026-11-29T10:00:06Z"),
            }),
        }
    }

    fn cx() -> Context<'static> {
        Context {
            provider: "runpod",
            host_ip: "127.0.0.1",
            restart_count: 0,
            now: ts("2026-11-29T10:01:00Z"),
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
}
