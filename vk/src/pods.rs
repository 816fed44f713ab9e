//! The pod pipeline under every provider: it takes the pods bound to this node to workloads on
//! providers and their states back to the pods.
//!
//! ```text
//! scheduler binds pod -> watch (spec.nodeName) -> store -> queue (keyed by pod UID)
//!   -> reconcile: decide(pod, observed, memory, now) -> Step
//!        Create       -> create: dispatch candidates, resolve env, provider.create, failover
//!        Report       -> status: translate, write the status subresource only on change
//!                        (readiness from the probe tasks of prober: probe, prober)
//!        Restart      -> restart: record the termination, delete the workload, back off
//!        FinishDeletion / DeleteOrphanedWorkloads / StopWorkload -> delete
//!        Lost / Fail  -> status (Failed, with a reason and an Event; storm: a storm of
//!                        failures of one owner is held instead)
//!        Hold         -> status (Pending, with a reason and an Event; refusals of pods a
//!                        controller owns are held, not failed: decide::refuse)
//! provider lists (observe: one list per provider per interval) -> cache -> enqueue changed pods
//!   (a workload missing from a list is lost only on repeated evidence: evidence)
//! gc: workloads owned by this node with no live pod -> delete (after a grace window)
//! startup: pod store synced + every provider listed once -> reconcile everything once
//! ```
//!
//! Where to look: what a pod should become is [`decide`] (pure, no I/O); how each step is
//! carried out is the file named for it; what happens on restart is [`startup`]; where a pod's
//! status gets written is [`status`]. Stateless by construction: everything here is re-derived
//! at start from the pods bound to this node and one list of every provider; the process-local
//! [`memory`] only holds what the pipeline did moments ago, to judge lists that raced with it.

pub mod address;
pub mod create;
pub mod decide;
pub mod delete;
pub mod dispatch;
pub mod duplicates;
pub mod env;
pub mod events;
pub mod evidence;
pub mod gc;
pub mod guard;
pub mod hardening;
mod image_pull;
pub mod inventory;
pub mod memory;
pub mod networks;
pub mod observe;
pub mod probe;
pub mod probe_target;
pub mod prober;
pub mod pull;
pub mod queue;
pub mod reconcile;
pub mod restart;
pub mod secrets;
mod slots;
pub mod spec;
pub mod startup;
pub mod status;
pub mod store;
pub mod storm;
pub mod translate;
pub mod watch;
pub mod worker;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use tokio::sync::watch as signal;
use tracing::info;

use crate::config::Config;
use crate::naming::Owner;
use crate::provider::health::Health;
use crate::provider::{DynProvider, Observed, ProviderError};
use crate::telemetry::{Metrics, PodLabels};
use events::Events;
use memory::Recent;
pub use queue::Queue;
pub use store::{PodStore, StoredPod};

/// Errors of one reconcile; all are retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to write pod status")]
    WriteStatus(#[source] kube::Error),
    #[error("failed to delete pod")]
    DeletePod(#[source] kube::Error),
    #[error("failed to resolve environment")]
    ResolveEnv(#[source] env::Error),
    #[error("call to provider {provider} failed")]
    Provider {
        provider: String,
        #[source]
        source: ProviderError,
    },
    #[error("waiting for provider {0} to list a workload created moments ago")]
    NotListed(String),
}

/// The shared state of the pod pipeline of a running VK.
pub struct PodController {
    client: Client,
    cfg: Arc<Config>,
    owner: Owner,
    slots: slots::Slots,
    /// What [`decide`] needs to know of the providers (names and capabilities).
    offers: Vec<dispatch::Offer>,
    /// Who may have workloads created (see [`decide::Admission`]).
    admission: decide::Admission,
    /// Each provider's start deadline (see `providers[].startDeadlineSeconds`).
    start_deadlines: Vec<crate::config::StartDeadline>,
    pods: PodStore,
    ready: signal::Sender<bool>,
    recent: Recent,
    queue: Queue,
    events: Events,
    /// Spend and workload guardrails, and the pods they hold.
    guard: guard::Guard,
    /// Readiness probes of running pods (see [`prober`]).
    prober: prober::Prober,
    /// The cluster's own networks, which no provider address may name (`networks`).
    networks: Arc<networks::ClusterNetworks>,
    /// Failures per owner, to stop a pod storm (see [`storm`]).
    storms: storm::Storms,
    pub metrics: Metrics,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl PodController {
    /// Builds the pipeline over `providers`; every provider call goes through the
    /// [`layer`] (timeout, metrics, tracing).
    pub fn new(
        client: Client,
        cfg: Arc<Config>,
        providers: Vec<Arc<dyn DynProvider>>,
        metrics: Metrics,
    ) -> Arc<Self> {
        let owner = Owner::new(&cfg.cluster_id, &cfg.node_name);
        let events = Events::new(
            client.clone(),
            "gpu-vk",
            &cfg.node_name,
            metrics.events_dropped.clone(),
        );
        let slots = slots::Slots::new(providers, &metrics, breaker_rules(&cfg.dispatch.breaker));
        let guard = guard::Guard::new(
            cfg.limits.clone(),
            slots
                .iter()
                .map(|s| {
                    let name = s.name().to_owned();
                    let limits = cfg
                        .providers
                        .iter()
                        .find(|p| p.name == name)
                        .map(|p| p.limits.clone())
                        .unwrap_or_default();
                    (name, limits)
                })
                .collect(),
        );
        let offers = slots
            .iter()
            .map(|s| {
                let name = s.name().to_owned();
                // A provider without an entry in the file (tests build some) follows the
                // strictest default.
                let entry = cfg.providers.iter().find(|p| p.name == name);
                let policy = |f: fn(&crate::config::ProviderConfig, &[String]) -> _| {
                    entry.map_or(crate::config::SecretEnv::Deny, |p| {
                        f(p, &cfg.allowed_namespaces)
                    })
                };
                dispatch::Offer {
                    name,
                    capabilities: s.provider().capabilities(),
                    secret_env: policy(crate::config::ProviderConfig::secret_env),
                    pull_secrets: policy(crate::config::ProviderConfig::pull_secrets),
                }
            })
            .collect();
        let admission = decide::Admission {
            taint: cfg
                .taint
                .then(|| (crate::vocab::TAINT_KEY.to_owned(), cfg.node_name.clone())),
            namespaces: cfg.allowed_namespaces.clone(),
        };
        let start_deadlines = slots
            .iter()
            .map(|s| {
                let name = s.name();
                cfg.providers
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.start_deadline())
                    .unwrap_or_default()
            })
            .collect();
        let storms = storm::Storms::new(&cfg.refusals);
        let networks = Arc::new(networks::ClusterNetworks::new(cfg.cluster_networks.clone()));
        let prober = prober::Prober::new(networks.clone());
        Arc::new(Self {
            client,
            cfg,
            owner,
            slots,
            offers,
            admission,
            start_deadlines,
            pods: PodStore::default(),
            ready: signal::channel(false).0,
            recent: Recent::default(),
            queue: Queue::new(),
            events,
            guard,
            prober,
            networks,
            storms,
            metrics,
        })
    }

    /// The cluster's own networks (configured and learnt; `networks::run` keeps them).
    pub fn networks(&self) -> &Arc<networks::ClusterNetworks> {
        &self.networks
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The providers, each behind the call layer.
    pub fn providers(&self) -> impl Iterator<Item = &Arc<dyn DynProvider>> {
        self.slots.iter().map(|s| s.provider())
    }

    /// A pod of this node by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods
            .find(namespace, name)
            .and_then(|p| p.pod())
            .map(Arc::new)
    }

    /// Every pod of this node, decoded from the store (for the kubelet API; not a hot path).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .select(|_| true)
            .iter()
            .filter_map(|p| p.pod())
            .map(Arc::new)
            .collect()
    }

    /// Waits until a pod in [`Self::published_pods`] was added, changed or removed.
    pub async fn published_changed(&self) {
        self.pods.published_changed().await
    }

    /// The pods of this node whose container ports their provider publishes elsewhere,
    /// decoded: the pods `crate::endpoints` writes EndpointSlices for. Their
    /// `gpu-vk.io/published-ports` annotation is set from what this VK observed of the
    /// workload, whatever the pod carries: anyone who may patch pods in the namespace can write
    /// the annotation, and a Service must not follow it to another namespace's pod or a node's
    /// port (the pattern of CVE-2021-25740). A pod without an observed workload that publishes
    /// ports is left out, whatever its annotation says.
    pub fn published_pods(&self) -> Vec<Pod> {
        let mut out = Vec::new();
        for stored in self.pods.select(|_| true) {
            let Some((i, o)) = self.find(&stored.uid) else {
                continue;
            };
            if o.ports.is_empty() {
                continue;
            }
            let choice = self.address_choice(&o, self.provider_name(i));
            let Some(text) = address::published_text(&choice.published) else {
                continue;
            };
            let Some(mut pod) = stored.pod() else {
                continue;
            };
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(spec::ANN_PUBLISHED.to_owned(), text);
            out.push(pod);
        }
        out
    }

    /// Decodes, one at a time, the pods whose UID passes `want` and hands each to `f`.
    pub fn visit_pods(&self, want: &dyn Fn(&str) -> bool, f: &mut dyn FnMut(&Pod)) {
        for p in self.pods.select(|p| want(&p.uid)) {
            if let Some(pod) = p.pod() {
                f(&pod);
            }
        }
    }

    /// The provider and workload serving a pod, if any.
    pub fn workload_of(&self, uid: &str) -> Option<(Arc<dyn DynProvider>, Observed)> {
        self.find(uid)
            .map(|(i, o)| (self.slots[i].provider().clone(), o))
    }

    /// The provider index and observed workload of a pod, if any provider holds one.
    fn find(&self, uid: &str) -> Option<(usize, Observed)> {
        self.slots.find(uid)
    }

    fn provider_name(&self, i: usize) -> &str {
        self.slots[i].name()
    }

    /// Each provider's health now, by name (for the node's conditions and the metrics).
    pub fn health(&self) -> Vec<(String, Health)> {
        let now = Instant::now();
        self.slots
            .iter()
            .map(|s| (s.name().to_owned(), s.health(now)))
            .collect()
    }

    /// GPUs the providers' inventories show free (providers that give no count add none).
    pub fn inventory_gpus(&self) -> u64 {
        self.slots.iter().filter_map(|s| s.available_gpus()).sum()
    }

    /// True once the pod store is synced and every provider was listed once.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Runs the watcher, the provider observers, the workers and the garbage collector until
    /// `shutdown` resolves; if one of them ends or panics first, says which (the process must
    /// then stop, see [`crate::supervise`]).
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), crate::supervise::TaskEnded> {
        let mut tasks = crate::supervise::Supervisor::new();
        tasks.spawn("pod watch", self.clone().watch_pods());
        for i in 0..self.slots.len() {
            tasks.spawn(
                format!("observer of provider {}", self.provider_name(i)),
                self.clone().observe(i),
            );
        }
        for i in 0..self.slots.len() {
            tasks.spawn(
                format!("inventory of provider {}", self.provider_name(i)),
                self.clone().refresh_inventory(i),
            );
        }
        tasks.spawn("workers", self.clone().start_when_ready());
        tasks.spawn("garbage collector", self.clone().collect_garbage());
        tasks.spawn("gauges", self.clone().export_gauges());
        let r = tasks.run(shutdown).await;
        info!("shutting down reconciliation");
        self.queue.shutdown();
        r
    }

    /// Pods by provider and phase, and the queue depth, for the metrics.
    async fn export_gauges(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let counts = self.pods.count_by_provider_and_phase();
            self.metrics.pods.clear();
            for ((provider, phase), n) in counts {
                self.metrics
                    .pods
                    .get_or_create(&PodLabels { provider, phase })
                    .set(n);
            }
            self.metrics.queue_depth.set(self.queue.len() as i64);
            self.metrics.held_pods.set(self.guard.held() as i64);
            let now = Instant::now();
            for (s, t) in self.slots.iter().zip(self.guard.tallies()) {
                let provider = s.name().to_owned();
                let l = crate::telemetry::ProviderLabels { provider };
                self.metrics.spend.get_or_create(&l).set(t.spend.dollars());
                self.metrics
                    .workloads
                    .get_or_create(&l)
                    .set(i64::from(t.workloads));
                self.metrics
                    .provider_healthy
                    .get_or_create(&l)
                    .set(i64::from(s.health(now).admits()));
            }
        }
    }
}

/// The circuit breaker's rules from its configuration.
fn breaker_rules(c: &crate::config::BreakerConfig) -> crate::provider::health::BreakerRules {
    crate::provider::health::BreakerRules {
        failures: c.failures,
        open: c.open(),
        slow: c.slow(),
    }
}
