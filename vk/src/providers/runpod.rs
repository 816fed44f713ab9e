//! RunPod adapter (REST API v2): one RunPod pod per workload, named with the workload id.
//!
//! Contract, verified in `api-reference-v2/openapi.json` of the runpod/docs repository (v1 at
//! `rest.runpod.io/v1` is retired and not used):
//! - Base `https://api.runpod.io/v2` (configurable, the `/v2` prefix is part of `baseUrl`),
//!   `Authorization: Bearer <key>`.
//! - `GET /pods` answers `{"pods": [Pod]}` (cluster member pods excluded by default). A `Pod`
//!   has `id`, `name`, `status` (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED),
//!   `gpu {id, count, vcpuCount, memory}`, `createdAt`, `startedAt`, `globalNetworking` and
//!   `runtime` (null unless RUNNING; `{}` right after create) with `uptime`, `cpu.util`,
//!   `memory.util` (percent), `gpus[]`, `ports[]`.
//! - `POST /pods` (201) takes `CreatePodRequest`: `name`, `image`, `gpu {id, count,
//!   minVcpuCountPerGpu, minRamPerGpu}`, `cloud` (SECURE | COMMUNITY), `dataCenterIds`,
//!   `env` (object), `args` (one string), `ports` (`"8080/tcp"`), `disk` (GB). The schema has
//!   `unevaluatedProperties: false`, so nothing else is sent. It places exactly one GPU type
//!   and never falls back.
//! - `DELETE /pods/{id}` (204) terminates and removes the pod (v2 documents it as the
//!   equivalent of `POST /pods/{id}/action {"action":"terminate"}`); 404 unknown, 409 for
//!   cluster members.
//! - Errors are RFC 9457 problems `{title, status, detail, errors[]}`. 400 covers both broken
//!   rules and "no capacity" (human-readable `detail` only); 402 insufficient balance; 422
//!   schema violations; 429 carries `Retry-After` in integer seconds.
//!
//! Decisions and assumptions:
//! - Idempotent create: one `GET /pods` before the `POST`; a pod already carrying the
//!   workload's name (and not TERMINATED) means the earlier attempt succeeded.
//! - 400 whose `detail` reads like capacity ("no instances available", "not enough",
//!   "unavailable", "could not be placed", ...) is [`ProviderError::Capacity`]; any other 400
//!   and 422 are [`ProviderError::Invalid`]. 402 is Capacity (another provider may be paid
//!   up). 401 and 403 are Auth, although RunPod also uses 403 for "no access to this GPU pool".
//! - EXITED maps to Succeeded: v2 exposes no exit code, so a crashed container that RunPod
//!   reports as EXITED cannot be told apart from a clean exit. ERROR maps to
//!   `Failed { exit_code: 1, reason: ProviderError }`.
//! - TERMINATED pods are omitted from `list()`: termination is what our own delete does, and
//!   the framework reports a workload that vanished without being deleted as lost.
//! - v2 has no entrypoint override: `command` and `args` are shell-quoted into `args`, which
//!   replaces the image's CMD (exact for images without an ENTRYPOINT). `workingDir` and
//!   interruptible/spot requests are not expressible in v2 and are ignored.
//! - `GET /pods/{id}/logs` exists in v2 (Server-Sent Events, `tail`, `since`, `source`), but a
//!   non-follow request has no documented end-of-backlog marker; this adapter keeps the
//!   trait's default (logs unsupported) until that is settled.
//! - Usage comes from `runtime`: CPU millicores = `cpu.util`% of the pod's `vcpuCount`, memory
//!   = `memory.util`% of its `memory` GB. The cumulative CPU time is approximated as the
//!   current rate times `uptime` (the API reports no counter).
//!
//! Pod options read from the workload (`gpu-vk.io/*` annotations): `cloud`
//! (SECURE/COMMUNITY), `data_center` / `data_center_ids` / `region` (comma-separated RunPod
//! data center ids), `disk_gb`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::http::{self, Bearer, Client, InitError, RawResponse};
use super::options::{Options, shell_join};
use super::rest::{self, lenient};
use crate::naming::{Owner, WorkloadId};
use crate::provider::{
    Capabilities, FailureReason, Observed, Provider, ProviderError, Usage, Workload, WorkloadState,
};

/// Default API root, including the version prefix.
pub const DEFAULT_BASE_URL: &str = "https://api.runpod.io/v2";

/// Exit code reported for pods RunPod marks ERROR (the API exposes none).
const ERROR_EXIT_CODE: i32 = 1;

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

/// The `settings` of a RunPod provider in the VK configuration.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunPodConfig {
    /// API root including `/v2`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The API key, resolved by the caller (never part of the settings file); see
    /// [`RunPodConfig::with_api_key`].
    #[serde(skip)]
    pub api_key: String,
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
    /// Whole-request timeout, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.to_owned()
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

impl Default for RunPodConfig {
    fn default() -> Self {
        Self {
            base_url: default_base_url(),
            api_key: String::new(),
            cloud: Cloud::default(),
            gpu_ids: BTreeMap::new(),
            default_gpu_type: None,
            data_center_ids: Vec::new(),
            container_disk_gb: default_disk_gb(),
            max_gpus_per_workload: default_max_gpus(),
            request_timeout_secs: default_timeout_secs(),
        }
    }
}

impl RunPodConfig {
    /// Parses the provider's `settings` value; an absent (null) value means all defaults.
    pub fn from_settings(settings: &serde_yaml::Value) -> Result<Self, serde_yaml::Error> {
        super::registry::decode_settings(settings)
    }

    /// Sets the API key resolved by the caller.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = api_key.into();
        self
    }
}

impl fmt::Debug for RunPodConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunPodConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("cloud", &self.cloud)
            .field("gpu_ids", &self.gpu_ids)
            .field("default_gpu_type", &self.default_gpu_type)
            .field("data_center_ids", &self.data_center_ids)
            .field("container_disk_gb", &self.container_disk_gb)
            .field("max_gpus_per_workload", &self.max_gpus_per_workload)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .finish()
    }
}

/// The RunPod adapter.
#[derive(Debug)]
pub struct RunPod {
    name: String,
    cfg: RunPodConfig,
    owner: Owner,
    api: Client<Bearer>,
}

impl RunPod {
    /// Builds the adapter. The process must have installed a rustls crypto provider.
    pub fn new(name: String, cfg: RunPodConfig, owner: Owner) -> Result<Self, InitError> {
        if cfg.container_disk_gb == 0 {
            return Err(InitError::InvalidSetting {
                provider: name,
                reason: "containerDiskGb must be positive".into(),
            });
        }
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        let auth = Bearer::new(&name, &cfg.api_key)?;
        let api = Client::new(&name, &cfg.base_url, auth, timeout)?;
        Ok(Self {
            name,
            cfg,
            owner,
            api,
        })
    }

    /// The request body for a workload; pure, so it can be checked before any network call.
    fn create_request(&self, w: &Workload) -> Result<CreatePodRequest, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        let gpu = w.gpu.as_ref().filter(|g| g.count > 0).ok_or_else(|| {
            invalid("RunPod runs GPU pods only: the pod requests no GPU".to_owned())
        })?;
        if gpu.count > self.cfg.max_gpus_per_workload {
            return Err(invalid(format!(
                "the pod requests {} GPUs, more than the {} allowed on {}",
                gpu.count, self.cfg.max_gpus_per_workload, self.name
            )));
        }
        let neutral = gpu
            .gpu_type
            .as_ref()
            .or(self.cfg.default_gpu_type.as_ref())
            .ok_or_else(|| {
                invalid("the pod names no GPU type and no defaultGpuType is configured".to_owned())
            })?;
        let gpu_id = self
            .cfg
            .gpu_ids
            .get(neutral)
            .cloned()
            .unwrap_or_else(|| neutral.clone());

        let options = Options::of(w);
        let cloud = options.parsed::<Cloud>("cloud")?.unwrap_or(self.cfg.cloud);
        let data_center_ids = options
            .list(&["data_center_ids", "data_center", "region"])
            .unwrap_or_else(|| self.cfg.data_center_ids.clone());
        let disk = match options.positive("disk_gb")? {
            Some(gb) => gb.ceil() as u32,
            None => self.cfg.container_disk_gb,
        };
        let per_gpu = |total: f64| Some((total / f64::from(gpu.count)).ceil().max(1.0) as u32);
        let words = w.command.iter().chain(&w.args).map(String::as_str);
        let args = (!w.command.is_empty() || !w.args.is_empty()).then(|| shell_join(words));

        Ok(CreatePodRequest {
            name: w.id.as_str().to_owned(),
            image: w.image.clone(),
            gpu: CreateGpu {
                id: gpu_id,
                count: gpu.count,
                min_vcpu_count_per_gpu: w.cpu_millis.and_then(|m| per_gpu(m as f64 / 1000.0)),
                min_ram_per_gpu: w.memory_bytes.and_then(|b| per_gpu(b as f64 / GB)),
            },
            cloud,
            data_center_ids,
            env: rest::env_map(&w.env),
            args,
            ports: w.ports.iter().map(|p| format!("{p}/tcp")).collect(),
            disk,
        })
    }

    /// One `GET /pods`, decoded item by item: an odd item never fails the whole list.
    async fn list_pods(&self) -> Result<Vec<Pod>, ProviderError> {
        let resp = self
            .api
            .send(Method::GET, self.api.url(&["pods"], false), None)
            .await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let list: ListPodsResponse = resp.json("pod list")?;
        Ok(list
            .pods
            .into_iter()
            .filter_map(|item| match item {
                ListEntry::Pod(pod) => Some(pod),
                ListEntry::Unreadable(e) => {
                    warn!(provider = %self.name, error = %e, "skipping a pod entry that is not an object");
                    None
                }
            })
            .collect())
    }

    /// Maps an unsuccessful answer to a [`ProviderError`].
    fn error_from(&self, resp: &RawResponse) -> ProviderError {
        let problem: Option<Problem> = serde_json::from_slice(&resp.body).ok();
        let detail = match &problem {
            Some(p) => {
                let mut d = p
                    .detail
                    .clone()
                    .or_else(|| p.title.clone())
                    .unwrap_or_default();
                let errors = p.errors.clone().unwrap_or_default();
                if !errors.is_empty() {
                    d = format!("{d} ({})", errors.join("; "));
                }
                d
            }
            None => resp.text_snippet(),
        };
        let detail = resp.detail_or_reason(detail);
        let message = resp.message("RunPod", &detail);
        if resp.status.as_u16() == 400 && is_capacity_detail(&detail) {
            return ProviderError::Capacity { message };
        }
        http::classify_status(resp.status, resp.retry_after, message)
    }
}

const GB: f64 = 1_000_000_000.0;

/// RunPod answers "no capacity" as a plain 400 with only human-readable wording.
fn is_capacity_detail(detail: &str) -> bool {
    let d = detail.to_ascii_lowercase();
    [
        "no instances",
        "no longer any instances",
        "not enough",
        "unavailable",
        "could not be placed",
        "no available",
        "capacity",
        "out of stock",
    ]
    .iter()
    .any(|needle| d.contains(needle))
}

impl Provider for RunPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            gpu_types: self.cfg.gpu_ids.keys().cloned().collect(),
            max_gpus_per_workload: self.cfg.max_gpus_per_workload,
            logs: false,
            exec: false,
            metrics: true,
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        super::ensure_owned(&self.owner, w)?;
        let body = self.create_request(w)?;
        // No lookup by name first: the framework only creates when no list begun after its
        // previous attempt showed this workload (see `Provider::create`).
        let body = serde_json::to_value(&body).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the request: {e}"),
        })?;
        let resp = self
            .api
            .send(Method::POST, self.api.url(&["pods"], false), Some(&body))
            .await?;
        if resp.is_success() {
            let created: Option<Pod> = serde_json::from_slice(&resp.body).ok();
            info!(provider = %self.name, workload = %w.id, pod_id = ?created.and_then(|p| p.id), "created RunPod pod");
            return Ok(());
        }
        let err = self.error_from(&resp);
        debug!(provider = %self.name, workload = %w.id, error = %err, "RunPod create failed");
        Err(err)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        if provider_id.is_empty() {
            return Err(ProviderError::Invalid {
                message: "empty RunPod pod id".into(),
            });
        }
        let resp = self
            .api
            .send(
                Method::DELETE,
                self.api.url(&["pods", provider_id], false),
                None,
            )
            .await?;
        if resp.is_success() {
            info!(provider = %self.name, pod_id = provider_id, "terminated RunPod pod");
            return Ok(());
        }
        Err(self.error_from(&resp))
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let pods = self.list_pods().await?;
        Ok(pods
            .into_iter()
            .filter_map(|p| observe(&self.name, p))
            .collect())
    }
}

/// Translates one listed pod; `None` when it is not one of ours (any VK's) or is terminated.
fn observe(provider: &str, pod: Pod) -> Option<Observed> {
    let id = WorkloadId::parse(pod.name.as_deref()?)?;
    let Some(provider_id) = pod.id.clone().filter(|s| !s.is_empty()) else {
        warn!(provider, workload = %id, "listed pod has no id; ignoring it");
        return None;
    };
    let raw = match &pod.status {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let (state, message) = match raw.as_str() {
        "PROVISIONING" => (WorkloadState::Queued { reason: None }, None),
        "STARTING" => (WorkloadState::Starting, None),
        "RUNNING" => (WorkloadState::Running, None),
        "EXITED" => (WorkloadState::Succeeded, None),
        "ERROR" => (
            WorkloadState::Failed {
                exit_code: ERROR_EXIT_CODE,
                reason: FailureReason::ProviderError,
            },
            Some("RunPod reports the container in an unrecoverable error state".to_owned()),
        ),
        "TERMINATED" => return None,
        _ => {
            warn!(provider, workload = %id, status = %raw, "unknown RunPod pod status");
            (
                WorkloadState::Unknown { raw: raw.clone() },
                Some(format!("RunPod status {raw:?}")),
            )
        }
    };
    let parse_ts = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<Timestamp>().ok());
    let ip = pod
        .global_networking
        .as_ref()
        .filter(|g| g.enabled == Some(true))
        .and_then(|g| g.ip.clone())
        .or_else(|| {
            pod.runtime
                .as_ref()?
                .ports
                .as_ref()?
                .iter()
                .find_map(|p| p.ip.clone().filter(|s| !s.is_empty()))
        });
    let usage = if raw == "RUNNING" { usage(&pod) } else { None };
    Some(Observed {
        id,
        provider_id,
        state,
        message,
        created_at: parse_ts(&pod.created_at),
        started_at: parse_ts(&pod.started_at),
        finished_at: None,
        ip,
        provider_restarts: 0,
        usage,
    })
}

/// Usage from the `runtime` block; `None` when RunPod reports no utilisation.
fn usage(pod: &Pod) -> Option<Usage> {
    let rt = pod.runtime.as_ref()?;
    let compute = pod.gpu.as_ref().or(pod.cpu.as_ref());
    let cpu_util = rt.cpu.as_ref().and_then(|u| u.util);
    let mem_util = rt.memory.as_ref().and_then(|u| u.util);
    if cpu_util.is_none() && mem_util.is_none() {
        return None;
    }
    let vcpus = compute.and_then(|c| c.vcpu_count).unwrap_or(0.0).max(0.0);
    let mem_gb = compute.and_then(|c| c.memory).unwrap_or(0.0).max(0.0);
    let pct = |u: Option<f64>| u.unwrap_or(0.0).clamp(0.0, 100.0) / 100.0;
    let cpu_millis = (pct(cpu_util) * vcpus * 1000.0).round() as u64;
    let memory_bytes = (pct(mem_util) * mem_gb * GB).round() as u64;
    let uptime = rt.uptime.unwrap_or(0.0).max(0.0);
    Some(Usage {
        cpu_usage_nanos: (cpu_millis as f64 * uptime * 1_000_000.0).round() as u64,
        cpu_millis,
        memory_bytes,
        timestamp: Timestamp::now(),
    })
}

// ---- wire types -------------------------------------------------------------------------

/// `CreatePodRequest` (only the fields this adapter sets).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreatePodRequest {
    name: String,
    image: String,
    gpu: CreateGpu,
    cloud: Cloud,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    data_center_ids: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<String>,
    disk: u32,
}

/// `CreateGpuConfig`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreateGpu {
    id: String,
    count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_vcpu_count_per_gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_ram_per_gpu: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct ListPodsResponse {
    pods: Vec<ListEntry>,
}

/// One entry of the pod list. Decoded entry by entry, so a list of 10,000 pods never exists
/// as one generic JSON tree (that tree was the VK's largest allocation in `make bench`).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // nearly every entry is a pod; boxing would cost an allocation each
enum ListEntry {
    Pod(Pod),
    /// Not an object: skipped with a warning naming the error.
    Unreadable(String),
}

impl<'de> Deserialize<'de> for ListEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(match serde_json::from_value::<Pod>(value) {
            Ok(pod) => ListEntry::Pod(pod),
            Err(e) => ListEntry::Unreadable(e.to_string()),
        })
    }
}

/// `Pod`, every field optional and lenient.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Pod {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    name: Option<String>,
    /// Kept raw: a missing or non-string status must surface as `Unknown`.
    #[serde(default)]
    status: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    gpu: Option<PodCompute>,
    #[serde(default, deserialize_with = "lenient")]
    cpu: Option<PodCompute>,
    #[serde(default, deserialize_with = "lenient")]
    runtime: Option<PodRuntime>,
    #[serde(default, deserialize_with = "lenient")]
    global_networking: Option<GlobalNetworking>,
    #[serde(default, deserialize_with = "lenient")]
    created_at: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    started_at: Option<String>,
}

/// The `gpu` / `cpu` block of a pod: what was allocated.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodCompute {
    #[serde(default, deserialize_with = "lenient")]
    vcpu_count: Option<f64>,
    /// System RAM, GB.
    #[serde(default, deserialize_with = "lenient")]
    memory: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
struct PodRuntime {
    /// Seconds since the container started.
    #[serde(default, deserialize_with = "lenient")]
    uptime: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    cpu: Option<Utilization>,
    #[serde(default, deserialize_with = "lenient")]
    memory: Option<Utilization>,
    #[serde(default, deserialize_with = "lenient")]
    ports: Option<Vec<RuntimePort>>,
}

#[derive(Debug, Default, Deserialize)]
struct Utilization {
    /// Percent, 0-100.
    #[serde(default, deserialize_with = "lenient")]
    util: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
struct RuntimePort {
    #[serde(default, deserialize_with = "lenient")]
    ip: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct GlobalNetworking {
    #[serde(default, deserialize_with = "lenient")]
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    ip: Option<String>,
}

/// RFC 9457 problem details.
#[derive(Debug, Deserialize)]
struct Problem {
    #[serde(default, deserialize_with = "lenient")]
    title: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    detail: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    errors: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME: &str = "vk-0123abcd-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn states_map_to_the_closed_set() {
        let cases = [
            ("PROVISIONING", Some(WorkloadState::Queued { reason: None })),
            ("STARTING", Some(WorkloadState::Starting)),
            ("RUNNING", Some(WorkloadState::Running)),
            ("EXITED", Some(WorkloadState::Succeeded)),
            (
                "ERROR",
                Some(WorkloadState::Failed {
                    exit_code: 1,
                    reason: FailureReason::ProviderError,
                }),
            ),
            ("TERMINATED", None),
            (
                "HIBERNATING",
                Some(WorkloadState::Unknown {
                    raw: "HIBERNATING".into(),
                }),
            ),
        ];
        for (status, want) in cases {
            let got = observe(
                "rp",
                pod(json!({"id": "p1", "name": NAME, "status": status})),
            );
            assert_eq!(got.map(|o| o.state), want, "{status}");
        }
    }

    #[test]
    fn odd_fields_do_not_break_an_item() {
        let o = observe(
            "rp",
            pod(
                json!({"id": "p1", "name": NAME, "status": "RUNNING", "runtime": "weird",
                       "createdAt": 5, "gpu": {"vcpuCount": "many"}}),
            ),
        )
        .unwrap();
        assert_eq!(o.state, WorkloadState::Running);
        assert_eq!(o.usage, None);
        assert_eq!(o.created_at, None);
    }

    #[test]
    fn usage_from_runtime() {
        let p = pod(json!({"id": "p1", "name": NAME, "status": "RUNNING",
            "gpu": {"id": "x", "count": 1, "vcpuCount": 8, "memory": 32},
            "runtime": {"uptime": 10, "cpu": {"util": 50}, "memory": {"util": 25}}}));
        let u = usage(&p).unwrap();
        assert_eq!(u.cpu_millis, 4000);
        assert_eq!(u.memory_bytes, 8_000_000_000);
        assert_eq!(u.cpu_usage_nanos, 40_000_000_000);
        assert!(usage(&pod(json!({"runtime": {}}))).is_none());
    }

    #[test]
    fn capacity_wording() {
        assert!(is_capacity_detail(
            "There are no instances currently available"
        ));
        assert!(is_capacity_detail(
            "Not enough free GPUs on the host machine"
        ));
        assert!(!is_capacity_detail("gpu.count must be at most 8"));
    }
}
