//! One configured provider (`providers[]`): kind, credentials, settings, Secret policy and
//! start deadline.

use super::*;

/// One configured provider instance.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderConfig {
    /// Name used in annotations, labels and metrics (`gpu-vk.io/provider: <name>`).
    pub name: String,
    /// Which adapter: `runpod`, `vast`, `slurm` or `kubernetes`.
    pub kind: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// File holding the API key (trailing whitespace trimmed).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Adapter-specific settings (base URL, defaults), passed to the adapter as is.
    #[serde(default)]
    pub settings: serde_json::Value,
    /// Extra node labels contributed by this provider.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Whether pods whose environment comes from a Secret may run here (their values are sent
    /// to the provider). Unset: [`SecretEnv::default_for`] the kind.
    #[serde(default)]
    pub secret_env: Option<SecretEnv>,
    /// Whether pods naming `imagePullSecrets` may run here (their registry logins are sent to
    /// the provider). Unset: this provider's `secretEnv`, since a registry password is a
    /// Secret value like any other.
    #[serde(default)]
    pub pull_secrets: Option<SecretEnv>,
    /// Guardrails of this provider alone.
    #[serde(default)]
    pub limits: Limits,
    /// A workload still queued or starting (image pulling, container being created) this long
    /// after the provider created it fails the pod (`StartDeadlineExceeded`) and is deleted:
    /// an image that never pulls leaves a RunPod pod STARTING and a Vast instance `loading`
    /// forever, billing. Default 1800 for `runpod`, `vast` and `kubernetes`; none for `slurm`, where a queue
    /// wait is normal. 0: no deadline.
    #[serde(default)]
    pub start_deadline_seconds: Option<u64>,
    /// The most a pod may ask for with `gpu-vk.io/start-deadline-seconds` (default: the
    /// provider's deadline; a pod may always ask for less).
    #[serde(default)]
    pub max_start_deadline_seconds: Option<u64>,
    /// How many workloads a pod gets whose start never completes: past the start deadline the
    /// stuck one is deleted and the pod's workload created again (Event `StartRetried`), until
    /// this many were tried; then the pod fails `StartDeadlineExceeded`. A start that never
    /// completes is most often the host's (Vast: an `offline` or `loading` instance "will
    /// never reach running: destroy the instance and retry"), and the pod never ran. Default 2;
    /// 1: no retry.
    #[serde(default)]
    pub start_attempts: Option<u32>,
    /// The pod IP of a workload this provider lists no usable address for (see
    /// `pods::address`); the pod's `gpu-vk.io/PodIPRoutable` condition is then False. Unset:
    /// such a pod has no IP.
    #[serde(default)]
    pub pod_ip_fallback: Option<std::net::IpAddr>,
    /// Addresses this provider lists may lie inside the cluster's own networks (its pod and
    /// Service ranges, node addresses): a remote cluster whose pods are routed into ours, a
    /// provider on the cluster's own network. Off: such an address is refused as a pod IP,
    /// a published port, a probe's or a port-forward's target (`pods::networks`).
    #[serde(default)]
    pub trust_cluster_addresses: bool,
    /// Slurm: let pods of more than one namespace run as the one Slurm user this provider
    /// submits as. Every job of that user can be reached from any other (`srun --jobid=<job>
    /// --overlap` reads its environment and output, `scancel` ends it), so without this a Slurm
    /// provider serves exactly one namespace (`allowedNamespaces`). Set it only where the
    /// namespaces trust each other.
    #[serde(default)]
    pub shared_slurm_user: bool,
}

/// A provider's start deadline and the ceiling of a pod's own (see
/// [`ProviderConfig::start_deadline`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartDeadline {
    pub default: Option<Duration>,
    pub max: Option<Duration>,
    /// Workloads a pod gets whose start never completes (0 and 1: one, no retry).
    pub attempts: u32,
}

/// May a provider receive Secret-sourced environment values?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretEnv {
    Allow,
    Deny,
}

impl SecretEnv {
    /// The default of a provider kind on a VK serving `allowed_namespaces` (empty: all):
    /// `deny` for the GPU clouds (`runpod`, `vast`, `kubernetes`), whose machines are run by
    /// third parties (Vast's hosts are individuals with root on the machine), so a Secret
    /// reaches them only once the operator says so. For `slurm`, `allow` only when the VK
    /// serves one namespace: every pod's job runs as the VK's one Slurm user, so a pod of one
    /// namespace can read the environment (the Secret values) of another's job with `srun
    /// --jobid=<job> --overlap`, read its output or cancel it; with one tenant there is no
    /// other namespace to read from (docs/slurm.md, "Who can read what").
    pub fn default_for(kind: &str, allowed_namespaces: &[String]) -> Self {
        if kind == "slurm" && allowed_namespaces.len() == 1 {
            Self::Allow
        } else {
            Self::Deny
        }
    }
}

/// A credential (an API key, a token, a kubeconfig) resolved from the environment or a file:
/// the one type every credential of the VK is held in. Kept as `secrecy`'s `SecretString`
/// (zeroed when dropped), never shown by `Debug`, exposed only for a header or a claim check,
/// and removed from messages by [`Secret::redact`].
#[derive(Clone, Default)]
pub struct Secret(secrecy::SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(secrecy::SecretString::from(value.into()))
    }

    /// The secret itself, for a header, a claim check or a client's configuration; never for a
    /// message.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }

    pub fn is_blank(&self) -> bool {
        self.expose().trim().is_empty()
    }

    /// Removes the secret from a message, should a provider ever echo it. Secrets shorter than
    /// four characters are left alone: replacing them would mangle ordinary words.
    pub fn redact(&self, message: &str) -> String {
        let secret = self.expose().trim();
        if secret.len() >= 4 {
            message.replace(secret, "<redacted>")
        } else {
            message.to_owned()
        }
    }

    /// A sensitive header value carrying `prefix` and the secret.
    pub fn header(&self, prefix: &str) -> Option<reqwest::header::HeaderValue> {
        let mut value =
            reqwest::header::HeaderValue::from_str(&format!("{prefix}{}", self.expose())).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl ProviderConfig {
    /// This provider's start deadline (its kind's default unless set) and the pod ceiling.
    pub fn start_deadline(&self) -> StartDeadline {
        let kind_default = match self.kind.as_str() {
            // A remote Kubernetes pod whose image never pulls holds its GPU node forever.
            "runpod" | "vast" | "kubernetes" => Some(1800),
            _ => None,
        };
        let secs = self
            .start_deadline_seconds
            .or(kind_default)
            .filter(|s| *s > 0);
        let max = self.max_start_deadline_seconds.or(secs).filter(|s| *s > 0);
        StartDeadline {
            default: secs.map(Duration::from_secs),
            max: max.map(Duration::from_secs),
            attempts: self.start_attempts.unwrap_or(2),
        }
    }

    /// This provider's `secretEnv`, or its kind's default on a VK serving
    /// `allowed_namespaces`.
    pub fn secret_env(&self, allowed_namespaces: &[String]) -> SecretEnv {
        self.secret_env
            .unwrap_or_else(|| SecretEnv::default_for(&self.kind, allowed_namespaces))
    }

    /// This provider's `pullSecrets`, or its `secretEnv` (as [`Self::secret_env`] decides it).
    pub fn pull_secrets(&self, allowed_namespaces: &[String]) -> SecretEnv {
        self.pull_secrets
            .unwrap_or_else(|| self.secret_env(allowed_namespaces))
    }

    /// Reads the provider's API key from its environment variable or file (empty if neither).
    pub fn api_key(&self) -> Result<Secret, Error> {
        if let Some(var) = &self.api_key_env {
            return std::env::var(var)
                .map(Secret::new)
                .map_err(|_| Error::MissingEnv {
                    provider: self.name.clone(),
                    var: var.clone(),
                });
        }
        if let Some(path) = &self.api_key_file {
            return std::fs::read_to_string(path)
                .map(|s| Secret::new(s.trim_end()))
                .map_err(|source| Error::ReadCredentialFile {
                    provider: self.name.clone(),
                    path: path.clone(),
                    source,
                });
        }
        Ok(Secret::default())
    }
}
