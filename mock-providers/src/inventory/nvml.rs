//! Read the GPU inventory from the host's real GPUs through NVML (cargo feature `nvml`).

use std::collections::BTreeMap;

use nvml_wrapper::Nvml;

use crate::config::GpuStock;

/// Why the host inventory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NvmlInventoryError {
    /// NVML could not be loaded or initialised (no driver, no GPU, no libnvidia-ml).
    #[error("failed to initialise NVML")]
    Init(#[source] nvml_wrapper::error::NvmlError),
    /// A device query failed.
    #[error("failed to query GPU {index}")]
    Device {
        /// Device index.
        index: u32,
        /// NVML error.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// NVML works but reports no GPU.
    #[error("NVML reports no GPU")]
    NoGpu,
}

/// One GPU seen through NVML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostGpu {
    /// Device name, e.g. `NVIDIA A100-SXM4-80GB`.
    pub name: String,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// List the host's GPUs.
pub fn host_gpus() -> Result<Vec<HostGpu>, NvmlInventoryError> {
    let nvml = Nvml::init().map_err(NvmlInventoryError::Init)?;
    let count = nvml
        .device_count()
        .map_err(|source| NvmlInventoryError::Device { index: 0, source })?;
    let mut out = Vec::new();
    for index in 0..count {
        let device = nvml
            .device_by_index(index)
            .map_err(|source| NvmlInventoryError::Device { index, source })?;
        let name = device
            .name()
            .map_err(|source| NvmlInventoryError::Device { index, source })?;
        let memory = device
            .memory_info()
            .map_err(|source| NvmlInventoryError::Device { index, source })?;
        out.push(HostGpu {
            name,
            memory_total: memory.total,
        });
    }
    if out.is_empty() {
        return Err(NvmlInventoryError::NoGpu);
    }
    Ok(out)
}

/// The host's GPUs grouped by name into stock lines, each GPU priced at `price_per_hour`.
pub fn host_inventory(price_per_hour: f64) -> Result<Vec<GpuStock>, NvmlInventoryError> {
    let mut by_name: BTreeMap<String, u32> = BTreeMap::new();
    for gpu in host_gpus()? {
        tracing::info!(gpu = %gpu.name, memory_bytes = gpu.memory_total, "found host GPU");
        *by_name.entry(gpu.name).or_default() += 1;
    }
    Ok(by_name
        .into_iter()
        .map(|(name, count)| GpuStock::new(name, count, price_per_hour))
        .collect())
}
