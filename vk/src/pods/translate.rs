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

mod containers;
use containers::{apply_exits, others};

/// Pod-level reasons the framework sets; documented for users in docs/status.md.
pub mod reason {
    pub const PROVIDER_CAPACITY: &str = "ProviderCapacity";
    pub const PROVIDER_ERROR: &str = "ProviderError";
    /// Every provider that could run the pod is unhealthy (circuit open) for now.
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
    /// A spend or workload guardrail holds the pod until room appears.
    pub const LIMIT_REACHED: &str = "LimitReached";
    /// The workload was still queued or starting at its start deadline (an image that never
    /// pulls): the pod fails and the workload is deleted.
    pub const START_DEADLINE_EXCEEDED: &str = "StartDeadlineExceeded";
    pub const PROVIDER_LOST: &str = "ProviderLost";
    /// The workload vanished because the provider account ran out of money.
    pub const PROVIDER_BALANCE_EXHAUSTED: &str = "ProviderBalanceExhausted";
    pub const PROVIDER_QUEUED: &str = "ProviderQueued";
    pub const PREEMPTED: &str = "Preempted";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const UNKNOWN_PROVIDER: &str = "UnknownProvider";
    pub const NOT_ALLOWED: &str = "NotAllowed";
    pub const SECRETS_NOT_ALLOWED: &str = "SecretsNotAllowed";
    /// Held instead of failed: too many pods of its owner failed in a short time.
    pub const REFUSAL_STORM: &str = "RefusalStorm";
    pub const CONFIG_ERROR: &str = "CreateContainerConfigError";
    pub const CREATING: &str = "ContainerCreating";
    pub const CRASH_LOOP: &str = "CrashLoopBackOff";
    pub const STATE_UNKNOWN: &str = "ProviderStateUnknown";
    /// A container or sidecar left out by `gpu-vk.io/omit-containers`.
    pub const NOT_RUN_ON_PROVIDER: &str = "NotRunOnProvider";
    /// A probe of the pod cannot be evaluated on its provider (Event reason).
    pub const PROBE_NOT_EVALUATED: &str = "ProbeNotEvaluated";
    /// An init container before its workload runs.
    pub const POD_INITIALIZING: &str = "PodInitializing";
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

/// What the main container's readiness probe says, as the prober last published it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Readiness {
    /// No readiness probe: ready while the provider reports the workload running.
    #[default]
    Unprobed,
    /// The probe's result (false until its first success after the container started).
    Probed { ready: bool },
    /// The probe cannot be evaluated on this provider: ready as without a probe; `message`
    /// names the probe and the provider and is shown on the Ready condition.
    NotEvaluable { message: String },
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
    /// The readiness probe's result; only consulted while the workload runs.
    pub readiness: Readiness,
    /// The provider runs every container of the pod (each a Slurm job step): the others share
    /// the main container's state instead of being reported as left out.
    pub all_containers: bool,
}

/// Translates a situation into the pod's status, keeping fields the VK does not own.
pub fn pod_status(pod: &Pod, situation: &Situation<'_>, cx: &Context<'_>) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let container = crate::pods::spec::main_container(pod);
    let container_name = container.map(|c| c.name.clone()).unwrap_or_default();
    let image = container.and_then(|c| c.image.clone()).unwrap_or_default();
    let old_cs = old
        .container_statuses
        .as_ref()
        .and_then(|v| v.iter().find(|c| c.name == container_name))
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

    let (phase, pod_reason, message, mut ready, mut ready_reason, pod_ip);
    let mut ready_message: Option<String> = None;
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
                    message = obs.message.clone(); // Vast: when its rental contract ends
                    if let WorkloadState::NotReady { reason: r } = &obs.state {
                        ready = false;
                        ready_reason = "ProviderNotReady";
                        cs.ready = false;
                        let _ = r;
                    } else if cx.readiness == (Readiness::Probed { ready: false }) {
                        ready = false;
                        ready_reason = "ContainersNotReady";
                        ready_message =
                            Some(format!("containers with unready status: [{}]", cs.name));
                    } else {
                        ready = true;
                        ready_reason = "";
                        if let Readiness::NotEvaluable { message: m } = &cx.readiness {
                            ready_message = Some(m.clone());
                        }
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
    // The main container has run (or runs) once it is running or has ended: so have the init
    // containers, which run before its command in the same workload.
    let initialized = cs
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        || cs
            .last_state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some());
    let (mut statuses, mut init_statuses) = others(pod, cs, initialized, cx);
    let mut init_failed = false;
    if let Situation::Observed(obs) = situation
        && cx.all_containers
        && !obs.container_exits.is_empty()
    {
        let ended = apply_exits(
            pod,
            obs,
            cx,
            &mut statuses,
            init_statuses.as_deref_mut(),
            phase,
        );
        init_failed = ended.init_failed;
        if !ended.unready.is_empty() {
            (ready, ready_reason) = (false, "ContainersNotReady");
            ready_message = Some(format!(
                "containers with unready status: [{}]",
                ended.unready.join(" ")
            ));
        }
    }
    st.container_statuses = Some(statuses);
    st.init_container_statuses = init_statuses;
    let initialized =
        !init_failed && (initialized || crate::pods::spec::run_init_containers(pod).is_empty());
    let containers_ready = ready;
    let not_ready_reason = (!ready).then_some(ready_reason);
    let with_message = |mut c: PodCondition| {
        c.message.clone_from(&ready_message);
        c
    };
    let conds = vec![
        condition("PodReadyToStartContainers", true, None),
        condition(
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
        ),
        with_message(condition("Ready", ready, not_ready_reason)),
        with_message(condition(
            "ContainersReady",
            containers_ready,
            not_ready_reason,
        )),
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
mod tests;
