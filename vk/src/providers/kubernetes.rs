//! Kubernetes adapter: another cluster's API server as a provider, one remote pod per
//! workload.
//!
//! Contract (the Kubernetes API, checked against a real 1.36 API server in
//! `vk/tests/kubernetes_contract.rs`):
//! - `POST /api/v1/namespaces/<ns>/pods` creates; a name that exists answers 409
//!   `AlreadyExists` (a previous generation still terminating, or our own create whose answer
//!   was lost: the next list adopts it), so it is Transient.
//! - `GET /api/v1/namespaces/<ns>/pods?labelSelector=gpu-vk.io/owner=<tag>` lists every remote
//!   pod of this VK: one call per remote namespace and poll.
//! - `DELETE` with a UID precondition (the provider id is `<ns>/<name>/<uid>`): 404 and a
//!   failed precondition (409, a newer pod under the name) both mean ours is gone.
//! - Refusals: 401 Auth; 403 `exceeded quota` (ResourceQuota admission) Capacity, any other
//!   403 (RBAC) Auth; 400/422 Invalid; 429 and 5xx Transient (with `retryAfterSeconds`); an
//!   API server that does not answer is Transient.
//! - Logs: `GET .../pods/<name>/log` (follow, tailLines, sinceTime, timestamps, limitBytes).
//!   Exec: `.../pods/<name>/exec` over WebSocket (kube's `ws`). Usage:
//!   `GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods` with the same selector, when the
//!   remote cluster serves it.
//!
//! Decisions:
//! - Remote pod name = workload id (48 characters, a DNS label); labels `gpu-vk.io/owner`
//!   (owner tag), `gpu-vk.io/pod-uid`, `app.kubernetes.io/managed-by: gpu-vk`; annotations
//!   `offload.gpu-vk.io/{cluster-id,node,source-pod}` (not `gpu-vk.io/*`, which a VK serving as
//!   the remote node refuses when it does not know them). `restartPolicy: Never` (the framework restarts),
//!   no service account token, none of the local pod's node name, tolerations or affinity:
//!   the configured `nodeSelector`, `tolerations`, `priorityClassName` and `runtimeClassName`.
//! - State mapping: [`state::observe`] and docs/providers.md. A remote pod being deleted
//!   with a `DisruptionTarget` condition is Preempted (scheduler preemption, Eviction API),
//!   Lost (taint manager, pod GC) or Evicted (the remote kubelet); being deleted without one
//!   (our delete, or someone's `kubectl delete`) it is left out of lists: gone.
//! - ConfigMaps and Secrets are not copied: env values arrive resolved in the workload, and
//!   the framework refuses the volumes that would need them.

mod adapter;
mod config;
pub mod spec;
pub mod state;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use tokio::sync::OnceCell;

use super::http::InitError;
use crate::naming::Owner;
use crate::provider::ProviderError;
pub use config::KubernetesConfig;

/// The Kubernetes adapter.
pub struct Kubernetes {
    name: String,
    cfg: KubernetesConfig,
    owner: Owner,
    kubeconfig: Kubeconfig,
    client: OnceCell<Client>,
    timeout: Duration,
    /// Cumulative CPU per remote pod, integrated from the metrics API's rate.
    cpu: std::sync::Mutex<super::cpu::CpuCounters>,
}

impl std::fmt::Debug for Kubernetes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubernetes")
            .field("name", &self.name)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl Kubernetes {
    /// Builds the adapter; the connection to the remote API server is made on first use, so an
    /// unreachable cluster is a provider error, never a start-up failure.
    pub fn new(name: String, cfg: KubernetesConfig, owner: Owner) -> Result<Self, InitError> {
        let bad = |reason: String| InitError::InvalidSetting {
            provider: name.clone(),
            reason,
        };
        for ns in cfg.remote_namespaces() {
            if !is_dns_label(&ns) {
                return Err(bad(format!("{ns:?} is not a valid namespace name")));
            }
        }
        if cfg.gpu_resource.trim().is_empty() {
            return Err(bad("gpuResource must not be empty".into()));
        }
        let kubeconfig = match &cfg.kubeconfig {
            Some(path) => read_kubeconfig(path).map_err(bad)?,
            None if !cfg.kubeconfig_text.is_blank() => {
                Kubeconfig::from_yaml(cfg.kubeconfig_text.expose()).map_err(|_| {
                    bad(format!(
                        "the kubeconfig from apiKeyEnv/apiKeyFile does not parse: {}",
                        parse_failure(cfg.kubeconfig_text.expose())
                    ))
                })?
            }
            None => {
                return Err(bad(
                    "kubeconfig is required: a file (settings.kubeconfig), or the kubeconfig \
                     itself through apiKeyEnv / apiKeyFile"
                        .into(),
                ));
            }
        };
        if let Some(ctx) = &cfg.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == ctx)
        {
            return Err(bad(format!("the kubeconfig has no context {ctx:?}")));
        }
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        Ok(Self {
            name,
            cfg,
            owner,
            kubeconfig,
            client: OnceCell::new(),
            timeout,
            cpu: std::sync::Mutex::default(),
        })
    }

    /// The client of the remote API server, built on first use.
    async fn client(&self) -> Result<Client, ProviderError> {
        self.client
            .get_or_try_init(|| async {
                let opts = KubeConfigOptions {
                    context: self.cfg.context.clone(),
                    ..KubeConfigOptions::default()
                };
                let mut config =
                    kube::Config::from_custom_kubeconfig(self.kubeconfig.clone(), &opts)
                        .await
                        .map_err(|e| ProviderError::Auth {
                            message: format!("the remote cluster's kubeconfig is not usable: {e}"),
                        })?;
                config.connect_timeout = Some(self.timeout);
                Client::try_from(config).map_err(|e| ProviderError::Auth {
                    message: format!("no client for the remote cluster: {e}"),
                })
            })
            .await
            .cloned()
    }

    fn pods(&self, client: Client, ns: &str) -> Api<Pod> {
        Api::namespaced(client, ns)
    }

    /// Runs one API call with the request timeout.
    async fn call<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ProviderError> {
        self.call_raw(what, fut)
            .await?
            .map_err(|e| api_error(what, e))
    }

    /// The same, leaving the API server's own error to the caller (outer error: no answer).
    async fn call_raw<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, ProviderError> {
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            ProviderError::transient(format!(
                "{what}: the remote API server did not answer within {}s",
                self.timeout.as_secs()
            ))
        })
    }

    /// What `vk check-config` verifies: the remote API server answers and every remote
    /// namespace exists (and its pods can be listed).
    pub async fn preflight(&self) -> Result<(), String> {
        let client = self.client().await.map_err(|e| e.to_string())?;
        for ns in self.cfg.remote_namespaces() {
            let namespaces: Api<Namespace> = Api::all(client.clone());
            match self.call("get namespace", namespaces.get_opt(&ns)).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(format!(
                        "the remote namespace {ns:?} does not exist in the remote cluster"
                    ));
                }
                // Namespaced RBAC may not allow reading the Namespace: the pod list below
                // still proves access (it cannot prove existence: a list in a missing
                // namespace is empty).
                Err(ProviderError::Auth { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
            let lp = ListParams::default()
                .labels(&spec::selector(&self.owner))
                .limit(1);
            self.call("list pods", self.pods(client.clone(), &ns).list(&lp))
                .await
                .map_err(|e| format!("namespace {ns}: {e}"))?;
        }
        Ok(())
    }
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, String> {
    Kubeconfig::read_from(path).map_err(|e| {
        let why = match e {
            kube::config::KubeconfigError::Parse(_) => {
                parse_failure(&std::fs::read_to_string(path).unwrap_or_default())
            }
            other => other.to_string(),
        };
        format!("cannot read the kubeconfig {}: {why}", path.display())
    })
}

/// Where a kubeconfig's text does not parse, by line and column, never the text itself: a
/// YAML error quotes what it stopped at, and a kubeconfig holds credentials.
fn parse_failure(text: &str) -> String {
    match serde_saphyr::from_multiple::<serde_json::Value>(text) {
        Ok(_) => "YAML, but not a kubeconfig (a field is missing or of the wrong type)".into(),
        Err(e) => match e.location() {
            Some(l) => format!("invalid YAML at line {}, column {}", l.line(), l.column()),
            None => "invalid YAML".into(),
        },
    }
}

/// The HTTP status of an error the API server answered with.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Classifies an error of the remote API server.
pub fn api_error(what: &str, e: kube::Error) -> ProviderError {
    match e {
        kube::Error::Api(s) => {
            let message = format!("{what}: {} ({} {})", s.message, s.code, s.reason);
            match s.code {
                404 => ProviderError::NotFound,
                401 => ProviderError::Auth { message },
                403 if s.message.contains("exceeded quota") => ProviderError::Capacity { message },
                403 => ProviderError::Auth { message },
                400 | 422 => ProviderError::Invalid { message },
                _ => ProviderError::Transient {
                    retry_after: s
                        .details
                        .as_ref()
                        .map(|d| d.retry_after_seconds)
                        .filter(|s| *s > 0)
                        .map(|s| Duration::from_secs(u64::from(s))),
                    message,
                },
            }
        }
        kube::Error::Auth(e) => ProviderError::Auth {
            message: format!("{what}: {e}"),
        },
        other => ProviderError::transient(format!(
            "{what}: the remote API server is not reachable: {other}"
        )),
    }
}
