//! The project's vocabulary, a leaf every layer may use: the virtual node's taint and label,
//! resource names, Kubernetes quantities, the toleration rule and shell quoting.

use k8s_openapi::api::core::v1::{Taint, Toleration};

pub mod image;
pub mod names;
pub mod quantity;
pub mod shell;

/// Taint key keeping ordinary pods off the virtual node.
pub const TAINT_KEY: &str = "virtual-kubelet.io/provider";
/// Label every virtual node carries.
pub const TYPE_LABEL: (&str, &str) = ("type", "virtual-kubelet");
/// The GPU resource pods ask for and the virtual node offers.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The node labels of the CUDA driver version that NVIDIA's GPU feature discovery puts on GPU
/// nodes (`nvidia.com/cuda.driver.major`, `.minor`); the virtual node publishes the highest its
/// providers declare (`maxCudaVersion`), and a pod's required node affinity on the major
/// version is a CUDA floor.
pub const CUDA_DRIVER_MAJOR: &str = "nvidia.com/cuda.driver.major";
pub const CUDA_DRIVER_MINOR: &str = "nvidia.com/cuda.driver.minor";

/// A CUDA version `12.8` as (major, minor).
pub fn cuda_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Whether `tol` tolerates `taint`, by the rules of "Taints and Tolerations" in the Kubernetes
/// docs: an empty key with `Exists` tolerates every taint, `Exists` any value, `Equal` (the
/// default operator) the same value, an empty effect every effect.
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    let exists = tol.operator.as_deref() == Some("Exists");
    let key = match tol.key.as_deref() {
        None | Some("") => exists,
        Some(k) => k == taint.key,
    };
    let value = exists
        || tol.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default();
    let effect = match tol.effect.as_deref() {
        None | Some("") => true,
        Some(e) => e == taint.effect,
    };
    key && value && effect
}

/// The virtual node's taint (`NoSchedule`, its value the node's name).
pub fn node_taint(node: &str) -> Taint {
    Taint {
        key: TAINT_KEY.into(),
        value: Some(node.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}
