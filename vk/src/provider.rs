//! The External Provider contract: what an adapter implements, and the neutral types it speaks.
//!
//! An adapter only knows how to talk to its backend (create, delete, list, and optionally logs,
//! exec and metrics). Everything else (reconciliation, garbage collection, status translation, events,
//! retries, naming) lives once in the pod pipeline (`crate::pods`).

pub mod health;
pub mod layer;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::naming::WorkloadId;

/// A boxed future, used where providers are held as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a provider can do; selects the optional kubelet API features and dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// GPU types this provider offers (normalised names such as `A100-80GB`, `RTX4090`).
    /// Empty means "any type the request names is worth trying".
    pub gpu_types: Vec<String>,
    /// Largest GPU count a single workload may request.
    pub max_gpus_per_workload: u32,
    pub logs: bool,
    /// Its logs can be followed (`follow`: new output as it is written, until the workload
    /// ends), not only read as they are now. `kubectl attach` needs it.
    #[serde(default)]
    pub follow_logs: bool,
    pub exec: bool,
    pub metrics: bool,
    /// Refuses workloads that request no GPU: dispatch skips it for CPU-only pods instead of
    /// failing them on it.
    #[serde(default)]
    pub gpu_only: bool,
    /// A finished workload keeps costing money here and offers nothing worth keeping it for
    /// (RunPod restarts an exited container in place and bills a stopped pod's disk): the
    /// framework deletes it as soon as the pod is terminal.
    #[serde(default)]
    pub delete_finished: bool,
    /// Runs every container of a pod (init containers in order, native sidecars alongside,
    /// the regular containers side by side) from [`Workload::containers`], with a log per
    /// container: pods the one-container policy refuses (`pods::spec`) may go here.
    #[serde(default)]
    pub containers: bool,
}

/// A provider-neutral, fully resolved description of what to run for one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Deterministic id derived from the pod UID and our ownership marker.
    pub id: WorkloadId,
    pub namespace: String,
    pub pod_name: String,
    pub container_name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: Option<String>,
    /// Environment with ConfigMap/Secret/downward values already resolved. Values may be
    /// secret: never log them (the `Debug` of [`EnvVar`] redacts values).
    pub env: Vec<EnvVar>,
    pub gpu: Option<GpuRequest>,
    /// CPU in millicores, if requested or limited.
    pub cpu_millis: Option<u64>,
    /// Memory in bytes, if requested or limited.
    pub memory_bytes: Option<u64>,
    pub ports: Vec<u16>,
    /// Provider-specific options from the pod's `gpu-vk.io/*` annotations (region, bid price, ...).
    pub options: BTreeMap<String, String>,
    /// Every container of the pod that runs (those in `gpu-vk.io/omit-containers` left out),
    /// init containers first in their order, then the regular ones; each with its own
    /// environment. Read by providers with [`Capabilities::containers`]; the others run
    /// `command`/`args` (the main container, with same-image init containers folded in).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<PodContainer>,
    /// The restrictive security settings the pod asks for (a provider that runs the container
    /// in a pod of its own, the kubernetes one, keeps them).
    #[serde(skip_serializing_if = "Hardening::is_empty")]
    pub hardening: Hardening,
}

/// Security settings that only ever narrow what a container may do, from the pod's and the
/// main container's `securityContext` (the container's own win, as on a kubelet). Settings
/// that widen it are not here: a privileged container is refused, added capabilities and
/// privilege escalation are never copied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Hardening {
    pub run_as_non_root: bool,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub read_only_root_filesystem: bool,
    /// `allowPrivilegeEscalation: false`.
    pub no_privilege_escalation: bool,
    /// Capabilities dropped (`ALL` included as written).
    pub drop_capabilities: Vec<String>,
    /// `seccompProfile: RuntimeDefault`.
    pub seccomp_runtime_default: bool,
}

impl Hardening {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What a container is to the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContainerRole {
    /// An init container: runs to completion before the next one starts.
    Init,
    /// A native sidecar (init container with `restartPolicy: Always`): started in its place
    /// among the init containers, kept running beside the regular containers, stopped when
    /// they have ended.
    Sidecar,
    /// A regular container: they run side by side.
    Regular,
}

/// One container of a pod, resolved like the workload itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodContainer {
    pub name: String,
    pub role: ContainerRole,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: Option<String>,
    /// This container's own environment (values may be secret, see [`EnvVar`]).
    pub env: Vec<EnvVar>,
}

/// One environment variable; its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

impl fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// True for names a shell and every provider take as a variable name (letters, digits and
/// `_`, not starting with a digit). No other name may reach a provider: Vast reads the keys of
/// its `env` as `docker run` options (`-p 8080:8080`), so `-v /:/host` would be one, and a
/// Slurm job script exports each name.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    /// Requested type, or `None` for "any".
    pub gpu_type: Option<String>,
    pub count: u32,
}

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

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// An hourly price in millionths of a dollar (exact, comparable, `Eq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Price(pub u64);

impl Price {
    /// From dollars per hour; `None` for a negative or non-finite figure.
    pub fn from_dollars(d: f64) -> Option<Self> {
        (d.is_finite() && d >= 0.0).then(|| Self((d * 1e6).round() as u64))
    }
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// This price for `n` units (GPUs).
    pub fn times(self, n: u32) -> Self {
        Self(self.0.saturating_mul(u64::from(n)))
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.2}/h", self.dollars())
    }
}

impl std::ops::Add for Price {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self(self.0.saturating_add(o.0))
    }
}

impl std::iter::Sum for Price {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self(0), |a, b| a + b)
    }
}

/// What a provider offers now for one GPU type (or for CPU-only work when `gpu_type` is
/// `None`): its list price and how much of it is free, from the provider's own catalogue
/// (RunPod `GET /v2/catalog/gpus`, Vast's offer search) or from configuration (Slurm).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Quote {
    /// Normalised GPU type (as pods name it, e.g. `RTX4090`); `None`: any type / CPU-only.
    pub gpu_type: Option<String>,
    /// Price of one GPU (of a CPU-only workload when `gpu_type` is `None`) for an hour.
    pub price_per_gpu: Price,
    /// GPUs of this type free now, where the provider tells; `None`: unknown.
    pub available_gpus: Option<u32>,
    /// Largest count one workload may ask for, where the provider tells.
    pub max_per_workload: Option<u32>,
}

/// A provider's offers at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub quotes: Vec<Quote>,
}

impl Inventory {
    /// The quote for a GPU type (case-insensitive), or the provider's catch-all quote.
    pub fn quote(&self, gpu_type: Option<&str>) -> Option<&Quote> {
        let exact = gpu_type.and_then(|t| {
            self.quotes.iter().find(|q| {
                q.gpu_type
                    .as_deref()
                    .is_some_and(|qt| qt.eq_ignore_ascii_case(t))
            })
        });
        exact.or_else(|| match gpu_type {
            // "Any GPU": the cheapest type that has room.
            None => self
                .quotes
                .iter()
                .filter(|q| q.available_gpus != Some(0))
                .min_by_key(|q| q.price_per_gpu),
            Some(_) => self.quotes.iter().find(|q| q.gpu_type.is_none()),
        })
    }

    /// GPUs free across every type, where the provider tells for each.
    pub fn available_gpus(&self) -> Option<u64> {
        self.quotes
            .iter()
            .filter(|q| q.gpu_type.is_some())
            .map(|q| q.available_gpus.map(u64::from))
            .sum()
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

/// Options for a log request, as the kubelet's `/containerLogs` takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub tail_lines: Option<u64>,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<u64>,
    pub timestamps: bool,
    pub follow: bool,
    pub previous: bool,
    /// The container asked for, set only for pods the provider runs container by container
    /// ([`Capabilities::containers`], [`Workload::containers`] of more than one): `None` is
    /// the workload's one log.
    pub container: Option<String>,
}

/// A stream of log bytes.
pub type LogStream =
    Pin<Box<dyn futures::Stream<Item = Result<bytes::Bytes, ProviderError>> + Send>>;

/// A command to run inside a running workload (`kubectl exec`).
///
/// The command is passed as an argument vector, never through a shell. Its arguments may hold
/// secrets: the `Debug` of this type shows only the program name and the argument count.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub command: Vec<String>,
    /// The client sends standard input (`kubectl exec -i`).
    pub stdin: bool,
    /// The client wants a terminal (`kubectl exec -t`): stdout and stderr are one stream.
    pub tty: bool,
}

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("program", &self.command.first())
            .field("args", &self.command.len().saturating_sub(1))
            .field("stdin", &self.stdin)
            .field("tty", &self.tty)
            .finish()
    }
}

/// A terminal size sent by the client of a TTY session (columns and rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width")]
    pub width: u16,
    #[serde(rename = "Height")]
    pub height: u16,
}

/// Where the standard input of an exec session is written; shutting it down (or dropping it)
/// is end of input.
pub type ExecStdin = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A running exec session, as a provider hands it to the kubelet API.
///
/// Dropping the session ends the command (the adapter stops it if it is still running), so a
/// client that goes away frees everything on the provider side. Output streams are pulled only
/// as fast as the client reads them: the adapter must not buffer without bound.
pub struct ExecSession {
    /// The command's standard input; `Some` exactly when [`ExecRequest::stdin`] was set.
    pub stdin: Option<ExecStdin>,
    /// Standard output (with a TTY: the terminal's output).
    pub stdout: LogStream,
    /// Standard error; `None` with a TTY.
    pub stderr: Option<LogStream>,
    /// Terminal size changes, for TTY sessions of providers that can apply them.
    pub resize: Option<tokio::sync::mpsc::Sender<TerminalSize>>,
    /// Resolves to the command's exit code once it has ended; `128 + n` for a signal `n`.
    pub exit: BoxFuture<'static, Result<i32, ProviderError>>,
}

impl fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSession")
            .field("stdin", &self.stdin.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("resize", &self.resize.is_some())
            .finish_non_exhaustive()
    }
}

/// Errors an adapter returns, classified so the framework knows what to do.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    /// Worth retrying with backoff; `retry_after` honours the provider's `Retry-After`.
    #[error("transient provider error: {message}")]
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The provider cannot serve this request now: try the next provider.
    #[error("provider out of capacity: {message}")]
    Capacity { message: String },
    /// The request can never succeed as it is: fail the pod, do not retry.
    #[error("invalid request: {message}")]
    Invalid { message: String },
    #[error("workload not found")]
    NotFound,
    /// Credentials missing, wrong or expired; retried, reported as an event.
    #[error("provider authentication failed: {message}")]
    Auth { message: String },
    /// The provider does not offer this optional capability.
    #[error("not supported by provider {provider}: {what}")]
    Unsupported { provider: String, what: String },
}

impl ProviderError {
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// The contract an adapter implements. Native async; the framework boxes through
/// [`DynProvider`], which every `Provider` gets for free.
pub trait Provider: Send + Sync + 'static {
    /// The configured name of this provider instance (e.g. `runpod`).
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// Creates the workload named `w.id`. The framework calls this only when no list that
    /// began after its previous attempt showed the workload (so a create lost to a timeout or
    /// a crash is adopted, not repeated); adapters therefore need no lookup before creating.
    fn create(&self, w: &Workload) -> impl Future<Output = Result<(), ProviderError>> + Send;

    /// Deletes the workload by its provider id; `NotFound` means it is already gone.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), ProviderError>> + Send;

    /// Every workload this VK owns at the provider (filtered by the ownership marker), in one
    /// call (or as few as the API allows): never one call per pod.
    fn list(&self) -> impl Future<Output = Result<Vec<Observed>, ProviderError>> + Send;

    /// Container logs; providers without a log API keep this default.
    fn logs(
        &self,
        _provider_id: &str,
        _opts: &LogOptions,
    ) -> impl Future<Output = Result<LogStream, ProviderError>> + Send {
        let err = ProviderError::Unsupported {
            provider: self.name().to_owned(),
            what: "logs".into(),
        };
        async move { Err(err) }
    }

    /// Prices and free capacity now, in as few calls as the API allows (called once per
    /// inventory interval, never per pod); providers without price data keep this default and
    /// dispatch treats them as unpriced.
    fn inventory(&self) -> impl Future<Output = Result<Inventory, ProviderError>> + Send {
        let err = ProviderError::Unsupported {
            provider: self.name().to_owned(),
            what: "inventory".into(),
        };
        async move { Err(err) }
    }

    /// Runs a command inside the running workload `provider_id` (`kubectl exec`); providers
    /// without a way to do that keep this default. Adapters that implement it report
    /// `capabilities().exec`.
    fn exec(
        &self,
        _provider_id: &str,
        _req: ExecRequest,
    ) -> impl Future<Output = Result<ExecSession, ProviderError>> + Send {
        let err = ProviderError::Unsupported {
            provider: self.name().to_owned(),
            what: "exec".into(),
        };
        async move { Err(err) }
    }
}

/// Object-safe twin of [`Provider`], so the framework can hold many kinds in one list.
pub trait DynProvider: Send + Sync {
    fn name(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    fn create<'a>(&'a self, w: &'a Workload) -> BoxFuture<'a, Result<(), ProviderError>>;
    fn delete<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>>;
    fn list(&self) -> BoxFuture<'_, Result<Vec<Observed>, ProviderError>>;
    fn inventory(&self) -> BoxFuture<'_, Result<Inventory, ProviderError>>;
    fn logs<'a>(
        &'a self,
        provider_id: &'a str,
        opts: &'a LogOptions,
    ) -> BoxFuture<'a, Result<LogStream, ProviderError>>;
    fn exec<'a>(
        &'a self,
        provider_id: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, Result<ExecSession, ProviderError>>;
}

impl<P: Provider> DynProvider for P {
    fn name(&self) -> &str {
        Provider::name(self)
    }
    fn capabilities(&self) -> Capabilities {
        Provider::capabilities(self)
    }
    fn create<'a>(&'a self, w: &'a Workload) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(Provider::create(self, w))
    }
    fn delete<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(Provider::delete(self, provider_id))
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<Observed>, ProviderError>> {
        Box::pin(Provider::list(self))
    }
    fn inventory(&self) -> BoxFuture<'_, Result<Inventory, ProviderError>> {
        Box::pin(Provider::inventory(self))
    }
    fn logs<'a>(
        &'a self,
        provider_id: &'a str,
        opts: &'a LogOptions,
    ) -> BoxFuture<'a, Result<LogStream, ProviderError>> {
        Box::pin(Provider::logs(self, provider_id, opts))
    }
    fn exec<'a>(
        &'a self,
        provider_id: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, Result<ExecSession, ProviderError>> {
        Box::pin(Provider::exec(self, provider_id, req))
    }
}
