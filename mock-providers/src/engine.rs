//! The provider-neutral core of an emulator: workloads and their lifecycle, GPU accounting,
//! execution (simulated or real processes), logs, and the admin operations.
//!
//! Simulated lifecycles cost nothing per workload: the phase is computed from timestamps when
//! read, and the only materialised event (a simulated exit after `run_ms`, which frees GPUs)
//! sits in one heap that is drained on every access.

pub mod gate;
pub mod logs;
pub(crate) mod process;

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

/// Which real API an engine emulates (decides ids, state names and preemption semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// RunPod REST v2.
    RunPod,
    /// Vast.ai.
    Vast,
}

/// Provider-neutral phase of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Being placed / image pulled.
    Provisioning,
    /// Container starting.
    Starting,
    /// Container running.
    Running,
    /// Container exited by itself (or through `/_admin/.../exit`).
    Exited,
    /// Unrecoverable error.
    Failed,
    /// Stopped by the user (or waiting for GPUs to come back, on Vast).
    Stopped,
    /// Taken away by the provider (outbid on Vast, host reclaimed on RunPod).
    Preempted,
}

impl Phase {
    /// Provisioning, starting or running: the workload holds GPUs.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Provisioning | Self::Starting | Self::Running)
    }
}

/// Why a workload is stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    /// The user asked.
    User,
    /// The provider took the GPUs (Vast: a higher bid, at this price if known).
    Preempted {
        /// The bid that won, when known.
        outbid_price: Option<f64>,
    },
    /// A start was requested but the machine's GPUs are taken (Vast).
    WaitingForGpus,
}

/// Lifecycle state.
#[derive(Clone, Debug, PartialEq)]
pub enum Run {
    /// Provisioning, starting or running, counted from `since`.
    Active {
        /// Monotonic start of this lifecycle.
        since: Instant,
        /// Wall-clock time of `since`.
        since_wall: Timestamp,
    },
    /// The container exited.
    Exited {
        /// When.
        at: Timestamp,
    },
    /// Stopped.
    Stopped {
        /// When.
        at: Timestamp,
        /// Why.
        reason: StopReason,
    },
    /// Unrecoverable error.
    Failed {
        /// When.
        at: Timestamp,
        /// What went wrong.
        message: String,
    },
}

/// CPU and memory use of a workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Resident memory in bytes.
    pub memory_bytes: u64,
}

/// Provider-specific request fields kept for rendering.
#[derive(Clone, Debug, Default)]
pub enum Extra {
    /// Injected through the admin API: render with defaults.
    #[default]
    None,
    /// RunPod pod fields.
    RunPod(Box<crate::runpod::PodExtra>),
    /// Vast instance fields.
    Vast(Box<crate::vast::InstanceExtra>),
}

/// A workload to create.
#[derive(Clone, Debug, Default)]
pub struct NewWorkload {
    /// RunPod `name` / Vast `label`.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// GPU type id.
    pub gpu_type: String,
    /// GPUs.
    pub gpu_count: u32,
    /// Shell command line for process mode (`None`: nothing to run, the container stays up).
    pub command: Option<String>,
    /// When the command ends the container stays up (Vast `ssh`/`jupyter` runtypes, where
    /// `onstart` runs beside the provider's own long-running entrypoint).
    pub keep_alive: bool,
    /// Interruptible (Vast bid).
    pub interruptible: bool,
    /// Bid in USD/hour for the whole instance (Vast).
    pub bid_price: Option<f64>,
    /// Pin to this machine.
    pub machine_id: Option<u64>,
    /// Create stopped (Vast `target_state: stopped`): no GPUs held.
    pub start_stopped: bool,
    /// Skip provisioning and starting (admin injection).
    pub already_running: bool,
    /// Provider fields.
    pub extra: Extra,
}

/// One workload.
#[derive(Debug)]
pub struct Workload {
    /// Internal insertion number (list order).
    pub seq: u64,
    /// Provider id.
    pub id: String,
    /// RunPod `name` / Vast `label`.
    pub name: String,
    /// Image.
    pub image: String,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// GPU type.
    pub gpu_type: String,
    /// GPUs.
    pub gpu_count: u32,
    /// USD per GPU-hour at creation.
    pub price_per_gpu_hour: f64,
    /// Process-mode command line.
    pub command: Option<String>,
    /// See [`NewWorkload::keep_alive`].
    pub keep_alive: bool,
    /// Interruptible (Vast bid).
    pub interruptible: bool,
    /// Current bid (Vast).
    pub bid_price: Option<f64>,
    /// Machine the workload is pinned to.
    pub machine_id: Option<u64>,
    /// GPUs currently held.
    pub placement: Option<Placement>,
    /// Creation time.
    pub created_at: Timestamp,
    /// When the container last reached running.
    pub running_since: Option<Timestamp>,
    /// RunPod: when the pod first reached running, kept across in-place container restarts.
    pub pod_started: Option<Timestamp>,
    /// RunPod: container exits restarted in place since the last start (not in the real API).
    pub restarts: u32,
    /// Simulated mode: how long the command ran before its (injected) exit; the restarted
    /// container runs the same command, so it ends again after as long, with the same code.
    pub rerun_for: Option<Duration>,
    /// Lifecycle.
    pub run: Run,
    /// Bumped on every (re)start; stale timers and processes check it.
    pub generation: u64,
    /// Exit code of the last container exit, when known.
    pub exit_code: Option<i32>,
    /// Usage set through the admin API.
    pub usage_override: Option<Usage>,
    /// Output and lifecycle lines.
    pub logs: LogBuffer,
    /// Provider fields.
    pub extra: Extra,
    pub(crate) proc: ProcState,
    announced: u8,
}

/// Admin view of a workload (`GET /_admin/workloads`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AdminWorkload {
    /// Provider id.
    pub id: String,
    /// Name / label the client gave.
    pub name: String,
    /// The emulator's own state string (RunPod `status`, Vast `actual_status`).
    pub state: String,
    /// Provider-neutral phase.
    pub phase: Phase,
    /// GPU type.
    pub gpu_type: String,
    /// GPUs.
    pub gpu_count: u32,
    /// Image.
    pub image: String,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Exit code of the last container exit.
    pub exit_code: Option<i32>,
    /// RunPod: container exits restarted in place since the last start.
    pub restarts: u32,
    /// CPU in millicores (0 unless running).
    pub cpu_millis: u64,
    /// Memory in bytes (0 unless running).
    pub memory_bytes: u64,
    /// Interruptible.
    pub interruptible: bool,
    /// Process-mode command line.
    pub command: Option<String>,
    /// Machine.
    pub machine_id: Option<u64>,
    /// Process (group) id while a process-mode command runs.
    pub pid: Option<u32>,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// The address the provider API lists for it (RunPod: of its `tcp` ports while it runs;
    /// Vast: `public_ipaddr`), see [`crate::serve::workload_address`].
    pub address: String,
}

/// Errors of admin operations.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdminError {
    /// No such workload.
    #[error("workload {0} not found")]
    NotFound(String),
    /// Not allowed in the current state.
    #[error("{0}")]
    Conflict(String),
    /// Bad input.
    #[error("{0}")]
    BadRequest(String),
}

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
            let at = match &w.run {
                Run::Active { since, since_wall } => {
                    ts_add(*since_wall, due.saturating_duration_since(*since))
                }
                _ => Timestamp::now(),
            };
            if self.flavor == Flavor::RunPod {
                w.logs.push(
                    at,
                    LogSource::Container,
                    "[emulator] simulated workload finished",
                );
                let code = w.exit_code.unwrap_or(0);
                self.restart_in_place_locked(inner, seq, code, due);
                continue;
            }
            if let Some(p) = w.placement.take() {
                inner.inventory.release(p);
            }
            w.logs.push(
                at,
                LogSource::Container,
                "[emulator] simulated workload finished",
            );
            w.logs
                .push(at, LogSource::System, "container exited with code 0");
            w.exit_code = Some(0);
            w.run = Run::Exited { at };
        }
    }

    /// The phase of `w` at `now`.
    pub fn phase(&self, w: &Workload, now: Instant) -> Phase {
        match &w.run {
            // RunPod keeps the pod RUNNING while it restarts an exited container.
            Run::Active { .. } if w.restarts > 0 => Phase::Running,
            Run::Active { since, .. } => {
                let elapsed = now.saturating_duration_since(*since);
                let provision = self.mode.provision();
                let start = provision + self.mode.start();
                if elapsed < provision {
                    Phase::Provisioning
                } else if elapsed < start {
                    Phase::Starting
                } else if self.mode.is_process() {
                    if w.proc.started {
                        Phase::Running
                    } else {
                        Phase::Starting
                    }
                } else if self.mode.run().is_some_and(|r| elapsed >= start + r) {
                    Phase::Exited
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
        let provision = self.mode.provision();
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
        if w.announced < 2 && elapsed >= provision {
            w.announced = 2;
            w.logs.push(
                ts_add(since_wall, provision),
                LogSource::System,
                format!("image {} ready, starting container", w.image),
            );
        }
        if w.announced < 3 && elapsed >= start && !self.mode.is_process() {
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
        let ready = since + self.mode.provision() + self.mode.start();
        if let Some(run) = self.mode.run().or(w.rerun_for) {
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

    /// Create a workload (GPUs are taken now unless it starts stopped).
    pub fn create_locked(
        &self,
        inner: &mut Inner,
        new: NewWorkload,
        now: Instant,
    ) -> Result<u64, AllocError> {
        self.settle(inner, now);
        // No GPU type: a CPU pod (RunPod), placed outside the GPU inventory.
        let cpu_only = new.gpu_type.is_empty();
        let price = if cpu_only {
            0.0
        } else {
            inner
                .inventory
                .get(&new.gpu_type)
                .map(|t| t.price_per_hour)
                .ok_or_else(|| AllocError::UnknownType(new.gpu_type.clone()))?
        };
        let placement = if new.start_stopped || cpu_only {
            None
        } else {
            Some(
                inner
                    .inventory
                    .allocate(&new.gpu_type, new.gpu_count, new.machine_id)?,
            )
        };
        let machine_id = placement
            .map(|p| p.machine_id)
            .or(new.machine_id)
            .or_else(|| {
                // A stopped workload still belongs to a machine of its type.
                inner
                    .inventory
                    .get(&new.gpu_type)
                    .and_then(|t| t.machines.first())
                    .map(|m| m.id)
            });
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let id = match self.flavor {
            Flavor::RunPod => loop {
                let id = crate::util::pod_id();
                if !inner.by_id.contains_key(&id) {
                    break id;
                }
            },
            Flavor::Vast => {
                let id = inner.next_vast_id;
                inner.next_vast_id += 1;
                id.to_string()
            }
        };
        let created_at = Timestamp::now();
        let mut w = Workload {
            seq,
            id: id.clone(),
            name: new.name,
            image: new.image,
            env: new.env,
            gpu_type: new.gpu_type,
            gpu_count: new.gpu_count,
            price_per_gpu_hour: price,
            command: new.command,
            keep_alive: new.keep_alive,
            interruptible: new.interruptible,
            bid_price: new.bid_price,
            machine_id,
            placement,
            created_at,
            running_since: None,
            pod_started: None,
            restarts: 0,
            rerun_for: None,
            run: Run::Stopped {
                at: created_at,
                reason: StopReason::User,
            },
            generation: 0,
            exit_code: None,
            usage_override: None,
            logs: LogBuffer::default(),
            extra: new.extra,
            proc: ProcState::default(),
            announced: 0,
        };
        if new.start_stopped {
            w.logs
                .push(created_at, LogSource::System, "created in stopped state");
        }
        inner.workloads.insert(seq, w);
        inner.by_id.insert(id, seq);
        if !new.start_stopped {
            let since = if new.already_running {
                now.checked_sub(self.mode.provision() + self.mode.start())
                    .unwrap_or(now)
            } else {
                now
            };
            self.begin(inner, seq, since);
        }
        Ok(seq)
    }

    /// Stop (user stop or preemption): GPUs are released and any process is killed.
    pub fn stop_locked(&self, inner: &mut Inner, seq: u64, reason: StopReason) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        let at = Timestamp::now();
        w.proc.kill();
        w.generation += 1;
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        let line = match &reason {
            StopReason::User => "stopped by user".to_owned(),
            StopReason::Preempted { outbid_price } => match outbid_price {
                Some(p) => format!("preempted: outbid at ${p:.4}/hr"),
                None => "preempted: host reclaimed the GPUs".to_owned(),
            },
            StopReason::WaitingForGpus => "waiting for GPUs to become available".to_owned(),
        };
        w.logs.push(at, LogSource::System, line);
        w.run = Run::Stopped { at, reason };
    }

    /// Start a stopped/exited/failed workload again on its machine. `skip_provisioning`
    /// resumes at STARTING (the machine is kept).
    pub fn start_locked(
        &self,
        inner: &mut Inner,
        seq: u64,
        now: Instant,
    ) -> Result<(), AllocError> {
        self.settle(inner, now);
        let Some(w) = inner.workloads.get(&seq) else {
            return Ok(());
        };
        if matches!(w.run, Run::Active { .. }) {
            return Ok(());
        }
        let placement = if w.gpu_type.is_empty() {
            None
        } else {
            Some(
                inner
                    .inventory
                    .allocate(&w.gpu_type, w.gpu_count, w.machine_id)?,
            )
        };
        if let Some(w) = inner.workloads.get_mut(&seq) {
            w.restarts = 0;
            w.rerun_for = None;
            w.pod_started = None;
            w.placement = placement;
            w.machine_id = placement.map(|p| p.machine_id).or(w.machine_id);
            w.logs
                .push(Timestamp::now(), LogSource::System, "start requested");
        }
        let since = now.checked_sub(self.mode.provision()).unwrap_or(now);
        self.begin(inner, seq, since);
        Ok(())
    }

    /// Restart the container of an active workload in place.
    pub fn restart_locked(&self, inner: &mut Inner, seq: u64, now: Instant) {
        if let Some(w) = inner.workloads.get_mut(&seq) {
            w.restarts = 0;
            w.rerun_for = None;
            w.pod_started = None;
            w.logs
                .push(Timestamp::now(), LogSource::System, "restart requested");
        }
        let since = now.checked_sub(self.mode.provision()).unwrap_or(now);
        self.begin(inner, seq, since);
    }

    /// End the container with an exit code (GPUs released). On RunPod the container is
    /// restarted in place instead and the pod stays RUNNING.
    pub fn exit_locked(&self, inner: &mut Inner, seq: u64, code: i32) {
        if self.flavor == Flavor::RunPod {
            self.restart_in_place_locked(inner, seq, code, Instant::now());
            return;
        }
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        let at = Timestamp::now();
        w.proc.kill();
        w.generation += 1;
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        w.exit_code = Some(code);
        w.logs.push(
            at,
            LogSource::System,
            format!("container exited with code {code}"),
        );
        w.run = Run::Exited { at };
    }

    /// RunPod: the container exited with `code` at `at`; it is started again after a
    /// docker-style back-off, on the same GPUs, and the pod stays RUNNING. The pod's
    /// `startedAt` is kept, `runtime.uptime` counts from the new start. Sources:
    /// runpod/runpodctl#149 ("pods restart after the ENTRYPOINT command has ended") and
    /// dstackai/dstack#1142 (a failing start command restarts "endlessly"); the back-off
    /// follows Docker's restart policies (100 ms, doubling), capped here at 10 s.
    fn restart_in_place_locked(&self, inner: &mut Inner, seq: u64, code: i32, at: Instant) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        w.exit_code = Some(code);
        w.restarts = w.restarts.saturating_add(1);
        if !self.mode.is_process()
            && self.mode.run().is_none()
            && let Some(t) = w.running_since
        {
            let ran = Timestamp::now().duration_since(t);
            w.rerun_for = Some(Duration::try_from(ran).unwrap_or_default().max(RERUN_MIN));
        }
        w.pod_started = w.pod_started.or(w.running_since);
        let delay = RESTART_BACKOFF_FIRST
            .saturating_mul(1 << (w.restarts - 1).min(10))
            .min(RESTART_BACKOFF_MAX);
        w.logs.push(
            Timestamp::now(),
            LogSource::System,
            format!(
                "container exited with code {code}; restarting it in {} ms",
                delay.as_millis()
            ),
        );
        let lead = self.mode.provision() + self.mode.start();
        let since = (at + delay).checked_sub(lead).unwrap_or(at);
        self.begin(inner, seq, since);
    }

    /// Put the workload into the error state (GPUs released).
    pub fn fail_locked(&self, inner: &mut Inner, seq: u64, message: String) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        let at = Timestamp::now();
        w.proc.kill();
        w.generation += 1;
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        w.logs
            .push(at, LogSource::System, format!("error: {message}"));
        w.run = Run::Failed { at, message };
    }

    /// Remove a workload (terminate, destroy, or vanish): GPUs released, process killed.
    pub fn remove_locked(&self, inner: &mut Inner, seq: u64) -> Option<Workload> {
        let mut w = inner.workloads.remove(&seq)?;
        inner.by_id.remove(&w.id);
        // Its published ports stop answering with it.
        self.served.close(&w.id);
        w.proc.kill();
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        Some(w)
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

    // ---- admin -----------------------------------------------------------------------------

    fn state_name(&self, phase: Phase) -> String {
        match self.flavor {
            Flavor::RunPod => crate::runpod::status_name(phase).to_owned(),
            Flavor::Vast => crate::vast::actual_status(phase)
                .unwrap_or("scheduling")
                .to_owned(),
        }
    }

    /// Every workload as the admin API shows it.
    pub fn admin_list(&self) -> Vec<AdminWorkload> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let mut out = Vec::with_capacity(inner.workloads.len());
        for w in inner.workloads.values_mut() {
            let phase = self.observe(w, now);
            let usage = self.usage(w, phase, now);
            out.push(AdminWorkload {
                id: w.id.clone(),
                name: w.name.clone(),
                state: self.state_name(phase),
                phase,
                gpu_type: w.gpu_type.clone(),
                gpu_count: w.gpu_count,
                image: w.image.clone(),
                env: w.env.clone(),
                exit_code: w.exit_code,
                restarts: w.restarts,
                cpu_millis: usage.cpu_millis,
                memory_bytes: usage.memory_bytes,
                interruptible: w.interruptible,
                command: w.command.clone(),
                machine_id: w.machine_id,
                pid: w.proc.pid,
                created_at: crate::util::rfc3339(w.created_at),
                address: self
                    .served
                    .listed_address(&crate::serve::workload_address(w.seq)),
            });
        }
        out
    }

    /// Inject a running workload (GPUs are taken; fails when none are free).
    pub fn inject(&self, new: NewWorkload) -> Result<String, AllocError> {
        let mut inner = self.lock();
        let seq = self.create_locked(
            &mut inner,
            NewWorkload {
                already_running: true,
                ..new
            },
            Instant::now(),
        )?;
        Ok(inner
            .workloads
            .get(&seq)
            .map(|w| w.id.clone())
            .unwrap_or_default())
    }

    fn with_active<T>(
        &self,
        id: &str,
        f: impl FnOnce(&Self, &mut Inner, u64, Phase) -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let seq = inner
            .seq_of(id)
            .ok_or_else(|| AdminError::NotFound(id.to_owned()))?;
        let phase = match inner.workloads.get_mut(&seq) {
            Some(w) => self.observe(w, now),
            None => return Err(AdminError::NotFound(id.to_owned())),
        };
        f(self, &mut inner, seq, phase)
    }

    /// Preempt: RunPod moves the pod to EXITED (host reclaimed, no spot market in v2); Vast
    /// stops an interruptible instance as if outbid (`stopped`, intended `running`).
    pub fn preempt(&self, id: &str, outbid_price: Option<f64>) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, phase| {
            if !phase.is_active() {
                return Err(AdminError::Conflict(format!(
                    "workload {id} is not running (phase {phase:?})"
                )));
            }
            if engine.flavor == Flavor::Vast {
                let interruptible = inner.workloads.get(&seq).is_some_and(|w| w.interruptible);
                if !interruptible {
                    return Err(AdminError::Conflict(format!(
                        "instance {id} is on-demand, only interruptible (bid) instances can be outbid"
                    )));
                }
            }
            engine.stop_locked(inner, seq, StopReason::Preempted { outbid_price });
            Ok(())
        })
    }

    /// End the workload with `code`.
    pub fn admin_exit(&self, id: &str, code: i32) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, phase| {
            if !phase.is_active() {
                return Err(AdminError::Conflict(format!(
                    "workload {id} is not running (phase {phase:?})"
                )));
            }
            engine.exit_locked(inner, seq, code);
            Ok(())
        })
    }

    /// Put the workload into the error state.
    pub fn admin_fail(&self, id: &str, message: String) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, _| {
            engine.fail_locked(inner, seq, message);
            Ok(())
        })
    }

    /// Override the reported usage.
    pub fn set_usage(&self, id: &str, usage: Usage) -> Result<(), AdminError> {
        self.with_active(id, |_, inner, seq, _| {
            if let Some(w) = inner.workloads.get_mut(&seq) {
                w.usage_override = Some(usage);
            }
            Ok(())
        })
    }

    /// Append container log lines.
    pub fn add_logs(
        &self,
        id: &str,
        source: LogSource,
        lines: Vec<String>,
    ) -> Result<(), AdminError> {
        self.with_active(id, |_, inner, seq, _| {
            if let Some(w) = inner.workloads.get_mut(&seq) {
                let now = Timestamp::now();
                for line in lines {
                    w.logs.push(now, source, line);
                }
            }
            Ok(())
        })
    }

    /// Make a workload vanish without a trace (the provider lost it).
    pub fn vanish(&self, id: &str) -> Result<(), AdminError> {
        let mut inner = self.lock();
        let seq = inner
            .seq_of(id)
            .ok_or_else(|| AdminError::NotFound(id.to_owned()))?;
        self.remove_locked(&mut inner, seq);
        Ok(())
    }

    /// Replace the GPU stock (live workloads keep their GPUs).
    pub fn set_inventory(&self, stock: &[GpuStock]) {
        let mut inner = self.lock();
        inner.inventory.replace(stock);
        let placements: Vec<Placement> = inner
            .workloads
            .values()
            .filter_map(|w| w.placement)
            .collect();
        for p in placements {
            inner.inventory.reserve(p);
        }
        inner.vast.clear_offers();
    }

    /// The GPU stock with free counts.
    pub fn inventory_lines(&self) -> Vec<InventoryLine> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        inner.inventory.lines()
    }

    /// Forget all workloads (processes killed), counters, faults and the rate window.
    pub fn reset(&self) {
        let mut inner = self.lock();
        for w in inner.workloads.values_mut() {
            w.proc.kill();
        }
        inner.workloads.clear();
        inner.by_id.clear();
        inner.exits.clear();
        inner.inventory.release_all();
        inner.gate.reset();
        inner.vast = crate::vast::Book::default();
        inner.runpod = crate::runpod::Account::default();
        self.served.set(crate::serve::SetAnswer::default());
    }

    /// Log lines of workload `id` after `after`, and its phase; `None` when it is gone.
    pub fn logs(
        &self,
        id: &str,
        after: u64,
        source: Option<LogSource>,
        tail: Option<usize>,
    ) -> Option<(Vec<LogLine>, Phase)> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let seq = inner.seq_of(id)?;
        let w = inner.workloads.get_mut(&seq)?;
        let phase = self.observe(w, now);
        Some((w.logs.after(after, source, tail), phase))
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
