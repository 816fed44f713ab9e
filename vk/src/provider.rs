//! The External Provider contract: what an adapter implements, and the neutral types it speaks.
//!
//! An adapter only knows how to talk to its backend (create, delete, list, and optionally logs,
//! exec and metrics). Everything else (reconciliation, garbage collection, status translation, events,
//! retries, naming) lives once in the pod pipeline (`crate::pods`).

pub mod health;
pub mod layer;
mod money;
mod observed;
mod streams;
mod workload;

pub use money::*;
pub use observed::*;
pub use streams::*;
pub use workload::*;

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
    /// Serves a container's UDP ports. RunPod publishes `tcp` and `http` ports only (v2
    /// `PodRuntimePort.type` is `http` or `tcp`, runpod/docs `api-reference-v2/openapi.json`;
    /// pods/configuration/expose-ports.mdx), and the Vast and kubernetes adapters publish every
    /// port as TCP (`-p P:P`, a ContainerPort of protocol TCP); a Slurm job binds on its node
    /// like any process. A pod declaring a UDP
    /// port goes only where this is set, and is refused before it exists when none may take it.
    #[serde(default)]
    pub udp: bool,
    /// The largest container disk a pod may ask for, GB (`maxDiskGb` of RunPod and Vast;
    /// `None`: no ceiling). A pod asking more of every provider it may use is refused before
    /// it exists.
    #[serde(default)]
    pub max_disk_gb: Option<u32>,
    /// Pulls a pod's images with its registry logins ([`Workload::registry_logins`]), or pulls
    /// no image at all (Slurm's `bare` runtime). A pod naming `imagePullSecrets` goes only
    /// where this is set.
    #[serde(default)]
    pub registry_logins: bool,
    /// The highest CUDA version its hosts' drivers run (`12.8`), as the operator declares it
    /// (`maxCudaVersion`; `None`: unknown). A pod whose `gpu-vk.io/min-cuda` is above it goes
    /// elsewhere, and is refused before it exists when no provider it may use is known to run
    /// it.
    #[serde(default)]
    pub max_cuda: Option<String>,
}

impl Capabilities {
    /// A provider of these GPU types (configured names), up to `max_gpus_per_workload` a
    /// workload, with every optional feature off: adapters switch on what they serve.
    pub fn gpus<'a>(
        types: impl IntoIterator<Item = &'a String>,
        max_gpus_per_workload: u32,
    ) -> Self {
        Self {
            gpu_types: types.into_iter().cloned().collect(),
            max_gpus_per_workload,
            ..Self::default()
        }
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
    /// An answer that breaks the provider's own schema where the VK cannot do without the
    /// field (a listed workload of ours without its id): retried like `Transient`, counted by
    /// provider and field (`gpu_vk_provider_malformed_answers_total`), and nothing is judged
    /// on it, so no workload is taken for lost because its entry could not be read.
    #[error("malformed answer from {provider}: {field}: {message}")]
    Malformed {
        provider: String,
        /// The field by its schema name (`Pod.id`, `Instance.id`, `job_id`).
        field: String,
        message: String,
    },
}

impl ProviderError {
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// Why a provider's workloads vanish, as far as it knows (see [`Provider::vanished_cause`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vanished {
    /// The account ran out of money and the provider ended its workloads: the sentence says
    /// what showed it.
    BalanceExhausted(String),
    /// Only the likely causes, for the message.
    Hint(String),
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

    /// What this provider knows of why its workloads vanish without a delete from this VK (a
    /// RunPod account that ran out of money terminates its pods), for the lost pod's reason
    /// and message. `None`, the default: the pod is `ProviderLost` with no more said.
    fn vanished_cause(&self) -> Option<Vanished> {
        None
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
    fn vanished_cause(&self) -> Option<Vanished>;
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
    fn vanished_cause(&self) -> Option<Vanished> {
        Provider::vanished_cause(self)
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
