//! What an exec or attach request asks for: the transport its upgrade headers offer and the
//! stream options of its query.

use axum::http::{HeaderMap, header};

use super::{Kind, WEBSOCKET_PROTOCOLS};
use crate::kubelet_api::ApiError;

/// How the client wants to stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A WebSocket upgrade offering one of [`WEBSOCKET_PROTOCOLS`] (our preferred one).
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

/// Parses `command` (repeated) and the stream flags. The API server sends the kubelet's names
/// (`input`, `output`, `error`, `tty`, value `1`); `stdin`, `stdout` and `stderr` (the names
/// of the pod `exec` subresource) are accepted too, as are `true`/`false`. At least one stream
/// must be requested; with a TTY stderr is dropped (it is part of the terminal), as the kubelet
/// does.
pub fn parse_options(kind: Kind, pairs: &[(String, String)]) -> Result<StreamOptions, ApiError> {
    let flag = |names: &[&str]| -> Result<bool, ApiError> {
        let mut set = false;
        for (k, v) in pairs.iter().filter(|(k, _)| names.contains(&k.as_str())) {
            match v.as_str() {
                "" | "0" | "false" | "False" | "FALSE" => {}
                "1" | "true" | "True" | "TRUE" => set = true,
                _ => {
                    let mut shown = v.clone();
                    shown.truncate(32);
                    return Err(ApiError::bad_request(format!(
                        "invalid query parameter {k}={shown:?}: must be 1 or 0"
                    )));
                }
            }
        }
        Ok(set)
    };
    let mut o = StreamOptions {
        command: pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        stdin: flag(&["input", "stdin"])?,
        stdout: flag(&["output", "stdout"])?,
        stderr: flag(&["error", "stderr"])?,
        tty: flag(&["tty"])?,
    };
    if o.tty {
        o.stderr = false;
    }
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
    Ok(o)
}
