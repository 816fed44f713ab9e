//! The provider-neutral core of an emulator: workloads and their lifecycle, GPU accounting,
//! execution (simulated or real processes), logs, and the admin operations.
//!
//! Simulated lifecycles cost nothing per workload: the phase is computed from timestamps when
//! read, and the only materialised event (a simulated exit after `run_ms`, which frees GPUs)
//! sits in one heap that is drained on every access.

mod admin;
pub mod gate;
mod lifecycle;
pub mod logs;
mod model;
pub(crate) mod process;
pub mod pull;

pub use model::*;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::config::{EmulatorConfig, ExecutionMode, GpuStock};
use crate::inventory::{AllocError, Inventory, InventoryLine, Placement};
use gate::{Admission, Credential, Denied, EndpointLimit, GateState, RateWindows, RouteKind};
use logs::{LogBuffer, LogLine, LogSource};
use process::{Launch, ProcState};

/// Usage reported for a running simulated workload unless the admin API overrides it.
pub const DEFAULT_USAGE: Usage = Usage {
    cpu_millis: 250,
    memory_bytes: 256 * 1024 * 1024,
};

/// First delay before RunPod restarts an exited container in place.
const RESTART_BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// Longest such delay.
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Shortest run of a re-run simulated command (keeps a loop from spinning).
const RERUN_MIN: Duration = Duration::from_millis(200);

/// Mutable state behind the engine's lock.
#[derive(Debug)]
pub struct Inner {
    /// Workloads by insertion number.
    pub workloads: BTreeMap<u64, Workload>,
    /// Provider id -> insertion number.
    pub by_id: HashMap<String, u64>,
    /// GPUs.
    pub inventory: Inventory,
    /// Counters, faults, rate window.
    pub gate: GateState,
    /// Vast offers and log snapshots.
    pub vast: crate::vast::Book,
    /// RunPod account state (pool access, balance).
    pub runpod: crate::runpod::Account,
    /// Private repositories and their logins.
    pub images: pull::Registry,
    next_seq: u64,
    next_vast_id: u64,
    exits: BinaryHeap<Reverse<(Instant, u64, u64)>>,
}

impl Inner {
    /// Insertion number of a provider id.
    pub fn seq_of(&self, id: &str) -> Option<u64> {
        self.by_id.get(id).copied()
    }
}

/// One emulator's engine.
pub struct Engine {
    flavor: Flavor,
    api_key: String,
    mode: ExecutionMode,
    /// Simulated mode: every how many creates one never leaves its start phase, and the first.
    stuck_every: Option<u32>,
    first_stuck: u32,
    /// Simulated mode, Vast: hosts that go offline under running instances.
    host_outage: Option<crate::config::HostOutage>,
    rate_windows: RateWindows,
    /// Per-endpoint limits (already scaled), by the endpoint names the routes pass.
    endpoint_limits: HashMap<&'static str, EndpointLimit>,
    weak: Weak<Engine>,
    inner: Mutex<Inner>,
    /// Listeners on running workloads' published TCP ports (RunPod), see [`crate::serve`].
    pub served: crate::serve::Served,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the API key.
        f.debug_struct("Engine")
            .field("flavor", &self.flavor)
            .field("mode", &self.mode)
            .field("rate_windows", &self.rate_windows)
            .field("endpoint_limits", &self.endpoint_limits)
            .finish_non_exhaustive()
    }
}

fn ts_add(ts: Timestamp, d: Duration) -> Timestamp {
    ts.checked_add(d).unwrap_or(ts)
}

impl Engine {
    /// An engine for `flavor` from `config`.
    pub fn new(flavor: Flavor, config: EmulatorConfig) -> Arc<Self> {
        Arc::new_cyclic(|weak| Self {
            flavor,
            api_key: config.api_key,
            stuck_every: config.stuck_every.filter(|_| !config.mode.is_process()),
            first_stuck: config.first_stuck,
            host_outage: config
                .host_outage
                .filter(|_| flavor == Flavor::Vast && !config.mode.is_process()),
            mode: config.mode,
            rate_windows: config.rate_windows,
            endpoint_limits: match (flavor, config.endpoint_limit_scale) {
                (Flavor::Vast, Some(scale)) => crate::vast::ENDPOINT_LIMITS
                    .iter()
                    .map(|(endpoint, limit)| (*endpoint, limit.scaled(scale)))
                    .collect(),
                _ => HashMap::new(),
            },
            weak: weak.clone(),
            inner: Mutex::new(Inner {
                workloads: BTreeMap::new(),
                by_id: HashMap::new(),
                inventory: Inventory::new(&config.inventory),
                gate: GateState::default(),
                vast: crate::vast::Book::default(),
                runpod: crate::runpod::Account::default(),
                images: pull::Registry::new(config.pull_ms_per_gb),
                next_seq: 1,
                next_vast_id: 1_000_001,
                exits: BinaryHeap::new(),
            }),
            served: crate::serve::Served::default(),
        })
    }

    /// The emulated API.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The execution mode.
    pub fn mode(&self) -> &ExecutionMode {
        &self.mode
    }

    /// Lock the state (a poisoned lock is recovered: the state stays usable).
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pass a real-API request through counters, faults, authentication and the quota
    /// windows.
    pub async fn gate(&self, kind: RouteKind, key: Credential<'_>) -> Result<Admission, Denied> {
        self.gate_at(kind, "", key).await
    }

    /// [`Engine::gate`], then the limit of `endpoint` (one of the names the provider's
    /// routes declare, e.g. [`crate::vast::ENDPOINT_LIMITS`]), if enforced.
    pub async fn gate_at(
        &self,
        kind: RouteKind,
        endpoint: &'static str,
        key: Credential<'_>,
    ) -> Result<Admission, Denied> {
        let (latency, fault) = self.lock().gate.observe(kind);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some(denied) = fault {
            return Err(denied);
        }
        match key {
            Credential::Key(k) if gate::same_secret(k, &self.api_key) => {}
            Credential::Missing => return Err(Denied::Unauthorized { missing: true }),
            _ => return Err(Denied::Unauthorized { missing: false }),
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let rate = inner.gate.take_rate(&self.rate_windows, now)?;
        if let Some(limit) = self.endpoint_limits.get(endpoint) {
            inner.gate.take_endpoint(endpoint, *limit, now)?;
        }
        Ok(Admission { rate })
    }

    // ---- lifecycle -------------------------------------------------------------------------

    /// Materialise due simulated exits (frees their GPUs).
    pub fn settle(&self, inner: &mut Inner, now: Instant) {
        while let Some(Reverse((due, seq, generation))) = inner.exits.peek().copied() {
            if due > now {
                break;
            }
            inner.exits.pop();
            let Some(w) = inner.workloads.get_mut(&seq) else {
                continue;
            };
            if w.generation != generation || !matches!(w.run, Run::Active { .. }) {
                continue;
            }
            self.announce(w, now);
            self.end_simulated_run(inner, seq, due);
        }
    }

    /// The phase of `w` at `now`.
    pub fn phase(&self, w: &Workload, now: Instant) -> Phase {
        match &w.run {
            // RunPod keeps the pod RUNNING while it restarts an exited container.
            Run::Active { .. } if w.restarts > 0 => Phase::Running,
            // A pull that fails is retried for ever: the workload never starts.
            Run::Active { .. } if w.pull_error.is_some() => Phase::Provisioning,
            Run::Active { since, .. } => {
                let elapsed = now.saturating_duration_since(*since);
                let provision = self.mode.provision() + w.pull_extra;
                let start = provision + self.mode.start();
                if elapsed < provision {
                    Phase::Provisioning
                } else if elapsed < start || self.stuck(w) {
                    Phase::Starting
                } else if self.mode.is_process() {
                    if w.proc.started {
                        Phase::Running
                    } else {
                        Phase::Starting
                    }
                } else if self.mode.run().is_some_and(|r| elapsed >= start + r) {
                    Phase::Exited
                } else if self.host_lost(w, elapsed - start) {
                    Phase::Offline
                } else {
                    Phase::Running
                }
            }
            Run::Exited { .. } => Phase::Exited,
            Run::Failed { .. } => Phase::Failed,
            Run::Stopped {
                reason: StopReason::Preempted { .. },
                ..
            } => Phase::Preempted,
            Run::Stopped { .. } => Phase::Stopped,
        }
    }

    /// Whether `w` is one of the creates that never start (`EmulatorConfig::stuck_every`; a
    /// restart in place keeps its fate).
    pub fn stuck(&self, w: &Workload) -> bool {
        self.stuck_every.is_some_and(|n| {
            let n = u64::from(n);
            // Shifted so that create number `first_stuck` is a multiple of `n`.
            let shift = n - u64::from(self.first_stuck) % n;
            (w.seq + shift).is_multiple_of(n)
        })
    }

    /// Whether the host of `w`, running for `running`, has gone offline
    /// (`EmulatorConfig::host_outage`).
    fn host_lost(&self, w: &Workload, running: Duration) -> bool {
        self.host_outage.is_some_and(|o| {
            w.seq % u64::from(o.every) == u64::from(o.every) - 1 && running >= o.after
        })
    }

    /// Phase of `w`, writing the lifecycle log lines it implies (simulated mode only writes
    /// them lazily, when somebody looks).
    pub fn observe(&self, w: &mut Workload, now: Instant) -> Phase {
        self.announce(w, now);
        self.phase(w, now)
    }

    fn announce(&self, w: &mut Workload, now: Instant) {
        let Run::Active { since, since_wall } = w.run.clone() else {
            return;
        };
        let elapsed = now.saturating_duration_since(since);
        let provision = self.mode.provision() + w.pull_extra;
        let start = provision + self.mode.start();
        if w.announced < 1 {
            w.announced = 1;
            w.logs.push(
                since_wall,
                LogSource::System,
                format!(
                    "allocated {} x {} on machine {}",
                    w.gpu_count,
                    w.gpu_type,
                    w.machine_id.unwrap_or(0)
                ),
            );
        }
        if w.pull_error.is_some() {
            self.announce_pull_failures(w, since_wall, elapsed);
            return;
        }
        if w.announced < 2 && elapsed >= provision {
            w.announced = 2;
            w.logs.push(
                ts_add(since_wall, provision),
                LogSource::System,
                format!("image {} ready, starting container", w.image),
            );
        }
        if w.announced < 3 && elapsed >= start && !self.mode.is_process() && !self.stuck(w) {
            w.announced = 3;
            let at = ts_add(since_wall, start);
            w.running_since = Some(at);
            w.logs.push(at, LogSource::System, "container is running");
            w.logs.push(
                at,
                LogSource::Container,
                format!(
                    "[emulator] simulated container started from image {}",
                    w.image
                ),
            );
        }
    }

    fn begin(&self, inner: &mut Inner, seq: u64, since: Instant) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        w.proc.kill();
        w.proc = ProcState::default();
        w.generation += 1;
        w.announced = 0;
        w.running_since = None;
        let since_wall = Timestamp::now()
            .checked_sub(Instant::now().saturating_duration_since(since))
            .unwrap_or_else(|_| Timestamp::now());
        w.run = Run::Active { since, since_wall };
        let ready = since + self.mode.provision() + w.pull_extra + self.mode.start();
        if w.pull_error.is_some() {
            return;
        }
        if let Some(run) = self.mode.run().or(w.rerun_for).filter(|_| !self.stuck(w)) {
            inner.exits.push(Reverse((ready + run, seq, w.generation)));
        }
        if !self.mode.is_process() {
            return;
        }
        let delay = ready.saturating_duration_since(Instant::now());
        if w.command.is_none() && delay.is_zero() {
            // Nothing to run and already past starting: up right away.
            let at = ts_add(since_wall, self.mode.provision() + self.mode.start());
            w.proc.started = true;
            w.running_since = Some(at);
            w.announced = 3;
            w.logs
                .push(at, LogSource::System, "container is running (no command)");
            return;
        }
        process::launch(
            self.weak.clone(),
            Launch {
                seq,
                generation: w.generation,
                command: w.command.clone(),
                env: w.env.clone(),
                delay,
            },
        );
    }

    /// Usage of `w` in `phase` (zero unless running).
    pub fn usage(&self, w: &mut Workload, phase: Phase, now: Instant) -> Usage {
        if phase != Phase::Running {
            return Usage::default();
        }
        if let Some(u) = w.usage_override {
            return u;
        }
        if self.mode.is_process()
            && let (Some(pid), Some(started)) = (w.proc.pid, w.proc.started_at)
        {
            if let Some((cpu_ms, rss)) = process::group_usage(pid) {
                let cpu_millis = w.proc.cpu.sample(now, cpu_ms, started);
                return Usage {
                    cpu_millis,
                    memory_bytes: rss,
                };
            }
            return Usage::default();
        }
        DEFAULT_USAGE
    }

    // ---- process callbacks -----------------------------------------------------------------

    pub(crate) fn proc_started(
        &self,
        seq: u64,
        generation: u64,
        pid: Option<u32>,
        kill: Option<oneshot::Sender<()>>,
    ) -> bool {
        let mut inner = self.lock();
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return false;
        };
        if w.generation != generation || !matches!(w.run, Run::Active { .. }) {
            return false;
        }
        let now = Timestamp::now();
        w.proc.started = true;
        w.proc.pid = pid;
        w.proc.kill = kill;
        w.proc.started_at = Some(Instant::now());
        w.running_since = Some(now);
        w.announced = 3;
        let line = match pid {
            Some(pid) => format!("container is running (process {pid})"),
            None => "container is running (no command)".to_owned(),
        };
        w.logs.push(now, LogSource::System, line);
        true
    }

    pub(crate) fn proc_log(&self, seq: u64, source: LogSource, line: String) {
        if let Some(w) = self.lock().workloads.get_mut(&seq) {
            w.logs.push(Timestamp::now(), source, line);
        }
    }

    pub(crate) fn proc_exited(&self, seq: u64, generation: u64, code: i32) {
        let mut inner = self.lock();
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        if w.generation != generation || !matches!(w.run, Run::Active { .. }) {
            return;
        }
        if w.keep_alive {
            w.proc.pid = None;
            w.proc.kill = None;
            w.logs.push(
                Timestamp::now(),
                LogSource::System,
                format!("onstart exited with code {code}; the container stays up"),
            );
            return;
        }
        self.exit_locked(&mut inner, seq, code);
    }

    pub(crate) fn proc_failed(&self, seq: u64, generation: u64, message: String) {
        let mut inner = self.lock();
        let matches = inner
            .workloads
            .get(&seq)
            .is_some_and(|w| w.generation == generation && matches!(w.run, Run::Active { .. }));
        if matches {
            self.fail_locked(&mut inner, seq, message);
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for w in inner.workloads.values_mut() {
            w.proc.kill();
        }
    }
}
