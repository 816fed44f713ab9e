//! `/exec`, `/attach` and `/portForward`: parsed and checked like the kubelet does, then
//! answered 501 naming the provider, since no provider offers a remote command stream yet.
//!
//! Where a WebSocket implementation slots in: [`stream`] resolves the pod, container and
//! provider and negotiates the transport ([`Transport`]); once a provider reports
//! `capabilities().exec` and the contract gains an exec call, the `Transport::WebSocket` arm
//! upgrades the connection (axum's `WebSocketUpgrade`, subprotocol `v5.channel.k8s.io`: one
//! leading byte per frame naming the stream, 0 stdin, 1 stdout, 2 stderr, 3 error/status,
//! 4 resize, 255 close) and bridges it to the provider. SPDY (`SPDY/3.1` upgrades, what
//! apiservers older than the WebSocket streaming path send) will not be implemented; such
//! requests get a clear 400.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, AppState, find_container, workload};

/// The kubelet's remote command subprotocols, newest first.
pub const WEBSOCKET_PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

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

/// How the client wants to stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A WebSocket upgrade offering one of [`WEBSOCKET_PROTOCOLS`] (the first one we know).
    WebSocket(String),
    /// A SPDY upgrade.
    Spdy,
    /// No upgrade, or one we do not speak.
    None,
}

/// Reads the transport a request asks for from its headers.
pub fn negotiate(headers: &HeaderMap) -> Transport {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if upgrade.starts_with("spdy/") {
        return Transport::Spdy;
    }
    if upgrade != "websocket" {
        return Transport::None;
    }
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect();
    WEBSOCKET_PROTOCOLS
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .map(|p| Transport::WebSocket((*p).to_owned()))
        .unwrap_or(Transport::None)
}

/// The options of an exec or attach request (`remotecommand.Options` on the kubelet).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Parses `command` (repeated), `stdin`, `stdout`, `stderr`, `tty`; at least one stream must be
/// requested, and a TTY has no separate stderr, as the kubelet checks.
pub fn parse_options(kind: Kind, pairs: &[(String, String)]) -> Result<StreamOptions, ApiError> {
    let flag = |name: &str| -> Result<bool, ApiError> {
        match pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
        {
            None | Some("" | "0" | "false" | "False" | "FALSE") => Ok(false),
            Some("1" | "true" | "True" | "TRUE") => Ok(true),
            Some(v) => Err(ApiError::bad_request(format!(
                "invalid query parameter {name}={v:?}: must be true or false"
            ))),
        }
    };
    let o = StreamOptions {
        command: pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        stdin: flag("stdin")?,
        stdout: flag("stdout")?,
        stderr: flag("stderr")?,
        tty: flag("tty")?,
    };
    if kind == Kind::Exec && o.command.is_empty() {
        return Err(ApiError::bad_request(
            "exec needs at least one command parameter",
        ));
    }
    if !(o.stdin || o.stdout || o.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least one of stdin, stdout, stderr",
        ));
    }
    if o.tty && o.stderr {
        return Err(ApiError::bad_request(
            "stderr cannot be requested together with a TTY",
        ));
    }
    Ok(o)
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec3).post(exec3),
        )
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(exec4).post(exec4),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach3).post(attach3),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(attach4).post(attach4),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(port_forward2).post(port_forward2),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(port_forward3).post(port_forward3),
        )
}

type Q = Result<Query<Vec<(String, String)>>, QueryRejection>;

async fn exec3(
    State(s): State<AppState>,
    Path((ns, pod, c)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(&s, Kind::Exec, &ns, &pod, None, Some(&c), &headers, q).await
}

async fn exec4(
    State(s): State<AppState>,
    Path((ns, pod, uid, c)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(&s, Kind::Exec, &ns, &pod, Some(&uid), Some(&c), &headers, q).await
}

async fn attach3(
    State(s): State<AppState>,
    Path((ns, pod, c)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(&s, Kind::Attach, &ns, &pod, None, Some(&c), &headers, q).await
}

async fn attach4(
    State(s): State<AppState>,
    Path((ns, pod, uid, c)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(
        &s,
        Kind::Attach,
        &ns,
        &pod,
        Some(&uid),
        Some(&c),
        &headers,
        q,
    )
    .await
}

async fn port_forward2(
    State(s): State<AppState>,
    Path((ns, pod)): Path<(String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(&s, Kind::PortForward, &ns, &pod, None, None, &headers, q).await
}

async fn port_forward3(
    State(s): State<AppState>,
    Path((ns, pod, uid)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Q,
) -> Response {
    stream(
        &s,
        Kind::PortForward,
        &ns,
        &pod,
        Some(&uid),
        None,
        &headers,
        q,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn stream(
    s: &AppState,
    kind: Kind,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
    container: Option<&str>,
    headers: &HeaderMap,
    query: Q,
) -> Response {
    let result = async {
        let Query(pairs) =
            query.map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
        if kind != Kind::PortForward {
            parse_options(kind, &pairs)?;
        }
        let p = match container {
            Some(c) => find_container(s.host.as_ref(), namespace, pod, c)?,
            None => s.host.pod(namespace, pod).ok_or_else(|| {
                ApiError::not_found(format!("pod \"{namespace}/{pod}\" does not exist"))
            })?,
        };
        if let Some(uid) = uid
            && p.metadata.uid.as_deref() != Some(uid)
        {
            return Err(ApiError::not_found(format!(
                "pod \"{namespace}/{pod}\" with UID {uid} does not exist"
            )));
        }
        let (provider, _observed) = workload(s.host.as_ref(), &p, container.unwrap_or(""))?;
        let name = provider.name();
        let supported = kind == Kind::Exec && provider.capabilities().exec;
        if !supported {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("not supported by provider {name}: {}", kind.what()),
            ));
        }
        match negotiate(headers) {
            Transport::Spdy => Err(ApiError::bad_request(
                "SPDY streaming is not supported by this kubelet: use a client and API server \
                 that stream over WebSockets (v5.channel.k8s.io)",
            )),
            Transport::None => Err(ApiError::bad_request(
                "exec needs a WebSocket upgrade offering v5.channel.k8s.io",
            )),
            // The provider contract has no exec call yet: this is where the bridge goes.
            Transport::WebSocket(_) => Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("not supported by provider {name}: exec streaming is not implemented yet"),
            )),
        }
    }
    .await;
    match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn pairs(s: &[(&str, &str)]) -> Vec<(String, String)> {
        s.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn options_follow_the_kubelet_rules() {
        let o = parse_options(
            Kind::Exec,
            &pairs(&[
                ("command", "ls"),
                ("command", "-l"),
                ("stdout", "1"),
                ("stderr", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(o.command, ["ls", "-l"]);
        assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
        assert!(parse_options(Kind::Exec, &pairs(&[("stdout", "1")])).is_err());
        assert!(parse_options(Kind::Attach, &pairs(&[])).is_err());
        assert!(parse_options(Kind::Attach, &pairs(&[("tty", "1"), ("stderr", "1")])).is_err());
        assert!(parse_options(Kind::Attach, &pairs(&[("stdin", "maybe")])).is_err());
    }

    #[test]
    fn negotiates_websocket_subprotocols_and_spots_spdy() {
        let mut h = HeaderMap::new();
        assert_eq!(negotiate(&h), Transport::None);
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert_eq!(negotiate(&h), Transport::Spdy);
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("base64.channel.k8s.io, v4.channel.k8s.io, v5.channel.k8s.io"),
        );
        assert_eq!(
            negotiate(&h),
            Transport::WebSocket("v5.channel.k8s.io".into())
        );
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("bogus"),
        );
        assert_eq!(negotiate(&h), Transport::None);
    }
}
