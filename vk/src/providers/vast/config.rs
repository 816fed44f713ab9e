//! The Vast provider's `settings` in the VK configuration, with their defaults.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::Secret;

use super::DEFAULT_BASE_URL;

/// The `settings` of a Vast provider in the VK configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VastConfig {
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The API key, resolved by the caller (never part of the settings file); see
    /// [`VastConfig::with_api_key`].
    #[serde(skip)]
    pub api_key: Secret,
    /// Neutral GPU type (e.g. `RTX4090`) to Vast's exact `gpu_name` (e.g. `RTX 4090`). Types
    /// not listed go through the built-in table (`gpus`), else are searched verbatim.
    #[serde(default)]
    pub gpu_names: BTreeMap<String, String>,
    /// Neutral GPU type used when a pod asks for "any" GPU; unset searches every type.
    #[serde(default)]
    pub default_gpu_type: Option<String>,
    /// Container disk in GB.
    #[serde(default = "default_disk_gb")]
    pub disk_gb: f64,
    /// Highest total $/hour an instance may cost (on demand) or be bid at.
    #[serde(default)]
    pub max_price_per_hour: Option<f64>,
    /// Rent interruptible (bid) instances unless a pod says otherwise.
    #[serde(default)]
    pub interruptible: bool,
    /// Only rent verified machines.
    #[serde(default = "yes")]
    pub verified_only: bool,
    /// The lowest machine `reliability` (0 to 1, "a measure of a machine's historical uptime
    /// and health. New machines start at 60%", vast-ai/docs `guides/concepts.mdx`) an offer may
    /// have. Default 0.90: the floor of Vast's own tools (its host verification requires "90%",
    /// `host/verification-stages.mdx`; vast-cli's self-test fails a host at "Reliability <=
    /// 0.90"; its console link `machineReliabilityMin=0.9`, `guides/get-started/index.mdx`).
    /// vast-cli's search sends no floor by default. 0: none.
    #[serde(default = "default_min_reliability")]
    pub min_reliability: f64,
    /// Offers returned by one search.
    #[serde(default = "default_search_limit")]
    pub search_limit: u32,
    /// Offers tried (cheapest first) before giving up with a capacity error.
    #[serde(default = "default_max_offers")]
    pub max_offers_tried: usize,
    #[serde(default = "default_max_gpus")]
    pub max_gpus_per_workload: u32,
    /// Largest disk a pod may ask for, GB (unset: no ceiling).
    #[serde(default)]
    pub max_disk_gb: Option<u32>,
    /// The highest CUDA version the hosts this provider rents run (`"12.8"`; unset: unknown):
    /// a pod whose `gpu-vk.io/min-cuda` is above it is sent elsewhere, or refused before it
    /// exists when no provider runs it.
    #[serde(default)]
    pub max_cuda_version: Option<String>,
    /// Whole-request timeout, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Allow a plain `http://` base URL to a host other than loopback (the credentials then
    /// cross the network in clear). Off by default.
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// Attempts to download a requested log file before giving up.
    #[serde(default = "default_log_attempts")]
    pub log_fetch_attempts: u32,
    /// Pause between log download attempts, milliseconds.
    #[serde(default = "default_log_interval_ms")]
    pub log_fetch_interval_ms: u64,
    /// An instance Vast reports `offline` or `unknown` this long is reported failed, so it is
    /// destroyed and (by the pod's restart policy) replaced; `0`: never.
    #[serde(default = "default_unreachable_deadline_secs")]
    pub unreachable_deadline_seconds: u64,
    /// Minimum seconds between calls of each endpoint (defaults: the service's documented
    /// limits, see `pace`).
    #[serde(default)]
    pub rate_limits: super::pace::MinIntervals,
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.to_owned()
}
fn default_disk_gb() -> f64 {
    20.0
}
fn yes() -> bool {
    true
}
fn default_search_limit() -> u32 {
    20
}
fn default_max_offers() -> usize {
    5
}
fn default_max_gpus() -> u32 {
    8
}
fn default_timeout_secs() -> u64 {
    30
}
fn default_log_attempts() -> u32 {
    10
}
fn default_log_interval_ms() -> u64 {
    1000
}
fn default_min_reliability() -> f64 {
    0.90
}

/// Ten minutes: long enough for a host's network blip, short enough that a pod on a host that
/// is gone is replaced before its users notice for long.
fn default_unreachable_deadline_secs() -> u64 {
    600
}

impl Default for VastConfig {
    fn default() -> Self {
        Self {
            base_url: default_base_url(),
            api_key: Secret::default(),
            gpu_names: BTreeMap::new(),
            default_gpu_type: None,
            disk_gb: default_disk_gb(),
            max_price_per_hour: None,
            interruptible: false,
            verified_only: true,
            min_reliability: default_min_reliability(),
            search_limit: default_search_limit(),
            max_offers_tried: default_max_offers(),
            max_gpus_per_workload: default_max_gpus(),
            max_disk_gb: None,
            max_cuda_version: None,
            request_timeout_secs: default_timeout_secs(),
            allow_insecure_http: false,
            log_fetch_attempts: default_log_attempts(),
            log_fetch_interval_ms: default_log_interval_ms(),
            unreachable_deadline_seconds: default_unreachable_deadline_secs(),
            rate_limits: super::pace::MinIntervals::default(),
        }
    }
}

impl VastConfig {
    /// Parses the provider's `settings` value; an absent (null) value means all defaults.
    pub fn from_settings(settings: &serde_json::Value) -> Result<Self, serde_json::Error> {
        crate::providers::registry::decode_settings(settings)
    }

    /// Sets the API key resolved by the caller.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Secret::new(api_key);
        self
    }
}
