//! The prober: runs the main container's readiness probe of every running offloaded pod on its
//! schedule, from the VK to where the provider exposes the port (`httpGet`, `tcpSocket`) or
//! through the provider's exec (`exec`).
//!
//! One sleeping task per probed pod, keyed by pod UID, replaced when the workload changes (a
//! restart is a new container: the result starts over) and aborted when the pod stops running
//! or goes away; probes themselves run under a shared concurrency limit. A task never writes
//! the pod: when the published result changes it stores it and enqueues the pod, and the
//! ordinary reconcile translates it (see [`super::translate::Readiness`]), so a change costs
//! exactly one status write and a steady result none. The state machine is [`super::probe`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Semaphore;
use tracing::debug;

use super::Queue;
use super::probe::{Action, Kind, Outcome, Spec, Tracker};
use super::translate::Readiness;
use crate::provider::{DynProvider, Endpoint, ExecRequest, Observed, WorkloadState};

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

struct Entry {
    target: Target,
    task: Option<tokio::task::AbortHandle>,
    /// The published result (`None` until the first flip: the kind's initial result).
    result: Arc<Mutex<Option<Outcome>>>,
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
    entries: Mutex<HashMap<String, Entry>>,
    limit: Arc<Semaphore>,
    http: OnceLock<Option<reqwest::Client>>,
}

impl Default for Prober {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            limit: Arc::new(Semaphore::new(MAX_CONCURRENT_PROBES)),
            http: OnceLock::new(),
        }
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
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The HTTP client of probes: no certificate checks for HTTPS (as the kubelet), no
    /// connection reuse between probes, up to 10 redirects (as Go's client the kubelet uses).
    fn http(&self) -> Option<reqwest::Client> {
        self.http
            .get_or_init(|| {
                // Without an installed crypto provider reqwest cannot build a TLS client.
                rustls::crypto::CryptoProvider::get_default()?;
                reqwest::Client::builder()
                    .tls_danger_accept_invalid_certs(true)
                    .pool_max_idle_per_host(0)
                    .redirect(reqwest::redirect::Policy::limited(10))
                    .build()
                    .ok()
            })
            .clone()
    }

    /// The readiness last published for a pod.
    pub fn readiness(&self, uid: &str) -> Readiness {
        match self.lock().get(uid) {
            None => Readiness::Unprobed,
            Some(e) => view(e),
        }
    }

    /// Stops probing a pod (it stopped running, is being deleted, or is gone).
    pub fn stop(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Pods probed now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes sure the pod's readiness probe runs against its current workload (starting,
    /// replacing or stopping its task) and says what it shows now.
    pub fn sync(
        &self,
        uid: &str,
        pod: &Pod,
        provider: &Arc<dyn DynProvider>,
        obs: &Observed,
        queue: &Queue,
    ) -> Synced {
        let container = super::spec::main_container(pod);
        let spec = container.and_then(|c| Spec::of(c, Kind::Readiness));
        let (Some(spec), WorkloadState::Running) = (spec, &obs.state) else {
            self.stop(uid);
            return Synced {
                readiness: Readiness::Unprobed,
                not_evaluable: None,
            };
        };
        let reach = reach(&spec, container, provider.as_ref(), obs);
        let target = Target {
            provider_id: obs.provider_id.clone(),
            started_at: obs.started_at,
            spec,
            reach,
        };
        let mut entries = self.lock();
        if let Some(e) = entries.get(uid).filter(|e| e.target == target) {
            return Synced {
                readiness: view(e),
                not_evaluable: None,
            };
        }
        let result = Arc::new(Mutex::new(None));
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
                };
                (Some(tokio::spawn(run.run()).abort_handle()), None)
            }
        };
        let entry = Entry {
            target,
            task,
            result,
        };
        let readiness = view(&entry);
        entries.insert(uid.to_owned(), entry);
        Synced {
            readiness,
            not_evaluable,
        }
    }
}

fn view(e: &Entry) -> Readiness {
    match &e.target.reach {
        Err(message) => Readiness::NotEvaluable {
            message: message.clone(),
        },
        Ok(_) => {
            let r = *e.result.lock().unwrap_or_else(|p| p.into_inner());
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
    if let Some(host) = host {
        return Ok(Reach::Connect(Endpoint {
            host: host.clone(),
            port: number,
        }));
    }
    match obs.ports.get(&number) {
        Some(e) => Ok(Reach::Connect(e.clone())),
        None => Err(format!(
            "{kind} probe ({handler} on port {number}) cannot be evaluated: provider {} \
             exposes no address for that port; {fallback}",
            provider.name()
        )),
    }
}

/// One probe task.
struct Run {
    uid: String,
    spec: Spec,
    reach: Reach,
    provider_id: String,
    started_at: Option<Timestamp>,
    provider: Arc<dyn DynProvider>,
    http: Option<reqwest::Client>,
    limit: Arc<Semaphore>,
    result: Arc<Mutex<Option<Outcome>>>,
    queue: Queue,
}

impl Run {
    async fn run(self) {
        let mut tracker = Tracker::new(&self.spec);
        let running_for = self
            .started_at
            .and_then(|s| Duration::try_from(Timestamp::now().duration_since(s)).ok())
            .unwrap_or(Duration::ZERO);
        let mut pause = tracker.wait(&self.spec, running_for);
        loop {
            tokio::time::sleep(pause).await;
            let start = Instant::now();
            let outcome = {
                let Ok(_permit) = self.limit.acquire().await else {
                    return;
                };
                self.probe_once().await
            };
            match outcome {
                Some(o) => {
                    if tracker.record(o) {
                        *self.result.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(tracker.result());
                        debug!(uid = %self.uid, result = ?tracker.result(), "probe result changed");
                        self.queue.add(&self.uid);
                    }
                }
                None => tracker.skip(),
            }
            // Periods run from probe start to probe start.
            pause = tracker
                .wait(&self.spec, running_for)
                .saturating_sub(start.elapsed());
        }
    }

    /// One probe; `None` when the prober itself could not run it (thrown away).
    async fn probe_once(&self) -> Option<Outcome> {
        let timeout = self.spec.timeout;
        match (&self.spec.action, &self.reach) {
            (
                Action::Http {
                    https,
                    path,
                    headers,
                    ..
                },
                Reach::Connect(e),
            ) => {
                let http = self.http.as_ref()?;
                let scheme = if *https { "https" } else { "http" };
                let path = if path.starts_with('/') {
                    path.clone()
                } else {
                    format!("/{path}")
                };
                let mut req = http
                    .get(format!("{scheme}://{e}{path}"))
                    .timeout(timeout)
                    .header("User-Agent", "kube-probe/gpu-vk")
                    .header("Accept", "*/*");
                for (k, v) in headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                Some(match req.send().await {
                    Ok(r) if (200..400).contains(&r.status().as_u16()) => Outcome::Success,
                    // Connection refused, timeouts and error statuses are all failures.
                    _ => Outcome::Failure,
                })
            }
            (Action::Tcp { .. }, Reach::Connect(e)) => {
                let dial = tokio::net::TcpStream::connect((e.host.as_str(), e.port));
                Some(match tokio::time::timeout(timeout, dial).await {
                    Ok(Ok(_)) => Outcome::Success,
                    _ => Outcome::Failure,
                })
            }
            (Action::Exec { command }, Reach::Exec) => {
                let req = ExecRequest {
                    command: command.clone(),
                    stdin: false,
                    tty: false,
                };
                let run = async {
                    let s = self.provider.exec(&self.provider_id, req).await?;
                    let drain = |st: crate::provider::LogStream| st.for_each(|_| async {});
                    let stderr = async {
                        if let Some(e) = s.stderr {
                            drain(e).await;
                        }
                    };
                    futures::join!(drain(s.stdout), stderr);
                    s.exit.await
                };
                match tokio::time::timeout(timeout, run).await {
                    Ok(Ok(0)) => Some(Outcome::Success),
                    Ok(Ok(_)) | Err(_) => Some(Outcome::Failure),
                    // The provider could not run the command at all: not the container's fault.
                    Ok(Err(_)) => None,
                }
            }
            _ => None,
        }
    }
}
