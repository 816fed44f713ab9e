//! One reconcile of one pod: gather what is known (the stored pod, the provider's workload,
//! the pipeline's memory), ask [`super::decide`] for the step, carry it out, and tell the
//! queue when to look again.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use tracing::warn;

use super::decide::{self, Found, Rules, Step};
use super::dispatch::Standing;
use super::events::EventType;
use super::memory::Memory;
use super::translate::reason;
use super::{Error, PodController};
use crate::provider::{Observed, Vanished};
use crate::telemetry::{ErrorChain, ResultLabels};

/// When the queue should bring the pod back, in the spirit of kube-runtime's `Action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action(Option<Duration>);

impl Action {
    /// Look again after `d` even if nothing changes.
    pub fn requeue(d: Duration) -> Self {
        Self(Some(d))
    }

    /// Look again only when the pod or its workload changes.
    pub fn await_change() -> Self {
        Self(None)
    }

    pub fn requeue_after(&self) -> Option<Duration> {
        self.0
    }
}

impl PodController {
    /// Why `pod` could never run on this node as it is (see [`decide::refusal`]): what the
    /// admission webhook refuses.
    pub fn refusal(&self, pod: &Pod) -> Option<decide::Refusal> {
        decide::refusal(&self.rules(&[]), pod)
    }

    /// What [`decide`] works with, given what dispatch knows of each provider now.
    fn rules<'a>(&'a self, standing: &'a [Standing<'a>]) -> Rules<'a> {
        Rules {
            owner: &self.owner,
            offers: &self.offers,
            timings: &self.cfg.timings,
            admission: &self.admission,
            secret_failover: self.cfg.secret_failover,
            standing,
            dispatch: &self.cfg.dispatch,
            start_deadlines: &self.start_deadlines,
            hold_retry: self.cfg.refusals.hold_retry(),
        }
    }

    /// [`Self::reconcile_logged`] for a worker, which hands over the key.
    pub(super) async fn reconcile_owned(&self, uid: String) {
        self.reconcile_logged(&uid).await;
    }

    /// Reconciles one pod and hands the outcome to the queue and the metrics.
    pub(super) async fn reconcile_logged(&self, uid: &str) {
        self.metrics.queue_depth.set(self.queue.len() as i64);
        let result = self.reconcile(uid).await;
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics
            .reconciles
            .get_or_create(&ResultLabels {
                result: label.into(),
            })
            .inc();
        match result {
            Ok(action) => {
                self.queue.forget(uid);
                if let Some(d) = action.requeue_after() {
                    self.queue.add_after(uid, d);
                }
            }
            Err(e) => {
                let d = self.queue.retry(uid);
                warn!(uid, error = %ErrorChain(&e), retry_in_ms = d.as_millis() as u64, "reconcile failed");
            }
        }
    }

    /// Brings one pod and its workload together: gathers what is known, asks [`decide`] for
    /// the step and carries it out.
    pub(super) async fn reconcile(&self, uid: &str) -> Result<Action, Error> {
        let stored = self.pods.get(uid);
        let list_changed = self.recent.take_changed(uid);
        let seen = stored.as_ref().map(|s| s.seen);
        let pod = match stored {
            Some(s) => match s.pod() {
                Some(p) => Some(p),
                None => return Ok(Action::await_change()),
            },
            None => None,
        };
        let found = self.find(uid);
        let (inventories, standings) = self.standings();
        let standing = super::inventory::attach(&inventories, standings);
        let rules = self.rules(&standing);
        let step = decide::decide(
            &rules,
            pod.as_ref(),
            found.as_ref().map(|(i, o)| Found {
                provider: *i,
                observed: o,
            }),
            &self.memory(uid, pod.as_ref(), found.as_ref().map(|(i, o)| (*i, o))),
            Timestamp::now(),
        );
        self.leave_behind(uid, &step);
        let Some(pod) = pod else {
            if step == Step::DeleteOrphanedWorkloads {
                self.delete_orphaned(uid).await?;
            }
            return Ok(Action::await_change());
        };
        let now = Now {
            pod: &pod,
            uid,
            found: found.as_ref().map(|(_, o)| o),
            list_changed,
        };
        self.carry_out(step, &now, seen).await
    }

    /// Carries out the step [`decide`] chose for a pod that exists.
    async fn carry_out(
        &self,
        step: Step,
        now: &Now<'_>,
        seen: Option<std::time::Instant>,
    ) -> Result<Action, Error> {
        let (pod, uid) = (now.pod, now.uid);
        match step {
            Step::Idle | Step::DeleteOrphanedWorkloads => Ok(Action::await_change()),
            Step::FinishDeletion => {
                self.finish_deletion(pod, uid).await?;
                Ok(Action::await_change())
            }
            Step::StopWorkload { provider } => {
                self.stop_found(provider, now).await?;
                Ok(Action::await_change())
            }
            Step::Fail {
                reason,
                message,
                stop,
            } => {
                let action = self
                    .fail_unless_storm(pod, reason, &message, stop.is_some())
                    .await?;
                // Now, rather than wait for a change to bring the pod back, which a workload
                // stuck starting never makes.
                if let Some(i) = stop {
                    self.stop_found(i, now).await?;
                }
                Ok(action)
            }
            Step::Report {
                provider,
                stop_finished,
                recheck,
            } => {
                self.report_step(now, provider, stop_finished, recheck)
                    .await
            }
            Step::KillUnhealthy { provider, why } => {
                // `leave_behind` stopped the probes: a restarted workload gets fresh ones.
                let Some(obs) = now.found else {
                    return Ok(Action::await_change());
                };
                let again = self
                    .kill_unhealthy(pod, provider, obs, &why, &self.cfg.timings)
                    .await?;
                Ok(again.map_or_else(Action::await_change, Action::requeue))
            }
            Step::Restart {
                provider,
                restarts,
                delay,
                last,
            } => {
                let Some(obs) = now.found else {
                    return Ok(Action::await_change());
                };
                self.restart(pod, provider, &obs.provider_id, restarts, delay, *last)
                    .await?;
                self.observe_status_latency(now);
                Ok(Action::requeue(delay))
            }
            Step::RetryStart {
                provider,
                attempt,
                message,
            } => {
                let Some(obs) = now.found else {
                    return Ok(Action::await_change());
                };
                self.retry_start(pod, provider, &obs.provider_id, attempt, &message)
                    .await?;
                Ok(Action::requeue(self.cfg.timings.poll_interval()))
            }
            step @ (Step::PullFailed { .. } | Step::PullBackOff { .. }) => {
                self.carry_out_pull(step, pod, now.found).await
            }
            Step::Lost { provider } => self.lost(pod, &provider).await,
            Step::Wait(d) => Ok(Action::requeue(d)),
            Step::Hold {
                reason,
                message,
                retry,
            } => {
                self.hold(pod, reason, &message).await?;
                Ok(Action::requeue(retry))
            }
            Step::Create { id, request, plan } => {
                let seen = seen.unwrap_or_else(std::time::Instant::now);
                self.create(pod, id, &request, &plan, seen).await
            }
        }
    }

    /// What the pipeline remembers of `uid` that [`decide`] needs.
    fn memory(&self, uid: &str, pod: Option<&Pod>, found: Option<(usize, &Observed)>) -> Memory {
        let created_on = self.recent.decision(uid).map(|(i, _)| i);
        Memory {
            gone: self.pods.is_gone(uid),
            listed: pod
                .and_then(decide::assigned)
                .and_then(|a| self.slots.index(a))
                .or(created_on)
                .map(|i| self.recent.listed(i, uid, self.slots[i].listed_at())),
            created_on,
            liveness_failed: found.and_then(|(_, o)| self.prober.liveness_failure(uid, o)),
            last_list_age: found
                .and_then(|(i, _)| self.slots[i].listed_at())
                .map(|at| at.elapsed()),
        }
    }

    /// What a pod leaves behind when `step` takes it elsewhere: its place in the guard's line
    /// and its probes.
    fn leave_behind(&self, uid: &str, step: &Step) {
        // A held pod that is no longer waiting to be created (it failed, got a workload, is
        // going away) holds up nobody: pods behind it get their turn.
        if !matches!(
            step,
            Step::Create { .. } | Step::Hold { .. } | Step::Wait(_)
        ) && self.guard.is_held(uid)
        {
            self.guard.forget(uid);
            self.wake_held();
        }
        // Only a pod whose workload is reported is probed.
        if !matches!(step, Step::Report { .. }) {
            self.prober.stop(uid);
        }
    }

    /// Deletes the workloads of a pod that is gone, and forgets it once none is left.
    async fn delete_orphaned(&self, uid: &str) -> Result<(), Error> {
        self.delete_workloads(uid, None).await?;
        if self.find(uid).is_none() {
            self.pods.forget_gone(uid);
        }
        Ok(())
    }

    /// Stops the workload found for the pod at `provider`, if one was found.
    async fn stop_found(&self, provider: usize, now: &Now<'_>) -> Result<(), Error> {
        if let Some(obs) = now.found {
            self.delete_one(provider, now.uid, &obs.provider_id, Some(now.pod))
                .await?;
        }
        Ok(())
    }

    /// The time from a list that changed the pod to its status written.
    fn observe_status_latency(&self, now: &Now<'_>) {
        if let Some(t) = now.list_changed {
            self.metrics
                .status_latency
                .observe(t.elapsed().as_secs_f64());
        }
    }

    /// [`Step::Report`]: syncs the pod's probes and writes the workload's status (and stops an
    /// ended workload that keeps billing).
    async fn report_step(
        &self,
        now: &Now<'_>,
        provider: usize,
        stop_finished: bool,
        recheck: Option<Duration>,
    ) -> Result<Action, Error> {
        let (pod, uid) = (now.pod, now.uid);
        let Some(obs) = now.found else {
            return Ok(Action::await_change());
        };
        let synced = self
            .prober
            .sync(uid, pod, self.slots[provider].provider(), obs, &self.queue);
        if let Some(note) = &synced.not_evaluable {
            self.event(
                pod,
                EventType::Warning,
                reason::PROBE_NOT_EVALUATED,
                "Probe",
                note,
            );
        }
        self.report(pod, provider, obs).await?;
        if stop_finished {
            self.stop_found(provider, now).await?;
        }
        self.observe_status_latency(now);
        Ok(recheck.map_or_else(Action::await_change, Action::requeue))
    }
}

/// One reconcile's pod, as the steps carry it out.
struct Now<'a> {
    pod: &'a Pod,
    uid: &'a str,
    /// The pod's workload, as its provider last listed it.
    found: Option<&'a Observed>,
    /// When a list last changed what is known of the pod, if one did since the last reconcile.
    list_changed: Option<std::time::Instant>,
}

impl PodController {
    /// Fails a pod whose workload vanished, with what its provider knows of why (an account
    /// out of money). A provider that loses every workload as it starts would make a storm of
    /// replacements: the backstop holds them.
    async fn lost(&self, pod: &Pod, provider: &str) -> Result<Action, Error> {
        let cause = self
            .slots
            .named(provider)
            .and_then(|s| s.provider().vanished_cause());
        let lost = format!("workload vanished at provider {provider}");
        let (why, msg) = match cause {
            Some(Vanished::BalanceExhausted(how)) => {
                (reason::PROVIDER_BALANCE_EXHAUSTED, format!("{lost}: {how}"))
            }
            Some(Vanished::Hint(hint)) => (reason::PROVIDER_LOST, format!("{lost}: {hint}")),
            None => (reason::PROVIDER_LOST, lost),
        };
        self.fail_unless_storm(pod, why, &msg, false).await
    }
}
#[allow(dead_code)]
fn _assert_send(pc: std::sync::Arc<PodController>) -> impl Send {
    async move { pc.reconcile("x").await }
}
