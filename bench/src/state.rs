//! What a round holds while it runs: its live processes and the snapshots it takes.

use super::*;

/// What one round has running: the emulators, the VK (its config, metrics port and log), the
/// namespace of its pods and the watch timing them.
pub(crate) struct Live {
    pub(crate) emu: Emulators,
    pub(crate) config: PathBuf,
    pub(crate) metrics_port: u16,
    pub(crate) vk_log: PathBuf,
    pub(crate) http: reqwest::Client,
    pub(crate) ns: String,
    pub(crate) pods: Api<Pod>,
    pub(crate) tracker: Tracker,
    pub(crate) watch: tokio::task::JoinHandle<()>,
}

/// CPU, API server and provider counters at the start of a phase.
pub(crate) struct Snapshots {
    pub(crate) cpu: CpuSnapshot,
    pub(crate) api: ApiCounts,
    pub(crate) emu: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The outcome of the create requests.
pub(crate) struct Created {
    /// Taken before the first create.
    pub(crate) before: Snapshots,
    /// Pods whose create failed for good.
    pub(crate) errors: usize,
    /// Create requests sent, retries included.
    pub(crate) attempts: usize,
}

/// The create phase once the pods are Running (or the wait timed out).
pub(crate) struct Running {
    /// Each pod's times, as the watch saw them at the end of the phase.
    pub(crate) times: HashMap<String, PodTimes>,
    /// API server requests during the phase, by verb and resource.
    pub(crate) api_requests: BTreeMap<String, f64>,
    /// Create requests sent, retries included.
    pub(crate) create_attempts: usize,
}

/// The quiet window after all pods are Running.
pub(crate) struct QuietWindow {
    /// The VK's status writes so far.
    pub(crate) status_writes: f64,
    /// The VK's metrics at the end of the window.
    pub(crate) vk_metrics_end: String,
}

/// The delete phase.
pub(crate) struct Deleted {
    /// Delete requests sent, retries included.
    pub(crate) attempts: usize,
    /// API server requests during the phase, by verb and resource.
    pub(crate) api_requests: BTreeMap<String, f64>,
}

/// When a pod was bound: with the scheduler, when the watch first saw it with `spec.nodeName`;
/// created bound, the earlier of the create answer and that first sight.
pub(crate) fn bind_time(bind: Bind, t: &PodTimes) -> Option<Timestamp> {
    match bind {
        Bind::NodeName => match (t.created, t.bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
        Bind::Scheduler => t.bound,
    }
}
