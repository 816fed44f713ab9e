//! RunPod adapter (REST API v2): one RunPod pod per workload, named with the workload id.
//!
//! Contract, verified in `api-reference-v2/openapi.json` of the runpod/docs repository (v1 at
//! `rest.runpod.io/v1` is retired and not used):
//! - Base `https://api.runpod.io/v2` (configurable, the `/v2` prefix is part of `baseUrl`),
//!   `Authorization: Bearer <key>`.
//! - `GET /pods` answers `{"pods": [Pod]}` (cluster member pods excluded by default). A `Pod`
//!   has `id`, `name`, `status` (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED),
//!   `gpu {id, count}` (GPU pods) or `cpu {id, vcpuCount, memory}` (CPU pods), `createdAt`, `startedAt`, `globalNetworking` and
//!   `runtime` (null unless RUNNING; `{}` right after create) with `uptime`, `cpu.util`,
//!   `memory.util` (percent), `gpus[]`, `ports[]`.
//! - `POST /pods` (201) takes `CreatePodRequest`: `name`, `image`, exactly one of `gpu {id,
//!   count}` (no vCPU or RAM fields: the GPU type brings them) and `cpu {id, vcpuCount}` (a CPU flavor from
//!   `GET /v2/catalog/cpus`; `vcpuCount` a power of two, at least 2), `cloud` (SECURE |
//!   COMMUNITY), `dataCenterIds`, `env` (object), `args` (one string, "arguments passed to the
//!   container entrypoint"), `ports` (`"8080/tcp"`), `disk` (GB). The schema has
//!   `unevaluatedProperties: false`, so nothing else is sent. It places exactly one GPU type
//!   and never falls back.
//! - `DELETE /pods/{id}` (204) terminates and removes the pod (v2 documents it as the
//!   equivalent of `POST /pods/{id}/action {"action":"terminate"}`); 404 unknown, 409 for
//!   cluster members.
//! - Errors are RFC 9457 problems `{title, status, detail, errors[]}`. The create operation's
//!   own table: 422 schema (never retry), 400 a broken rule *or* no capacity (human-readable
//!   `detail` only: "try your next candidate"), 402 insufficient balance, 403 "your account
//!   cannot access the requested pool: skip this candidate, keep going", 429 with
//!   `Retry-After` in integer seconds, 5xx transient.
//! - A container whose command ends is restarted in place by RunPod and the pod stays
//!   RUNNING (runpod/runpodctl#149, dstackai/dstack#1142); EXITED follows a `stop` (a user,
//!   maintenance, a $0 balance). Neither state nor schema carries an exit code.
//!
//! Decisions and assumptions:
//! - The framework creates only after a list begun after its previous attempt: no lookup.
//! - 400 whose `detail` reads like capacity ("no instances available", "not enough",
//!   "unavailable", "could not be placed", ...) is [`ProviderError::Capacity`]; any other 400
//!   and 422 are [`ProviderError::Invalid`]. 402 is Capacity (another provider may be paid
//!   up). 403 on create is Capacity (the next candidate may be open to us); elsewhere 401 and
//!   403 are Auth.
//! - Exits: a falling `runtime.uptime` (or a new `startedAt`) between two lists means the
//!   container exited and RunPod restarted it (`exits`). The pod is then reported ended:
//!   `Succeeded` with exit code 0 by default, or `Failed` with 1 (`unknownExitAs`), the
//!   message saying the code is assumed. The framework applies the restart policy (Always:
//!   the RunPod pod is replaced after the back-off, restartCount and lastState recorded;
//!   Never/OnFailure: the pod ends) and, since `delete_finished`, terminates the RunPod pod
//!   so it stops re-running and billing. An exit before the first sighting after a VK
//!   start is only seen at the next one.
//! - EXITED is `Failed { exit_code: 137, reason: Evicted }`: the VK never stops a pod, so
//!   someone else did. ERROR maps to `Failed { exit_code: 1, reason: ProviderError }`.
//! - TERMINATED pods are omitted from `list()`: termination is what our own delete does, and
//!   the framework reports a workload that vanished without being deleted as lost.
//! - Entrypoint: v2 has no entrypoint override (v1's `dockerEntrypoint`/`dockerStartCmd`
//!   are gone); `args` replaces the image's CMD and keeps its ENTRYPOINT. Kubernetes `args`
//!   alone map exactly; a `command` is shell-quoted in front of the args into `args`, exact
//!   for images without an ENTRYPOINT only. `workingDir` and interruptible/spot requests are
//!   not expressible in v2 and are ignored.
//! - Pods requesting no GPU become CPU pods of flavor `cpuFlavorId` (default `cpu3c`) with
//!   the request's CPUs rounded up to a power of two; memory follows from the flavor.
//!   Without a flavor the adapter declares `gpu_only` and dispatch passes it by.
//! - Logs: `GET /pods/{id}/logs` (Server-Sent Events), read as `logs.rs` says.
//! - Private images: the pod's registry login becomes a registry credential named by its
//!   digest and sent by id in `registry` (`registries.rs`); a pull that fails shows only in the
//!   pod's system log, where `pulls.rs` reads it.
//! - Usage comes from `runtime`: CPU millicores = `cpu.util`% of the pod's vCPUs, memory =
//!   `memory.util`% of its RAM. A CPU pod's `cpu` block gives both; a GPU pod's are not in
//!   the API, so they come from the settings' `gpuPodResources` (per GPU of the type) or the
//!   usage is unknown, never 0. The API reports no cumulative CPU time: the adapter
//!   integrates the rate over `uptime` (`cpu`).
//!
//! Pod options read from the workload (`gpu-vk.io/*` annotations): `cloud`
//! (SECURE/COMMUNITY), `data_center` / `data_center_ids` / `region` (comma-separated RunPod
//! data center ids), `disk_gb`.

mod adapter;
mod catalog;
mod config;
mod exits;
#[cfg(test)]
mod fuzz;
mod logs;
mod pulls;
mod registries;
mod state;
mod wire;

use std::sync::Mutex;
use std::time::Duration;

use reqwest::Method;
use tracing::warn;

use super::http::{self, Bearer, Client, InitError, RawResponse};
use super::options::Options;
use super::rest;
use crate::naming::Owner;
use crate::provider::{GpuRequest, ProviderError, Workload};
use crate::vocab::shell::shell_join;
pub use config::{Cloud, PerGpu, RunPodConfig, UnknownExit};
use wire::{CreateCpu, CreateGpu, CreatePodRequest, ListEntry, ListPodsResponse, Pod, Problem};

/// Default API root, including the version prefix.
pub const DEFAULT_BASE_URL: &str = "https://api.runpod.io/v2";

/// Exit code reported for pods RunPod marks ERROR (the API exposes none).
const ERROR_EXIT_CODE: i32 = 1;

/// The RunPod adapter.
#[derive(Debug)]
pub struct RunPod {
    name: String,
    cfg: RunPodConfig,
    owner: Owner,
    api: std::sync::Arc<Client<Bearer>>,
    /// Container exits seen through falling uptimes.
    exits: Mutex<exits::Exits>,
    /// Cumulative CPU counters integrated from the reported rate.
    cpu: Mutex<super::cpu::CpuCounters>,
    /// When a create was last refused for insufficient balance (402), until one succeeds.
    unpaid_since: Mutex<Option<std::time::Instant>>,
    /// Registry credentials this process created or used.
    registries: Mutex<registries::Known>,
    /// What the system logs of starting pods say of their pulls.
    pulls: std::sync::Arc<Mutex<pulls::Pulls>>,
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
        let auth = Bearer::new(&name, cfg.api_key.expose())?;
        let api = std::sync::Arc::new(Client::new(
            &name,
            &cfg.base_url,
            auth,
            timeout,
            cfg.allow_insecure_http,
        )?);
        Ok(Self {
            name,
            cfg,
            owner,
            api,
            exits: Mutex::default(),
            cpu: Mutex::default(),
            unpaid_since: Mutex::default(),
            registries: Mutex::default(),
            pulls: std::sync::Arc::default(),
        })
    }

    /// The request body for a workload; pure, so it can be checked before any network call.
    fn create_request(&self, w: &Workload) -> Result<CreatePodRequest, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        let (gpu, cpu) = match w.gpu.as_ref().filter(|g| g.count > 0) {
            Some(gpu) => {
                let mut config = self.gpu_config(gpu)?;
                config.min_cuda_version = Options::of(w).text("min_cuda");
                (Some(config), None)
            }
            None => {
                let flavor = self.cfg.cpu_flavor_id.clone().ok_or_else(|| {
                    invalid(format!(
                        "the pod requests no GPU and {} has no cpuFlavorId for CPU pods",
                        self.name
                    ))
                })?;
                let cpu = CreateCpu {
                    id: flavor,
                    vcpu_count: cpu_pod_vcpus(w.cpu_millis),
                };
                (None, Some(cpu))
            }
        };
        let options = Options::of(w);
        let cloud = match options.parsed::<Cloud>("cloud")? {
            Some(c) if c != self.cfg.cloud && !self.cfg.allowed_clouds.contains(&c) => {
                return Err(invalid(format!(
                    "option cloud={c:?} is not allowed by the operator (configured {:?}; \
                     allowedClouds {:?})",
                    self.cfg.cloud, self.cfg.allowed_clouds
                )));
            }
            Some(c) => c,
            None => self.cfg.cloud,
        };
        let data_center_ids = options
            .list(&["data_center_ids", "data_center", "region"])
            .unwrap_or_else(|| self.cfg.data_center_ids.clone());
        let disk = options
            .disk_gb(
                f64::from(self.cfg.container_disk_gb),
                self.cfg.max_disk_gb.map(f64::from),
            )?
            .ceil() as u32;
        let words = w.command.iter().chain(&w.args).map(String::as_str);
        let args = (!w.command.is_empty() || !w.args.is_empty()).then(|| shell_join(words));

        Ok(CreatePodRequest {
            name: w.id.as_str().to_owned(),
            image: w.image.clone(),
            gpu,
            cpu,
            cloud,
            data_center_ids,
            env: rest::env_map(&w.env),
            args,
            ports: w.ports.iter().map(|p| format!("{p}/tcp")).collect(),
            disk,
            registry: None,
        })
    }

    /// The `gpu` block of a GPU pod.
    fn gpu_config(&self, gpu: &GpuRequest) -> Result<CreateGpu, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
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
        let id = self
            .cfg
            .gpu_ids
            .get(neutral)
            .cloned()
            .unwrap_or_else(|| neutral.clone());
        // The pod's CPU and memory requests are not sent: v2's `CreateGpuConfig` has no field
        // for them (the GPU type brings its vCPUs and RAM) and refuses unknown ones with 422.
        Ok(CreateGpu {
            id,
            count: gpu.count,
            min_cuda_version: None,
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
        error_of(resp)
    }
}

/// Maps an unsuccessful answer to a [`ProviderError`].
fn error_of(resp: &RawResponse) -> ProviderError {
    {
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

/// vCPUs of a CPU pod: the request rounded up to a power of two, at least 2
/// (`BaseCpuConfig.vcpuCount`: "must be a power of two", minimum 2).
fn cpu_pod_vcpus(cpu_millis: Option<u64>) -> u32 {
    let wanted = cpu_millis.unwrap_or(0).div_ceil(1000).clamp(2, 1 << 16) as u32;
    wanted.next_power_of_two()
}

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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn cpu_pods_get_a_power_of_two_of_at_least_two_vcpus() {
        let got: Vec<u32> = [
            None,
            Some(500),
            Some(2000),
            Some(2001),
            Some(5000),
            Some(16_000),
        ]
        .into_iter()
        .map(cpu_pod_vcpus)
        .collect();
        assert_eq!(got, [2, 2, 2, 4, 8, 16]);
    }
}
