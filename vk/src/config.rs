//! The VK's configuration file (YAML): node identity, capacity, timings and the providers.
//!
//! Credentials are never written inline: a provider names an environment variable or a file
//! holding its key, read at start-up and kept out of logs and `Debug` output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod admission;
mod dispatch;
mod kubelet_api;
mod leader;
pub mod pod_ip;
mod providers;
mod refusals;
pub use admission::Admission;
pub use dispatch::{BreakerConfig, DispatchConfig, DispatchPolicy, Limits};
pub use kubelet_api::{KubeletApiConfig, TlsConfig};
pub use leader::LeaderElection;
pub use providers::{ProviderConfig, Secret, SecretEnv, StartDeadline};
pub use refusals::Refusals;

/// Errors while loading or validating configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse config file {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_saphyr::Error,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
    #[error("provider {provider}: credential environment variable {var} is not set")]
    MissingEnv { provider: String, var: String },
    #[error("provider {provider}: failed to read credential file {path}")]
    ReadCredentialFile {
        provider: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Name of the Node object this VK registers.
    pub node_name: String,
    /// Identifies this cluster in workload ownership markers; must differ between clusters that
    /// share a provider account.
    pub cluster_id: String,
    /// Address advertised as the node's InternalIP (where the kubelet API listens).
    #[serde(default = "default_internal_ip")]
    pub internal_ip: String,
    /// Address the kubelet API binds, when `internalIp` is not a local address but one that
    /// forwards to this process (a Service's ClusterIP, see `vk run --address-service`).
    /// Default: `internalIp`.
    #[serde(default)]
    pub kubelet_bind_ip: Option<String>,
    /// Port of the kubelet API, advertised in `daemonEndpoints`.
    #[serde(default = "default_kubelet_port")]
    pub kubelet_port: u16,
    /// Address of the VK's own Prometheus metrics (`/metrics`).
    #[serde(default = "default_metrics_addr")]
    pub metrics_addr: String,
    #[serde(default)]
    pub capacity: Capacity,
    /// Taint the node so only pods that tolerate it land there.
    #[serde(default = "yes")]
    pub taint: bool,
    /// Namespaces whose pods may run on the providers (spend provider money); empty: all.
    /// Checked by the VK itself, so it also holds for pods that set `spec.nodeName` directly
    /// and never met the scheduler's taint check.
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// The cluster's own networks (its Service and pod ranges, CIDRs): probes and
    /// port-forward never dial a published address in them, which would reach the cluster's
    /// services from the VK's network position.
    #[serde(default)]
    pub cluster_networks: Vec<ipnet::IpNet>,
    /// Take over an existing Node of this name that this VK did not register (by default the
    /// VK refuses to start: that Node's pods would be offloaded).
    #[serde(default)]
    pub adopt_existing_node: bool,
    #[serde(default)]
    pub timings: Timings,
    /// Pods reconciled at the same time.
    #[serde(default = "default_workers")]
    pub workers: usize,
    pub providers: Vec<ProviderConfig>,
    /// Whether a pod whose environment comes from a Secret fails over to the next provider when
    /// the first has no capacity. Off: it waits for the first eligible provider, so one pod's
    /// Secrets are never sent to several providers.
    #[serde(default)]
    pub secret_failover: bool,
    /// Kubelet API serving certificate and client certificate authentication.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Lets requests without credentials reach the kubelet API as `system:anonymous` (still
    /// authorized by SubjectAccessReview). Off by default: they get 401.
    #[serde(default)]
    pub anonymous_auth: bool,
    /// Several replicas for one node: one leads (see `crate::leader`), the others stand by.
    #[serde(default)]
    pub leader_election: LeaderElection,
    /// Limits of the kubelet API server.
    #[serde(default)]
    pub kubelet_api: KubeletApiConfig,
    /// How a provider is chosen for each pod (policy, health, capacity memory).
    #[serde(default)]
    pub dispatch: DispatchConfig,
    /// Spend and workload guardrails over all providers together (each provider may have its
    /// own too: `providers[].limits`).
    #[serde(default)]
    pub limits: Limits,
    /// Refused pods that a controller would replace are held; a storm of refusals is stopped.
    #[serde(default)]
    pub refusals: Refusals,
    /// The validating admission webhook that refuses such pods before they exist.
    #[serde(default)]
    pub admission: Admission,
}

/// Capacity the node reports. Defaults are large enough to never be the limit for offloaded
/// work, yet small enough that add-ons which size themselves from node capacity (for example
/// per-node daemons computing requests as a fraction of allocatable) stay sane.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Capacity {
    pub cpu: String,
    pub memory: String,
    pub pods: String,
    pub gpus: String,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            cpu: "1000".into(),
            memory: "4Ti".into(),
            pods: "10000".into(),
            gpus: "1000".into(),
        }
    }
}

/// Timings, in milliseconds in the file.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Timings {
    /// Interval between two list calls to each provider.
    pub poll_interval_ms: u64,
    /// A workload without a pod is collected only once it is older than this and has been
    /// seen orphaned for this long.
    pub gc_grace_ms: u64,
    /// Lease renewal interval.
    pub lease_renew_ms: u64,
    /// Node status is re-posted at least this often even without change.
    pub node_status_ms: u64,
    /// First delay of the container restart back-off (doubles up to `restartBackoffMaxMs`).
    pub restart_backoff_ms: u64,
    pub restart_backoff_max_ms: u64,
    /// A workload is lost only once this many consecutive successful lists of its provider
    /// lacked it (one list proves nothing: see `pods::evidence`)...
    pub loss_lists: u32,
    /// ...spanning at least this long (five times as long when most workloads vanished at
    /// once, which looks like a provider incident rather than a loss).
    pub loss_window_ms: u64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            poll_interval_ms: 2000,
            gc_grace_ms: 30_000,
            lease_renew_ms: 10_000,
            node_status_ms: 300_000,
            restart_backoff_ms: 10_000,
            restart_backoff_max_ms: 300_000,
            loss_lists: 3,
            loss_window_ms: 30_000,
        }
    }
}

impl Timings {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
    pub fn gc_grace(&self) -> Duration {
        Duration::from_millis(self.gc_grace_ms)
    }
    pub fn loss_window(&self) -> Duration {
        Duration::from_millis(self.loss_window_ms)
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let cfg: Self = serde_saphyr::from_str(&text).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Warnings for `vk check-config`: a Slurm provider that receives Secret values while the
    /// VK serves more than one namespace (see [`SecretEnv::default_for`]).
    pub fn shared_slurm_secret_warnings(&self) -> Vec<String> {
        if self.allowed_namespaces.len() == 1 {
            return Vec::new();
        }
        self.providers
            .iter()
            .filter(|p| {
                p.kind == "slurm" && p.secret_env(&self.allowed_namespaces) == SecretEnv::Allow
            })
            .map(|p| {
                format!(
                    "provider {}: secretEnv allow on Slurm while the VK serves {}: every pod's \
                     job runs as the one Slurm user, so a pod of one namespace can read another's \
                     Secret values (srun --jobid --overlap), read its output or cancel its jobs; \
                     serve one namespace (allowedNamespaces) or set secretEnv: deny",
                    p.name,
                    if self.allowed_namespaces.is_empty() {
                        "every namespace".to_owned()
                    } else {
                        format!("{} namespaces", self.allowed_namespaces.len())
                    }
                )
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), Error> {
        if self.node_name.is_empty() || self.cluster_id.is_empty() {
            return Err(Error::Invalid(
                "nodeName and clusterId must not be empty".into(),
            ));
        }
        if self.providers.is_empty() {
            return Err(Error::Invalid(
                "at least one provider must be configured".into(),
            ));
        }
        self.refusals.validate().map_err(Error::Invalid)?;
        self.admission.validate().map_err(Error::Invalid)?;
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.providers {
            if !seen.insert(&p.name) {
                return Err(Error::Invalid(format!(
                    "provider name {} is used twice",
                    p.name
                )));
            }
            p.limits
                .validate(&format!("providers[{}].limits", p.name))?;
            if let Some(ip) = p.pod_ip_fallback
                && let Some(why) = pod_ip::unusable(ip, self.internal_ip.parse().ok())
            {
                return Err(Error::Invalid(format!(
                    "provider {}: podIpFallback {ip} cannot be a pod IP ({why})",
                    p.name
                )));
            }
            if p.kind == "slurm" && self.allowed_namespaces.len() != 1 && !p.shared_slurm_user {
                return Err(Error::Invalid(format!(
                    "provider {}: every pod's job runs as the one Slurm user, and any job of that \
                     user can reach another's (srun --jobid=<job> --overlap reads its environment \
                     and output, scancel ends it), but the VK serves {}: serve one namespace \
                     (allowedNamespaces: [<namespace>]), or set sharedSlurmUser: true on the \
                     provider where the namespaces trust each other",
                    p.name,
                    if self.allowed_namespaces.is_empty() {
                        "every namespace".to_owned()
                    } else {
                        format!("{} namespaces", self.allowed_namespaces.len())
                    }
                )));
            }
            if p.api_key_env.is_some() && p.api_key_file.is_some() {
                return Err(Error::Invalid(format!(
                    "provider {}: set apiKeyEnv or apiKeyFile, not both",
                    p.name
                )));
            }
        }
        if self.timings.poll_interval_ms == 0 || self.workers == 0 {
            return Err(Error::Invalid(
                "pollIntervalMs and workers must be positive".into(),
            ));
        }
        self.leader_election.validate()?;
        self.limits.validate("limits")?;
        if self.dispatch.inventory_interval_ms == 0 || self.dispatch.breaker.failures == 0 {
            return Err(Error::Invalid(
                "dispatch.inventoryIntervalMs and dispatch.breaker.failures must be positive"
                    .into(),
            ));
        }
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&self.kubelet_api.max_connections) {
            return Err(Error::Invalid(format!(
                "kubeletApi.maxConnections must be between 1 and {MAX_CONNECTIONS_LIMIT}"
            )));
        }
        if self.timings.loss_lists == 0 {
            return Err(Error::Invalid(
                "lossLists must be at least 1: one list proves nothing".into(),
            ));
        }
        Ok(())
    }
}

/// Far above what one process serves, far below what a semaphore holds.
const MAX_CONNECTIONS_LIMIT: usize = 1_000_000;

fn yes() -> bool {
    true
}
fn default_internal_ip() -> String {
    "127.0.0.1".into()
}
fn default_kubelet_port() -> u16 {
    10250
}
fn default_metrics_addr() -> String {
    "127.0.0.1:10255".into()
}
fn default_workers() -> usize {
    // Workers mostly wait on API server writes; `make bench` measured bind->create p99 of
    // 15 s at 128 and 2 s at 256 for a burst of 10,000 pods.
    256
}

#[cfg(test)]
mod tests;
