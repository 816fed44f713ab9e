//! The kubelet API on the node's kubelet port: HTTPS (axum over tokio-rustls) serving logs,
//! exec, stats, resource metrics, the pod list and health, behind the kubelet's authentication and
//! authorization (client certificates, TokenReview, SubjectAccessReview).
//!
//! Routes (as the kubelet's `pkg/kubelet/server`):
//!
//! | path | what |
//! |------|------|
//! | `/healthz` | `ok` |
//! | `/pods` | `PodList` of the pods bound to this node |
//! | `/containerLogs/{ns}/{pod}/{container}` | logs streamed from the pod's provider ([`logs`]) |
//! | `/stats/summary` | stats summary JSON from the providers' usage figures ([`stats`]) |
//! | `/metrics/resource` | the Prometheus resource metrics metrics-server parses ([`stats`]) |
//! | `/exec/{ns}/{pod}[/{uid}]/{container}` | a command run by the pod's provider, over a WebSocket (`v5.channel.k8s.io`) ([`exec`]) |
//! | `/attach`, `/portForward` | 501 naming the provider ([`exec`]) |
//!
//! Every path, `/healthz` included, is authenticated and authorized like on the kubelet
//! ([`auth`]). TLS: [`crate::tls`]; a serving certificate from the cluster: [`csr`].

pub mod auth;
pub mod csr;
pub mod exec;
pub mod logs;
pub mod spdy;
pub mod stats;
use crate::tls;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jiff::Timestamp;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use tracing::info;

use crate::config::Config;
use crate::pods::PodController;
use crate::provider::{DynProvider, Observed, ProviderError};

/// Errors while starting the kubelet API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to parse the kubelet API address {addr}")]
    ParseAddress {
        addr: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("failed to bind the kubelet API on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set up TLS")]
    SetUpTls(#[from] tls::Error),
}

/// What the API needs from the running VK; [`PodController`] is the real one, tests bring their own.
pub trait Host: Send + Sync + 'static {
    /// A pod bound to this node.
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
    /// Every pod bound to this node.
    fn pods(&self) -> Vec<Arc<Pod>>;
    /// Calls `f` with each pod of this node whose UID passes `want`, one at a time: a
    /// store that keeps pods encoded decodes only those, and never all at once.
    fn visit_pods(&self, want: &dyn Fn(&str) -> bool, f: &mut dyn FnMut(&Pod)) {
        for p in self.pods() {
            if p.metadata.uid.as_deref().is_some_and(want) {
                f(&p);
            }
        }
    }
    /// The provider and workload serving a pod, by pod UID.
    fn workload_of(&self, uid: &str) -> Option<(Arc<dyn DynProvider>, Observed)>;
}

impl Host for PodController {
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        PodController::pod(self, namespace, name)
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        PodController::pods(self)
    }
    fn visit_pods(&self, want: &dyn Fn(&str) -> bool, f: &mut dyn FnMut(&Pod)) {
        PodController::visit_pods(self, want, f)
    }
    fn workload_of(&self, uid: &str) -> Option<(Arc<dyn DynProvider>, Observed)> {
        PodController::workload_of(self, uid)
    }
}

/// Shared state of the handlers.
pub(crate) struct Shared {
    pub(crate) host: Arc<dyn Host>,
    pub(crate) node_name: String,
    pub(crate) started: Timestamp,
    pub(crate) auth: auth::Auth,
    pub(crate) ledger: Mutex<stats::CpuLedger>,
    pub(crate) exec: exec::SessionLimits,
    /// The cluster's own networks (configured and learnt): port-forward never dials them.
    pub(crate) cluster_networks: Arc<crate::pods::networks::ClusterNetworks>,
}

pub(crate) type AppState = Arc<Shared>;

/// The running server.
pub struct Server {
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Stops serving (open streams are dropped).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Binds `kubelet_bind_ip` (default `internal_ip`) on `kubelet_port`, sets up TLS and client
/// authentication, and serves the API in the background until the process ends or
/// [`Server::abort`].
pub async fn start(
    fw: Arc<PodController>,
    cfg: Arc<Config>,
    client: Client,
) -> Result<Server, Error> {
    let bind = cfg.kubelet_bind_ip.as_deref().unwrap_or(&cfg.internal_ip);
    let ip = bind
        .parse::<std::net::IpAddr>()
        .map_err(|source| Error::ParseAddress {
            addr: bind.to_owned(),
            source,
        })?;
    let addr = SocketAddr::new(ip, cfg.kubelet_port);
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let local_addr = tcp.local_addr().unwrap_or(addr);
    let serving = tls::ServingCert::load(&cfg.tls, &cfg.node_name, &cfg.internal_ip)?;
    let configs = tls::TlsConfigs::new(serving.clone(), None)?;
    let x509 = tls::install_client_ca(&cfg.tls, &client, &configs).await?;
    serving.watch();
    if cfg.tls.csr {
        csr::spawn(
            serving.clone(),
            client.clone(),
            cfg.tls.clone(),
            cfg.node_name.clone(),
            cfg.internal_ip.clone(),
        );
    }
    let limits = tls::Limits::new(cfg.kubelet_api.max_connections);
    let listener = tls::TlsListener::new(tcp, configs, limits);

    let reviewer = Arc::new(auth::KubeReviewer::new(client));
    let auth = auth::Auth::new(reviewer, cfg.anonymous_auth);
    let exec_limits = exec::SessionLimits {
        idle_timeout: cfg.kubelet_api.exec_idle_timeout(),
        ..exec::SessionLimits::default()
    };
    let networks = fw.networks().clone();
    let app = router_with(fw, cfg.node_name.clone(), auth, exec_limits, networks);
    info!(
        addr = %local_addr,
        x509_client_auth = x509,
        max_connections = limits.max_connections,
        anonymous = cfg.anonymous_auth,
        serving_cert = serving.source(),
        "kubelet API listening"
    );
    let task = tokio::spawn(async move {
        tls::serve(listener, app, tls::Deadlines::default()).await;
    });
    Ok(Server { local_addr, task })
}

/// The API's routes behind authentication and authorization, exec sessions with the default
/// limits.
pub fn router(host: Arc<dyn Host>, node_name: String, auth: auth::Auth) -> Router {
    router_with(
        host,
        node_name,
        auth,
        exec::SessionLimits::default(),
        Arc::new(crate::pods::networks::ClusterNetworks::new(Vec::new())),
    )
}

/// The API's routes behind authentication and authorization.
pub fn router_with(
    host: Arc<dyn Host>,
    node_name: String,
    auth: auth::Auth,
    exec: exec::SessionLimits,
    cluster_networks: Arc<crate::pods::networks::ClusterNetworks>,
) -> Router {
    let state: AppState = Arc::new(Shared {
        host,
        node_name,
        started: Timestamp::now(),
        auth,
        ledger: Mutex::default(),
        exec,
        cluster_networks,
    });
    Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/runningpods/", get(running_pods))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs),
        )
        .route("/stats/summary", get(stats::summary))
        .route("/metrics/resource", get(stats::resource_metrics))
        .merge(exec::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::middleware,
        ))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("{} is not served by this kubelet", uri.path()),
    )
}

/// `/pods`: the pods bound to this node, as the kubelet's `PodList`.
async fn pods(axum::extract::State(s): axum::extract::State<AppState>) -> Response {
    pod_list(s.host.pods().iter().map(|p| (**p).clone()).collect())
}

/// `items` as a `PodList`, by namespace and name.
fn pod_list(mut items: Vec<Pod>) -> Response {
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let list = List::<Pod> {
        items,
        metadata: Default::default(),
    };
    match serde_json::to_vec(&list) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to encode pods: {e}"),
        )
        .into_response(),
    }
}

/// `GET /runningpods/`: the pods whose workload runs now, as the kubelet lists what its container
/// runtime runs (`getRunningPods` in the kubelet's server.go, each pod from the runtime's
/// `ToAPIPod`): name, namespace and UID, and each container's name and image; nothing else of
/// the spec, no status.
async fn running_pods(axum::extract::State(s): axum::extract::State<AppState>) -> Response {
    use crate::provider::WorkloadState;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    let items: Vec<Pod> = s
        .host
        .pods()
        .iter()
        .filter(|p| {
            let uid = p.metadata.uid.as_deref().unwrap_or_default();
            s.host
                .workload_of(uid)
                .is_some_and(|(_, o)| o.state == WorkloadState::Running)
        })
        .map(|p| Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: p.metadata.name.clone(),
                namespace: p.metadata.namespace.clone(),
                uid: p.metadata.uid.clone(),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: p
                    .spec
                    .iter()
                    .flat_map(|s| &s.containers)
                    .map(|c| Container {
                        name: c.name.clone(),
                        image: c.image.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            status: None,
        })
        .collect();
    pod_list(items)
}

/// An error answered as plain text, as the kubelet does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// Maps a provider's answer to a status; the message always names the provider.
    pub fn from_provider(provider: &str, e: &ProviderError) -> Self {
        let status = match e {
            ProviderError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
            ProviderError::NotFound => StatusCode::NOT_FOUND,
            ProviderError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ProviderError::Transient { .. } | ProviderError::Capacity { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProviderError::Auth { .. } | ProviderError::Malformed { .. } => StatusCode::BAD_GATEWAY,
        };
        let message = match e {
            // Already "not supported by provider <name>: <what>".
            ProviderError::Unsupported { .. } => e.to_string(),
            _ => format!("provider {provider}: {e}"),
        };
        Self::new(status, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", self.message),
        )
            .into_response()
    }
}

impl ApiError {
    /// The answer of a streaming endpoint (`exec`, `attach`, `portForward`) that refuses before
    /// any upgrade: a `metav1.Status` in JSON. Clients read the body of a failed SPDY upgrade
    /// with a decoder that also takes YAML (client-go `spdy.RoundTripper.NewConnection`), and
    /// plain text such as `not supported by provider rp: exec` is a YAML mapping: it decodes
    /// into an empty Status, and an API server that translates `kubectl exec`'s WebSocket to
    /// SPDY (every one before 1.36) then tells the user "error stream protocol error: unknown
    /// error". A JSON Status reaches them with its message.
    pub fn status_response(self) -> Response {
        let reason = match self.status.as_u16() {
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            501 => "NotImplemented",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        let body = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": reason,
            "code": self.status.as_u16(),
        });
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// The pod `namespace/name` on this node and its container `container`, or 404 naming them.
pub(crate) fn find_container(
    host: &dyn Host,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<Arc<Pod>, ApiError> {
    let p = host
        .pod(namespace, pod)
        .ok_or_else(|| ApiError::not_found(format!("pod \"{namespace}/{pod}\" does not exist")))?;
    let spec = p.spec.as_ref();
    let names = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .map(|c| c.name.as_str())
                .chain(s.init_containers.iter().flatten().map(|c| c.name.as_str()))
                .chain(
                    s.ephemeral_containers
                        .iter()
                        .flatten()
                        .map(|c| c.name.as_str()),
                )
        })
        .collect::<Vec<_>>();
    if !names.contains(&container) {
        return Err(ApiError::not_found(format!(
            "container \"{container}\" not found in pod \"{namespace}/{pod}\""
        )));
    }
    // Left out everywhere; on a provider running one container, init containers run inside it.
    if crate::pods::spec::omitted(&p).contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" of pod \"{namespace}/{pod}\" is not run: it is left out \
             by gpu-vk.io/omit-containers"
        )));
    }
    if let Some(main) = crate::pods::spec::main_container(&p)
        && !runs_every_container(host, &p)
        && main.name != container
        && crate::pods::spec::run_init_containers(&p)
            .iter()
            .any(|c| c.name == container)
    {
        return Err(ApiError::bad_request(format!(
            "init container \"{container}\" of pod \"{namespace}/{pod}\" runs before the main \
             command in the workload of container \"{}\": its output is that container's",
            main.name
        )));
    }
    Ok(p)
}

/// True when the pod's workload is at a provider that runs every container
/// ([`crate::provider::Capabilities::containers`]), each with its own log.
pub(crate) fn runs_every_container(host: &dyn Host, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    host.workload_of(uid)
        .is_some_and(|(p, _)| p.capabilities().containers)
}

/// The provider workload running a pod, or 400 when it has none (not started or removed).
pub(crate) fn workload(
    host: &dyn Host,
    pod: &Pod,
    container: &str,
) -> Result<(Arc<dyn DynProvider>, Observed), ApiError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    host.workload_of(uid).ok_or_else(|| {
        ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{}/{}\" has no workload at a provider (not started yet, or already removed)",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        ))
    })
}
