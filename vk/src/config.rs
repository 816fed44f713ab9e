//! The VK's configuration file (YAML): node identity, capacity, timings and the providers.
//!
//! Credentials are never written inline: a provider names an environment variable or a file
//! holding its key, read at start-up and kept out of logs and `Debug` output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod admission;
pub mod pod_ip;
mod refusals;
pub use admission::Admission;
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
        source: serde_yaml::Error,
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

/// Which order providers are tried in (`dispatch.policy`, or a pod's
/// `gpu-vk.io/dispatch-policy` where `dispatch.podPolicy` allows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DispatchPolicy {
    /// Configuration order (the provider recorded on the pod first).
    #[default]
    Preference,
    /// Lowest price per hour for the pod's GPU type and count first, from each provider's own
    /// price data; unpriced providers after, in configuration order.
    Cheapest,
}

impl DispatchPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preference => "preference",
            Self::Cheapest => "cheapest",
        }
    }
}

/// The `dispatch` block.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DispatchConfig {
    #[serde(default)]
    pub policy: DispatchPolicy,
    /// Pods may choose the policy with `gpu-vk.io/dispatch-policy`.
    #[serde(default = "yes")]
    pub pod_policy: bool,
    /// After a provider said "no capacity" for a GPU type, new pods skip it for that type
    /// this long, so a burst does not hammer a provider that just said no.
    #[serde(default = "default_capacity_memory_ms")]
    pub capacity_memory_ms: u64,
    /// Interval between two inventory (price and free capacity) calls to each provider.
    #[serde(default = "default_inventory_interval_ms")]
    pub inventory_interval_ms: u64,
    #[serde(default)]
    pub breaker: BreakerConfig,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            policy: DispatchPolicy::default(),
            pod_policy: true,
            capacity_memory_ms: default_capacity_memory_ms(),
            inventory_interval_ms: default_inventory_interval_ms(),
            breaker: BreakerConfig::default(),
        }
    }
}

impl DispatchConfig {
    pub fn capacity_memory(&self) -> Duration {
        Duration::from_millis(self.capacity_memory_ms)
    }
    pub fn inventory_interval(&self) -> Duration {
        Duration::from_millis(self.inventory_interval_ms)
    }
}

/// The `dispatch.breaker` block: a provider's circuit breaker (`crate::provider::health`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BreakerConfig {
    /// Consecutive failed calls that open the breaker.
    #[serde(default = "default_breaker_failures")]
    pub failures: u32,
    /// How long an open breaker keeps new pods away before the next call probes.
    #[serde(default = "default_breaker_open_ms")]
    pub open_ms: u64,
    /// A call slower than this counts as failed.
    #[serde(default = "default_breaker_slow_ms")]
    pub slow_call_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: default_breaker_failures(),
            open_ms: default_breaker_open_ms(),
            slow_call_ms: default_breaker_slow_ms(),
        }
    }
}

impl BreakerConfig {
    pub fn rules(&self) -> crate::provider::health::BreakerRules {
        crate::provider::health::BreakerRules {
            failures: self.failures,
            open: Duration::from_millis(self.open_ms),
            slow: Duration::from_millis(self.slow_call_ms),
        }
    }
}

/// Guardrails: the most that may be spent per hour and the most workloads that may exist at
/// once. Spend is what the providers list (price x live workloads), so it holds across
/// restarts; a pod that would go past a limit waits Pending until room appears.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Dollars per hour.
    #[serde(default)]
    pub max_spend_per_hour: Option<f64>,
    #[serde(default)]
    pub max_workloads: Option<u32>,
}

impl Limits {
    fn validate(&self, what: &str) -> Result<(), Error> {
        if let Some(s) = self.max_spend_per_hour
            && !(s.is_finite() && s >= 0.0)
        {
            return Err(Error::Invalid(format!(
                "{what}.maxSpendPerHour must be a non-negative number of dollars"
            )));
        }
        Ok(())
    }
}

/// The `kubeletApi` block: bounds on the kubelet API server's connections and exec sessions.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletApiConfig {
    /// TLS connections open at once (handshaking or established); more are closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// An exec session without a data message in either direction for this long is closed;
    /// 0 never closes one. The default is the kubelet's: its `streamingConnectionIdleTimeout`
    /// (`--streaming-connection-idle-timeout`) defaults to 4 hours.
    #[serde(default = "default_exec_idle_timeout_seconds")]
    pub exec_idle_timeout_seconds: u64,
    /// Declare `ExtendWebSocketsToKubelet` in the Node's `status.declaredFeatures` (default).
    /// A 1.36 API server then passes `kubectl exec`'s WebSocket straight through; without it
    /// the API server translates WebSockets to SPDY/3.1 towards this node (served too).
    #[serde(default = "yes")]
    pub declare_extend_web_sockets_to_kubelet: bool,
}

impl Default for KubeletApiConfig {
    fn default() -> Self {
        Self {
            max_connections: default_max_connections(),
            exec_idle_timeout_seconds: default_exec_idle_timeout_seconds(),
            declare_extend_web_sockets_to_kubelet: true,
        }
    }
}

impl KubeletApiConfig {
    /// `None` when sessions never time out.
    pub fn exec_idle_timeout(&self) -> Option<Duration> {
        (self.exec_idle_timeout_seconds > 0)
            .then(|| Duration::from_secs(self.exec_idle_timeout_seconds))
    }
}

/// Capacity the node reports. Defaults are large enough to never be the limit for offloaded
/// work, yet small enough that add-ons which size themselves from node capacity (for example
/// per-node daemons computing requests as a fraction of allocatable) stay sane.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Capacity {
    #[serde(default = "default_cpu")]
    pub cpu: String,
    #[serde(default = "default_memory")]
    pub memory: String,
    #[serde(default = "default_pods")]
    pub pods: String,
    #[serde(default = "default_gpus")]
    pub gpus: String,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            cpu: default_cpu(),
            memory: default_memory(),
            pods: default_pods(),
            gpus: default_gpus(),
        }
    }
}

/// Timings, in milliseconds in the file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Timings {
    /// Interval between two list calls to each provider.
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    /// A workload without a pod is collected only once it is older than this and has been
    /// seen orphaned for this long.
    #[serde(default = "default_gc_grace_ms")]
    pub gc_grace_ms: u64,
    /// Lease renewal interval.
    #[serde(default = "default_lease_ms")]
    pub lease_renew_ms: u64,
    /// Node status is re-posted at least this often even without change.
    #[serde(default = "default_node_status_ms")]
    pub node_status_ms: u64,
    /// First delay of the container restart back-off (doubles up to `restartBackoffMaxMs`).
    #[serde(default = "default_restart_backoff_ms")]
    pub restart_backoff_ms: u64,
    #[serde(default = "default_restart_backoff_max_ms")]
    pub restart_backoff_max_ms: u64,
    /// A workload is lost only once this many consecutive successful lists of its provider
    /// lacked it (one list proves nothing: see `pods::evidence`)...
    #[serde(default = "default_loss_lists")]
    pub loss_lists: u32,
    /// ...spanning at least this long (five times as long when most workloads vanished at
    /// once, which looks like a provider incident rather than a loss).
    #[serde(default = "default_loss_window_ms")]
    pub loss_window_ms: u64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            poll_interval_ms: default_poll_ms(),
            gc_grace_ms: default_gc_grace_ms(),
            lease_renew_ms: default_lease_ms(),
            node_status_ms: default_node_status_ms(),
            restart_backoff_ms: default_restart_backoff_ms(),
            restart_backoff_max_ms: default_restart_backoff_max_ms(),
            loss_lists: default_loss_lists(),
            loss_window_ms: default_loss_window_ms(),
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

/// One configured provider instance.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderConfig {
    /// Name used in annotations, labels and metrics (`gpu-vk.io/provider: <name>`).
    pub name: String,
    /// Which adapter: `runpod`, `vast`, `slurm` or `kubernetes`.
    pub kind: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// File holding the API key (trailing whitespace trimmed).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Adapter-specific settings (base URL, defaults), passed to the adapter as is.
    #[serde(default)]
    pub settings: serde_yaml::Value,
    /// Extra node labels contributed by this provider.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Whether pods whose environment comes from a Secret may run here (their values are sent
    /// to the provider). Unset: [`SecretEnv::default_for`] the kind.
    #[serde(default)]
    pub secret_env: Option<SecretEnv>,
    /// Guardrails of this provider alone.
    #[serde(default)]
    pub limits: Limits,
    /// A workload still queued or starting (image pulling, container being created) this long
    /// after the provider created it fails the pod (`StartDeadlineExceeded`) and is deleted:
    /// an image that never pulls leaves a RunPod pod STARTING and a Vast instance `loading`
    /// forever, billing. Default 1800 for `runpod`, `vast` and `kubernetes`; none for `slurm`, where a queue
    /// wait is normal. 0: no deadline.
    #[serde(default)]
    pub start_deadline_seconds: Option<u64>,
    /// The most a pod may ask for with `gpu-vk.io/start-deadline-seconds` (default: the
    /// provider's deadline; a pod may always ask for less).
    #[serde(default)]
    pub max_start_deadline_seconds: Option<u64>,
    /// The pod IP of a workload this provider lists no usable address for (see
    /// `pods::address`); the pod's `gpu-vk.io/PodIPRoutable` condition is then False. Unset:
    /// such a pod has no IP.
    #[serde(default)]
    pub pod_ip_fallback: Option<std::net::IpAddr>,
}

/// A provider's start deadline and the ceiling of a pod's own (see
/// [`ProviderConfig::start_deadline`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartDeadline {
    pub default: Option<Duration>,
    pub max: Option<Duration>,
}

/// May a provider receive Secret-sourced environment values?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretEnv {
    Allow,
    Deny,
}

impl SecretEnv {
    /// The default of a provider kind on a VK serving `allowed_namespaces` (empty: all):
    /// `deny` for the GPU clouds (`runpod`, `vast`, `kubernetes`), whose machines are run by
    /// third parties (Vast's hosts are individuals with root on the machine), so a Secret
    /// reaches them only once the operator says so. For `slurm`, `allow` only when the VK
    /// serves one namespace: every pod's job runs as the VK's one Slurm user, so a pod of one
    /// namespace can read the environment (the Secret values) of another's job with `srun
    /// --jobid=<job> --overlap`, read its output or cancel it; with one tenant there is no
    /// other namespace to read from (docs/slurm.md, "Who can read what").
    pub fn default_for(kind: &str, allowed_namespaces: &[String]) -> Self {
        if kind == "slurm" && allowed_namespaces.len() == 1 {
            Self::Allow
        } else {
            Self::Deny
        }
    }
}

/// The `tls` block of the config file: the kubelet API's serving certificate and client
/// certificate authentication (see `crate::kubelet_api::tls`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsConfig {
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    #[serde(default = "yes")]
    pub client_ca_from_cluster: bool,
    /// Request the serving certificate from the cluster (`kubernetes.io/kubelet-serving` CSR).
    #[serde(default)]
    pub csr: bool,
    /// Approve our own serving CSR (needs `approve` on `signers/kubernetes.io/kubelet-serving`);
    /// otherwise an administrator or an approver controller must approve it.
    #[serde(default)]
    pub csr_auto_approve: bool,
    /// Requested certificate lifetime (the signer may cap it).
    #[serde(default)]
    pub csr_expiration_seconds: Option<i32>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            client_ca_from_cluster: true,
            csr: false,
            csr_auto_approve: false,
            csr_expiration_seconds: None,
        }
    }
}

/// The `leaderElection` block: replicas of the VK for one node elect a leader through a Lease
/// (`crate::leader`). Defaults are client-go's (15 s, 10 s, 2 s), as the controller-manager uses.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElection {
    #[serde(default)]
    pub enabled: bool,
    /// Namespace of the Lease (default `kube-node-lease`, beside the node's heartbeat Lease).
    #[serde(default = "default_leader_namespace")]
    pub namespace: String,
    /// Name of the Lease (default `gpu-vk-leader-<nodeName>`).
    #[serde(default)]
    pub lease_name: Option<String>,
    /// A standby takes over once the Lease went unrenewed this long (whole seconds, as the
    /// Lease records it).
    #[serde(default = "default_lease_duration_ms")]
    pub lease_duration_ms: u64,
    /// The leader stops leading once it could not renew for this long (less than the duration).
    #[serde(default = "default_renew_deadline_ms")]
    pub renew_deadline_ms: u64,
    /// Interval between renewals, and between a standby's attempts.
    #[serde(default = "default_retry_period_ms")]
    pub retry_period_ms: u64,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: default_leader_namespace(),
            lease_name: None,
            lease_duration_ms: default_lease_duration_ms(),
            renew_deadline_ms: default_renew_deadline_ms(),
            retry_period_ms: default_retry_period_ms(),
        }
    }
}

impl LeaderElection {
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_duration_seconds().unsigned_abs()))
    }
    /// The duration as the Lease records it: whole seconds, rounded up.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration_ms.div_ceil(1000)).unwrap_or(i32::MAX)
    }
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_millis(self.renew_deadline_ms)
    }
    pub fn retry_period(&self) -> Duration {
        Duration::from_millis(self.retry_period_ms)
    }
    fn validate(&self) -> Result<(), Error> {
        let (d, r, p) = (
            self.lease_duration().as_millis(),
            u128::from(self.renew_deadline_ms),
            u128::from(self.retry_period_ms),
        );
        if !(p > 0 && p < r && r < d) {
            return Err(Error::Invalid(format!(
                "leaderElection: need 0 < retryPeriodMs ({p}) < renewDeadlineMs ({r}) < \
                 leaseDurationMs ({d}, whole seconds), so a leader stops before a standby takes over"
            )));
        }
        Ok(())
    }
}

/// A credential resolved from the environment or a file; `Debug` never shows it.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl ProviderConfig {
    /// This provider's start deadline (its kind's default unless set) and the pod ceiling.
    pub fn start_deadline(&self) -> StartDeadline {
        let kind_default = match self.kind.as_str() {
            // A remote Kubernetes pod whose image never pulls holds its GPU node forever.
            "runpod" | "vast" | "kubernetes" => Some(1800),
            _ => None,
        };
        let secs = self
            .start_deadline_seconds
            .or(kind_default)
            .filter(|s| *s > 0);
        let max = self.max_start_deadline_seconds.or(secs).filter(|s| *s > 0);
        StartDeadline {
            default: secs.map(Duration::from_secs),
            max: max.map(Duration::from_secs),
        }
    }

    /// This provider's `secretEnv`, or its kind's default on a VK serving
    /// `allowed_namespaces`.
    pub fn secret_env(&self, allowed_namespaces: &[String]) -> SecretEnv {
        self.secret_env
            .unwrap_or_else(|| SecretEnv::default_for(&self.kind, allowed_namespaces))
    }

    /// Reads the provider's API key from its environment variable or file (empty if neither).
    pub fn api_key(&self) -> Result<Secret, Error> {
        if let Some(var) = &self.api_key_env {
            return std::env::var(var)
                .map(Secret)
                .map_err(|_| Error::MissingEnv {
                    provider: self.name.clone(),
                    var: var.clone(),
                });
        }
        if let Some(path) = &self.api_key_file {
            return std::fs::read_to_string(path)
                .map(|s| Secret(s.trim_end().to_owned()))
                .map_err(|source| Error::ReadCredentialFile {
                    provider: self.name.clone(),
                    path: path.clone(),
                    source,
                });
        }
        Ok(Secret::default())
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let cfg: Self = serde_yaml::from_str(&text).map_err(|source| Error::Parse {
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

fn default_max_connections() -> usize {
    1024
}
fn default_exec_idle_timeout_seconds() -> u64 {
    4 * 3600
}
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
fn default_cpu() -> String {
    "1000".into()
}
fn default_memory() -> String {
    "4Ti".into()
}
fn default_pods() -> String {
    "10000".into()
}
fn default_gpus() -> String {
    "1000".into()
}
fn default_poll_ms() -> u64 {
    2000
}
fn default_gc_grace_ms() -> u64 {
    30_000
}
fn default_lease_ms() -> u64 {
    10_000
}
fn default_node_status_ms() -> u64 {
    300_000
}
fn default_restart_backoff_ms() -> u64 {
    10_000
}
fn default_restart_backoff_max_ms() -> u64 {
    300_000
}
fn default_loss_lists() -> u32 {
    3
}
fn default_loss_window_ms() -> u64 {
    30_000
}
fn default_capacity_memory_ms() -> u64 {
    30_000
}
fn default_inventory_interval_ms() -> u64 {
    // Vast allows 10 offer searches a minute and RunPod 60 calls a minute in all: one
    // inventory call a minute each stays far inside both.
    60_000
}
fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_open_ms() -> u64 {
    30_000
}
fn default_breaker_slow_ms() -> u64 {
    20_000
}
fn default_leader_namespace() -> String {
    "kube-node-lease".into()
}
fn default_lease_duration_ms() -> u64 {
    15_000
}
fn default_renew_deadline_ms() -> u64 {
    10_000
}
fn default_retry_period_ms() -> u64 {
    2_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, Error> {
        let cfg: Config = serde_yaml::from_str(s).map_err(|source| Error::Parse {
            path: "test".into(),
            source,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let cfg =
            parse("nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n").unwrap();
        assert_eq!(cfg.kubelet_port, 10250);
        assert_eq!(cfg.capacity.gpus, "1000");
        assert!(cfg.taint);
        assert_eq!(cfg.timings.poll_interval_ms, 2000);
        assert_eq!(cfg.kubelet_api.max_connections, 1024);
        assert_eq!(
            cfg.kubelet_api.exec_idle_timeout(),
            Some(Duration::from_secs(14_400))
        );
    }

    #[test]
    fn cluster_networks_are_cidrs() {
        let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
        let cfg = parse(&format!(
            "{base}clusterNetworks: [10.96.0.0/12, \"fd00::/8\"]\n"
        ))
        .unwrap();
        assert_eq!(cfg.cluster_networks.len(), 2);
        assert!(parse(&format!("{base}clusterNetworks: [10.96.0.0]\n")).is_err());
        assert!(parse(&format!("{base}clusterNetworks: [cluster]\n")).is_err());
    }

    #[test]
    fn kubelet_api_limits_are_read_and_checked() {
        let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
        let cfg = parse(&format!(
            "{base}kubeletApi: {{maxConnections: 8, execIdleTimeoutSeconds: 0}}\n"
        ))
        .unwrap();
        assert_eq!(cfg.kubelet_api.max_connections, 8);
        assert_eq!(cfg.kubelet_api.exec_idle_timeout(), None);
        assert!(parse(&format!("{base}kubeletApi: {{maxConnections: 0}}\n")).is_err());
        assert!(parse(&format!("{base}kubeletApi: {{maxConnection: 8}}\n")).is_err());
    }

    #[test]
    fn rejects_duplicate_names_unknown_fields_and_no_providers() {
        assert!(parse("nodeName: vk\nclusterId: c\nproviders: []\n").is_err());
        assert!(
            parse("nodeName: vk\nclusterId: c\nproviders:\n- {name: a, kind: runpod}\n- {name: a, kind: vast}\n")
                .is_err()
        );
        assert!(
            parse("nodeName: vk\nclusterId: c\nbogus: 1\nproviders:\n- {name: a, kind: runpod}\n")
                .is_err()
        );
    }

    #[test]
    fn leader_election_timings_must_let_a_leader_stop_before_a_standby_takes_over() {
        let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
        let cfg = parse(base).unwrap();
        assert!(!cfg.leader_election.enabled);
        assert_eq!(cfg.leader_election.lease_duration_seconds(), 15);
        let with = |le: &str| parse(&format!("{base}leaderElection: {le}\n"));
        assert!(
            with(
                "{enabled: true, leaseDurationMs: 4000, renewDeadlineMs: 3000, retryPeriodMs: 500}"
            )
            .is_ok()
        );
        // A renew deadline at or past the duration would let two replicas lead at once.
        let err =
            with("{enabled: true, leaseDurationMs: 4000, renewDeadlineMs: 4000}").unwrap_err();
        assert!(err.to_string().contains("renewDeadlineMs"), "{err}");
        // 3.5 s is recorded as 4 whole seconds: the deadline compares against that.
        assert!(with("{leaseDurationMs: 3500, renewDeadlineMs: 3800, retryPeriodMs: 500}").is_ok());
        assert!(with("{retryPeriodMs: 0}").is_err());
    }

    #[test]
    fn secret_env_defaults_by_kind_and_is_overridden() {
        let cfg = parse(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n\
             - {name: v, kind: vast}\n- {name: hpc, kind: slurm}\n\
             - {name: rp2, kind: runpod, secretEnv: allow}\n- {name: hpc2, kind: slurm, secretEnv: deny}\n",
        )
        .unwrap();
        let got = |ns: &[String]| -> Vec<SecretEnv> {
            cfg.providers.iter().map(|p| p.secret_env(ns)).collect()
        };
        use SecretEnv::{Allow, Deny};
        // Slurm: its jobs share one Slurm user, so Secrets only for a single tenant.
        assert_eq!(got(&[]), [Deny, Deny, Deny, Allow, Deny]);
        assert_eq!(
            got(&["a".into(), "b".into()]),
            [Deny, Deny, Deny, Allow, Deny]
        );
        assert_eq!(got(&["ml".into()]), [Deny, Deny, Allow, Allow, Deny]);
        assert_eq!(cfg.shared_slurm_secret_warnings(), Vec::<String>::new());
        let shared = parse(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: hpc, kind: slurm, secretEnv: allow}\n",
        )
        .unwrap();
        let w = shared.shared_slurm_secret_warnings();
        assert!(w.len() == 1 && w[0].contains("provider hpc"), "{w:?}");
        assert!(!cfg.secret_failover);
        let on = parse(
            "nodeName: vk\nclusterId: c\nsecretFailover: true\nproviders:\n- {name: a, kind: runpod}\n",
        )
        .unwrap();
        assert!(on.secret_failover);
        assert!(
            parse("nodeName: vk\nclusterId: c\nproviders:\n- {name: a, kind: runpod, secretEnv: maybe}\n")
                .is_err()
        );
    }

    #[test]
    fn dispatch_and_limits_are_read_and_checked() {
        let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod, limits: {maxWorkloads: 3}}\n";
        let cfg = parse(base).unwrap();
        assert_eq!(cfg.dispatch.policy, DispatchPolicy::Preference);
        assert!(cfg.dispatch.pod_policy);
        assert_eq!(cfg.providers[0].limits.max_workloads, Some(3));
        assert_eq!(cfg.limits, Limits::default());
        let cfg = parse(&format!(
            "{base}dispatch: {{policy: cheapest, breaker: {{failures: 2}}}}\nlimits: {{maxSpendPerHour: 2.5}}\n"
        ))
        .unwrap();
        assert_eq!(cfg.dispatch.policy, DispatchPolicy::Cheapest);
        assert_eq!(cfg.dispatch.breaker.rules().failures, 2);
        assert_eq!(cfg.limits.max_spend_per_hour, Some(2.5));
        assert!(parse(&format!("{base}dispatch: {{policy: random}}\n")).is_err());
        assert!(parse(&format!("{base}limits: {{maxSpendPerHour: -1}}\n")).is_err());
        assert!(parse(&format!("{base}dispatch: {{breaker: {{failures: 0}}}}\n")).is_err());
    }

    #[test]
    fn start_deadlines_default_by_kind_and_are_overridden() {
        let cfg = parse(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n\
             - {name: hpc, kind: slurm}\n- {name: v, kind: vast, startDeadlineSeconds: 0}\n\
             - {name: hpc2, kind: slurm, startDeadlineSeconds: 600, maxStartDeadlineSeconds: 3600}\n",
        )
        .unwrap();
        let d: Vec<StartDeadline> = cfg.providers.iter().map(|p| p.start_deadline()).collect();
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(
            d[0],
            StartDeadline {
                default: s(1800),
                max: s(1800)
            }
        );
        assert_eq!(
            d[1],
            StartDeadline::default(),
            "a Slurm queue wait is normal"
        );
        assert_eq!(d[2], StartDeadline::default(), "0 turns it off");
        assert_eq!(
            d[3],
            StartDeadline {
                default: s(600),
                max: s(3600)
            }
        );
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::new("hunter2".into());
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }
}
