//! The backstop against a pod storm: a pod that fails is replaced at once by its controller, and
//! if the replacement fails for the same cause the loop makes pods as fast as the API server
//! takes them. Refusals caused by the pod template are held, not failed (see `decide::refuse`);
//! for every other failure, once more than `refusals.stormThreshold` pods of one controller
//! failed within `refusals.stormWindowMs`, the next ones are held Pending (reason
//! `RefusalStorm`) with one Event on the owner, and counted in `refusal_storm_held`. A held pod
//! stays held while its cause stays; once the cause is gone it goes on as any other pod.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::ResourceExt;

use super::decide::{self, controller_of};
use super::events::EventType;
use super::reconcile::Action;
use super::translate::reason;
use super::{Error, PodController};
use crate::config::Refusals;

/// What to do with one more failing pod of an owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Fail,
    /// Hold it; `announce`: the first hold of this storm (one Event on the owner per window).
    Hold {
        announce: bool,
    },
}

/// Failures per owner within the window (owned state; pure apart from its lock).
pub struct Storms {
    threshold: usize,
    window: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    failed: HashMap<String, VecDeque<Instant>>,
    announced: HashMap<String, Instant>,
}

impl Storms {
    pub fn new(cfg: &Refusals) -> Self {
        Self {
            threshold: cfg.storm_threshold as usize,
            window: cfg.storm_window(),
            state: Mutex::default(),
        }
    }

    /// One more pod of the owner `owner` (its UID) is about to fail at `now`.
    pub fn judge(&self, owner: &str, now: Instant) -> Verdict {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let window = self.window;
        let recent = |t: &Instant| now.saturating_duration_since(*t) < window;
        if s.failed.len() > 1024 {
            s.failed.retain(|_, q| q.back().is_some_and(recent));
            s.announced.retain(|_, t| recent(t));
        }
        let q = s.failed.entry(owner.to_owned()).or_default();
        while q.front().is_some_and(|t| !recent(t)) {
            q.pop_front();
        }
        if q.len() < self.threshold {
            q.push_back(now);
            return Verdict::Fail;
        }
        let announce = !s.announced.get(owner).is_some_and(recent);
        if announce {
            s.announced.insert(owner.to_owned(), now);
        }
        Verdict::Hold { announce }
    }
}

impl PodController {
    /// Fails the pod, unless its owner's pods are failing in a storm (or it is already held
    /// for one): then it is held Pending and looked at again after `refusals.holdRetryMs`.
    /// `live`: the pod still has a live workload, which a failure stops; such a pod is never
    /// held (its failure is not instant, so it cannot storm).
    pub(super) async fn fail_unless_storm(
        &self,
        pod: &Pod,
        failure: &'static str,
        message: &str,
        live: bool,
    ) -> Result<Action, Error> {
        if let Some(owner) = controller_of(pod).filter(|_| !live) {
            let held = decide::current_container(pod)
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
                == Some(reason::REFUSAL_STORM);
            let verdict = if held {
                Verdict::Hold { announce: false }
            } else {
                self.storms.judge(&owner.uid, Instant::now())
            };
            if let Verdict::Hold { announce } = verdict {
                let what = format!("{} {}", owner.kind, owner.name);
                if announce {
                    let note = format!(
                        "more than {} pods of {what} failed within {} s ({failure}: {message}); \
                         its next failing pods are held Pending instead, so that it stops \
                         replacing them",
                        self.storms.threshold,
                        self.storms.window.as_secs()
                    );
                    let regarding = ObjectReference {
                        api_version: Some(owner.api_version.clone()),
                        kind: Some(owner.kind.clone()),
                        name: Some(owner.name.clone()),
                        namespace: pod.namespace(),
                        uid: Some(owner.uid.clone()),
                        ..Default::default()
                    };
                    self.events.publish(
                        &regarding,
                        EventType::Warning,
                        reason::REFUSAL_STORM,
                        "Admit",
                        &note,
                    );
                }
                if !held {
                    self.metrics.refusal_storm_held.inc();
                }
                let why = format!(
                    "held instead of failed ({failure}: {message}): pods of {what} keep \
                     failing and each failure makes its controller create another"
                );
                self.hold(pod, reason::REFUSAL_STORM, &why).await?;
                return Ok(Action::requeue(self.cfg.refusals.hold_retry()));
            }
        }
        self.fail(pod, failure, message).await?;
        Ok(Action::await_change())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storms(threshold: u32, window_ms: u64) -> Storms {
        Storms::new(&Refusals {
            storm_threshold: threshold,
            storm_window_ms: window_ms,
            ..Default::default()
        })
    }

    #[test]
    fn past_the_threshold_within_the_window_pods_are_held_and_announced_once() {
        let s = storms(3, 60_000);
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(s.judge("rs-a", t0 + Duration::from_secs(i)), Verdict::Fail);
        }
        assert_eq!(
            s.judge("rs-a", t0 + Duration::from_secs(4)),
            Verdict::Hold { announce: true }
        );
        assert_eq!(
            s.judge("rs-a", t0 + Duration::from_secs(5)),
            Verdict::Hold { announce: false }
        );
        // Another owner has its own count.
        assert_eq!(s.judge("rs-b", t0 + Duration::from_secs(5)), Verdict::Fail);
    }

    #[test]
    fn failures_spread_wider_than_the_window_are_no_storm() {
        let s = storms(2, 10_000);
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                s.judge("rs-a", t0 + Duration::from_secs(6 * i)),
                Verdict::Fail,
                "failure {i}"
            );
        }
    }

    #[test]
    fn a_storm_after_a_quiet_window_is_announced_again() {
        let s = storms(1, 10_000);
        let t0 = Instant::now();
        assert_eq!(s.judge("rs-a", t0), Verdict::Fail);
        assert_eq!(
            s.judge("rs-a", t0 + Duration::from_secs(1)),
            Verdict::Hold { announce: true }
        );
        let later = t0 + Duration::from_secs(30);
        assert_eq!(s.judge("rs-a", later), Verdict::Fail);
        assert_eq!(
            s.judge("rs-a", later + Duration::from_secs(1)),
            Verdict::Hold { announce: true }
        );
    }
}
