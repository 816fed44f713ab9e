//! The Slurm provider's `settings` in the VK configuration, with their defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::config::Secret;

use super::{DEFAULT_BASE_URL, Dialect, ExecMode, Runtime};

/// The `settings` of a Slurm provider in the VK configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SlurmConfig {
    #[serde(default = "default_base_url")]
    pub base_url: String,
    #[serde(default)]
    pub dialect: Dialect,
    /// The Slurm user the token belongs to (`X-SLURM-USER-NAME`); jobs run as this user.
    #[serde(default)]
    pub user_name: String,
    /// File holding the JWT (`scontrol token` output or the bare token), re-read whenever it
    /// changes. Without it, the provider's `apiKeyEnv` / `apiKeyFile` supplies the token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The token from `apiKeyEnv` / `apiKeyFile`, set by the caller; see
    /// [`SlurmConfig::with_api_key`].
    #[serde(skip)]
    pub api_key: Secret,
    /// Defaults, overridden per pod by `gpu-vk.io/partition`, `account`, `qos`, `time-limit`.
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub qos: Option<String>,
    #[serde(default)]
    pub default_time_limit_minutes: Option<u32>,
    #[serde(default)]
    pub runtime: Runtime,
    /// Where jobs write stdout and stderr (`slurm-<job id>.log`); logs are served from there
    /// when the VK can read it. Must exist on the compute nodes.
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
    /// The job's working directory on the compute node (before the pod's workingDir, which
    /// the script `cd`s into).
    #[serde(default = "default_work_dir")]
    pub work_dir: String,
    /// `PATH` of the job's environment.
    #[serde(default = "default_path")]
    pub path: String,
    /// Neutral GPU type (e.g. `A100-80GB`) to Slurm GRES type (e.g. `a100`). When empty, a
    /// pod's GPU type is not passed to Slurm (any GPU of the partition).
    #[serde(default)]
    pub gpu_types: BTreeMap<String, String>,
    #[serde(default = "default_max_gpus")]
    pub max_gpus_per_workload: u32,
    /// What one GPU-hour on this cluster costs the organisation, in dollars (Slurm has no
    /// prices of its own): used by the `cheapest` dispatch policy and the spend figures.
    /// Unset: the cluster is unpriced (dispatch puts it after priced providers).
    #[serde(default)]
    pub price_per_gpu_hour: Option<f64>,
    /// Sets the jobs' `requeue` flag; unset keeps the cluster's default (`JobRequeue`).
    #[serde(default)]
    pub requeue: Option<bool>,
    /// Partitions, accounts and QOS a pod may choose by annotation besides the configured
    /// `partition`, `account` and `qos` (empty: only those).
    #[serde(default)]
    pub allowed_partitions: Vec<String>,
    #[serde(default)]
    pub allowed_accounts: Vec<String>,
    #[serde(default)]
    pub allowed_qos: Vec<String>,
    /// Whole-request timeout, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Allow a plain `http://` base URL to a host other than loopback (the credentials then
    /// cross the network in clear). Off by default.
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// `kubectl exec`: `off` (default) or `srun` (`srun --jobid=<job> --overlap` from the VK's
    /// host, which needs the Slurm client, munge and the cluster's configuration).
    #[serde(default)]
    pub exec: ExecMode,
    /// The srun program (`srun` looked up in `path` by default).
    #[serde(default = "default_srun_path")]
    pub srun_path: String,
    /// Program and arguments put before srun, e.g. `[runuser, -u, vkslurm, --]` or `[sudo, -n,
    /// -u, vkslurm, --]` when the VK does not run as the jobs' user: Slurm lets only a job's
    /// owner add steps to it (root included).
    #[serde(default)]
    pub exec_wrapper: Vec<String>,
    /// `SLURM_CONF` for srun; unset: the VK's own `SLURM_CONF`, else Slurm's default.
    #[serde(default)]
    pub slurm_conf: Option<PathBuf>,
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.to_owned()
}
fn default_work_dir() -> String {
    "/tmp".to_owned()
}
fn default_path() -> String {
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()
}
fn default_max_gpus() -> u32 {
    8
}
fn default_timeout_secs() -> u64 {
    30
}
fn default_srun_path() -> String {
    "srun".to_owned()
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            base_url: default_base_url(),
            dialect: Dialect::default(),
            user_name: String::new(),
            token_file: None,
            api_key: Secret::default(),
            partition: None,
            account: None,
            qos: None,
            default_time_limit_minutes: None,
            runtime: Runtime::default(),
            output_dir: None,
            work_dir: default_work_dir(),
            path: default_path(),
            gpu_types: BTreeMap::new(),
            max_gpus_per_workload: default_max_gpus(),
            price_per_gpu_hour: None,
            requeue: None,
            allowed_partitions: Vec::new(),
            allowed_accounts: Vec::new(),
            allowed_qos: Vec::new(),
            request_timeout_secs: default_timeout_secs(),
            allow_insecure_http: false,
            exec: ExecMode::Off,
            srun_path: default_srun_path(),
            exec_wrapper: Vec::new(),
            slurm_conf: None,
        }
    }
}

impl SlurmConfig {
    /// Sets the token resolved by the caller from `apiKeyEnv` / `apiKeyFile`.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Secret::new(api_key);
        self
    }
}
