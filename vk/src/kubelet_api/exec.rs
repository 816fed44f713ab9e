//! `/exec`, `/attach` and `/portForward`: parsed and checked like the kubelet does them
//! (`pkg/kubelet/server/server.go`, `pkg/kubelet/cri/streaming/remotecommand`).
//!
//! `/exec` runs the command through the pod's provider ([`crate::provider::Provider::exec`])
//! over one of two transports:
//! - a WebSocket speaking the channel protocol `v5.channel.k8s.io` (or `v4`), framed as in
//!   [`channel`] and pumped by [`bridge`]. That is what a 1.36 API server sends to a node that
//!   declares `ExtendWebSocketsToKubelet` in `status.declaredFeatures` (the VK's Node does
//!   unless `kubeletApi.declareExtendWebSocketsToKubelet` is false, see [`crate::node`]): it
//!   passes `kubectl exec`'s WebSocket through unchanged, as
//!   `GET /exec/<ns>/<pod>/<container>?command=..&input=1&output=1&error=1` with `Upgrade:
//!   websocket` and `Sec-WebSocket-Protocol: v5.channel.k8s.io`;
//! - SPDY/3.1 (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: v4.channel.k8s.io` down to
//!   `channel.k8s.io`), served by [`spdy`] over the framing of [`crate::kubelet_api::spdy`]:
//!   what older API servers, a 1.36 one towards a node without the feature, and kubectl with
//!   `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` send.
//!
//! Answers before any upgrade, in this order: 400 for malformed options, 404 for an unknown
//! pod, container or UID, 400 when the pod has no workload, 501 naming the provider when it
//! cannot exec (for `/attach`: serves no logs that follow), 400 for a SPDY upgrade without a protocol
//! header or an HTTP/1.1 connection to take over, 403 when no SPDY protocol is in common (as the kubelet's handshake), 400 without a
//! WebSocket or SPDY upgrade.
//!
//! Past that point a refusal (the container is not running, or the provider's own answer,
//! mapped like [`ApiError::from_provider`]) is sent *inside* the upgraded connection, as a
//! `Failure` status on the error channel: kubectl falls back to SPDY whenever a WebSocket
//! upgrade is refused, and would then show our SPDY refusal instead of the real reason.
//!
//! Sessions are bounded ([`SessionLimits`]): a client message (or SPDY frame) over 1 MiB ends the session
//! (never buffered), and so do 4 hours without traffic (`kubeletApi.execIdleTimeoutSeconds`,
//! the kubelet's `streamingConnectionIdleTimeout` default).
//!
//! The command line is never logged: it may carry secrets.
//!
//! What a request asks for (its transport and stream options) is read in `request`.
//!
//! `/attach` is served over the same two transports, on every provider whose logs follow: the
//! container's output from the attach on, until the container ends ([`attach`]).
//!
//! `/portForward` runs a SPDY/3.1 port-forward session (`portforward.k8s.io`,
//! [`spdy::portforward`]) to where the provider publishes the container's ports (501 where it
//! publishes none), over one of two transports:
//! - the WebSocket tunnel of the kubelet (`SPDY/3.1+portforward.k8s.io`, [`tunnel`]): a 1.36
//!   API server passes `kubectl port-forward`'s WebSocket through to a node declaring
//!   `ExtendWebSocketsToKubelet`, and the SPDY connection's bytes travel in its binary
//!   messages;
//! - SPDY/3.1 itself: older API servers, a 1.36 one towards a node without the feature, and
//!   kubectl with `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`.
//!
//! The session limits are those of exec (a WebSocket message or SPDY frame over the size limit,
//! or the idle timeout, ends it). Every refusal is a plain HTTP answer before the upgrade, in
//! the kubelet's order (404 unknown pod or UID, 501 no published port, then the transport's
//! 400/403), so kubectl retries a refused WebSocket over SPDY and shows the SPDY answer. Each
//! session logs its transport (`transport="websocket"` or `"SPDY/3.1"`) at debug.

pub mod attach;
pub mod bridge;
pub mod channel;
mod forward;
mod limits;
mod request;
pub mod spdy;
#[cfg(test)]
mod tests;
pub mod tunnel;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::debug;

pub use limits::{KUBELET_IDLE_TIMEOUT, MAX_MESSAGE_BYTES, SessionLimits};
pub use request::{StreamOptions, Transport, negotiate, parse_options};

use super::{ApiError, AppState, find_container, workload};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::provider::{
    Capabilities, DynProvider, ExecRequest, ExecSession, Observed, WorkloadState,
};

/// The WebSocket subprotocols served, preferred first (both binary; v5 adds the close
/// signal). The base64 and pre-v4 variants are not served: their status is not a
/// `metav1.Status`, and every client since 1.30 offers v5.
pub const WEBSOCKET_PROTOCOLS: &[&str] = &[channel::V5, channel::V4];

/// Which streaming endpoint was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Attach => "attach",
            Self::PortForward => "port forwarding",
        }
    }
}

pub(crate) fn routes() -> Router<AppState> {
    // One handler for the six routes: the path's segments say the rest.
    let h = |kind: Kind| {
        move |State(s): State<AppState>,
              Path(segments): Path<Vec<String>>,
              headers: HeaderMap,
              SpdyUpgrade(spdy): SpdyUpgrade,
              ws: Ws,
              q: Q| async move {
            let (uid, container) = match (kind, &segments[2..]) {
                (Kind::PortForward, []) => (None, None),
                (Kind::PortForward, [uid]) => (Some(uid.as_str()), None),
                (_, [c]) => (None, Some(c.as_str())),
                (_, [uid, c]) => (Some(uid.as_str()), Some(c.as_str())),
                _ => return StatusCode::NOT_FOUND.into_response(),
            };
            let target = Target {
                kind,
                namespace: &segments[0],
                pod: &segments[1],
                uid,
                container,
            };
            stream(&s, target, &headers, q, Upgrades { ws: ws.ok(), spdy }).await
        }
    };
    let both = |kind| get(h(kind)).post(h(kind));
    Router::new()
        .route("/exec/{namespace}/{pod}/{container}", both(Kind::Exec))
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            both(Kind::Exec),
        )
        .route("/attach/{namespace}/{pod}/{container}", both(Kind::Attach))
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            both(Kind::Attach),
        )
        .route("/portForward/{namespace}/{pod}", both(Kind::PortForward))
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            both(Kind::PortForward),
        )
}

type Q = Result<Query<Vec<(String, String)>>, QueryRejection>;
type Ws = Result<WebSocketUpgrade, WebSocketUpgradeRejection>;

/// The connection upgrade of a SPDY request (`Upgrade: SPDY/3.1`), taken before the WebSocket
/// extractor could; `None` for any other request, or without an HTTP/1.1 connection to take
/// over.
pub struct SpdyUpgrade(Option<OnUpgrade>);

impl<S: Send + Sync> FromRequestParts<S> for SpdyUpgrade {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let spdy = parts
            .headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|u| u.to_ascii_lowercase().starts_with("spdy/"));
        Ok(Self(if spdy {
            parts.extensions.remove::<OnUpgrade>()
        } else {
            None
        }))
    }
}

/// What a streaming request addresses.
#[derive(Clone, Copy, Debug)]
struct Target<'a> {
    kind: Kind,
    namespace: &'a str,
    pod: &'a str,
    uid: Option<&'a str>,
    container: Option<&'a str>,
}

/// The upgrades a request can be taken over by.
#[derive(Default)]
struct Upgrades {
    ws: Option<WebSocketUpgrade>,
    spdy: Option<OnUpgrade>,
}

/// The transport chosen for a session.
enum Upgrade {
    WebSocket(WebSocketUpgrade, String),
    Spdy(OnUpgrade, &'static str),
}

async fn stream(
    s: &AppState,
    t: Target<'_>,
    headers: &HeaderMap,
    query: Q,
    up: Upgrades,
) -> Response {
    match serve(s, t, headers, query, up).await {
        Ok(r) => r,
        Err(e) => e.status_response(),
    }
}

async fn serve(
    s: &AppState,
    t: Target<'_>,
    headers: &HeaderMap,
    query: Q,
    up: Upgrades,
) -> Result<Response, ApiError> {
    let Query(pairs) =
        query.map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    let opts = if t.kind == Kind::PortForward {
        StreamOptions::default()
    } else {
        parse_options(t.kind, &pairs)?
    };
    let p = target_pod(s, &t)?;
    let container = t.container.unwrap_or("");
    let (provider, observed) = workload(s.host.as_ref(), &p, container)?;
    let name = provider.name().to_owned();
    if t.kind == Kind::PortForward {
        return forward::port_forward(s, &p, &name, &observed, headers, up);
    }
    capable(t.kind, &provider.capabilities(), &name)?;
    let upgrade = choose_upgrade(t.kind, headers, up)?;
    let started = start(&t, &p, provider.as_ref(), &observed, &opts).await;
    let what = t.kind.what();
    let (namespace, pod) = (t.namespace, t.pod);
    let (protocol, transport) = match &upgrade {
        Upgrade::WebSocket(_, p) => (p.clone(), "WebSocket"),
        Upgrade::Spdy(_, p) => ((*p).to_owned(), "SPDY/3.1"),
    };
    let started = started.map_err(|e| {
        debug!(namespace, pod, container, provider = %name, status = e.status.as_u16(), error = %e.message, "{what} session refused");
        channel::Outcome::Refused {
            code: e.status.as_u16(),
            message: e.message,
        }
    });
    if started.is_ok() {
        debug!(
            namespace,
            pod,
            container,
            provider = %name,
            workload = %observed.id,
            protocol,
            transport,
            stdin = opts.stdin,
            tty = opts.tty,
            "{what} session starting"
        );
    }
    let streams = bridge::Streams {
        stdout: opts.stdout,
        stderr: opts.stderr,
        close_signal: protocol == channel::V5,
        target: format!("{namespace}/{pod}/{container}"),
        provider: name,
        limits: s.exec,
    };
    take_over(upgrade, started, streams, &opts)
}

/// The pod a request addresses (and its container, when named), or 404 naming what is
/// unknown: the pod, the container, or the pod with that UID.
fn target_pod(s: &AppState, t: &Target<'_>) -> Result<Arc<Pod>, ApiError> {
    let (namespace, pod) = (t.namespace, t.pod);
    let p = match t.container {
        Some(c) => find_container(s.host.as_ref(), namespace, pod, c)?,
        None => s.host.pod(namespace, pod).ok_or_else(|| {
            ApiError::not_found(format!("pod \"{namespace}/{pod}\" does not exist"))
        })?,
    };
    if let Some(uid) = t.uid
        && p.metadata.uid.as_deref() != Some(uid)
    {
        return Err(ApiError::not_found(format!(
            "pod \"{namespace}/{pod}\" with UID {uid} does not exist"
        )));
    }
    Ok(p)
}

/// 501 naming the provider when it cannot serve `kind`.
fn capable(kind: Kind, caps: &Capabilities, name: &str) -> Result<(), ApiError> {
    match kind {
        Kind::Exec if !caps.exec => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("not supported by provider {name}: exec"),
        )),
        Kind::Attach if !(caps.logs && caps.follow_logs) => {
            let why = if caps.logs {
                "its logs cannot be followed"
            } else {
                "it serves no logs"
            };
            Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!(
                    "not supported by provider {name}: attach (an attach follows the \
                     container's log, and {why})"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The transport the request negotiates, with the upgrade that takes it over, or 400/403.
fn choose_upgrade(kind: Kind, headers: &HeaderMap, up: Upgrades) -> Result<Upgrade, ApiError> {
    match negotiate(headers) {
        Transport::Spdy => {
            let protocol = spdy::negotiate(headers)?;
            let Some(on) = up.spdy else {
                return Err(ApiError::bad_request(format!(
                    "{} over SPDY needs an HTTP/1.1 connection upgrade (Connection: Upgrade, \
                     Upgrade: SPDY/3.1)",
                    kind.what()
                )));
            };
            Ok(Upgrade::Spdy(on, protocol))
        }
        Transport::None => Err(ApiError::bad_request(format!(
            "{} needs a WebSocket upgrade offering {} or a SPDY/3.1 upgrade offering {}",
            kind.what(),
            WEBSOCKET_PROTOCOLS.join(" or "),
            spdy::PROTOCOLS.join(", ")
        ))),
        Transport::WebSocket(p) => {
            let Some(ws) = up.ws else {
                return Err(ApiError::bad_request(format!(
                    "{} needs a WebSocket upgrade: a GET with Connection: Upgrade, Upgrade: websocket, \
                     Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key",
                    kind.what()
                )));
            };
            Ok(Upgrade::WebSocket(ws, p))
        }
    }
}

/// Starts the session at the provider: the command of an exec, the log follow of an attach.
/// A refusal here is sent inside the upgraded connection.
async fn start(
    t: &Target<'_>,
    p: &Pod,
    provider: &dyn DynProvider,
    observed: &Observed,
    opts: &StreamOptions,
) -> Result<ExecSession, ApiError> {
    let container = t.container.unwrap_or("");
    if !matches!(
        observed.state,
        WorkloadState::Running | WorkloadState::NotReady { .. } | WorkloadState::Unknown { .. }
    ) {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{}/{}\" is not running (provider {} reports {})",
            t.namespace,
            t.pod,
            provider.name(),
            forward::state_name(&observed.state)
        )));
    }
    if t.kind == Kind::Attach {
        return attach::start(p, provider, observed, container, opts).await;
    }
    let req = ExecRequest {
        command: opts.command.clone(),
        stdin: opts.stdin,
        tty: opts.tty,
    };
    // The provider call layer bounds starting the command by its timeout.
    provider
        .exec(&observed.provider_id, req)
        .await
        .map_err(|e| ApiError::from_provider(provider.name(), &e))
}

/// Takes the connection over with the chosen transport and runs the session in it (or sends
/// its refusal).
fn take_over(
    upgrade: Upgrade,
    started: Result<ExecSession, channel::Outcome>,
    streams: bridge::Streams,
    opts: &StreamOptions,
) -> Result<Response, ApiError> {
    let ws = match upgrade {
        Upgrade::WebSocket(ws, _) => ws,
        Upgrade::Spdy(on, protocol) => {
            let setup = spdy::Setup {
                protocol,
                stdin: opts.stdin,
                tty: opts.tty,
                streams: bridge::Streams {
                    close_signal: false,
                    ..streams
                },
            };
            tokio::spawn(async move {
                match on.await {
                    Ok(io) => spdy::run(TokioIo::new(io), setup, started).await,
                    Err(e) => debug!(error = %e, "exec SPDY upgrade failed"),
                }
            });
            return Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "Upgrade")
                .header(header::UPGRADE, "SPDY/3.1")
                .header(spdy::PROTOCOL_HEADER, protocol)
                .body(Body::empty())
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
        }
    };
    let ws = ws
        .protocols(WEBSOCKET_PROTOCOLS.iter().copied())
        .max_message_size(streams.limits.max_message_bytes)
        .max_frame_size(streams.limits.max_message_bytes);
    Ok(match started {
        Ok(session) => ws.on_upgrade(move |socket| bridge::run(socket, session, streams)),
        Err(outcome) => ws.on_upgrade(move |socket| bridge::refuse(socket, outcome)),
    })
}
