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

mod adapter;
mod config;
mod state;
mod wire;

use std::time::Duration;

use reqwest::Method;
use tracing::warn;

use super::http::{self, Bearer, Client, InitError, RawResponse};
use super::options::{Options, shell_join};
use super::rest;
use crate::naming::Owner;
use crate::provider::{ProviderError, Workload};
pub use config::{Cloud, RunPodConfig};
use wire::{CreateGpu, CreatePodRequest, ListEntry, ListPodsResponse, Pod, Problem};

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
        let api = Client::new(&name, &cfg.base_url, auth, timeout, cfg.allow_insecure_http)?;
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
        let disk = match options.positive_at_most("disk_gb", self.cfg.max_disk_gb.map(f64::from))? {
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
}
