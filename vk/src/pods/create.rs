//! Creating a pod's workload: resolve its environment, then try the dispatch plan's
//! candidates in order until one provider accepts it (failover on capacity errors, see
//! [`super::decide::after_create_error`]), within the guardrails ([`super::guard`]). The
//! decision and its inputs are recorded on the pod (`gpu-vk.io/dispatch`) and as an Event.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::info;

use super::decide::{AfterCreateError, after_create_error, assigned, restart_count};
use super::dispatch::{Candidate, Plan};
use super::events::EventType;
use super::reconcile::Action;
use super::spec::{self, Request};
use super::translate::{Situation, reason};
use super::{Error, PodController, env, queue};
use crate::naming::WorkloadId;
use crate::provider::{GpuRequest, Observed, ProviderError, Workload, WorkloadState};
use crate::telemetry::DispatchLabels;

/// The earliest held pod looks again this often even if no wake-up reaches it (a wake-up
/// lost to a reconcile in flight); wake-ups normally come first.
const HELD_RECHECK: Duration = Duration::from_secs(30);

/// One create in progress: what each candidate is offered in turn.
struct Creating<'a> {
    pod: &'a Pod,
    id: &'a WorkloadId,
    req: &'a Request,
    plan: &'a Plan,
    /// The workload as every candidate gets it, but for the GPU type the candidate names.
    base: Workload,
    /// When this process first saw the pod (for the admission latency metric).
    seen: Instant,
}

/// What offering the workload to one candidate came to.
enum Tried {
    /// Done with the pod for now: when the queue should bring it back.
    Done(Action),
    /// The candidate is over a spend or workload limit; why, for the pod's status.
    OverLimit(String),
    /// The provider has no capacity; its message, for the pod's status.
    NoCapacity(String),
}

impl PodController {
    /// Creates the workload `id` on the first of the plan's candidates that accepts it. `seen`
    /// is when this process first saw the pod (for the admission latency metric).
    pub(super) async fn create(
        &self,
        pod: &Pod,
        id: WorkloadId,
        req: &Request,
        plan: &Plan,
        seen: Instant,
    ) -> Result<Action, Error> {
        let uid = id.pod_uid().to_owned();
        let assigned = assigned(pod).unwrap_or_default().to_owned();
        let arrived = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |t| t.0);
        if let ControlFlow::Break(action) = self.wait_turn(pod, &uid, arrived).await? {
            return Ok(action);
        }
        let env = match self.environment(pod, &assigned).await? {
            ControlFlow::Continue(env) => env,
            ControlFlow::Break(action) => return Ok(action),
        };
        let mut base = spec::workload(pod, req, id.clone(), env.vars, &env.containers);
        base.registry_logins = self.pull_logins(pod).await?;
        let creating = Creating {
            pod,
            id: &id,
            req,
            plan,
            base,
            seen,
        };
        let mut capacity_msgs = Vec::new();
        let mut limit_msgs = Vec::new();
        for n in 0..plan.candidates.len() {
            match self.attempt(&creating, n).await? {
                Tried::Done(action) => return Ok(action),
                Tried::OverLimit(msg) => limit_msgs.push(msg),
                Tried::NoCapacity(msg) => capacity_msgs.push(msg),
            }
        }
        self.none_accepted(pod, &uid, arrived, &assigned, capacity_msgs, limit_msgs)
            .await
    }

    /// Under a guardrail, pods get room in arrival order: a pod with earlier held pods ahead
    /// of it waits for them (breaks with the action to return).
    async fn wait_turn(
        &self,
        pod: &Pod,
        uid: &str,
        arrived: Timestamp,
    ) -> Result<ControlFlow<Action>, Error> {
        if !self.guard.active() {
            return Ok(ControlFlow::Continue(()));
        }
        let behind = self.guard.behind(uid, arrived);
        if behind == 0 {
            return Ok(ControlFlow::Continue(()));
        }
        self.guard.hold(uid, arrived);
        let msg = format!(
            "waiting for {behind} earlier pod(s) held by a spend or workload limit \
             (pods get room in arrival order)"
        );
        self.hold(pod, reason::LIMIT_REACHED, &msg).await?;
        // Not the earliest: it is woken when its turn comes (the earliest wakes the next once
        // it got room), so it needs no timer of its own.
        Ok(ControlFlow::Break(Action::await_change()))
    }

    /// The pod's resolved environment, or (a break) what to do when it cannot be resolved
    /// yet or ever; `assigned` is the provider recorded on the pod, for the status.
    async fn environment(
        &self,
        pod: &Pod,
        assigned: &str,
    ) -> Result<ControlFlow<Action, env::Resolved>, Error> {
        let env = match env::resolve(
            pod,
            &env::KubeSource(self.client.clone()),
            &self.cfg.internal_ip,
        )
        .await
        {
            Ok(env) => env,
            Err(env::Error::Missing(m)) => {
                self.event(
                    pod,
                    EventType::Warning,
                    "Failed",
                    "CreateWorkload",
                    &format!("Error: {m}"),
                );
                let s = Situation::Waiting {
                    reason: reason::CONFIG_ERROR,
                    message: m,
                };
                self.write_status(pod, &s, assigned).await?;
                return Ok(ControlFlow::Break(Action::requeue(queue::backoff(4))));
            }
            Err(env::Error::Invalid(m)) => {
                self.fail(pod, reason::INVALID_SPEC, &m).await?;
                return Ok(ControlFlow::Break(Action::await_change()));
            }
            Err(e) => return Err(Error::ResolveEnv(e)),
        };
        if !env.skipped.is_empty() {
            // The kubelet's event for the same case.
            self.event(
                pod,
                EventType::Warning,
                "InvalidEnvironmentVariableNames",
                "CreateWorkload",
                &format!(
                    "Keys [{}] from the EnvFrom configMap or secret were skipped since they are \
                     considered invalid environment variable names.",
                    env.skipped.join(", ")
                ),
            );
        }
        Ok(ControlFlow::Continue(env))
    }

    /// The registry logins the pod's images pull with. A pull Secret that is missing or not a
    /// docker config is said in the kubelet's words and left out: the pull then fails and the
    /// pod says why (`ErrImagePull`), and a fixed Secret is read at the next attempt.
    async fn pull_logins(&self, pod: &Pod) -> Result<Vec<crate::provider::RegistryLogin>, Error> {
        let got = super::pull::resolve(pod, &env::KubeSource(self.client.clone()))
            .await
            .map_err(Error::ResolveEnv)?;
        if !got.unreadable.is_empty() {
            self.event(
                pod,
                EventType::Warning,
                "FailedToRetrieveImagePullSecret",
                "CreateWorkload",
                &format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the \
                     image may not succeed.",
                    got.unreadable.join(", ")
                ),
            );
        }
        Ok(got.logins)
    }

    /// Offers the workload to candidate `n` of the plan.
    async fn attempt(&self, a: &Creating<'_>, n: usize) -> Result<Tried, Error> {
        let c = &a.plan.candidates[n];
        let uid = a.id.pod_uid();
        let i = c.provider;
        let slot = &self.slots[i];
        let name = slot.name().to_owned();
        // An earlier attempt on this provider may have created the workload even though it
        // failed for us (timeout, crash): only a list that began after it can tell. This is
        // what lets adapters create without looking up the name first.
        if self.recent.creating(i, uid) {
            return Ok(Tried::Done(Action::requeue(
                self.cfg.timings.poll_interval(),
            )));
        }
        if let Err(why) = self.guard.reserve(uid, i, c.price) {
            return Ok(Tried::OverLimit(format!("{name}: {why}")));
        }
        let mut workload = a.base.clone();
        if let (Some(g), Some(t)) = (&a.req.gpu, &c.gpu_type) {
            workload.gpu = Some(GpuRequest {
                gpu_type: Some(t.clone()),
                count: g.count,
            });
        }
        self.recent.note_create(i, uid);
        let call = Instant::now();
        let result = slot.provider().create(&workload).await;
        let call = call.elapsed();
        // Only a list that began after the provider answered is sure to show the workload:
        // a list sent while the create was in flight may be served before it (seen under
        // load: the workload judged vanished and the pod failed with ProviderLost).
        self.recent.note_create(i, uid);
        match result {
            Ok(()) => {
                // The next held pod (if any) may fit too.
                self.wake_held();
                let action = self
                    .created(a.pod, a.id, a.plan, n, &name, a.seen, call)
                    .await?;
                Ok(Tried::Done(action))
            }
            Err(e) => {
                self.guard.release(uid);
                self.refused(a.pod, c, name, e).await
            }
        }
    }

    /// Candidate `c` (provider `name`) refused the workload with `e`: on to the next
    /// candidate, or what to do with the pod now.
    async fn refused(
        &self,
        pod: &Pod,
        c: &Candidate,
        name: String,
        e: ProviderError,
    ) -> Result<Tried, Error> {
        match after_create_error(&name, &e) {
            AfterCreateError::NextCandidate => {
                let message = match &e {
                    ProviderError::Capacity { message } => message.clone(),
                    other => other.to_string(),
                };
                self.remember_refusal(c.provider, c.gpu_type.as_deref());
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PROVIDER_CAPACITY,
                    "CreateWorkload",
                    &format!("provider {name} has no capacity: {message}"),
                );
                Ok(Tried::NoCapacity(format!("{name}: {message}")))
            }
            AfterCreateError::Fail { reason, message } => {
                // The provider refuses what the template asks for: a replacement would be
                // refused too, so a pod its controller owns is held (see decide::refuse).
                if super::decide::controller_of(pod).is_some() {
                    let why = format!("{message} (held: a replacement would be refused too)");
                    self.hold(pod, reason, &why).await?;
                    return Ok(Tried::Done(Action::requeue(self.cfg.refusals.hold_retry())));
                }
                self.fail(pod, reason, &message).await?;
                Ok(Tried::Done(Action::await_change()))
            }
            AfterCreateError::Retry(after) => {
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PROVIDER_ERROR,
                    "CreateWorkload",
                    &format!("provider {name}: {e}"),
                );
                let s = Situation::Waiting {
                    reason: reason::PROVIDER_ERROR,
                    message: format!("provider {name}: {e}"),
                };
                self.write_status(pod, &s, &name).await?;
                match after {
                    Some(d) => Ok(Tried::Done(Action::requeue(d))),
                    None => Err(Error::Provider {
                        provider: name,
                        source: e,
                    }),
                }
            }
        }
    }

    /// No candidate took the workload: the pod waits for room under the guardrails when
    /// every candidate was over one, else for capacity. `assigned` is the provider recorded
    /// on the pod, for the status.
    async fn none_accepted(
        &self,
        pod: &Pod,
        uid: &str,
        arrived: Timestamp,
        assigned: &str,
        mut capacity_msgs: Vec<String>,
        limit_msgs: Vec<String>,
    ) -> Result<Action, Error> {
        if capacity_msgs.is_empty() && !limit_msgs.is_empty() {
            // Every candidate is over a guardrail: wait for room, in arrival order.
            self.guard.hold(uid, arrived);
            let msg = format!(
                "a spend or workload limit is reached; the pod is created as soon as room \
                 appears ({})",
                limit_msgs.join("; ")
            );
            self.hold(pod, reason::LIMIT_REACHED, &msg).await?;
            return Ok(Action::requeue(HELD_RECHECK));
        }
        capacity_msgs.extend(limit_msgs);
        let msg = format!("no provider has capacity ({})", capacity_msgs.join("; "));
        let s = Situation::Waiting {
            reason: reason::PROVIDER_CAPACITY,
            message: msg,
        };
        self.write_status(pod, &s, assigned).await?;
        Ok(Action::requeue(
            self.cfg.timings.poll_interval().max(queue::backoff(3)),
        ))
    }

    /// The workload was accepted by candidate `n` of the plan: cache it, record the decision
    /// on the pod (annotation and Event) and count it.
    #[allow(clippy::too_many_arguments)]
    async fn created(
        &self,
        pod: &Pod,
        id: &WorkloadId,
        plan: &Plan,
        n: usize,
        name: &str,
        seen: Instant,
        call: Duration,
    ) -> Result<Action, Error> {
        let c = &plan.candidates[n];
        let uid = id.pod_uid().to_owned();
        let obs = Observed {
            id: id.clone(),
            provider_id: String::new(),
            state: WorkloadState::Queued { reason: None },
            message: None,
            created_at: Some(Timestamp::now()),
            started_at: None,
            finished_at: None,
            ip: None,
            provider_restarts: 0,
            ports: Default::default(),
            usage: None,
            price: c.price,
            container_exits: Default::default(),
            pull_failure: None,
        };
        self.slots[c.provider].cache(uid.clone(), obs.clone());
        let waited = seen.elapsed();
        if restart_count(pod) == 0 {
            // Relaunches after a restart back-off are not admission latency.
            self.metrics.create_latency.observe(waited.as_secs_f64());
        }
        let policy = plan.policy.unwrap_or_default().as_str();
        self.metrics
            .dispatch_decisions
            .get_or_create(&DispatchLabels {
                policy: policy.to_owned(),
                provider: name.to_owned(),
            })
            .inc();
        let decision = self.describe_decision(plan, n);
        info!(namespace = pod.namespace().unwrap_or_default(), pod = pod.name_any(), uid, provider = %name, workload = %id, since_seen_ms = waited.as_millis() as u64, provider_ms = call.as_millis() as u64, decision = %decision, "created workload");
        // One Event says both what was decided and what was created (the kubelet's budget:
        // a user reads one line per step, and every Event is an API write).
        self.event(
            pod,
            EventType::Normal,
            "Dispatched",
            "CreateWorkload",
            &format!("{decision}; created workload {id}"),
        );
        // No status write now: the provider's first report (the next list) writes the status,
        // the chosen provider and the decision in one PATCH, so a workload already running
        // when first listed costs one write. Should no list show it in time, the pod comes
        // back here and writes what is known (queued at its provider).
        self.recent.note_decision(uid, c.provider, decision);
        Ok(Action::requeue(self.cfg.timings.poll_interval() * 2))
    }

    /// "policy cheapest: chose vast: 1x RTX4090 at $0.41/h; runpod $0.69/h; slurm unpriced".
    fn describe_decision(&self, plan: &Plan, n: usize) -> String {
        let one = |c: &Candidate| {
            let price = c
                .price
                .map_or_else(|| "unpriced".to_owned(), |p| p.to_string());
            match &c.gpu_type {
                Some(t) => format!("{} {t} {price}", self.provider_name(c.provider)),
                None => format!("{} {price}", self.provider_name(c.provider)),
            }
        };
        let chosen = &plan.candidates[n];
        let mut text = format!(
            "policy {}: chose {}",
            plan.policy.unwrap_or_default().as_str(),
            one(chosen)
        );
        let others: Vec<String> = plan
            .candidates
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != n)
            .map(|(_, c)| one(c))
            .collect();
        if !others.is_empty() {
            text.push_str("; also considered ");
            text.push_str(&others.join(", "));
        }
        if !plan.passed_over.is_empty() {
            let names = |i: usize| self.provider_name(i).to_owned();
            text.push_str("; passed over ");
            text.push_str(&plan.describe_passed_over(&names));
        }
        text
    }

    /// The pod waits Pending with `reason` (an Event when it starts waiting for this reason).
    pub(super) async fn hold(
        &self,
        pod: &Pod,
        reason: &'static str,
        message: &str,
    ) -> Result<(), Error> {
        let waiting_for = super::decide::current_container(pod)
            .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
        if waiting_for.as_deref() != Some(reason) {
            self.event(pod, EventType::Warning, reason, "Dispatch", message);
        }
        let assigned = assigned(pod).unwrap_or_default().to_owned();
        let s = Situation::Waiting {
            reason,
            message: message.to_owned(),
        };
        self.write_status(pod, &s, &assigned).await
    }
}
