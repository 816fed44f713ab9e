//! Status translation: one pure function from (pod, what the provider reports) to `PodStatus`.
//!
//! The framework decides *what is true* (a [`Situation`]); this module only says how that truth
//! looks in Kubernetes terms: phase, conditions, container statuses, reasons, exit codes and
//! times. Times already on the pod are kept when the state did not change, so translating the
//! same situation twice gives the same status and no write.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::provider::Observed;

mod containers;
mod phase;
use containers::{apply_exits, others};
use phase::Outcome;

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
    /// A workload still starting at its deadline was deleted and is created again.
    pub const START_RETRIED: &str = "StartRetried";
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
    /// The provider could not pull the image (the kubelet's container reason).
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// Waiting for the image back-off before the next pull (the kubelet's container reason).
    pub const IMAGE_PULL_BACKOFF: &str = "ImagePullBackOff";
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
    let Outcome {
        state,
        last,
        container_id,
        started,
        phase,
        reason: pod_reason,
        message,
        mut ready,
        mut ready_reason,
        mut ready_message,
        pod_ip,
    } = phase::outcome(
        situation,
        cx,
        old.phase.as_deref(),
        old_cs.as_ref().and_then(|c| c.state.as_ref()),
        &container_name,
    );
    let last_state = match last {
        Some(t) => Some(ContainerState {
            terminated: Some(t),
            ..Default::default()
        }),
        None => old_cs.as_ref().and_then(|c| c.last_state.clone()),
    };
    let mut cs = ContainerStatus {
        name: container_name,
        image,
        image_id: String::new(),
        restart_count: cx.restart_count,
        last_state,
        container_id,
        state: Some(state),
        ready,
        started: Some(started),
        ..Default::default()
    };
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
    let all = all_statuses(pod, cs, situation, cx, phase);
    if !all.unready.is_empty() {
        (ready, ready_reason) = (false, "ContainersNotReady");
        ready_message = Some(format!(
            "containers with unready status: [{}]",
            all.unready.join(" ")
        ));
    }
    st.container_statuses = Some(all.containers);
    st.init_container_statuses = all.init_containers;
    st.conditions = Some(conditions(
        old.conditions.as_deref().unwrap_or_default(),
        all.initialized,
        (ready, ready_reason, ready_message),
        &now,
    ));
    st
}

/// Every container's status, and what they say of the pod.
struct AllStatuses {
    containers: Vec<ContainerStatus>,
    init_containers: Option<Vec<ContainerStatus>>,
    /// The init containers have run (or there are none to run), and none failed.
    initialized: bool,
    /// Regular containers that ended while the pod runs.
    unready: Vec<String>,
}

/// The statuses of every container from the main one's: the others share or wait on its
/// state, and where the provider reports each container's end, each gets its own.
fn all_statuses(
    pod: &Pod,
    main: ContainerStatus,
    situation: &Situation<'_>,
    cx: &Context<'_>,
    phase: &str,
) -> AllStatuses {
    // The main container has run (or runs) once it is running or has ended: so have the init
    // containers, which run before its command in the same workload.
    let has_run = main
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        || main
            .last_state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some());
    let (mut containers, mut init_containers) = others(pod, main, has_run, cx);
    let (mut init_failed, mut unready) = (false, Vec::new());
    if let Situation::Observed(obs) = situation
        && cx.all_containers
        && !obs.container_exits.is_empty()
    {
        let ended = apply_exits(
            pod,
            obs,
            cx,
            &mut containers,
            init_containers.as_deref_mut(),
            phase,
        );
        (init_failed, unready) = (ended.init_failed, ended.unready);
    }
    let initialized =
        !init_failed && (has_run || crate::pods::spec::run_init_containers(pod).is_empty());
    AllStatuses {
        containers,
        init_containers,
        initialized,
        unready,
    }
}

/// The pod's conditions: initialized or not, and ready (with the reason and message of not
/// ready) for both Ready and ContainersReady, the VK reading readiness of the main container.
fn conditions(
    old: &[PodCondition],
    initialized: bool,
    (ready, ready_reason, ready_message): (bool, &str, Option<String>),
    now: &Time,
) -> Vec<PodCondition> {
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
        with_message(condition("ContainersReady", ready, not_ready_reason)),
        condition("PodScheduled", true, None),
    ];
    merge_conditions(old, conds, now)
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
