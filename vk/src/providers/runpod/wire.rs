//! RunPod wire types: the create request and the pod list, decoded leniently and entry by
//! entry (an odd item never fails the whole list).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Cloud;
use crate::providers::rest::lenient;

/// `CreatePodRequest` (only the fields this adapter sets).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreatePodRequest {
    pub(super) name: String,
    pub(super) image: String,
    /// Exactly one of `gpu` and `cpu` is set (a GPU or a CPU pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gpu: Option<CreateGpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cpu: Option<CreateCpu>,
    pub(super) cloud: Cloud,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) data_center_ids: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) args: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) ports: Vec<String>,
    pub(super) disk: u32,
    /// The registry credential's id, for a private image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) registry: Option<String>,
}

/// `CreateGpuConfig`: `id`, `count` and the CUDA constraints, nothing else
/// (`unevaluatedProperties: false`; runpod/docs `api-reference-v2/openapi.json`). A GPU pod's
/// vCPUs and RAM come with its GPU type: v2 has no field to ask for more.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateGpu {
    pub(super) id: String,
    pub(super) count: u32,
    /// The pod's CUDA floor (`gpu-vk.io/min-cuda`): only hosts whose driver runs at least this
    /// CUDA version (`"12.8"`, pattern `^\d+\.\d+$`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) min_cuda_version: Option<String>,
}

/// `CreateCpuConfig`: a CPU flavor (`GET /v2/catalog/cpus`) and a power-of-two vCPU count
/// of at least 2; memory follows from the flavor.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateCpu {
    pub(super) id: String,
    pub(super) vcpu_count: u32,
}

#[derive(Debug, Deserialize)]
pub(super) struct ListPodsResponse {
    pub(super) pods: Vec<ListEntry>,
}

/// One entry of the pod list. Decoded entry by entry, so a list of 10,000 pods never exists
/// as one generic JSON tree (that tree was the VK's largest allocation in `make bench`).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // nearly every entry is a pod; boxing would cost an allocation each
pub(super) enum ListEntry {
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
pub(super) struct Pod {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) name: Option<String>,
    /// Kept raw: a missing or non-string status must surface as `Unknown`.
    #[serde(default)]
    pub(super) status: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) gpu: Option<PodCompute>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) cpu: Option<PodCompute>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) runtime: Option<PodRuntime>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) created_at: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) started_at: Option<String>,
    /// "Current cost in USD per hour (0.0 when EXITED or TERMINATED)" (v2 `Pod.cost`), the
    /// rate billed for the whole pod.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) cost: Option<f64>,
    /// The registry credential the pod pulls with (`ContainerConfig.registry`).
    #[serde(default, deserialize_with = "lenient")]
    pub(super) registry: Option<String>,
}

/// The `gpu` / `cpu` block of a pod: what was allocated.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PodCompute {
    /// The GPU type's RunPod id (`GpuConfig.id`) or the CPU flavor.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) id: Option<String>,
    /// GPUs of that type (`GpuConfig.count`).
    #[serde(default, deserialize_with = "lenient")]
    pub(super) count: Option<f64>,
    /// vCPUs: given for CPU pods (`CpuConfig.vcpuCount`), not for GPU pods.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) vcpu_count: Option<f64>,
    /// System RAM, GB: given for CPU pods (`CpuConfig.memory`), not for GPU pods.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) memory: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct PodRuntime {
    /// Seconds since the container started.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) uptime: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) cpu: Option<Utilization>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) memory: Option<Utilization>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) ports: Option<Vec<RuntimePort>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Utilization {
    /// Percent, 0-100.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) util: Option<f64>,
}

/// `PodRuntimePort`, "live port mapping for a running pod": `private` (the container port),
/// `public` (where it is published, `null` until assigned), `type` (`http` through RunPod's
/// proxy, `tcp` directly at `ip`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RuntimePort {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) ip: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) private: Option<u16>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) public: Option<u16>,
    #[serde(default, rename = "type", deserialize_with = "lenient")]
    pub(super) kind: Option<String>,
}

/// RFC 9457 problem details.
#[derive(Debug, Deserialize)]
pub(super) struct Problem {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) title: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) detail: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) errors: Option<Vec<String>>,
}

/// `GET /v2/catalog/gpus` answers `ListGpuTypesResponse` = `{gpus: [GpuType]}` (runpod/docs
/// `api-reference-v2/openapi.json`).
#[derive(Debug, Deserialize)]
pub(super) struct GpuCatalog {
    pub(super) gpus: Vec<serde_json::Value>,
}

/// One `GpuType` of the catalogue, leniently decoded.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GpuType {
    /// "Individual GPU type identifier (use for pod creation)", e.g. `NVIDIA GeForce RTX 4090`.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) id: Option<String>,
    /// Offered on the secure / community cloud.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) secure: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) community: Option<bool>,
    /// "List price in USD per hour for a single GPU of this type", per cloud.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) price: Option<PerCloud<f64>>,
    /// Largest GPU count on one pod ("a ceiling, not a stock level"), per cloud.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) max_count: Option<PerCloud<u32>>,
    /// `NONE | LOW | MEDIUM | HIGH`, present with `include=AVAILABILITY`.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) availability: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct PerCloud<T> {
    #[serde(default)]
    pub(super) secure: Option<T>,
    #[serde(default)]
    pub(super) community: Option<T>,
}
