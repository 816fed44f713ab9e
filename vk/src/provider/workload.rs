//! What a provider is asked to run: the neutral workload, its containers, environment, GPUs
//! and security settings.

use super::*;

/// A provider-neutral, fully resolved description of what to run for one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Deterministic id derived from the pod UID and our ownership marker.
    pub id: WorkloadId,
    pub namespace: String,
    pub pod_name: String,
    pub container_name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: Option<String>,
    /// Environment with ConfigMap/Secret/downward values already resolved. Values may be
    /// secret: never log them (the `Debug` of [`EnvVar`] redacts values).
    pub env: Vec<EnvVar>,
    pub gpu: Option<GpuRequest>,
    /// CPU in millicores, if requested or limited.
    pub cpu_millis: Option<u64>,
    /// Memory in bytes, if requested or limited.
    pub memory_bytes: Option<u64>,
    pub ports: Vec<u16>,
    /// Provider-specific options from the pod's `gpu-vk.io/*` annotations (region, bid price, ...).
    pub options: BTreeMap<String, String>,
    /// Every container of the pod that runs (those in `gpu-vk.io/omit-containers` left out),
    /// init containers first in their order, then the regular ones; each with its own
    /// environment. Read by providers with [`Capabilities::containers`]; the others run
    /// `command`/`args` (the main container, with same-image init containers folded in).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<PodContainer>,
    /// The restrictive security settings the pod asks for (a provider that runs the container
    /// in a pod of its own, the kubernetes one, keeps them).
    #[serde(skip_serializing_if = "Hardening::is_empty")]
    pub hardening: Hardening,
    /// The logins the pod's images pull with, one per registry (from its `imagePullSecrets`,
    /// where its provider may receive them: `pullSecrets` in docs/configuration.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub registry_logins: Vec<RegistryLogin>,
}

impl Workload {
    /// The login `image` pulls with, if the pod has one for its registry.
    pub fn login_for(&self, image: &str) -> Option<&RegistryLogin> {
        let registry = crate::vocab::image::reference(image).registry();
        self.registry_logins.iter().find(|l| l.registry == registry)
    }
}

/// A registry login from a pull Secret; its `Debug` and serialised form never show the
/// password.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct RegistryLogin {
    /// `host[:port]` (Docker Hub is `index.docker.io`).
    pub registry: String,
    pub username: String,
    #[serde(skip)]
    pub password: String,
}

impl fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{} (password <redacted>)",
            self.username, self.registry
        )
    }
}

/// Security settings that only ever narrow what a container may do, from the pod's and the
/// main container's `securityContext` (the container's own win, as on a kubelet). Settings
/// that widen it are not here: a privileged container is refused, added capabilities and
/// privilege escalation are never copied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Hardening {
    pub run_as_non_root: bool,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub read_only_root_filesystem: bool,
    /// `allowPrivilegeEscalation: false`.
    pub no_privilege_escalation: bool,
    /// Capabilities dropped (`ALL` included as written).
    pub drop_capabilities: Vec<String>,
    /// `seccompProfile: RuntimeDefault`.
    pub seccomp_runtime_default: bool,
}

impl Hardening {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What a container is to the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContainerRole {
    /// An init container: runs to completion before the next one starts.
    Init,
    /// A native sidecar (init container with `restartPolicy: Always`): started in its place
    /// among the init containers, kept running beside the regular containers, stopped when
    /// they have ended.
    Sidecar,
    /// A regular container: they run side by side.
    Regular,
}

/// One container of a pod, resolved like the workload itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodContainer {
    pub name: String,
    pub role: ContainerRole,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: Option<String>,
    /// This container's own environment (values may be secret, see [`EnvVar`]).
    pub env: Vec<EnvVar>,
}

/// One environment variable; its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

impl fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// True for names a shell and every provider take as a variable name (letters, digits and
/// `_`, not starting with a digit). No other name may reach a provider: Vast reads the keys of
/// its `env` as `docker run` options (`-p 8080:8080`), so `-v /:/host` would be one, and a
/// Slurm job script exports each name.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    /// Requested type, or `None` for "any".
    pub gpu_type: Option<String>,
    pub count: u32,
}
