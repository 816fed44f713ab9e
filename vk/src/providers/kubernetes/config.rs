//! The Kubernetes provider's `settings` in the VK configuration, with their defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Toleration;
use serde::Deserialize;

use crate::config::Secret;

/// The `settings` of a `kubernetes` provider: which remote cluster, which namespace, and what
/// the remote pods get besides what the local pod asks for.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesConfig {
    /// Kubeconfig file of the remote cluster. Without it, the provider's `apiKeyEnv` /
    /// `apiKeyFile` holds the kubeconfig itself (a Secret key mounted as a file).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[serde(default)]
    pub context: Option<String>,
    /// The remote namespace pods are created in (must exist: `vk check-config` says so).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Local namespace -> remote namespace; namespaces not listed go to `namespace`.
    #[serde(default)]
    pub namespace_mapping: BTreeMap<String, String>,
    /// Extended resource name of a GPU on the remote nodes.
    #[serde(default = "default_gpu_resource")]
    pub gpu_resource: String,
    /// Node label that carries the GPU type on the remote nodes (with `gpuTypes`).
    #[serde(default = "default_gpu_type_label")]
    pub gpu_type_label: String,
    /// Neutral GPU type (e.g. `A100-80GB`) -> value of `gpuTypeLabel` on the remote nodes. When
    /// empty, a pod's GPU type is not passed on (any GPU of the remote cluster); otherwise a
    /// type not listed fails the pod `InvalidSpec`.
    #[serde(default)]
    pub gpu_types: BTreeMap<String, String>,
    #[serde(default = "default_max_gpus")]
    pub max_gpus_per_workload: u32,
    /// Put on every remote pod (the remote cluster's own scheduling rules).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub runtime_class_name: Option<String>,
    /// Names of image pull Secrets that exist in the remote namespace.
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    /// Extra labels and annotations of every remote pod.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// What one GPU-hour there costs, in dollars (for `cheapest` and the spend figures).
    #[serde(default)]
    pub price_per_gpu_hour: Option<f64>,
    /// `kubectl top` of offloaded pods from the remote `metrics.k8s.io` (one list per poll).
    #[serde(default = "default_true")]
    pub metrics: bool,
    /// `kubectl exec` through the remote API server.
    #[serde(default = "default_true")]
    pub exec: bool,
    /// Timeout of each API call, seconds (log streams and exec sessions excepted).
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
    /// The kubeconfig text from `apiKeyEnv` / `apiKeyFile`, set by the caller.
    #[serde(skip)]
    pub kubeconfig_text: Secret,
}

fn default_namespace() -> String {
    "default".to_owned()
}
fn default_gpu_resource() -> String {
    "nvidia.com/gpu".to_owned()
}
fn default_gpu_type_label() -> String {
    "nvidia.com/gpu.product".to_owned()
}
fn default_max_gpus() -> u32 {
    8
}
fn default_true() -> bool {
    true
}
fn default_timeout_secs() -> u64 {
    30
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespace: default_namespace(),
            namespace_mapping: BTreeMap::new(),
            gpu_resource: default_gpu_resource(),
            gpu_type_label: default_gpu_type_label(),
            gpu_types: BTreeMap::new(),
            max_gpus_per_workload: default_max_gpus(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            priority_class_name: None,
            runtime_class_name: None,
            image_pull_secrets: Vec::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            price_per_gpu_hour: None,
            metrics: true,
            exec: true,
            request_timeout_secs: default_timeout_secs(),
            kubeconfig_text: Secret::default(),
        }
    }
}

impl KubernetesConfig {
    /// Sets the kubeconfig text resolved by the caller from `apiKeyEnv` / `apiKeyFile`.
    pub fn with_api_key(mut self, text: impl Into<String>) -> Self {
        self.kubeconfig_text = Secret::new(text);
        self
    }

    /// The remote namespace of pods from local namespace `ns`.
    pub fn remote_namespace(&self, ns: &str) -> &str {
        self.namespace_mapping
            .get(ns)
            .map(String::as_str)
            .unwrap_or(&self.namespace)
    }

    /// Every remote namespace pods may be in, each once.
    pub fn remote_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = std::iter::once(self.namespace.clone())
            .chain(self.namespace_mapping.values().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}
