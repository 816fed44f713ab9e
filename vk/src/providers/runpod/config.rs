//! The RunPod provider's `settings` in the VK configuration, with their defaults, and the
//! cloud tier a pod runs in.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::DEFAULT_BASE_URL;
use crate::config::Secret;

/// RunPod cloud tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Cloud {
    /// RunPod-owned data center hardware (the API's default).
    #[default]
    Secure,
    /// Community-hosted hardware.
    Community,
}

impl Cloud {
    /// The API's spelling (`SECURE`, `COMMUNITY`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secure => "SECURE",
            Self::Community => "COMMUNITY",
        }
    }
}

impl FromStr for Cloud {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().as_str() {
            "SECURE" => Ok(Self::Secure),
            "COMMUNITY" => Ok(Self::Community),
            _ => Err(format!(
                "unknown RunPod cloud {s:?} (expected SECURE or COMMUNITY)"
            )),
        }
    }
}

/// How an exit RunPod reports no code for ends the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum UnknownExit {
    /// Completed, exit code 0: a Job with restartPolicy Never or OnFailure completes once.
    #[default]
    Succeeded,
    /// Error, exit code 1: a Job's pod fails and its backoffLimit decides what follows.
    Failed,
}

/// The `settings` of a RunPod provider in the VK configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunPodConfig {
    /// API root including `/v2`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The API key, resolved by the caller (never part of the settings file); see
    /// [`RunPodConfig::with_api_key`].
    #[serde(skip)]
    pub api_key: Secret,
    /// Cloud tier used unless a pod asks otherwise.
    #[serde(default)]
    pub cloud: Cloud,
    /// Neutral GPU type (as pods request it, e.g. `RTX4090`) to RunPod GPU id (e.g.
    /// `NVIDIA GeForce RTX 4090`). Types not listed are passed to RunPod verbatim.
    #[serde(default)]
    pub gpu_ids: BTreeMap<String, String>,
    /// Neutral GPU type used when a pod asks for "any" GPU.
    #[serde(default)]
    pub default_gpu_type: Option<String>,
    /// Preferred data centers; empty lets RunPod choose.
    #[serde(default)]
    pub data_center_ids: Vec<String>,
    /// Container disk in GB.
    #[serde(default = "default_disk_gb")]
    pub container_disk_gb: u32,
    #[serde(default = "default_max_gpus")]
    pub max_gpus_per_workload: u32,
    /// Clouds a pod may choose by annotation besides the configured `cloud` (empty: only it).
    #[serde(default)]
    pub allowed_clouds: Vec<Cloud>,
    /// Largest container disk a pod may ask for, GB (unset: no ceiling).
    #[serde(default)]
    pub max_disk_gb: Option<u32>,
    /// The highest CUDA version the hosts this provider rents run (`"12.8"`; unset: unknown):
    /// a pod whose `gpu-vk.io/min-cuda` is above it is sent elsewhere, or refused before it
    /// exists when no provider runs it.
    #[serde(default)]
    pub max_cuda_version: Option<String>,
    /// CPU flavor (`GET /v2/catalog/cpus`, e.g. `cpu3c`) for pods that request no GPU; unset
    /// (`null`): this provider refuses CPU-only pods and dispatch skips it for them.
    #[serde(default = "default_cpu_flavor")]
    pub cpu_flavor_id: Option<String>,
    /// How a container exit is reported: RunPod exposes no exit code, so the exit is
    /// `Succeeded` (assumed 0, the default) or `Failed` (assumed 1).
    #[serde(default)]
    pub unknown_exit_as: UnknownExit,
    /// vCPUs and system RAM (GB) a GPU pod gets per GPU, by GPU type (the neutral name pods
    /// use or RunPod's id), as RunPod's console shows them at deploy time. v2 reports none for
    /// GPU pods (`Pod.gpu` is `GpuConfig {id, count}`; `cpu.vcpuCount` and `cpu.memory` are
    /// "omitted from GPU pods"), only utilisation percentages, so a GPU pod's usage is
    /// reported unknown, never 0, unless its type is listed here.
    #[serde(default)]
    pub gpu_pod_resources: BTreeMap<String, PerGpu>,
    /// Whole-request timeout, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Allow a plain `http://` base URL to a host other than loopback (the credentials then
    /// cross the network in clear). Off by default.
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// How often this owner's registry credentials that no pod uses are deleted, seconds
    /// (the first sweep one interval after start; 0: at every list).
    #[serde(default = "default_registry_sweep")]
    pub registry_sweep_seconds: u64,
}

/// What a GPU pod gets per GPU besides the GPU (see `gpuPodResources`).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PerGpu {
    pub vcpus: u32,
    pub memory_gb: u32,
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.to_owned()
}
fn default_cpu_flavor() -> Option<String> {
    Some("cpu3c".to_owned())
}
fn default_disk_gb() -> u32 {
    20
}
fn default_max_gpus() -> u32 {
    8
}
fn default_timeout_secs() -> u64 {
    30
}
fn default_registry_sweep() -> u64 {
    300
}

impl Default for RunPodConfig {
    fn default() -> Self {
        Self {
            base_url: default_base_url(),
            api_key: Secret::default(),
            cloud: Cloud::default(),
            gpu_ids: BTreeMap::new(),
            default_gpu_type: None,
            data_center_ids: Vec::new(),
            container_disk_gb: default_disk_gb(),
            max_gpus_per_workload: default_max_gpus(),
            allowed_clouds: Vec::new(),
            max_disk_gb: None,
            max_cuda_version: None,
            cpu_flavor_id: default_cpu_flavor(),
            unknown_exit_as: UnknownExit::default(),
            gpu_pod_resources: BTreeMap::new(),
            request_timeout_secs: default_timeout_secs(),
            allow_insecure_http: false,
            registry_sweep_seconds: default_registry_sweep(),
        }
    }
}

impl RunPodConfig {
    /// Parses the provider's `settings` value; an absent (null) value means all defaults.
    pub fn from_settings(settings: &serde_json::Value) -> Result<Self, serde_json::Error> {
        crate::providers::registry::decode_settings(settings)
    }

    /// The per-GPU vCPUs and RAM of RunPod GPU type `runpod_id`, listed under that id or under
    /// the neutral name `gpuIds` maps to it.
    pub fn per_gpu(&self, runpod_id: &str) -> Option<PerGpu> {
        if let Some(p) = self.gpu_pod_resources.get(runpod_id) {
            return Some(*p);
        }
        self.gpu_ids
            .iter()
            .filter(|(_, id)| id.as_str() == runpod_id)
            .find_map(|(neutral, _)| self.gpu_pod_resources.get(neutral).copied())
    }

    /// Sets the API key resolved by the caller.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Secret::new(api_key);
        self
    }
}
