//! What the engine works on: a workload, its phases and how it stops, what it uses, and
//! what the admin API shows of it.

use super::*;

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
    /// Running, but its host stopped talking to the provider (Vast `offline`): it still holds
    /// its GPUs and never comes back.
    Offline,
}

impl Phase {
    /// Provisioning, starting, running or on a host gone offline: the workload holds GPUs.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            Self::Provisioning | Self::Starting | Self::Running | Self::Offline
        )
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
    /// The registry login the image pulls with.
    pub login: Option<super::pull::Login>,
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
    /// Why the image does not pull (a private image without its login): the workload stays
    /// in its start, the pull retried, until deleted.
    pub pull_error: Option<String>,
    /// The time its image takes to pull beyond the placing time (a known size, `pull.rs`).
    pub pull_extra: Duration,
    /// Why its container dies as it starts (an image needing a newer CUDA than the host's
    /// driver runs, `pull.rs`): printed, then exit code 1.
    pub crash: Option<String>,
    pub(crate) proc: ProcState,
    pub(crate) announced: u8,
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
