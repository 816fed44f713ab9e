//! The prober: runs the main container's readiness and liveness probes of every running
//! offloaded pod on their schedule, from the VK to where the provider exposes the port
//! (`httpGet`, `tcpSocket`) or through the provider's exec (`exec`).
//!
//! One sleeping task per probe of a probed pod, keyed by pod UID and probe kind, replaced when
//! the workload changes (a restart is a new container: the result starts over) and aborted
//! when the pod stops running or goes away; probes themselves run under a shared concurrency
//! limit. A task never writes the pod: when the published result changes it stores it and
//! enqueues the pod, and the ordinary reconcile acts on it (readiness: see
//! [`super::translate::Readiness`]; a failed liveness probe: the container is restarted as
//! its restart policy says), so a change costs exactly one status write and a steady result
//! none. The state machine is [`super::probe`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Semaphore;

use super::Queue;
use super::probe::{Action, Kind, Outcome, Spec};
use super::translate::Readiness;
use crate::provider::{DynProvider, Endpoint, Observed, WorkloadState};

#[path = "prober/run.rs"]
mod run;
use run::Run;

/// Probes running at once across all pods (each is bounded by its own timeout).
pub const MAX_CONCURRENT_PROBES: usize = 32;

/// How one probe reaches the container.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reach {
    Connect(Endpoint),
    Exec,
}

/// What a probe task probes: a task is kept while this stays the same.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    provider_id: String,
    started_at: Option<Timestamp>,
    spec: Spec,
    /// `Err(message)`: the probe cannot be evaluated here.
    reach: Result<Reach, String>,
}

/// What a probe task published.
#[derive(Clone, Debug, Default)]
struct Published {
    /// `None` until the first flip: the kind's initial result.
    outcome: Option<Outcome>,
    /// Why the last failed probe failed (for the `Unhealthy` Event).
    detail: String,
}

struct Entry {
    target: Target,
    task: Option<tokio::task::AbortHandle>,
    result: Arc<Mutex<Published>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// The prober task set of a VK.
pub struct Prober {
    entries: Mutex<HashMap<(String, Kind), Entry>>,
    limit: Arc<Semaphore>,
    http: OnceLock<Option<reqwest::Client>>,
    /// The cluster's own networks (configured and learnt): never dialled.
    cluster_networks: Arc<super::networks::ClusterNetworks>,
}

impl Default for Prober {
    fn default() -> Self {
        Self::new(Arc::new(super::networks::ClusterNetworks::new(Vec::new())))
    }
}

/// What [`Prober::sync`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Synced {
    pub readiness: Readiness,
    /// Set the first time a probe turns out not evaluable for this workload: worth one Event.
    pub not_evaluable: Option<String>,
}

impl Prober {
    /// A prober that never dials an address in `cluster_networks`.
    pub fn new(cluster_networks: Arc<super::networks::ClusterNetworks>) -> Self {
        Self {
            entries: Mutex::default(),
            limit: Arc::new(Semaphore::new(MAX_CONCURRENT_PROBES)),
            http: OnceLock::new(),
            cluster_networks,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Kind), Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The HTTP client of probes: no certificate checks for HTTPS (as the kubelet), no
    /// connection reuse between probes, up to 10 redirects (as Go's client the kubelet uses),
    /// on the same host and port only ([`super::probe_target`]).
    fn http(&self) -> Option<reqwest::Client> {
        self.http
            .get_or_init(|| {
                // Without an installed crypto provider reqwest cannot build a TLS client.
                rustls::crypto::CryptoProvider::get_default()?;
                reqwest::Client::builder()
                    .tls_danger_accept_invalid_certs(true)
                    .pool_max_idle_per_host(0)
                    .redirect(reqwest::redirect::Policy::custom(|attempt| {
                        // Up to 10, and only to the same host and port: a redirect elsewhere
                        // is the answer (a 3xx, a success, as the kubelet takes it).
                        let first = attempt.previous().first().cloned();
                        match first {
                            Some(f)
                                if attempt.previous().len() <= 10
                                    && super::probe_target::follow_redirect(&f, attempt.url()) =>
                            {
                                attempt.follow()
                            }
                            _ => attempt.stop(),
                        }
                    }))
                    .build()
                    .ok()
            })
            .clone()
    }

    /// The readiness last published for a pod.
    pub fn readiness(&self, uid: &str) -> Readiness {
        match self.lock().get(&(uid.to_owned(), Kind::Readiness)) {
            None => Readiness::Unprobed,
            Some(e) => view(e),
        }
    }

    /// Why the liveness probe of the workload `obs` failed (its threshold of consecutive
    /// failures), if it did: a result published for an earlier workload of the pod (before a
    /// restart) does not count.
    pub fn liveness_failure(&self, uid: &str, obs: &Observed) -> Option<String> {
        let entries = self.lock();
        let e = entries.get(&(uid.to_owned(), Kind::Liveness))?;
        if e.target.provider_id != obs.provider_id || e.target.started_at != obs.started_at {
            return None;
        }
        published(e)
            .filter(|p| p.outcome == Some(Outcome::Failure))
            .map(|p| p.detail)
    }

    /// Stops probing a pod (it stopped running, is being deleted, or is gone).
    pub fn stop(&self, uid: &str) {
        let mut entries = self.lock();
        for kind in Kind::ALL {
            entries.remove(&(uid.to_owned(), kind));
        }
    }

    /// Pods probed now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes sure the pod's probes run against its current workload (starting, replacing or
    /// stopping their tasks) and says what they show now.
    pub fn sync(
        &self,
        uid: &str,
        pod: &Pod,
        provider: &Arc<dyn DynProvider>,
        obs: &Observed,
        queue: &Queue,
    ) -> Synced {
        let mut synced = Synced {
            readiness: Readiness::Unprobed,
            not_evaluable: None,
        };
        for kind in Kind::ALL {
            let (view, note) = self.sync_one(kind, uid, pod, provider, obs, queue);
            if let Some(note) = note {
                synced.not_evaluable = Some(match synced.not_evaluable.take() {
                    Some(first) => format!("{first}; {note}"),
                    None => note,
                });
            }
            if let (Kind::Readiness, Some(e)) = (kind, view) {
                synced.readiness = e.0;
            }
        }
        synced
    }

    /// One probe kind of [`Self::sync`]: its readiness view and published result, and a note
    /// when it just turned out not evaluable.
    #[allow(clippy::type_complexity)]
    fn sync_one(
        &self,
        kind: Kind,
        uid: &str,
        pod: &Pod,
        provider: &Arc<dyn DynProvider>,
        obs: &Observed,
        queue: &Queue,
    ) -> (Option<(Readiness, Option<Published>)>, Option<String>) {
        let key = (uid.to_owned(), kind);
        let container = super::spec::main_container(pod);
        let spec = container.and_then(|c| Spec::of(c, kind));
        let (Some(spec), WorkloadState::Running) = (spec, &obs.state) else {
            self.lock().remove(&key);
            return (None, None);
        };
        let reach = reach(
            &spec,
            container,
            provider.as_ref(),
            obs,
            &self.cluster_networks.snapshot(),
        );
        let target = Target {
            provider_id: obs.provider_id.clone(),
            started_at: obs.started_at,
            spec,
            reach,
        };
        let mut entries = self.lock();
        if let Some(e) = entries.get(&key).filter(|e| e.target == target) {
            return (Some((view(e), published(e))), None);
        }
        let result = Arc::new(Mutex::new(Published::default()));
        let (task, not_evaluable) = match &target.reach {
            Err(m) => (None, Some(m.clone())),
            Ok(r) => {
                let run = Run {
                    uid: uid.to_owned(),
                    spec: target.spec.clone(),
                    reach: r.clone(),
                    provider_id: obs.provider_id.clone(),
                    started_at: obs.started_at,
                    provider: provider.clone(),
                    http: self.http(),
                    limit: self.limit.clone(),
                    result: result.clone(),
                    queue: queue.clone(),
                    cluster: self.cluster_networks.snapshot(),
                };
                (Some(tokio::spawn(run.run()).abort_handle()), None)
            }
        };
        let entry = Entry {
            target,
            task,
            result,
        };
        let out = (view(&entry), published(&entry));
        entries.insert(key, entry);
        (Some(out), not_evaluable)
    }
}

/// The published result of a probe that runs (`None` for one not evaluable).
fn published(e: &Entry) -> Option<Published> {
    e.target
        .reach
        .is_ok()
        .then(|| e.result.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

fn view(e: &Entry) -> Readiness {
    match &e.target.reach {
        Err(message) => Readiness::NotEvaluable {
            message: message.clone(),
        },
        Ok(_) => {
            let r = e.result.lock().unwrap_or_else(|p| p.into_inner()).outcome;
            Readiness::Probed {
                ready: r == Some(Outcome::Success),
            }
        }
    }
}

/// Where the probe connects, or why it cannot be evaluated on this provider.
fn reach(
    spec: &Spec,
    container: Option<&k8s_openapi::api::core::v1::Container>,
    provider: &dyn DynProvider,
    obs: &Observed,
    cluster_networks: &[ipnet::IpNet],
) -> Result<Reach, String> {
    let kind = spec.kind.as_str();
    let fallback = "Ready follows the provider's running state instead";
    let (handler, host, port) = match &spec.action {
        Action::Http { host, port, .. } => ("httpGet", host, port),
        Action::Tcp { host, port } => ("tcpSocket", host, port),
        Action::Exec { .. } => {
            return if provider.capabilities().exec {
                Ok(Reach::Exec)
            } else {
                Err(format!(
                    "{kind} probe (exec) cannot be evaluated: provider {} has no exec; {fallback}",
                    provider.name()
                ))
            };
        }
        Action::Unsupported(what) => {
            return Err(format!(
                "{kind} probe ({what}) is not evaluated by the virtual kubelet (provider {}); \
                 {fallback}",
                provider.name()
            ));
        }
    };
    let Some(number) = port.resolve(container) else {
        return Err(format!(
            "{kind} probe ({handler}) names port {port:?}, which the container does not \
             declare; {fallback}"
        ));
    };
    super::probe_target::target(
        &format!("{kind} probe ({handler})"),
        number,
        host.as_deref(),
        obs.ports.get(&number),
        provider.name(),
        cluster_networks,
    )
    .map(Reach::Connect)
    .map_err(|why| format!("{why}; {fallback}"))
}
