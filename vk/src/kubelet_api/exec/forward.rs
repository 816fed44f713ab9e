//! `/portForward` taken over once its pod and workload are known: where the provider publishes
//! the pod's ports, by transport (the WebSocket tunnel or SPDY/3.1); and the names of workload
//! states the streaming endpoints refuse with.

use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::spdy::portforward;
use super::{ApiError, AppState, Transport, Upgrades, negotiate, spdy, tunnel};
use crate::provider::WorkloadState;

/// Takes a port-forward request over once the pod and its workload are known: 501 where the
/// provider publishes no container port of the pod; then, by transport:
/// - a WebSocket (what a 1.36 API server passes through from kubectl to a node declaring
///   `ExtendWebSocketsToKubelet`): 400 without a `SPDY/3.1+<protocol>.k8s.io` subprotocol,
///   403 when `portforward.k8s.io` is not among them, else the SPDY session runs in the
///   WebSocket's binary messages ([`tunnel`]);
/// - SPDY/3.1 (older API servers, and kubectl with `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`):
///   400/403 from the handshake, 400 without an HTTP/1.1 connection to take over;
/// - 400 for anything else.
pub(super) fn port_forward(
    s: &AppState,
    p: &k8s_openapi::api::core::v1::Pod,
    provider: &str,
    observed: &crate::provider::Observed,
    headers: &HeaderMap,
    up: Upgrades,
) -> Result<Response, ApiError> {
    let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
    let pod = p.metadata.name.as_deref().unwrap_or_default();
    if observed.ports.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "not supported by provider {provider}: port forwarding (it publishes no \
                 container port of pod \"{namespace}/{pod}\"; RunPod publishes the ports the \
                 container declares)"
            ),
        ));
    }
    let setup = portforward::Setup {
        pod: format!("{namespace}/{pod}"),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        provider: provider.to_owned(),
        ports: observed.ports.clone(),
        limits: s.exec,
        cluster_networks: s.cluster_networks.snapshot(),
    };
    let who = Who {
        namespace,
        pod,
        provider,
    };
    if let Some(offered) = tunnel::offered(headers) {
        return over_websocket(s, &offered, up.ws, who, setup);
    }
    if negotiate(headers) != Transport::Spdy {
        return Err(ApiError::bad_request(format!(
            "port forwarding needs a SPDY/3.1 upgrade offering {} or a WebSocket upgrade \
             offering {}",
            portforward::PROTOCOL,
            tunnel::PORT_FORWARD
        )));
    }
    over_spdy(headers, up.spdy, who, setup)
}

/// The pod and provider a port-forward session is for, as its "session starting" line logs them.
struct Who<'a> {
    namespace: &'a str,
    pod: &'a str,
    provider: &'a str,
}

impl Who<'_> {
    /// Logs the session's start over `transport` with `protocol`.
    fn starting(&self, protocol: &str, transport: &str) {
        debug!(
            namespace = self.namespace,
            pod = self.pod,
            provider = self.provider,
            protocol,
            transport,
            "port-forward session starting"
        );
    }
}

/// A port-forward refusal of the handshake, `(status, message)`, as the API error it answers.
fn refused((code, m): (u16, String)) -> ApiError {
    ApiError::new(
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        m,
    )
}

/// Takes a port-forward request offering WebSocket subprotocols over: 400 without a tunnelled
/// SPDY protocol or without a WebSocket upgrade, 403 without `portforward.k8s.io`, else the
/// session runs in the WebSocket's binary messages.
fn over_websocket(
    s: &AppState,
    offered: &[String],
    ws: Option<WebSocketUpgrade>,
    who: Who<'_>,
    setup: portforward::Setup,
) -> Result<Response, ApiError> {
    if offered.is_empty() {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade: no tunneling spdy protocols provided (port forwarding over \
             a WebSocket needs the subprotocol {})",
            tunnel::PORT_FORWARD
        )));
    }
    portforward::choose(offered).map_err(refused)?;
    let Some(ws) = ws else {
        return Err(ApiError::bad_request(
            "port forwarding over a WebSocket needs a GET with Connection: Upgrade, \
             Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key",
        ));
    };
    who.starting(tunnel::PORT_FORWARD, "websocket");
    let ws = ws
        .protocols([tunnel::PORT_FORWARD])
        .max_message_size(s.exec.max_message_bytes)
        .max_frame_size(s.exec.max_message_bytes);
    Ok(ws.on_upgrade(move |socket| portforward::run(tunnel::Tunnel::new(socket), setup)))
}

/// Takes a SPDY/3.1 port-forward request over: 400/403 from the handshake, 400 without an
/// HTTP/1.1 connection to take over, else 101 and the session runs on the connection.
fn over_spdy(
    headers: &HeaderMap,
    on: Option<OnUpgrade>,
    who: Who<'_>,
    setup: portforward::Setup,
) -> Result<Response, ApiError> {
    let protocol = portforward::negotiate(headers).map_err(refused)?;
    let Some(on) = on else {
        return Err(ApiError::bad_request(
            "port forwarding over SPDY needs an HTTP/1.1 connection upgrade (Connection: \
             Upgrade, Upgrade: SPDY/3.1)",
        ));
    };
    who.starting(protocol, "SPDY/3.1");
    tokio::spawn(async move {
        match on.await {
            Ok(io) => portforward::run(TokioIo::new(io), setup).await,
            Err(e) => debug!(error = %e, "port-forward SPDY upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header(spdy::PROTOCOL_HEADER, protocol)
        .body(Body::empty())
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

pub(super) fn state_name(s: &WorkloadState) -> &'static str {
    match s {
        WorkloadState::Queued { .. } => "Queued",
        WorkloadState::Starting => "Starting",
        WorkloadState::Running => "Running",
        WorkloadState::NotReady { .. } => "NotReady",
        WorkloadState::Succeeded => "Succeeded",
        WorkloadState::Failed { .. } => "Failed",
        WorkloadState::Preempted => "Preempted",
        WorkloadState::Lost => "Lost",
        WorkloadState::Unknown { .. } => "Unknown",
    }
}
