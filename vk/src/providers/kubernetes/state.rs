//! Remote pod status -> [`Observed`]: one pure function, unit-tested on pods as a real API
//! server and kubelet write them.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};

use crate::naming::{Owner, WorkloadId};
use crate::provider::{
    FailureReason, Observed, PUBLISHED_ANNOTATION, Price, Usage, WorkloadState, parse_published,
};
use crate::providers::http;

/// CPU (millicores) and memory (bytes) of a remote pod now, from `metrics.k8s.io`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// The provider id of a remote pod: `<namespace>/<name>/<uid>` (the UID makes a delete of
/// one generation never hit the next one created under the same name).
pub fn provider_id(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}/{name}/{uid}")
}

/// Splits a provider id into namespace, name and (possibly empty) UID.
pub fn parse_provider_id(id: &str) -> Option<(&str, &str, &str)> {
    let mut parts = id.splitn(3, '/');
    let ns = parts.next().filter(|s| !s.is_empty())?;
    let name = parts.next().filter(|s| !s.is_empty())?;
    Some((ns, name, parts.next().unwrap_or("")))
}

/// Translates one listed remote pod; `None` when it is not one of this VK's workloads, or
/// when it is being deleted with no disruption recorded (a delete of ours, or of someone
/// else's: absent from the following lists, it then counts as lost).
pub fn observe(
    owner: &Owner,
    pod: &Pod,
    price_per_gpu: Option<Price>,
    gpu_resource: &str,
    usage: Option<PodUsage>,
) -> Option<Observed> {
    let name = pod.metadata.name.as_deref()?;
    let id = WorkloadId::parse(name)?;
    if !owner.owns(&id) {
        return None;
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let status = pod.status.clone().unwrap_or_default();
    let cs = status
        .container_statuses
        .as_ref()
        .and_then(|v| v.first())
        .cloned();
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let disruption = condition(pod, "DisruptionTarget").filter(|c| c.status == "True");
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let (state, mut message) = if deleting || phase == "Failed" {
        match disruption {
            Some(c) if phase != "Succeeded" => (
                disrupted(c.reason.as_deref().unwrap_or("")),
                c.message.clone().or_else(|| c.reason.clone()),
            ),
            _ if deleting => return None,
            _ => state_of(pod, cs.as_ref()),
        }
    } else {
        state_of(pod, cs.as_ref())
    };
    if message.is_none() {
        message = status.message.clone();
    }
    let pull_failure = pull_failure(cs.as_ref(), &state);
    let running = cs.as_ref().and_then(|c| c.state.as_ref());
    let started_at = running
        .and_then(|s| {
            s.running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
        })
        .map(|t| t.0);
    let finished_at = running
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.finished_at.as_ref().map(|f| f.0))
        .unwrap_or(None)
        .filter(|_| state.is_terminal());
    let gpus = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(gpu_resource))
        .and_then(|q| q.0.parse::<u32>().ok())
        .unwrap_or(0);
    let usage = usage.filter(|_| state == WorkloadState::Running).map(|u| {
        let uptime = started_at
            .map(|s| Timestamp::now().duration_since(s).as_secs_f64().max(0.0))
            .unwrap_or(0.0);
        Usage {
            cpu_usage_nanos: (u.cpu_millis as f64 * uptime * 1_000_000.0).round() as u64,
            cpu_millis: u.cpu_millis,
            memory_bytes: u.memory_bytes,
            timestamp: Timestamp::now(),
        }
    });
    Some(Observed {
        id,
        provider_id: provider_id(ns, name, uid),
        state,
        message: message.map(|m| http::truncate(&m)),
        created_at: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        started_at,
        finished_at,
        ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()),
        provider_restarts: 0,
        // A remote pod's IP is inside the remote cluster's network, not reachable from the VK
        // in general; probes of such pods say they cannot be evaluated. A remote pod run by a
        // virtual kubelet of ours on a provider that publishes its ports elsewhere says where.
        ports: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PUBLISHED_ANNOTATION))
            .map(|t| parse_published(t))
            .unwrap_or_default(),
        usage,
        price: price_per_gpu.map(|p| p.times(gpus.max(1))),
        container_exits: Default::default(),
        pull_failure,
    })
}

fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// A pod the remote cluster took away (its `DisruptionTarget` condition's reason).
fn disrupted(reason: &str) -> WorkloadState {
    match reason {
        // The remote kubelet killed it (node pressure): someone else killed it.
        "TerminationByKubelet" => WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted,
        },
        // Its node is gone or unreachable.
        "DeletionByTaintManager" | "DeletionByPodGC" => WorkloadState::Lost,
        // PreemptionByScheduler, EvictionByEvictionAPI (drain, descheduler) and anything new.
        _ => WorkloadState::Preempted,
    }
}

/// The remote kubelet could not pull the image of a container still starting: its own words.
fn pull_failure(cs: Option<&ContainerStatus>, state: &WorkloadState) -> Option<String> {
    if *state != WorkloadState::Starting {
        return None;
    }
    let w = cs?.state.as_ref()?.waiting.as_ref()?;
    if !matches!(
        w.reason.as_deref(),
        Some("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")
    ) {
        return None;
    }
    Some(http::truncate(
        w.message
            .as_deref()
            .filter(|m| !m.is_empty())
            .or(w.reason.as_deref())
            .unwrap_or_default(),
    ))
}

/// The state from the phase and the container's state.
fn state_of(pod: &Pod, cs: Option<&ContainerStatus>) -> (WorkloadState, Option<String>) {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let state = cs.and_then(|c| c.state.as_ref());
    let waiting = state.and_then(|s| s.waiting.as_ref());
    let terminated = state.and_then(|s| s.terminated.as_ref());
    let waiting_message = || {
        waiting.and_then(|w| {
            let reason = w.reason.as_deref()?;
            Some(match w.message.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_owned(),
            })
        })
    };
    match phase {
        "Pending" => {
            let scheduled = condition(pod, "PodScheduled");
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            match scheduled {
                Some(c) if c.status == "False" => {
                    let reason = c
                        .message
                        .clone()
                        .or_else(|| c.reason.clone())
                        .map(|m| http::truncate(&m));
                    (WorkloadState::Queued { reason }, None)
                }
                _ if !bound => (WorkloadState::Queued { reason: None }, None),
                // Image pulling (or failing to pull: the start deadline ends that), container
                // being created.
                _ => (WorkloadState::Starting, waiting_message()),
            }
        }
        "Running" => match (state, cs) {
            (Some(s), Some(c)) if s.running.is_some() => {
                if c.ready {
                    (WorkloadState::Running, None)
                } else {
                    (
                        WorkloadState::NotReady {
                            reason: "the remote container is not ready".into(),
                        },
                        None,
                    )
                }
            }
            _ if terminated.is_some() => terminated_state(terminated),
            _ => (WorkloadState::Starting, waiting_message()),
        },
        "Succeeded" => (WorkloadState::Succeeded, None),
        "Failed" => {
            let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("");
            match reason {
                "Evicted" => (
                    WorkloadState::Failed {
                        exit_code: 137,
                        reason: FailureReason::Evicted,
                    },
                    None,
                ),
                "DeadlineExceeded" => (
                    WorkloadState::Failed {
                        exit_code: 137,
                        reason: FailureReason::DeadlineExceeded,
                    },
                    None,
                ),
                _ if terminated.is_some() => terminated_state(terminated),
                _ => (
                    WorkloadState::Failed {
                        exit_code: 128,
                        reason: FailureReason::ProviderError,
                    },
                    Some(if reason.is_empty() {
                        "the remote pod failed without a container exit".into()
                    } else {
                        format!("the remote pod failed: {reason}")
                    }),
                ),
            }
        }
        other => (
            WorkloadState::Unknown {
                raw: other.to_owned(),
            },
            None,
        ),
    }
}

fn terminated_state(
    t: Option<&k8s_openapi::api::core::v1::ContainerStateTerminated>,
) -> (WorkloadState, Option<String>) {
    let Some(t) = t else {
        return (WorkloadState::Starting, None);
    };
    let state = match (t.exit_code, t.reason.as_deref()) {
        (_, Some("OOMKilled")) => WorkloadState::Failed {
            exit_code: if t.exit_code == 0 { 137 } else { t.exit_code },
            reason: FailureReason::OomKilled,
        },
        (0, _) => WorkloadState::Succeeded,
        (code, _) => WorkloadState::Failed {
            exit_code: code,
            reason: FailureReason::Error,
        },
    };
    (state, t.message.clone().filter(|m| !m.is_empty()))
}

/// The metrics API gives a rate, the kubelet summary wants a counter that never falls: each
/// remote pod's counter integrates the rate over the time since its container started
/// ([`crate::providers::cpu`]); pods gone from `out` are forgotten.
pub(super) fn count_cpu(
    cpu: &mut crate::providers::cpu::CpuCounters,
    out: &mut [Observed],
    now: Timestamp,
) {
    for obs in out.iter_mut() {
        let uptime = obs
            .started_at
            .map(|s| now.duration_since(s).as_secs_f64())
            .unwrap_or(0.0);
        if let Some(u) = obs.usage.as_mut() {
            u.cpu_usage_nanos = cpu.advance(&obs.provider_id, u.cpu_millis, uptime);
        }
    }
    cpu.retain(out.iter().map(|o| o.provider_id.as_str()));
}
