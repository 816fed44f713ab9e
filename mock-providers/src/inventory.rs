//! GPU inventory: GPU types split into machines of up to eight GPUs, with allocation.
//!
//! Both emulators place a workload on one machine (RunPod pods and Vast instances never span
//! hosts), so a request for more GPUs than one machine has fails like the real APIs do.

use std::collections::HashMap;

use serde::Serialize;

use crate::config::GpuStock;

#[cfg(feature = "nvml")]
pub mod nvml;

/// GPUs per emulated machine.
pub const MACHINE_GPUS: u32 = 8;

/// One emulated host.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// Stable id (Vast `machine_id`).
    pub id: u64,
    /// GPUs installed.
    pub capacity: u32,
    /// GPUs held by workloads.
    pub used: u32,
    /// Bumped whenever `used` changes; Vast offers of an older epoch are gone.
    pub epoch: u64,
}

impl Machine {
    /// GPUs not held by any workload.
    pub fn free(&self) -> u32 {
        self.capacity.saturating_sub(self.used)
    }
}

/// One GPU type and its machines.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeStock {
    /// Provider-side type id.
    pub gpu_type: String,
    /// USD per GPU-hour.
    pub price_per_hour: f64,
    /// The hosts carrying this type.
    pub machines: Vec<Machine>,
}

impl TypeStock {
    /// Total GPUs of this type.
    pub fn count(&self) -> u32 {
        self.machines.iter().map(|m| m.capacity).sum()
    }

    /// GPUs of this type not held by any workload.
    pub fn free(&self) -> u32 {
        self.machines.iter().map(Machine::free).sum()
    }
}

/// Where a workload's GPUs live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Machine id.
    pub machine_id: u64,
    /// GPUs held there.
    pub count: u32,
}

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The GPU type is not offered at all.
    #[error("unknown GPU type {0:?}")]
    UnknownType(String),
    /// Not enough free GPUs on any single machine.
    #[error("no machine has {wanted} free GPUs of type {gpu_type:?}")]
    NoCapacity {
        /// Requested type.
        gpu_type: String,
        /// Requested count.
        wanted: u32,
    },
}

/// Inventory as reported by `GET /_admin/inventory`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InventoryLine {
    /// GPU type.
    pub gpu_type: String,
    /// Total GPUs.
    pub count: u32,
    /// USD per GPU-hour.
    pub price_per_hour: f64,
    /// GPUs not held by a workload.
    pub free: u32,
}

/// All GPU types and machines.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    types: Vec<TypeStock>,
    /// Stable small number per type name, so machine ids survive an inventory replacement.
    type_numbers: HashMap<String, u64>,
}

impl Inventory {
    /// Build from stock lines.
    pub fn new(stock: &[GpuStock]) -> Self {
        let mut inv = Self::default();
        inv.replace(stock);
        inv
    }

    /// Replace the stock. Allocations are dropped; the caller re-applies live ones with
    /// [`Inventory::reserve`].
    pub fn replace(&mut self, stock: &[GpuStock]) {
        let mut types: Vec<TypeStock> = Vec::new();
        for line in stock {
            let next = self.type_numbers.len() as u64 + 1;
            let number = *self
                .type_numbers
                .entry(line.gpu_type.clone())
                .or_insert(next);
            if let Some(existing) = types.iter_mut().find(|t| t.gpu_type == line.gpu_type) {
                // Same type listed twice: add machines.
                existing.price_per_hour = line.price_per_hour;
                let start = existing.machines.len() as u64;
                existing
                    .machines
                    .extend(machines_for(number, start, line.count));
                continue;
            }
            types.push(TypeStock {
                gpu_type: line.gpu_type.clone(),
                price_per_hour: line.price_per_hour,
                machines: machines_for(number, 0, line.count),
            });
        }
        self.types = types;
    }

    /// Release everything.
    pub fn release_all(&mut self) {
        for m in self.types.iter_mut().flat_map(|t| t.machines.iter_mut()) {
            if m.used != 0 {
                m.used = 0;
                m.epoch += 1;
            }
        }
    }

    /// The types, in configuration order.
    pub fn types(&self) -> &[TypeStock] {
        &self.types
    }

    /// Look a type up.
    pub fn get(&self, gpu_type: &str) -> Option<&TypeStock> {
        self.types.iter().find(|t| t.gpu_type == gpu_type)
    }

    /// The type and machine for a machine id.
    pub fn machine(&self, machine_id: u64) -> Option<(&TypeStock, &Machine)> {
        self.types.iter().find_map(|t| {
            t.machines
                .iter()
                .find(|m| m.id == machine_id)
                .map(|m| (t, m))
        })
    }

    fn machine_mut(&mut self, machine_id: u64) -> Option<&mut Machine> {
        self.types
            .iter_mut()
            .flat_map(|t| t.machines.iter_mut())
            .find(|m| m.id == machine_id)
    }

    /// Take `count` GPUs of `gpu_type` on the first machine that has them (or on `machine_id`
    /// only, when given).
    pub fn allocate(
        &mut self,
        gpu_type: &str,
        count: u32,
        machine_id: Option<u64>,
    ) -> Result<Placement, AllocError> {
        let stock = self
            .types
            .iter_mut()
            .find(|t| t.gpu_type == gpu_type)
            .ok_or_else(|| AllocError::UnknownType(gpu_type.to_owned()))?;
        let machine = stock
            .machines
            .iter_mut()
            .filter(|m| machine_id.is_none_or(|id| m.id == id))
            .find(|m| m.free() >= count)
            .ok_or_else(|| AllocError::NoCapacity {
                gpu_type: gpu_type.to_owned(),
                wanted: count,
            })?;
        machine.used += count;
        machine.epoch += 1;
        Ok(Placement {
            machine_id: machine.id,
            count,
        })
    }

    /// Re-apply an existing placement after [`Inventory::replace`]; ignores machines that no
    /// longer exist. May over-commit a machine that shrank.
    pub fn reserve(&mut self, placement: Placement) {
        if let Some(m) = self.machine_mut(placement.machine_id) {
            m.used += placement.count;
            m.epoch += 1;
        }
    }

    /// Give GPUs back.
    pub fn release(&mut self, placement: Placement) {
        if let Some(m) = self.machine_mut(placement.machine_id) {
            m.used = m.used.saturating_sub(placement.count);
            m.epoch += 1;
        }
    }

    /// Report for the admin API.
    pub fn lines(&self) -> Vec<InventoryLine> {
        self.types
            .iter()
            .map(|t| InventoryLine {
                gpu_type: t.gpu_type.clone(),
                count: t.count(),
                price_per_hour: t.price_per_hour,
                free: t.free(),
            })
            .collect()
    }
}

fn machines_for(type_number: u64, start_index: u64, count: u32) -> Vec<Machine> {
    let mut out = Vec::new();
    let mut left = count;
    let mut index = start_index;
    while left > 0 {
        let capacity = left.min(MACHINE_GPUS);
        out.push(Machine {
            id: 10_000 * type_number + index + 1,
            capacity,
            used: 0,
            epoch: 0,
        });
        left -= capacity;
        index += 1;
    }
    out
}

/// Memory of the emulated GPUs stocked under Vast's exact names, which carry no size: the
/// emulated data-center cards are the large models (an emulated "A100 SXM4" has 80 GB).
const NAMED_MEMORY_GB: &[(&str, u64)] = &[
    ("A100 SXM4", 80),
    ("A100 PCIE", 80),
    ("A100 SXM", 80),
    ("A100X", 80),
    ("H100 SXM", 80),
    ("H100 PCIE", 80),
    ("H100 NVL", 94),
    ("H200", 141),
    ("L40S", 48),
    ("L40", 48),
    ("A40", 48),
    ("RTX A6000", 48),
    ("RTX 6000Ada", 48),
    ("RTX 5090", 32),
];

/// GPU memory in MB guessed from a type name (`A100-80GB` -> 81920, `A100 SXM4` -> 81920);
/// 24 GB otherwise.
pub fn gpu_memory_mb(gpu_type: &str) -> u64 {
    if let Some((_, gb)) = NAMED_MEMORY_GB.iter().find(|(n, _)| *n == gpu_type) {
        return gb * 1024;
    }
    let upper = gpu_type.to_ascii_uppercase();
    if let Some(pos) = upper.find("GB") {
        let digits: String = upper[..pos]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if let Ok(gb) = digits.parse::<u64>()
            && gb > 0
        {
            return gb * 1024;
        }
    }
    24 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        Inventory::new(&[
            GpuStock::new("A100-80GB", 8, 1.89),
            GpuStock::new("RTX4090", 12, 0.69),
        ])
    }

    #[test]
    fn splits_into_machines() {
        let inv = inv();
        let rtx = inv.get("RTX4090").unwrap();
        assert_eq!(
            rtx.machines.iter().map(|m| m.capacity).collect::<Vec<_>>(),
            [8, 4]
        );
        assert_eq!(rtx.count(), 12);
    }

    #[test]
    fn allocates_and_releases() {
        let mut inv = inv();
        let p = inv.allocate("A100-80GB", 6, None).unwrap();
        assert_eq!(inv.get("A100-80GB").unwrap().free(), 2);
        assert!(matches!(
            inv.allocate("A100-80GB", 3, None),
            Err(AllocError::NoCapacity { .. })
        ));
        inv.release(p);
        assert_eq!(inv.get("A100-80GB").unwrap().free(), 8);
        assert!(matches!(
            inv.allocate("H100", 1, None),
            Err(AllocError::UnknownType(_))
        ));
        // 9 GPUs never fit one machine.
        assert!(inv.allocate("RTX4090", 9, None).is_err());
    }

    #[test]
    fn replace_keeps_machine_ids() {
        let mut inv = inv();
        let p = inv.allocate("RTX4090", 2, None).unwrap();
        inv.replace(&[GpuStock::new("RTX4090", 16, 0.5)]);
        inv.reserve(p);
        assert_eq!(inv.get("RTX4090").unwrap().free(), 14);
        assert!(inv.get("A100-80GB").is_none());
        assert_eq!(inv.machine(p.machine_id).unwrap().1.used, 2);
    }

    #[test]
    fn memory_from_name() {
        assert_eq!(gpu_memory_mb("A100-80GB"), 80 * 1024);
        assert_eq!(gpu_memory_mb("RTX4090"), 24 * 1024);
        assert_eq!(gpu_memory_mb("A100 SXM4"), 80 * 1024);
    }
}
