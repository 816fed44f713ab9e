//! What the main container's state says of the pod, one situation (and one provider state) at
//! a time: its phase, reason, message and readiness. [`super::pod_status`] assembles them.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Context, Readiness, Situation, reason};
use crate::provider::{Observed, WorkloadState};

/// The main container's state and what it makes of the pod.
pub(super) struct Outcome {
    pub state: ContainerState,
    /// How the container last ended, when the situation says it (a crash loop's last exit);
    /// otherwise the status keeps the one it had.
    pub last: Option<ContainerStateTerminated>,
    pub container_id: Option<String>,
    pub started: bool,
    pub phase: &'static str,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub ready: bool,
    /// The Ready condition's reason while not ready.
    pub ready_reason: &'static str,
    pub ready_message: Option<String>,
    pub pod_ip: Option<String>,
}

impl Outcome {
    fn new(state: ContainerState, phase: &'static str, ready_reason: &'static str) -> Self {
        Self {
            state,
            last: None,
            container_id: None,
            started: false,
            phase,
            reason: None,
            message: None,
            ready: false,
            ready_reason,
            ready_message: None,
            pod_ip: None,
        }
    }

    fn pending(state: ContainerState) -> Self {
        Self::new(state, "Pending", "ContainersNotReady")
    }

    fn failed(state: ContainerState, reason: Option<String>, message: Option<String>) -> Self {
        Self {
            reason,
            message,
            ..Self::new(state, "Failed", "PodFailed")
        }
    }
}

/// A waiting container state with this reason (and message, unless empty).
pub(super) fn waiting(reason: &str, message: String) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message: (!message.is_empty()).then_some(message),
        }),
        ..Default::default()
    }
}

/// The outcome of `situation` for the main container `name`, given the phase and container
/// state the pod had (a provider state we cannot read keeps them).
pub(super) fn outcome(
    situation: &Situation<'_>,
    cx: &Context<'_>,
    old_phase: Option<&str>,
    old_state: Option<&ContainerState>,
    name: &str,
) -> Outcome {
    match situation {
        Situation::Waiting { reason, message } => {
            Outcome::pending(waiting(reason, message.clone()))
        }
        Situation::Failed { reason, message } => Outcome::failed(
            waiting(reason, message.clone()),
            Some((*reason).to_owned()),
            Some(message.clone()),
        ),
        Situation::BackOff { last, message } => Outcome {
            last: Some(last.clone()),
            phase: "Running",
            ..Outcome::pending(waiting(reason::CRASH_LOOP, message.clone()))
        },
        Situation::Observed(obs) => Outcome {
            container_id: Some(format!("{}://{}", cx.provider, obs.id)),
            pod_ip: obs.ip.clone(),
            ..observed(obs, cx, old_phase, old_state, name)
        },
    }
}

/// The outcome of a workload in the state its provider reports.
fn observed(
    obs: &Observed,
    cx: &Context<'_>,
    old_phase: Option<&str>,
    old_state: Option<&ContainerState>,
    name: &str,
) -> Outcome {
    let terminated = |exit_code: i32, reason: &str| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_owned()),
            message: obs.message.clone(),
            started_at: obs.started_at.map(Time),
            finished_at: Some(Time(obs.finished_at.unwrap_or(cx.now))),
            container_id: Some(format!("{}://{}", cx.provider, obs.id)),
            signal: None,
        }),
        ..Default::default()
    };
    let message_or = |default: String| Some(obs.message.clone().unwrap_or(default));
    match &obs.state {
        WorkloadState::Queued { reason: r } => {
            let msg = r.clone().or_else(|| obs.message.clone());
            Outcome::pending(waiting(reason::PROVIDER_QUEUED, msg.unwrap_or_default()))
        }
        WorkloadState::Starting => Outcome::pending(waiting(
            reason::CREATING,
            obs.message.clone().unwrap_or_default(),
        )),
        WorkloadState::Running | WorkloadState::NotReady { .. } => running(obs, cx, name),
        WorkloadState::Succeeded => {
            Outcome::new(terminated(0, "Completed"), "Succeeded", "PodCompleted")
        }
        WorkloadState::Failed {
            exit_code,
            reason: r,
        } => Outcome::failed(
            terminated(*exit_code, r.as_str()),
            (r.as_str() != "Error").then(|| r.as_str().to_owned()),
            obs.message.clone(),
        ),
        WorkloadState::Preempted => Outcome::failed(
            terminated(137, reason::PREEMPTED),
            Some(reason::PREEMPTED.to_owned()),
            message_or(format!("preempted by provider {}", cx.provider)),
        ),
        WorkloadState::Lost => Outcome::failed(
            terminated(137, reason::PROVIDER_LOST),
            Some(reason::PROVIDER_LOST.to_owned()),
            message_or(format!("provider {} lost the workload", cx.provider)),
        ),
        WorkloadState::Unknown { raw } => {
            // Never invent progress: keep the last known container state and phase.
            let state = old_state.cloned().unwrap_or_else(|| {
                waiting(reason::STATE_UNKNOWN, format!("provider state {raw:?}"))
            });
            let phase = match old_phase {
                Some("Running") => "Running",
                _ => "Pending",
            };
            Outcome::new(state, phase, reason::STATE_UNKNOWN)
        }
    }
}

/// A running workload: ready unless its provider says not yet or its readiness probe fails.
fn running(obs: &Observed, cx: &Context<'_>, name: &str) -> Outcome {
    let state = ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(Time(obs.started_at.unwrap_or(cx.now))),
        }),
        ..Default::default()
    };
    let mut out = Outcome {
        started: true,
        message: obs.message.clone(), // Vast: when its rental contract ends
        ..Outcome::new(state, "Running", "ContainersNotReady")
    };
    if matches!(obs.state, WorkloadState::NotReady { .. }) {
        out.ready_reason = "ProviderNotReady";
    } else if cx.readiness == (Readiness::Probed { ready: false }) {
        out.ready_message = Some(format!("containers with unready status: [{name}]"));
    } else {
        out.ready = true;
        out.ready_reason = "";
        if let Readiness::NotEvaluable { message } = &cx.readiness {
            out.ready_message = Some(message.clone());
        }
    }
    out
}
