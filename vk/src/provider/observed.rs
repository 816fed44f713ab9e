//! What a provider reports about a workload: its state in the closed set, how it failed,
//! where it listens and what it uses.

use super::*;

/// What a provider reports about one of our workloads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Observed {
    pub id: WorkloadId,
    /// The provider's own id for the workload (used for delete, logs).
    pub provider_id: String,
    pub state: WorkloadState,
    /// Free text from the provider, shown on the pod as the status message.
    pub message: Option<String>,
    pub created_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// IP where the provider exposes one.
    pub ip: Option<String>,
    /// Restarts the provider itself performed (Slurm requeues); added to ours.
    pub provider_restarts: u32,
    /// Where the container's ports are reachable from the VK, by container port (RunPod's
    /// direct TCP mappings); empty where the provider exposes none. Probes use it.
    pub ports: BTreeMap<u16, Endpoint>,
    pub usage: Option<Usage>,
    /// What the workload costs per hour now, as the provider lists it (RunPod `cost`, Vast
    /// `dph_total`) or as configured (Slurm); `None` where unknown. Spend and the spend
    /// guardrails are computed from this, so they survive restarts without state of our own.
    pub price: Option<Price>,
    /// The containers of a workload running several ([`Capabilities::containers`]) that have
    /// ended, by container name, where the provider observes each one's end (Slurm with an
    /// `outputDir`: the `.exit` file each step's wrapper writes); empty elsewhere, and then
    /// every container follows the workload's state.
    pub container_exits: BTreeMap<String, ContainerExit>,
    /// The provider reports that the image could not be pulled (no such image or tag, no or
    /// wrong credentials): its message. The workload is then ended and the pod waits in
    /// `ImagePullBackOff`, as a kubelet's container does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_failure: Option<String>,
}

/// How one container of a workload of several ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerExit {
    pub exit_code: i32,
    /// When it ended, where known.
    pub finished_at: Option<Timestamp>,
}

/// A host and port where a container port of a workload is reachable from the VK.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// The pod annotation where a virtual kubelet of ours writes where a pod's container ports are
/// published when that is not the pod's own address (`pods::address`); the kubernetes provider
/// reads it on a remote pod run by another of ours.
pub use crate::vocab::names::ANN_PUBLISHED_PORTS as PUBLISHED_ANNOTATION;

/// Reads the [`PUBLISHED_ANNOTATION`]'s text, `8080=203.0.113.7:43210,80=[2001:db8::7]:40000`,
/// by container port. Entries that do not parse (or name port 0) are left out: whoever wrote
/// it, it is only what it says, never an error.
pub fn parse_published(text: &str) -> BTreeMap<u16, Endpoint> {
    text.split(',')
        .filter_map(|entry| {
            let (port, at) = entry.trim().split_once('=')?;
            let addr: std::net::SocketAddr = at.parse().ok()?;
            let e = Endpoint {
                host: addr.ip().to_string(),
                port: addr.port(),
            };
            Some((port.parse().ok()?, e)).filter(|(p, e)| *p != 0 && e.port != 0)
        })
        .collect()
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The closed set of provider states the framework understands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state")]
pub enum WorkloadState {
    /// Accepted, waiting for capacity or scheduling; `reason` is the provider's (e.g. Slurm's
    /// `Resources`).
    Queued {
        reason: Option<String>,
    },
    /// Resources assigned, image pulling or container starting.
    Starting,
    Running,
    /// Running but temporarily not serving (suspended, being reallocated).
    NotReady {
        reason: String,
    },
    Succeeded,
    Failed {
        exit_code: i32,
        reason: FailureReason,
    },
    /// Taken away by the provider (outbid, preempted by a higher priority job).
    Preempted,
    /// The provider lost the machine the workload ran on.
    Lost,
    /// A state the adapter did not recognise; `raw` is the provider's value.
    Unknown {
        raw: String,
    },
}

impl WorkloadState {
    /// True once the workload will not run again by itself.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed { .. } | Self::Preempted | Self::Lost
        )
    }
}

/// Why a workload failed, mapped to the pod's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FailureReason {
    /// Non-zero exit of the workload's command (`Error`).
    Error,
    OomKilled,
    DeadlineExceeded,
    /// Killed by someone other than us (e.g. `scancel` at the provider) (`Evicted`).
    Evicted,
    /// The provider failed to run it (`ProviderError`).
    ProviderError,
}

impl FailureReason {
    /// The reason string shown on the pod and its container status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "Error",
            Self::OomKilled => "OOMKilled",
            Self::DeadlineExceeded => "DeadlineExceeded",
            Self::Evicted => "Evicted",
            Self::ProviderError => "ProviderError",
        }
    }
}

/// Resource usage a provider reports for a running workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Cumulative CPU time in nanoseconds since the workload started.
    pub cpu_usage_nanos: u64,
    /// Current CPU use in millicores.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub timestamp: Timestamp,
}
