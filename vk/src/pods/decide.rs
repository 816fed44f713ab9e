//! What a pod should become next: one pure function from (pod, observed workload, memory,
//! now) to a [`Step`], with no I/O, so the restart policy, "vanished vs not listed yet" and
//! failover are tested without a cluster. `reconcile` carries the step out.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::dispatch::{self, Offer, Plan, Standing};
use super::memory::{Listed, Memory};
use super::secrets;
use super::spec::{self, ANN_ASSIGNED, Request};
use super::translate::reason;
use crate::config::{DispatchConfig, StartDeadline, Timings};
use crate::naming::{Owner, WorkloadId};
use crate::provider::{FailureReason, Observed, ProviderError, WorkloadState};

mod admission;
mod backoff;
mod capability;
mod deadline;
mod facts;
pub mod pull;
mod stopping;

pub use admission::Admission;
pub use backoff::delay as backoff_delay;
use capability::capability_refusal;
pub use deadline::start_deadline_due_in;
use deadline::{past_deadline, seen_past, start_deadline};
pub use facts::{
    AfterCreateError, after_create_error, assigned, controller_of, current_container, restart_count,
};

/// The workload a provider lists for the pod.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    /// Index of the provider in the configuration.
    pub provider: usize,
    pub observed: &'a Observed,
}

/// What to do for one pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing until something changes.
    Idle,
    /// The pod is gone from the API: delete the workloads it left.
    DeleteOrphanedWorkloads,
    /// The pod is being deleted: its workloads go first, then the pod object.
    FinishDeletion,
    /// The pod ended but its workload still holds resources: stop it. Workloads that exited
    /// are kept (their logs stay readable) until the pod is deleted.
    StopWorkload { provider: usize },
    /// The pod can never run as specified. A failed pod keeps no live workload (a start past
    /// its deadline is still billing): `stop` is the provider whose live workload is stopped
    /// after the pod is failed.
    Fail {
        reason: &'static str,
        message: String,
        stop: Option<usize>,
    },
    /// Report the workload's state on the pod. `stop_finished`: the workload just ended at a
    /// provider that keeps billing a finished one, so it is deleted after the report (our own
    /// status write may not come back as a change to act on). `recheck`: when the start
    /// deadline of a workload still queued or starting is due (a workload stuck starting
    /// changes nothing a list would report).
    Report {
        provider: usize,
        stop_finished: bool,
        recheck: Option<Duration>,
    },
    /// The running workload's liveness probe failed (`why`): kill it as the kubelet kills the
    /// container, then restart it or fail the pod by its restart policy.
    KillUnhealthy { provider: usize, why: String },
    /// The workload ended and the restart policy wants the container back: record how it
    /// ended, delete the workload, create it again after `delay`.
    Restart {
        provider: usize,
        restarts: i32,
        delay: Duration,
        last: Box<ContainerStateTerminated>,
    },
    /// The workload is still starting past its start deadline and the pod has attempts left:
    /// record the attempt (`gpu-vk.io/start-attempts`), delete the workload; the pod's
    /// workload is then created again.
    RetryStart {
        provider: usize,
        attempt: u32,
        message: String,
    },
    /// The provider could not pull the workload's image: end the workload, record the
    /// failure (`record`, the `gpu-vk.io/pull-failures` value) and wait `ErrImagePull`.
    PullFailed {
        provider: usize,
        record: String,
        message: String,
    },
    /// No workload, and the image pull back-off still runs: wait `ImagePullBackOff`.
    PullBackOff { wait: Duration, message: String },
    /// The pod had a workload and its provider's list, trusted, no longer shows it.
    Lost { provider: String },
    /// Look again after this long (a list to come, a restart back-off to expire).
    Wait(Duration),
    /// Create the workload `id`, trying the plan's candidates in order.
    Create {
        id: WorkloadId,
        request: Box<Request>,
        plan: Plan,
    },
    /// Every provider that could run the pod is passed over for now (breaker open, capacity
    /// refused moments ago, price above the pod's maximum): the pod waits Pending saying why, and is looked at
    /// again after `retry` (or when something changes).
    Hold {
        reason: &'static str,
        message: String,
        retry: Duration,
    },
}

/// The configuration `decide` works with.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub owner: &'a Owner,
    pub offers: &'a [Offer],
    pub timings: &'a Timings,
    pub admission: &'a Admission,
    /// `secretFailover`: a pod reading Secrets may move on to the next provider.
    pub secret_failover: bool,
    /// What dispatch knows of each provider now (parallel to `offers`).
    pub standing: &'a [Standing<'a>],
    pub dispatch: &'a DispatchConfig,
    /// Each provider's start deadline (parallel to `offers`; missing: none).
    pub start_deadlines: &'a [StartDeadline],
    /// How long a refused pod that a controller owns is held before it is judged again.
    pub hold_retry: Duration,
}

/// The next step for a pod (`None`: not in the store any more), given the workload a provider
/// lists for it, the pipeline's memory and the time.
pub fn decide(
    rules: &Rules<'_>,
    pod: Option<&Pod>,
    found: Option<Found<'_>>,
    memory: &Memory,
    now: Timestamp,
) -> Step {
    let Some(pod) = pod else {
        // A workload whose pod this process never saw is left to the garbage collector and
        // its grace window.
        return if memory.gone {
            Step::DeleteOrphanedWorkloads
        } else {
            Step::Idle
        };
    };
    match choose(rules, pod, found, memory, now) {
        Step::Fail {
            reason, message, ..
        } => Step::Fail {
            reason,
            message,
            stop: found
                .filter(|f| !f.observed.state.is_terminal())
                .map(|f| f.provider),
        },
        Step::Report { provider, .. }
            if memory.liveness_failed.is_some()
                && found.is_some_and(|f| f.observed.state == WorkloadState::Running) =>
        {
            Step::KillUnhealthy {
                provider,
                why: memory.liveness_failed.clone().unwrap_or_default(),
            }
        }
        step => step,
    }
}

/// [`decide`] for a pod in the store, before a failure is told which workload to stop and a
/// failed liveness probe turns a report into a kill.
fn choose(
    rules: &Rules<'_>,
    pod: &Pod,
    found: Option<Found<'_>>,
    memory: &Memory,
    now: Timestamp,
) -> Step {
    if pod.metadata.deletion_timestamp.is_some() {
        // Its containers' preStop sleep first, while the Service lets go of it.
        if found.is_some()
            && let Some(left) = stopping::pre_stop_wait(pod, now)
        {
            return Step::Wait(left);
        }
        return Step::FinishDeletion;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        return match found {
            Some(f)
                if !matches!(
                    f.observed.state,
                    WorkloadState::Succeeded | WorkloadState::Failed { .. }
                ) || deletes_finished(rules, f.provider) =>
            {
                Step::StopWorkload {
                    provider: f.provider,
                }
            }
            _ => Step::Idle,
        };
    }
    let request = match spec::request(pod) {
        Ok(r) => r,
        Err(e) => return refuse(rules, pod, reason::INVALID_SPEC, e.0),
    };
    if let Some(f) = found {
        return observed(rules, pod, f, memory, now);
    }
    // No workload anywhere. Was one created before (a container id on the pod)?
    let had_workload = memory.created_on.is_some()
        || current_container(pod)
            .and_then(|c| c.container_id.as_deref())
            .is_some_and(|s| !s.is_empty());
    if had_workload {
        // Only trust absence from a list that began after our own create.
        return match memory.listed {
            None | Some(Listed::SinceCreate) => Step::Lost {
                provider: assigned(pod)
                    .map(str::to_owned)
                    .or_else(|| Some(rules.offers.get(memory.created_on?)?.name.clone()))
                    .unwrap_or_default(),
            },
            Some(Listed::NotSinceCreate | Listed::Never) => {
                Step::Wait(rules.timings.poll_interval())
            }
        };
    }
    if let Some(wait) = backoff::backoff_remaining(pod, rules.timings, now) {
        return Step::Wait(wait);
    }
    if let Some(step) = pull::backoff_remaining(pod, rules.timings, now) {
        return step;
    }
    let plan = match plan(rules, pod, &request) {
        Ok(p) => p,
        Err((reason, why)) => return refuse(rules, pod, reason, why),
    };
    if plan.candidates.is_empty() {
        return passed_over(rules, &plan);
    }
    let uid = pod.uid().unwrap_or_default();
    let Some(id) = rules.owner.workload_id(&uid) else {
        return fail(
            reason::INVALID_SPEC,
            format!("pod UID {uid:?} is not a UUID"),
        );
    };
    Step::Create {
        id,
        request: Box::new(request),
        plan,
    }
}

/// Every provider that could run the pod is passed over for now: the pod is held, saying why,
/// until the first of them may take it.
fn passed_over(rules: &Rules<'_>, plan: &Plan) -> Step {
    let names = |i: usize| {
        rules
            .offers
            .get(i)
            .map(|o| o.name.clone())
            .unwrap_or_default()
    };
    let (reason, what) = if plan.only_capacity() {
        (reason::PROVIDER_CAPACITY, "no provider has capacity now")
    } else {
        (
            reason::PROVIDER_UNAVAILABLE,
            "no provider can take the pod now",
        )
    };
    Step::Hold {
        reason,
        message: format!("{what}: {}", plan.describe_passed_over(&names)),
        retry: plan
            .retry_in()
            .unwrap_or(rules.timings.poll_interval())
            .max(Duration::from_millis(200)),
    }
}

/// A refusal: its reason and message.
pub type Refusal = (&'static str, String);

/// What the pod asks for, against the configuration and what dispatch knows: the plan, or why
/// the pod may never run as it is. The admission webhook asks the same question ([`refusal`]),
/// so a pod it refuses at create time gets the message the VK would give.
fn plan(rules: &Rules<'_>, pod: &Pod, request: &Request) -> Result<Plan, Refusal> {
    if let Err(why) = rules.admission.check(pod) {
        return Err((reason::NOT_ALLOWED, why));
    }
    if let Some(refused) = capability_refusal(rules, request) {
        return Err(refused);
    }
    let policy = request
        .policy
        .filter(|_| rules.dispatch.pod_policy)
        .unwrap_or(rules.dispatch.policy);
    let mut plan =
        match dispatch::candidates(rules.offers, rules.standing, request, assigned(pod), policy) {
            Ok(c) => c,
            Err(e) => {
                let r = match e {
                    dispatch::Error::UnknownProvider(_) => reason::UNKNOWN_PROVIDER,
                    dispatch::Error::NoMatch(_) => reason::INVALID_SPEC,
                };
                return Err((r, e.to_string()));
            }
        };
    let secrets = secrets::Uses::of(pod);
    if !secrets.is_empty() {
        let mut order = plan.providers();
        // Passed-over providers count too: a Secret-bearing pod waiting for its only
        // allowed provider must not fail just because that one is unhealthy right now.
        for p in &plan.passed_over {
            if !order.contains(&p.provider) {
                order.push(p.provider);
            }
        }
        match secrets::restrict(rules.offers, order, &secrets, rules.secret_failover) {
            Ok(allowed) => {
                plan.candidates.retain(|c| allowed.contains(&c.provider));
                plan.passed_over.retain(|p| allowed.contains(&p.provider));
            }
            Err(why) => return Err((reason::SECRETS_NOT_ALLOWED, why)),
        }
    }
    Ok(plan)
}

/// Why the pod can never run here, whatever the providers' state now (`None`: it may): the
/// refusals of [`decide`] that depend only on the pod and the configuration.
pub fn refusal(rules: &Rules<'_>, pod: &Pod) -> Option<Refusal> {
    let request = match spec::request(pod) {
        Ok(r) => r,
        Err(e) => return Some((reason::INVALID_SPEC, e.0)),
    };
    let now = Rules {
        standing: &[],
        ..*rules
    };
    plan(&now, pod, &request).err()
}

/// The pod has a workload: report it, or restart it when it ended and the policy says so.
fn observed(rules: &Rules<'_>, pod: &Pod, f: Found<'_>, memory: &Memory, now: Timestamp) -> Step {
    let obs = f.observed;
    if let Some(message) = &obs.pull_failure
        && matches!(
            obs.state,
            WorkloadState::Queued { .. } | WorkloadState::Starting
        )
    {
        return pull::failed(pod, f.provider, message, rules.timings, now);
    }
    match start_deadline(rules, pod, f) {
        Err(message) => return fail(reason::INVALID_SPEC, message),
        Ok(Some(deadline))
            if matches!(
                obs.state,
                WorkloadState::Queued { .. } | WorkloadState::Starting
            ) && obs
                .created_at
                .is_some_and(|c| now.duration_since(c) >= deadline) =>
        {
            if seen_past(obs, deadline, memory.last_list_age, now) {
                return past_deadline(rules, pod, f, deadline);
            }
            // Still starting as of a list from before the deadline (lists failing in an
            // outage back off for up to a minute): judged on the next one.
            return Step::Report {
                provider: f.provider,
                stop_finished: false,
                recheck: Some(rules.timings.poll_interval()),
            };
        }
        Ok(_) => {}
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let restart = match &obs.state {
        WorkloadState::Succeeded => policy == "Always",
        // Evicted means someone killed it on purpose: the pod fails, as after a kubelet
        // eviction, and its controller replaces it.
        WorkloadState::Failed { reason: r, .. } => {
            policy != "Never" && *r != FailureReason::Evicted
        }
        _ => false,
    };
    if !restart {
        return Step::Report {
            provider: f.provider,
            stop_finished: obs.state.is_terminal() && deletes_finished(rules, f.provider),
            recheck: start_deadline_due_in(rules, pod, f, now),
        };
    }
    let restarts = restart_count(pod) + 1;
    let (exit_code, why) = match &obs.state {
        WorkloadState::Failed { exit_code, reason } => (*exit_code, reason.as_str()),
        _ => (0, "Completed"),
    };
    let provider = rules
        .offers
        .get(f.provider)
        .map(|o| o.name.as_str())
        .unwrap_or_default();
    let last = ContainerStateTerminated {
        exit_code,
        reason: Some(why.to_owned()),
        started_at: obs.started_at.map(Time),
        finished_at: Some(Time(obs.finished_at.unwrap_or(now))),
        container_id: Some(format!("{provider}://{}", obs.id)),
        message: obs.message.clone(),
        signal: None,
    };
    Step::Restart {
        provider: f.provider,
        restarts,
        delay: backoff::delay(rules.timings, restarts - 1),
        last: Box::new(last),
    }
}

/// The provider bills a finished workload and offers nothing to keep it for.
fn deletes_finished(rules: &Rules<'_>, provider: usize) -> bool {
    rules
        .offers
        .get(provider)
        .is_some_and(|o| o.capabilities.delete_finished)
}

/// A failure; which live workload to stop is filled in by [`decide`].
fn fail(reason: &'static str, message: String) -> Step {
    Step::Fail {
        reason,
        message,
        stop: None,
    }
}

/// A refusal of what the pod asks for. A pod its controller would replace is held rather than
/// failed: the replacement, made from the same template, would meet the same refusal at once,
/// and then the next (a pod storm). A bare pod fails, as the kubelet fails a pod it rejects.
fn refuse(rules: &Rules<'_>, pod: &Pod, reason: &'static str, message: String) -> Step {
    if controller_of(pod).is_none() {
        return fail(reason, message);
    }
    Step::Hold {
        reason,
        message: format!("{message} (held: a replacement would be refused too)"),
        retry: rules.hold_retry,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod secret_tests;

#[cfg(test)]
mod failover_tests;

#[cfg(test)]
mod admission_tests;
