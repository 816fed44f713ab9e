//! Leader election through a `coordination.k8s.io/v1` Lease, so two or more replicas of the VK
//! can run for one node and exactly one of them (the leader) registers the Node, reconciles pods,
//! writes status and serves the kubelet API; the others wait as standbys.
//!
//! The rules are those of Kubernetes' own leader election (client-go `leaderelection`, as the
//! controller-manager and scheduler use it): a replica takes a Lease that is free, released
//! (empty holder) or whose record has not changed for `leaseDuration` *as observed on its own
//! clock* (so no clock skew between hosts matters); every write is conditional on the
//! `resourceVersion` it read, so two replicas never both win; the leader renews every
//! `retryPeriod` and gives up once it could not renew for `renewDeadline`, which is shorter than
//! `leaseDuration`, so it has stopped before a standby may take over. A replica that restarts
//! with the identity holding the Lease (its container restarted within the same pod) takes it
//! back at once. On a clean stop the leader releases the Lease so a standby takes over without
//! waiting out the duration.
//!
//! The process acts on a lost leadership by ending (non-zero), so Kubernetes restarts it as a
//! standby: nothing of the old term's state survives into the next.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::LeaderElection;
use crate::telemetry::ErrorChain;

/// Label the leader puts on its own pod (and every replica removes from its pod when it starts),
/// so a Service that selects it (the Helm chart's kubelet Service) sends the API server's logs,
/// exec and stats requests to the leader only.
pub use crate::vocab::names::LEADER_LABEL;

/// The pod a replica runs in (from the downward API), for [`LEADER_LABEL`].
#[derive(Clone, Debug)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// What a replica last saw of the Lease: the record and when (on its own clock) it changed.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    resource_version: Option<String>,
    changed_at: Option<Instant>,
}

/// What a replica may do with the Lease as it stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody holds it, it was released, its holder stopped renewing, or it is ours: write it.
    Take,
    /// Another replica holds it and renewed it less than a lease duration ago.
    HeldBy(String),
}

impl Observation {
    /// Records `spec` as read now; the record's change time moves only when it changed.
    pub fn update(
        &mut self,
        spec: Option<&LeaseSpec>,
        resource_version: Option<&str>,
        now: Instant,
    ) {
        let holder = spec
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty());
        let renew_time = spec.and_then(|s| s.renew_time.as_ref().map(|t| t.0));
        let rv = resource_version.map(str::to_owned);
        if self.changed_at.is_none()
            || holder != self.holder
            || renew_time != self.renew_time
            || rv != self.resource_version
        {
            self.changed_at = Some(now);
        }
        self.holder = holder;
        self.renew_time = renew_time;
        self.resource_version = rv;
    }

    /// Whether `me` may take the Lease now, given `duration` (the record's own
    /// `leaseDurationSeconds` when it has one).
    pub fn judge(&self, me: &str, duration: Duration, now: Instant) -> Verdict {
        match &self.holder {
            None => Verdict::Take,
            Some(h) if h == me => Verdict::Take,
            Some(h) => {
                let since = self
                    .changed_at
                    .map_or(Duration::MAX, |t| now.duration_since(t));
                if since >= duration {
                    Verdict::Take
                } else {
                    Verdict::HeldBy(h.clone())
                }
            }
        }
    }
}

/// Errors of one attempt to take or renew the Lease.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("failed to read lease {0}")]
    Read(String, #[source] kube::Error),
    #[error("failed to write lease {0}")]
    Write(String, #[source] kube::Error),
}

/// Takes part in the election for one node's Lease.
pub struct Elector {
    api: Api<Lease>,
    pods: Option<(Api<Pod>, String)>,
    lease: String,
    identity: String,
    cfg: LeaderElection,
    observed: Observation,
}

/// The term of a leader: ends (the receiver turns `true`) when the Lease could not be renewed
/// for `renewDeadline` or another replica took it.
pub struct Term {
    lost: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<Elector>,
    stop: watch::Sender<bool>,
    /// Setting the leader label on this replica's pod (retried in the background).
    labelling: tokio::task::JoinHandle<()>,
}

/// Sets (`Some`) or removes (`None`) [`LEADER_LABEL`] on the pod `pods` names, retrying for a
/// while, then giving up with a warning.
async fn set_label(pods: Option<&(Api<Pod>, String)>, value: Option<&str>) {
    let Some((pods, name)) = pods else {
        return;
    };
    let patch = serde_json::json!({ "metadata": { "labels": { LEADER_LABEL: value } } });
    for attempt in 1..=10u32 {
        match pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(e) => {
                warn!(pod = %name, error = %ErrorChain(&e), attempt, "failed to set the leader label of this pod");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
        }
    }
}

impl Elector {
    pub fn new(
        client: Client,
        cfg: LeaderElection,
        node_name: &str,
        identity: String,
        pod: Option<PodRef>,
    ) -> Self {
        let lease = cfg
            .lease_name
            .clone()
            .unwrap_or_else(|| format!("gpu-vk-leader-{node_name}"));
        Self {
            api: Api::namespaced(client.clone(), &cfg.namespace),
            pods: pod.map(|p| (Api::namespaced(client, &p.namespace), p.name)),
            lease,
            identity,
            cfg,
            observed: Observation::default(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Removes [`LEADER_LABEL`] from this replica's pod (left by an earlier container of this
    /// pod that led): a standby must not receive kubelet traffic. Retries for a while, then
    /// goes on with a warning (the standby refuses those connections; it serves no kubelet API).
    pub async fn clear_label(&self) {
        set_label(self.pods.as_ref(), None).await;
    }

    /// Waits until this replica leads (or `shutdown` fires first: `None`).
    pub async fn acquire(mut self, shutdown: impl Future<Output = ()>) -> Option<Term> {
        let retry = self.cfg.retry_period();
        let mut waiting_logged = None::<String>;
        let wait = async {
            loop {
                match self.attempt().await {
                    Ok(Verdict::Take) => return,
                    Ok(Verdict::HeldBy(h)) => {
                        if waiting_logged.as_deref() != Some(&h) {
                            info!(lease = %self.lease, leader = %h, me = %self.identity, "standing by: another replica leads");
                            waiting_logged = Some(h);
                        }
                    }
                    Err(e) => warn!(error = %ErrorChain(&e), "leader election attempt failed"),
                }
                tokio::time::sleep(retry).await;
            }
        };
        tokio::select! {
            () = wait => {}
            () = shutdown => return None,
        }
        info!(lease = %self.lease, me = %self.identity, "became the leader");
        let (lost_tx, lost) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        // Renewing starts before the label: labelling may take retries (seconds), and a Lease
        // left unrenewed meanwhile would let a standby lead while this replica still does.
        let pods = self.pods.clone();
        let task = tokio::spawn(self.renew(lost_tx, stop_rx));
        let labelling = tokio::spawn(async move { set_label(pods.as_ref(), Some("true")).await });
        Some(Term {
            lost,
            task,
            stop,
            labelling,
        })
    }

    /// Renews every retry period until `stop`; reports a loss on `lost` and returns.
    async fn renew(mut self, lost: watch::Sender<bool>, mut stop: watch::Receiver<bool>) -> Self {
        let retry = self.cfg.retry_period();
        let deadline = self.cfg.renew_deadline();
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = stop.wait_for(|s| *s) => return self,
            }
            let left = deadline.saturating_sub(renewed.elapsed());
            // The Lease counts from when the attempt began (its read), not from when the write
            // came back: a slow answer must not stretch this replica's idea of its term.
            let started = Instant::now();
            match tokio::time::timeout(left, self.attempt()).await {
                Ok(Ok(Verdict::Take)) => renewed = started,
                Ok(Ok(Verdict::HeldBy(h))) => {
                    warn!(lease = %self.lease, leader = %h, "another replica took the lease");
                    let _ = lost.send(true);
                    return self;
                }
                Ok(Err(e)) => warn!(error = %ErrorChain(&e), "lease renewal failed"),
                Err(_) => {}
            }
            if renewed.elapsed() >= deadline {
                warn!(lease = %self.lease, deadline_ms = deadline.as_millis() as u64, "could not renew the lease in time");
                let _ = lost.send(true);
                return self;
            }
        }
    }

    /// One read and, when this replica may take the Lease, one conditional write.
    async fn attempt(&mut self) -> Result<Verdict, AttemptError> {
        let now = Instant::now();
        let current = self
            .api
            .get_opt(&self.lease)
            .await
            .map_err(|e| AttemptError::Read(self.lease.clone(), e))?;
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease.clone()),
                    ..Default::default()
                },
                spec: Some(self.record(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observed.update(
                        l.spec.as_ref(),
                        l.metadata.resource_version.as_deref(),
                        now,
                    );
                    Ok(Verdict::Take)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Verdict::HeldBy("a replica that just created it".into()))
                }
                Err(e) => Err(AttemptError::Write(self.lease.clone(), e)),
            };
        };
        self.observed.update(
            current.spec.as_ref(),
            current.metadata.resource_version.as_deref(),
            now,
        );
        let duration = current
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.cfg.lease_duration(), Duration::from_secs);
        if let Verdict::HeldBy(h) = self.observed.judge(&self.identity, duration, now) {
            return Ok(Verdict::HeldBy(h));
        }
        let mut next = current.clone();
        next.spec = Some(self.record(current.spec.as_ref()));
        match self
            .api
            .replace(&self.lease, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                self.observed
                    .update(l.spec.as_ref(), l.metadata.resource_version.as_deref(), now);
                Ok(Verdict::Take)
            }
            // Somebody wrote the Lease since we read it (resourceVersion precondition).
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Ok(Verdict::HeldBy("a replica that just wrote it".into()))
            }
            Err(e) => Err(AttemptError::Write(self.lease.clone(), e)),
        }
    }

    /// The record this replica writes when it takes or renews the Lease.
    fn record(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let ours = previous.and_then(|p| p.holder_identity.as_deref()) == Some(&self.identity);
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration_seconds()),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    /// Gives the Lease up (empty holder), so a standby takes over at its next attempt.
    async fn release(&mut self) {
        let Ok(Some(current)) = self.api.get_opt(&self.lease).await else {
            return;
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        let mut next = current;
        next.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..spec
        });
        match self
            .api
            .replace(&self.lease, &PostParams::default(), &next)
            .await
        {
            Ok(_) => info!(lease = %self.lease, "released the leader lease"),
            Err(e) => warn!(error = %ErrorChain(&e), "failed to release the leader lease"),
        }
    }
}

impl Term {
    /// Resolves when this term ends without [`Term::release`] (the process must stop leading).
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|l| *l).await;
    }

    /// Ends the term cleanly: stops renewing, removes the leader label and releases the Lease.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        // A label still being set must not land after it was removed.
        self.labelling.abort();
        let _ = self.labelling.await;
        if let Ok(mut elector) = self.task.await {
            elector.clear_label().await;
            elector.release().await;
        }
    }

    /// True once the term ended (the Lease could not be renewed, or another replica took it).
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            ..Default::default()
        }
    }

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn a_lease_renewed_within_its_duration_stays_with_its_holder() {
        let t0 = Instant::now();
        let mut o = Observation::default();
        o.update(Some(&spec("a", 100)), Some("1"), t0);
        assert_eq!(
            o.judge("b", LEASE, t0 + Duration::from_secs(14)),
            Verdict::HeldBy("a".into())
        );
        // Renewed at 10 s: the duration counts from when we saw the change, not from t0.
        o.update(
            Some(&spec("a", 110)),
            Some("2"),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(
            o.judge("b", LEASE, t0 + Duration::from_secs(24)),
            Verdict::HeldBy("a".into())
        );
        assert_eq!(
            o.judge("b", LEASE, t0 + Duration::from_secs(25)),
            Verdict::Take
        );
    }

    #[test]
    fn an_unchanged_record_expires_on_the_observers_clock_whatever_its_renew_time_says() {
        // The holder's clock runs an hour ahead: its renewTime is in our future. Only our own
        // observation of the record not changing counts.
        let t0 = Instant::now();
        let mut o = Observation::default();
        let ahead = Timestamp::now().as_second() + 3600;
        o.update(Some(&spec("a", ahead)), Some("7"), t0);
        o.update(
            Some(&spec("a", ahead)),
            Some("7"),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(
            o.judge("b", LEASE, t0 + Duration::from_secs(14)),
            Verdict::HeldBy("a".into())
        );
        assert_eq!(
            o.judge("b", LEASE, t0 + Duration::from_secs(15)),
            Verdict::Take
        );
    }

    #[test]
    fn a_free_released_or_own_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut o = Observation::default();
        o.update(None, None, t0);
        assert_eq!(o.judge("b", LEASE, t0), Verdict::Take);
        o.update(Some(&spec("", 100)), Some("3"), t0);
        assert_eq!(o.judge("b", LEASE, t0), Verdict::Take);
        o.update(Some(&spec("b", 100)), Some("4"), t0);
        assert_eq!(o.judge("b", LEASE, t0), Verdict::Take);
        assert_eq!(o.judge("c", LEASE, t0), Verdict::HeldBy("b".into()));
    }
}
