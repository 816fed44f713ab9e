//! The framework under every provider: pod store, provider observation, reconciliation,
//! dispatch, garbage collection and deletion. Where a pod's status gets written: here, in
//! [`Framework::write_status`], from the pure translation in `crate::translate`.
//!
//! Stateless by construction: everything below is re-derived at start from the pods bound to
//! this node and one list of every provider.

pub mod queue;
pub mod store;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ObjectReference, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::events::{EventType, Events};
use crate::naming::{Owner, WorkloadId};
use crate::provider::{DynProvider, Observed, ProviderError, WorkloadState};
use crate::spec::{self, ANN_ASSIGNED};
use crate::telemetry::{Metrics, PodLabels, ResultLabels};
use crate::translate::{self, Situation, reason};
use crate::{dispatch, env};
pub use queue::Queue;
pub use store::StoredPod;

/// Timeout of a single provider call; beyond it the call counts as transient.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of one reconcile; all are retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to write pod status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("failed to delete pod: {0}")]
    DeletePod(#[source] kube::Error),
    #[error("failed to resolve environment: {0}")]
    Env(#[source] env::Error),
    #[error("provider {provider}: {source}")]
    Provider {
        provider: String,
        source: ProviderError,
    },
    #[error("waiting for provider {0} to be listed")]
    NotListed(String),
}

/// What the framework knows about one provider.
struct ProviderSlot {
    provider: Arc<dyn DynProvider>,
    /// Our workloads at this provider by pod UID, from the last list plus local changes.
    cache: RwLock<HashMap<String, Observed>>,
    /// Start time of the last successful list.
    listed_at: RwLock<Option<Instant>>,
}

/// Local memory of recent actions, to judge list results that raced with them.
#[derive(Default)]
struct Recent {
    /// (provider, pod UID) -> when our last create call for its workload ended (set when it
    /// starts too); kept until a list that began later has been applied.
    created: HashMap<(usize, String), Instant>,
    /// pod UID -> when we deleted its workload.
    deleted: HashMap<(usize, String), Instant>,
    /// workload -> first time it was seen without a live pod.
    orphans: HashMap<(usize, WorkloadId), Instant>,
    /// pod UID -> when a list showed its workload in a new state, until the pod's next sync.
    changed: HashMap<String, Instant>,
    /// Pods (by UID) this VK removed from the API, until the watch reports them gone: their
    /// last update events must not cause a second DELETE.
    pods_deleted: HashSet<String>,
}

/// The shared state of a running VK.
pub struct Framework {
    client: Client,
    cfg: Arc<Config>,
    owner: Owner,
    slots: Vec<ProviderSlot>,
    pods: RwLock<HashMap<String, Arc<StoredPod>>>,
    pods_synced: AtomicBool,
    /// UIDs of pods seen deleted whose workloads may still need deleting.
    gone: RwLock<HashSet<String>>,
    ready: watch::Sender<bool>,
    recent: RwLock<Recent>,
    queue: Queue,
    events: Events,
    pub metrics: Metrics,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl Framework {
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
        let slots = providers
            .into_iter()
            .map(|provider| ProviderSlot {
                provider,
                cache: RwLock::default(),
                listed_at: RwLock::default(),
            })
            .collect();
        Arc::new(Self {
            client,
            cfg,
            owner,
            slots,
            pods: RwLock::default(),
            pods_synced: AtomicBool::new(false),
            gone: RwLock::default(),
            ready: watch::channel(false).0,
            recent: RwLock::default(),
            queue: Queue::new(),
            events,
            metrics,
        })
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    pub fn providers(&self) -> impl Iterator<Item = &Arc<dyn DynProvider>> {
        self.slots.iter().map(|s| &s.provider)
    }

    /// A pod of this node by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let found = read(&self.pods)
            .values()
            .find(|p| &*p.namespace == namespace && &*p.name == name)
            .cloned();
        found.and_then(|p| p.pod()).map(Arc::new)
    }

    /// Every pod of this node, decoded from the store (for the kubelet API; not a hot path).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.stored(&|_| true)
            .iter()
            .filter_map(|p| p.pod())
            .map(Arc::new)
            .collect()
    }

    /// The stored pods whose UID passes `want` (a snapshot: the lock is not held after).
    fn stored(&self, want: &dyn Fn(&str) -> bool) -> Vec<Arc<StoredPod>> {
        read(&self.pods)
            .values()
            .filter(|p| want(&p.uid))
            .cloned()
            .collect()
    }

    /// Decodes, one at a time, the pods whose UID passes `want` and hands each to `f`.
    pub fn visit_pods(&self, want: &dyn Fn(&str) -> bool, f: &mut dyn FnMut(&Pod)) {
        for p in self.stored(want) {
            if let Some(pod) = p.pod() {
                f(&pod);
            }
        }
    }

    /// The provider and workload serving a pod, if any.
    pub fn workload_of(&self, uid: &str) -> Option<(Arc<dyn DynProvider>, Observed)> {
        self.slots.iter().find_map(|s| {
            read(&s.cache)
                .get(uid)
                .map(|o| (s.provider.clone(), o.clone()))
        })
    }

    /// True once the pod store is synced and every provider was listed once.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Runs the watcher, the provider observers, the workers and the garbage collector until
    /// `shutdown` resolves.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(self.clone().watch_pods());
        for i in 0..self.slots.len() {
            tasks.spawn(self.clone().observe(i));
        }
        tasks.spawn(self.clone().start_when_ready());
        tasks.spawn(self.clone().collect_garbage());
        tasks.spawn(self.clone().export_gauges());
        shutdown.await;
        info!("shutting down reconciliation");
        self.queue.shutdown();
        tasks.abort_all();
    }

    async fn start_when_ready(self: Arc<Self>) {
        let t0 = Instant::now();
        loop {
            let listed = self.slots.iter().all(|s| read(&s.listed_at).is_some());
            if listed && self.pods_synced.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        info!(
            elapsed_ms = t0.elapsed().as_millis() as u64,
            pods = read(&self.pods).len(),
            "pod store synced and every provider listed: reconciling"
        );
        for uid in read(&self.pods).keys() {
            self.queue.add(uid);
        }
        for s in &self.slots {
            for uid in read(&s.cache).keys() {
                self.queue.add(uid);
            }
        }
        self.ready.send_replace(true);
        let mut workers = tokio::task::JoinSet::new();
        // A share of the workers serves only pods that just arrived (or are being deleted).
        for _ in 0..(self.cfg.workers / 4).max(1) {
            let fw = self.clone();
            workers.spawn(async move {
                while let Some(uid) = fw.queue.next_first().await {
                    fw.reconcile_logged(&uid).await;
                    fw.queue.done(&uid);
                }
            });
        }
        for _ in 0..self.cfg.workers {
            let fw = self.clone();
            workers.spawn(async move {
                while let Some(uid) = fw.queue.next().await {
                    fw.reconcile_logged(&uid).await;
                    fw.queue.done(&uid);
                }
            });
        }
        // Marks the end of the start-up reconcile (everything known at start handled once):
        // how long a restart takes to re-derive its state, for operators and `make bench`.
        let fw = self.clone();
        workers.spawn(async move {
            while !fw.queue.is_idle() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let elapsed = t0.elapsed();
            fw.metrics
                .startup_reconcile_seconds
                .set(elapsed.as_secs_f64().max(1e-6));
            info!(
                elapsed_ms = elapsed.as_millis() as u64,
                pods = read(&fw.pods).len(),
                "start-up reconcile finished"
            );
        });
        while workers.join_next().await.is_some() {}
    }

    // ---------------------------------------------------------------------------------------
    // Pod store

    async fn watch_pods(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let wc =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.cfg.node_name));
        let mut buffer: Option<HashMap<String, Arc<StoredPod>>> = None;
        let mut stream = watcher(api, wc).default_backoff().boxed();
        loop {
            let ev = match stream.try_next().await {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    warn!(error = %e, "pod watch failed; retrying");
                    continue;
                }
            };
            match ev {
                watcher::Event::Init => buffer = Some(HashMap::new()),
                watcher::Event::InitApply(p) => {
                    if let (Some(b), Some(uid)) = (buffer.as_mut(), p.metadata.uid.clone()) {
                        b.insert(uid, Arc::new(StoredPod::new(p)));
                    }
                }
                watcher::Event::InitDone => {
                    let new = buffer.take().unwrap_or_default();
                    let old = std::mem::replace(&mut *write(&self.pods), new.clone());
                    write(&self.recent)
                        .pods_deleted
                        .retain(|u| new.contains_key(u));
                    write(&self.gone).extend(old.keys().filter(|u| !new.contains_key(*u)).cloned());
                    for uid in old.keys().chain(new.keys()) {
                        self.queue.add(uid);
                    }
                    self.pods_synced.store(true, Ordering::SeqCst);
                }
                watcher::Event::Apply(p) => {
                    if let Some(uid) = p.metadata.uid.clone() {
                        let p = StoredPod::new(p);
                        let changed = {
                            let mut pods = write(&self.pods);
                            let old = pods.get(&uid);
                            if old.is_some_and(|old| old.resource_version > p.resource_version) {
                                // The answer to one of our own writes is already stored and is
                                // newer than this event, which was in flight: keeping it avoids
                                // a reconcile (and a status write) against a stale status.
                                None
                            } else {
                                let changed = old.is_none_or(|old| !old.same_generation(&p));
                                // A pod new to this node (or being deleted) goes ahead of status
                                // refreshes: its create (or its deletion) is what users wait on.
                                let first = old.is_none()
                                    || (p.deleting && old.is_some_and(|o| !o.deleting));
                                let p = p.seen_since(old.map(|o| &**o));
                                pods.insert(uid.clone(), Arc::new(p));
                                changed.then_some(first)
                            }
                        };
                        match changed {
                            Some(true) => self.queue.add_first(&uid),
                            Some(false) => self.queue.add(&uid),
                            None => {}
                        }
                    }
                }
                watcher::Event::Delete(p) => {
                    if let Some(uid) = p.metadata.uid.clone() {
                        write(&self.pods).remove(&uid);
                        write(&self.recent).pods_deleted.remove(&uid);
                        write(&self.gone).insert(uid.clone());
                        self.queue.add(&uid);
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Provider observation: one list per provider per interval.

    async fn observe(self: Arc<Self>, i: usize) {
        let interval = self.cfg.timings.poll_interval();
        let mut failures = 0u32;
        loop {
            let started = Instant::now();
            let slot = &self.slots[i];
            let name = slot.provider.name().to_owned();
            match tokio::time::timeout(PROVIDER_TIMEOUT, slot.provider.list()).await {
                Ok(Ok(list)) => {
                    self.metrics.call(&name, "list", true);
                    failures = 0;
                    self.apply_list(i, started, list);
                    tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
                }
                Ok(Err(e)) => {
                    self.metrics.call(&name, "list", false);
                    let wait = match &e {
                        ProviderError::Transient {
                            retry_after: Some(d),
                            ..
                        } => *d,
                        _ => queue::backoff(failures).max(interval),
                    };
                    failures = failures.saturating_add(1);
                    warn!(provider = %name, error = %e, retry_in_ms = wait.as_millis() as u64, "provider list failed");
                    tokio::time::sleep(wait).await;
                }
                Err(_) => {
                    self.metrics.call(&name, "list", false);
                    failures = failures.saturating_add(1);
                    warn!(provider = %name, "provider list timed out");
                    tokio::time::sleep(interval).await;
                }
            }
        }
    }

    /// Folds one list result into the cache and enqueues the pods whose workload changed.
    fn apply_list(&self, i: usize, started: Instant, list: Vec<Observed>) {
        let slot = &self.slots[i];
        let mut changed = Vec::new();
        {
            let recent = read(&self.recent);
            let mut cache = write(&slot.cache);
            let mut seen = HashSet::new();
            for obs in list {
                if !self.owner.owns(&obs.id) {
                    continue;
                }
                let uid = obs.id.pod_uid().to_owned();
                // A delete we issued after this list began wins over the list.
                if recent
                    .deleted
                    .get(&(i, uid.clone()))
                    .is_some_and(|t| *t > started)
                {
                    continue;
                }
                seen.insert(uid.clone());
                match cache.get(&uid) {
                    Some(old) if same_state(old, &obs) => {
                        cache.insert(uid, obs);
                    }
                    _ => {
                        cache.insert(uid.clone(), obs);
                        changed.push(uid);
                    }
                }
            }
            let gone: Vec<String> = cache
                .keys()
                .filter(|uid| !seen.contains(*uid))
                // A workload created after this list began is not missing, just not listed yet.
                .filter(|uid| {
                    recent
                        .created
                        .get(&(i, (*uid).clone()))
                        .is_none_or(|t| *t <= started)
                })
                .cloned()
                .collect();
            for uid in gone {
                cache.remove(&uid);
                changed.push(uid);
            }
        }
        {
            let mut recent = write(&self.recent);
            recent.deleted.retain(|(p, _), t| *p != i || *t > started);
            recent.created.retain(|(p, _), t| *p != i || *t > started);
        }
        *write(&slot.listed_at) = Some(started);
        if !changed.is_empty() {
            let now = Instant::now();
            let mut recent = write(&self.recent);
            for uid in &changed {
                recent.changed.entry(uid.clone()).or_insert(now);
            }
        }
        for uid in changed {
            self.queue.add(&uid);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Reconciliation

    async fn reconcile_logged(&self, uid: &str) {
        self.metrics.queue_depth.set(self.queue.len() as i64);
        match self.reconcile(uid).await {
            Ok(requeue) => {
                self.metrics
                    .reconciles
                    .get_or_create(&ResultLabels {
                        result: "ok".into(),
                    })
                    .inc();
                self.queue.forget(uid);
                if let Some(d) = requeue {
                    self.queue.add_after(uid, d);
                }
            }
            Err(e) => {
                self.metrics
                    .reconciles
                    .get_or_create(&ResultLabels {
                        result: "error".into(),
                    })
                    .inc();
                let d = self.queue.retry(uid);
                warn!(uid, error = %e, retry_in_ms = d.as_millis() as u64, "reconcile failed");
            }
        }
    }

    /// Brings one pod and its workload together. Returns an optional requeue delay.
    async fn reconcile(&self, uid: &str) -> Result<Option<Duration>, Error> {
        let stored = read(&self.pods).get(uid).cloned();
        let list_changed = write(&self.recent).changed.remove(uid);
        let Some(stored) = stored else {
            // A pod we saw deleted: its workloads go now. A workload whose pod this process
            // never saw is left to the garbage collector and its grace window.
            if read(&self.gone).contains(uid) {
                self.delete_workloads(uid, None).await?;
                if self.find(uid).is_none() {
                    write(&self.gone).remove(uid);
                }
            }
            return Ok(None);
        };
        let Some(pod) = stored.pod() else {
            return Ok(None);
        };
        let seen = stored.seen;
        drop(stored);
        if pod.metadata.deletion_timestamp.is_some() {
            return self.finish_deletion(&pod, uid).await.map(|_| None);
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        if phase == "Succeeded" || phase == "Failed" {
            // Terminal: keep exited workloads (logs), stop anything still holding resources.
            if let Some((i, obs)) = self.find(uid)
                && !matches!(
                    obs.state,
                    WorkloadState::Succeeded | WorkloadState::Failed { .. }
                )
            {
                self.delete_one(i, uid, &obs.provider_id, Some(&pod))
                    .await?;
            }
            return Ok(None);
        }

        let req = match spec::request(&pod) {
            Ok(r) => r,
            Err(e) => {
                self.fail(&pod, reason::INVALID_SPEC, &e.0).await?;
                return Ok(None);
            }
        };

        if let Some((i, obs)) = self.find(uid) {
            let r = self.sync_observed(&pod, i, &obs).await;
            if r.is_ok()
                && let Some(t) = list_changed
            {
                self.metrics
                    .status_latency
                    .observe(t.elapsed().as_secs_f64());
            }
            return r;
        }

        // No workload anywhere. Was one created before (container id on the pod)?
        let assigned = pod.annotations().get(ANN_ASSIGNED).cloned();
        let had_workload = current_container(&pod)
            .and_then(|c| c.container_id.clone())
            .is_some_and(|s| !s.is_empty());
        if had_workload {
            let i = assigned.as_deref().and_then(|a| self.index(a));
            // Only trust absence from a list that began after our own create.
            let fresh = i.is_none_or(|i| {
                let created = read(&self.recent)
                    .created
                    .get(&(i, uid.to_owned()))
                    .copied();
                match (read(&self.slots[i].listed_at).as_ref(), created) {
                    (Some(l), Some(c)) => *l > c,
                    (Some(_), None) => true,
                    (None, _) => false,
                }
            });
            if !fresh {
                return Ok(Some(self.cfg.timings.poll_interval()));
            }
            let provider = assigned.unwrap_or_default();
            let msg = format!("workload vanished at provider {provider}");
            self.event(
                &pod,
                EventType::Warning,
                reason::PROVIDER_LOST,
                "Observe",
                &msg,
            );
            let lost = Situation::Failed {
                reason: reason::PROVIDER_LOST,
                message: msg,
            };
            self.write_status(&pod, &lost, &provider).await?;
            return Ok(None);
        }

        // Waiting out a restart back-off?
        if let Some(wait) = self.backoff_remaining(&pod) {
            return Ok(Some(wait));
        }
        self.create(&pod, &req, assigned, seen).await
    }

    fn find(&self, uid: &str) -> Option<(usize, Observed)> {
        self.slots
            .iter()
            .enumerate()
            .find_map(|(i, s)| read(&s.cache).get(uid).map(|o| (i, o.clone())))
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.provider.name() == name)
    }

    /// Creates the workload on the first provider that accepts it.
    async fn create(
        &self,
        pod: &Pod,
        req: &spec::Request,
        assigned: Option<String>,
        seen: Instant,
    ) -> Result<Option<Duration>, Error> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let candidates = match dispatch::candidates(
            &self
                .slots
                .iter()
                .map(|s| s.provider.clone())
                .collect::<Vec<_>>(),
            req,
            assigned.as_deref(),
        ) {
            Ok(c) => c,
            Err(e) => {
                let r = match e {
                    dispatch::Error::UnknownProvider(_) => reason::UNKNOWN_PROVIDER,
                    dispatch::Error::NoMatch(_) => reason::INVALID_SPEC,
                };
                self.fail(pod, r, &e.to_string()).await?;
                return Ok(None);
            }
        };
        let Some(id) = self.owner.workload_id(&uid) else {
            self.fail(
                pod,
                reason::INVALID_SPEC,
                &format!("pod UID {uid:?} is not a UUID"),
            )
            .await?;
            return Ok(None);
        };
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
                self.write_status(pod, &s, assigned.as_deref().unwrap_or_default())
                    .await?;
                return Ok(Some(queue::backoff(4)));
            }
            Err(env::Error::Invalid(m)) => {
                self.fail(pod, reason::INVALID_SPEC, &m).await?;
                return Ok(None);
            }
            Err(e) => return Err(Error::Env(e)),
        };
        let workload = spec::workload(pod, req, id.clone(), env);

        let mut capacity_msgs = Vec::new();
        for i in candidates {
            let slot = &self.slots[i];
            let name = slot.provider.name().to_owned();
            // An earlier attempt on this provider may have created the workload even though it
            // failed for us (timeout, crash): only a list that began after it can tell. This is
            // what lets adapters create without looking up the name first.
            if read(&self.recent).created.contains_key(&(i, uid.clone())) {
                return Ok(Some(self.cfg.timings.poll_interval()));
            }
            write(&self.recent)
                .created
                .insert((i, uid.clone()), Instant::now());
            let call = Instant::now();
            let result =
                match tokio::time::timeout(PROVIDER_TIMEOUT, slot.provider.create(&workload)).await
                {
                    Ok(r) => r,
                    Err(_) => Err(ProviderError::transient("create timed out")),
                };
            let call = call.elapsed();
            // Only a list that began after the provider answered is sure to show the workload:
            // a list sent while the create was in flight may be served before it (seen under
            // load: the workload judged vanished and the pod failed with ProviderLost).
            write(&self.recent)
                .created
                .insert((i, uid.clone()), Instant::now());
            self.metrics.call(&name, "create", result.is_ok());
            match result {
                Ok(()) => {
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
                        usage: None,
                    };
                    write(&slot.cache).insert(uid.clone(), obs.clone());
                    let waited = seen.elapsed();
                    if restart_count(pod) == 0 {
                        // Relaunches after a restart back-off are not admission latency.
                        self.metrics.create_latency.observe(waited.as_secs_f64());
                    }
                    info!(namespace = pod.namespace().unwrap_or_default(), pod = pod.name_any(), uid, provider = %name, workload = %id, since_seen_ms = waited.as_millis() as u64, provider_ms = call.as_millis() as u64, "created workload");
                    // The status write also records the chosen provider on the pod.
                    self.write_status(pod, &Situation::Observed(&obs), &name)
                        .await?;
                    self.event(
                        pod,
                        EventType::Normal,
                        "Created",
                        "CreateWorkload",
                        &format!("created workload {id} on provider {name}"),
                    );
                    return Ok(None);
                }
                Err(ProviderError::Capacity { message }) => {
                    self.event(
                        pod,
                        EventType::Warning,
                        reason::PROVIDER_CAPACITY,
                        "CreateWorkload",
                        &format!("provider {name} has no capacity: {message}"),
                    );
                    capacity_msgs.push(format!("{name}: {message}"));
                }
                Err(ProviderError::Invalid { message }) => {
                    self.fail(
                        pod,
                        reason::INVALID_SPEC,
                        &format!("provider {name} rejected the pod: {message}"),
                    )
                    .await?;
                    return Ok(None);
                }
                Err(e) => {
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
                    let retry = match &e {
                        ProviderError::Transient {
                            retry_after: Some(d),
                            ..
                        } => Some(*d),
                        _ => None,
                    };
                    return match retry {
                        Some(d) => Ok(Some(d)),
                        None => Err(Error::Provider {
                            provider: name,
                            source: e,
                        }),
                    };
                }
            }
        }
        let msg = format!("no provider has capacity ({})", capacity_msgs.join("; "));
        let s = Situation::Waiting {
            reason: reason::PROVIDER_CAPACITY,
            message: msg,
        };
        self.write_status(pod, &s, assigned.as_deref().unwrap_or_default())
            .await?;
        Ok(Some(
            self.cfg.timings.poll_interval().max(queue::backoff(3)),
        ))
    }

    /// The pod has a workload: report its state, and apply the restart policy when it ended.
    async fn sync_observed(
        &self,
        pod: &Pod,
        i: usize,
        obs: &Observed,
    ) -> Result<Option<Duration>, Error> {
        let name = self.slots[i].provider.name().to_owned();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // A workload adopted after a restart between its create and the first status write gets
        // its provider recorded by the status write below.
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
                policy != "Never" && *r != crate::provider::FailureReason::Evicted
            }
            _ => false,
        };
        if restart {
            let restarts = restart_count(pod) + 1;
            let exit_code = match &obs.state {
                WorkloadState::Failed { exit_code, .. } => *exit_code,
                _ => 0,
            };
            let last = ContainerStateTerminated {
                exit_code,
                reason: Some(match &obs.state {
                    WorkloadState::Failed { reason: r, .. } => r.as_str().to_owned(),
                    _ => "Completed".to_owned(),
                }),
                started_at: obs
                    .started_at
                    .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
                finished_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    obs.finished_at.unwrap_or_else(Timestamp::now),
                )),
                container_id: Some(format!("{name}://{}", obs.id)),
                message: obs.message.clone(),
                signal: None,
            };
            let wait = self.restart_delay(restarts - 1);
            let msg = format!("back-off {}s restarting failed container", wait.as_secs());
            self.event(
                pod,
                EventType::Warning,
                "BackOff",
                "RestartWorkload",
                &format!("workload exited with code {exit_code}; {msg}"),
            );
            let s = Situation::BackOff { last, message: msg };
            self.write_status_with_restarts(pod, &s, &name, restarts)
                .await?;
            self.delete_one(i, &uid, &obs.provider_id, Some(pod))
                .await?;
            return Ok(Some(wait));
        }
        match &obs.state {
            WorkloadState::Preempted => {
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PREEMPTED,
                    "Observe",
                    &format!("workload preempted at provider {name}"),
                );
            }
            WorkloadState::Lost => {
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PROVIDER_LOST,
                    "Observe",
                    &format!("provider {name} lost the workload"),
                );
            }
            WorkloadState::Failed {
                exit_code,
                reason: r,
            } => {
                self.event(
                    pod,
                    EventType::Warning,
                    r.as_str(),
                    "Observe",
                    &format!("workload failed with exit code {exit_code} at provider {name}"),
                );
            }
            _ => {}
        }
        self.write_status(pod, &Situation::Observed(obs), &name)
            .await?;
        Ok(None)
    }

    fn restart_delay(&self, restarts_before: i32) -> Duration {
        let t = &self.cfg.timings;
        let ms = t
            .restart_backoff_ms
            .saturating_mul(1u64 << restarts_before.clamp(0, 20))
            .min(t.restart_backoff_max_ms);
        Duration::from_millis(ms)
    }

    /// Remaining restart back-off, read from the pod's status (stateless across restarts).
    fn backoff_remaining(&self, pod: &Pod) -> Option<Duration> {
        let cs = current_container(pod)?;
        let waiting = cs.state.as_ref()?.waiting.as_ref()?;
        if waiting.reason.as_deref() != Some(reason::CRASH_LOOP) {
            return None;
        }
        let finished = cs
            .last_state
            .as_ref()?
            .terminated
            .as_ref()?
            .finished_at
            .as_ref()?
            .0;
        let delay = self.restart_delay(cs.restart_count - 1);
        let due = finished
            .checked_add(jiff::SignedDuration::try_from(delay).ok()?)
            .ok()?;
        let left = due.duration_since(Timestamp::now());
        (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
    }

    // ---------------------------------------------------------------------------------------
    // Deletion and garbage collection

    /// The pod is being deleted: remove its workloads, then the pod (grace 0, UID precondition).
    async fn finish_deletion(&self, pod: &Pod, uid: &str) -> Result<(), Error> {
        self.delete_workloads(uid, Some(pod)).await?;
        if read(&self.recent).pods_deleted.contains(uid) {
            return Ok(());
        }
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {
                self.metrics.pod_deletes.inc();
                write(&self.recent).pods_deleted.insert(uid.to_owned());
                debug!(pod = pod.name_any(), uid, "pod deleted after its workload");
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(Error::DeletePod(e)),
        }
    }

    async fn delete_workloads(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        for i in 0..self.slots.len() {
            let found = read(&self.slots[i].cache)
                .get(uid)
                .map(|o| o.provider_id.clone());
            if let Some(provider_id) = found {
                self.delete_one(i, uid, &provider_id, pod).await?;
            }
        }
        Ok(())
    }

    /// Deletes one workload; NotFound counts as done.
    async fn delete_one(
        &self,
        i: usize,
        uid: &str,
        provider_id: &str,
        pod: Option<&Pod>,
    ) -> Result<(), Error> {
        let slot = &self.slots[i];
        let name = slot.provider.name().to_owned();
        let provider_id = if provider_id.is_empty() {
            // Created moments ago and not listed yet: learn its provider id first.
            match self.lookup_provider_id(i, uid).await? {
                Some(id) => id,
                None => return Err(Error::NotListed(name)),
            }
        } else {
            provider_id.to_owned()
        };
        let result = match tokio::time::timeout(
            PROVIDER_TIMEOUT,
            slot.provider.delete(&provider_id),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(ProviderError::transient("delete timed out")),
        };
        self.metrics.call(
            &name,
            "delete",
            matches!(result, Ok(()) | Err(ProviderError::NotFound)),
        );
        match result {
            Ok(()) | Err(ProviderError::NotFound) => {
                write(&slot.cache).remove(uid);
                write(&self.recent)
                    .deleted
                    .insert((i, uid.to_owned()), Instant::now());
                info!(uid, provider = %name, provider_id, "deleted workload");
                Ok(())
            }
            Err(e) => {
                if let Some(pod) = pod {
                    self.event(
                        pod,
                        EventType::Warning,
                        reason::PROVIDER_ERROR,
                        "DeleteWorkload",
                        &format!("provider {name}: {e}"),
                    );
                }
                Err(Error::Provider {
                    provider: name,
                    source: e,
                })
            }
        }
    }

    async fn lookup_provider_id(&self, i: usize, uid: &str) -> Result<Option<String>, Error> {
        let slot = &self.slots[i];
        let started = Instant::now();
        let list = slot
            .provider
            .list()
            .await
            .map_err(|source| Error::Provider {
                provider: slot.provider.name().to_owned(),
                source,
            })?;
        self.metrics.call(slot.provider.name(), "list", true);
        let found = list
            .iter()
            .find(|o| o.id.pod_uid() == uid && self.owner.owns(&o.id))
            .map(|o| o.provider_id.clone());
        self.apply_list(i, started, list);
        Ok(found)
    }

    /// Collects workloads owned by this node whose pod no longer exists, once the store is
    /// synced and the workload stayed orphaned for the grace window.
    async fn collect_garbage(self: Arc<Self>) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
        let grace = self.cfg.timings.gc_grace();
        loop {
            let mut victims = Vec::new();
            {
                let pods = read(&self.pods);
                let mut recent = write(&self.recent);
                let mut still = HashSet::new();
                for (i, slot) in self.slots.iter().enumerate() {
                    let name = slot.provider.name();
                    for (uid, obs) in read(&slot.cache).iter() {
                        let live = pods
                            .get(uid)
                            .is_some_and(|p| p.assigned_to_or_unassigned(name));
                        if live {
                            continue;
                        }
                        let key = (i, obs.id.clone());
                        still.insert(key.clone());
                        let first = *recent.orphans.entry(key).or_insert_with(Instant::now);
                        if first.elapsed() >= grace && !obs.provider_id.is_empty() {
                            victims.push((i, uid.clone(), obs.provider_id.clone(), obs.id.clone()));
                        }
                    }
                }
                recent.orphans.retain(|k, _| still.contains(k));
            }
            for (i, uid, provider_id, id) in victims {
                // Re-check under the per-pod queue discipline: a pod may have appeared.
                if read(&self.pods)
                    .get(&uid)
                    .is_some_and(|p| p.assigned_to_or_unassigned(self.slots[i].provider.name()))
                {
                    continue;
                }
                info!(provider = self.slots[i].provider.name(), workload = %id, provider_id, "collecting orphaned workload");
                if self.delete_one(i, &uid, &provider_id, None).await.is_ok() {
                    self.metrics.gc_deletes.inc();
                }
            }
            tokio::time::sleep(self.cfg.timings.poll_interval()).await;
        }
    }

    async fn export_gauges(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let mut counts: HashMap<(String, String), i64> = HashMap::new();
            for p in read(&self.pods).values() {
                let provider = p.assigned.as_deref().unwrap_or_default().to_owned();
                let phase = p.phase.as_deref().unwrap_or("Pending").to_owned();
                *counts.entry((provider, phase)).or_default() += 1;
            }
            self.metrics.pods.clear();
            for ((provider, phase), n) in counts {
                self.metrics
                    .pods
                    .get_or_create(&PodLabels { provider, phase })
                    .set(n);
            }
            self.metrics.queue_depth.set(self.queue.len() as i64);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Writes to the API server

    async fn fail(&self, pod: &Pod, reason: &str, message: &str) -> Result<(), Error> {
        let already = pod.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some(reason)
        });
        if !already {
            warn!(
                namespace = pod.namespace().unwrap_or_default(),
                pod = pod.name_any(),
                reason,
                message,
                "pod cannot run"
            );
            self.event(pod, EventType::Warning, reason, "Admit", message);
        }
        let provider = pod
            .annotations()
            .get(ANN_ASSIGNED)
            .cloned()
            .unwrap_or_default();
        self.write_status(
            pod,
            &Situation::Failed {
                reason,
                message: message.to_owned(),
            },
            &provider,
        )
        .await
    }

    async fn write_status(
        &self,
        pod: &Pod,
        s: &Situation<'_>,
        provider: &str,
    ) -> Result<(), Error> {
        self.write_status_with_restarts(pod, s, provider, restart_count(pod))
            .await
    }

    /// Writes the translated status through the status subresource, only when it changed.
    async fn write_status_with_restarts(
        &self,
        pod: &Pod,
        s: &Situation<'_>,
        provider: &str,
        restarts: i32,
    ) -> Result<(), Error> {
        let provider_restarts = match s {
            Situation::Observed(o) => o.provider_restarts as i32,
            _ => 0,
        };
        let cx = translate::Context {
            provider,
            host_ip: &self.cfg.internal_ip,
            restart_count: restarts.max(provider_restarts),
            now: Timestamp::now(),
        };
        let status = translate::pod_status(pod, s, &cx);
        // The chosen provider rides on the status write (the pods/status subresource accepts
        // annotations), so creating a workload costs no extra API request before or after.
        let annotate = !provider.is_empty()
            && pod.annotations().get(ANN_ASSIGNED).map(String::as_str) != Some(provider);
        if !annotate && !translate::status_changed(pod.status.as_ref(), &status) {
            return Ok(());
        }
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        // Merge patch: fields we dropped must be nulled explicitly, lists are replaced.
        if let (Some(obj), Ok(serde_json::Value::Object(old))) = (
            value.as_object_mut(),
            serde_json::to_value(pod.status.clone().unwrap_or_default()),
        ) {
            for k in old.keys() {
                obj.entry(k.clone()).or_insert(serde_json::Value::Null);
            }
        }
        let mut metadata = serde_json::json!({ "uid": pod.metadata.uid });
        if annotate {
            metadata["annotations"] = serde_json::json!({ ANN_ASSIGNED: provider });
        }
        let patch = serde_json::json!({ "metadata": metadata, "status": value });
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        match api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(updated) => {
                self.metrics.status_writes.inc();
                debug!(
                    namespace = pod.namespace().unwrap_or_default(),
                    pod = pod.name_any(),
                    uid = pod.metadata.uid.as_deref().unwrap_or_default(),
                    phase = status.phase.as_deref().unwrap_or_default(),
                    "wrote pod status"
                );
                // Keep our store current so the next reconcile compares against what we wrote.
                if let Some(uid) = updated.metadata.uid.clone() {
                    let updated = StoredPod::new(updated);
                    let mut pods = write(&self.pods);
                    if let Some(old) = pods
                        .get(&uid)
                        .filter(|p| p.resource_version <= updated.resource_version)
                    {
                        let updated = updated.seen_since(Some(old));
                        pods.insert(uid, Arc::new(updated));
                    }
                }
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(Error::WriteStatus(e)),
        }
    }

    fn event(&self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: &str) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        };
        self.events.publish(&reference, type_, reason, action, note);
    }
}

/// Observed states equal apart from usage figures (which change every poll and only feed
/// metrics).
fn same_state(a: &Observed, b: &Observed) -> bool {
    a.state == b.state
        && a.message == b.message
        && a.ip == b.ip
        && a.started_at == b.started_at
        && a.finished_at == b.finished_at
        && a.provider_restarts == b.provider_restarts
        && a.provider_id == b.provider_id
}

fn current_container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn restart_count(pod: &Pod) -> i32 {
    current_container(pod).map(|c| c.restart_count).unwrap_or(0)
}

#[allow(dead_code)]
fn _assert_send(fw: Arc<Framework>) -> impl Send {
    async move { fw.reconcile("x").await }
}
