//! What a pod asks of its provider's hosts: container disk and a CUDA floor (the annotation,
//! or required node affinity on GPU feature discovery's driver label).

use super::*;

impl Request {
    /// The container disk the pod asks for, GB, and from where: the option `disk_gb` (the
    /// annotation `gpu-vk.io/disk-gb`), else its `ephemeral-storage` ([`EPHEMERAL_OPTION`]).
    pub fn disk_asked(&self) -> Option<(&'static str, f64)> {
        ["disk_gb", EPHEMERAL_OPTION]
            .into_iter()
            .find_map(|k| Some((k, self.options.get(k)?.parse::<f64>().ok()?)))
    }

    /// The lowest CUDA version the pod's image needs (`gpu-vk.io/min-cuda`), as (major, minor).
    pub fn min_cuda(&self) -> Option<(u32, u32)> {
        cuda_version(self.options.get("min_cuda")?)
    }
}

/// The CUDA floor a pod's required node affinity sets on the driver's major version
/// ([`crate::vocab::CUDA_DRIVER_MAJOR`]): `Gt N` is N+1, `In [..]` the lowest; terms are
/// alternatives, so the floor is the lowest of theirs, and none when a term sets none.
pub(super) fn affinity_cuda_floor(
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> Option<(u32, u32)> {
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let mut lowest: Option<u32> = None;
    for t in terms {
        let floor = t
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| e.key == crate::vocab::CUDA_DRIVER_MAJOR)
            .filter_map(|e| {
                let values = e
                    .values
                    .iter()
                    .flatten()
                    .filter_map(|v| v.parse::<u32>().ok());
                match e.operator.as_str() {
                    "Gt" => values.min().map(|n| n.saturating_add(1)),
                    "In" => values.min(),
                    _ => None,
                }
            })
            .max()?;
        lowest = Some(lowest.map_or(floor, |l| l.min(floor)));
    }
    lowest.map(|m| (m, 0))
}
