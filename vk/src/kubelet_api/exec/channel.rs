//! The remote command channel protocol over WebSockets (`v5.channel.k8s.io`, and
//! `v4.channel.k8s.io` without the close signal): framing of messages and the status written
//! on the error channel.
//!
//! Checked against Kubernetes' own sources:
//! - `staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go`: stream ids 0 stdin,
//!   1 stdout, 2 stderr, 3 error, 4 resize, 255 close; `NonZeroExitCode` / `ExitCode`.
//! - `staging/src/k8s.io/apimachinery/pkg/util/httpstream/wsstream/conn.go`: every binary
//!   message starts with one byte naming the channel, the rest is the payload; empty
//!   messages are ignored.
//! - `staging/src/k8s.io/client-go/tools/remotecommand/websocket.go`: v5 closes a stream by
//!   sending the two bytes `[255, <channel>]` (how `kubectl exec -i` signals end of input);
//!   the client reads each stream until the connection ends (a normal close is end of
//!   stream).
//! - `pkg/kubelet/cri/streaming/remotecommand/websocket.go` and `exec.go`: after the upgrade
//!   the kubelet sends an empty message on the lowest writable channel; when the command ends
//!   it writes a JSON `metav1.Status` on the error channel (v4 and later) and closes the
//!   connection. The client (`client-go/tools/remotecommand/v4.go`) turns `Success` into
//!   success and `Failure`/`NonZeroExitCode` with an `ExitCode` cause into the exit code
//!   (parsed as an 8-bit unsigned number); any other failure is shown as its message.
//! - Resize messages carry JSON `TerminalSize` objects (`{"Width":..,"Height":..}`), possibly
//!   several in one message (the client uses a JSON encoder on the stream).

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::provider::TerminalSize;

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: `[CLOSE, channel]` half-closes `channel`.
pub const CLOSE: u8 = 255;

/// The WebSocket subprotocol with the close signal.
pub const V5: &str = "v5.channel.k8s.io";
/// The previous one: same framing and status, no close signal.
pub const V4: &str = "v4.channel.k8s.io";

/// One message for `channel`.
pub fn frame(channel: u8, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + 1);
    b.put_u8(channel);
    b.put_slice(data);
    b.freeze()
}

/// What a client message means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Bytes for the command's standard input.
    Stdin(Bytes),
    /// Terminal sizes (each JSON object in the message that parsed).
    Resize(Vec<TerminalSize>),
    /// v5 close signal for a channel (stdin: end of input).
    Close(u8),
    /// Nothing to act on: an empty message, a channel clients do not write, or a malformed
    /// close signal (ignored, as the kubelet ignores frames for channels it does not read).
    Ignored,
}

/// Decodes one binary client message; `close_signal` is true for v5.
pub fn parse(msg: &Bytes, close_signal: bool) -> Incoming {
    let Some((&channel, _)) = msg.split_first() else {
        return Incoming::Ignored;
    };
    let payload = msg.slice(1..);
    match channel {
        CLOSE if close_signal => match payload.as_ref() {
            [c] => Incoming::Close(*c),
            _ => Incoming::Ignored,
        },
        STDIN if !payload.is_empty() => Incoming::Stdin(payload),
        RESIZE => Incoming::Resize(
            serde_json::Deserializer::from_slice(&payload)
                .into_iter::<TerminalSize>()
                .map_while(Result::ok)
                .collect(),
        ),
        _ => Incoming::Ignored,
    }
}

/// How an exec session ended, as written on the error channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    /// The provider failed while running the command (not the command's own failure).
    Error(String),
    /// The session could not start, or was ended by the server (a limit); `code` is the HTTP
    /// status the refusal would have had.
    Refused {
        code: u16,
        message: String,
    },
}

#[derive(Serialize)]
struct Status<'a> {
    /// `metav1.ListMeta`, always present (empty) in the kubelet's JSON.
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

/// The `metav1.Status` JSON for the error channel, as the kubelet marshals it.
///
/// Exit codes outside 1-255 (which the client could not parse) are reported as 255.
pub fn status(outcome: &Outcome) -> Bytes {
    // Serializing these plain structs cannot fail; an empty status would read as an error.
    Bytes::from(serde_json::to_vec(&status_of(outcome)).unwrap_or_default())
}

/// What the kubelet writes on the error stream of the pre-v4 protocols (`v3.channel.k8s.io`
/// and older, SPDY only): the status message as plain text on failure, nothing on success
/// (`v1WriteStatusFunc` in the kubelet's `remotecommand/httpstream.go`).
pub fn status_text(outcome: &Outcome) -> Option<String> {
    let s = status_of(outcome);
    (s.status != "Success").then(|| s.message.unwrap_or_default())
}

fn status_of(outcome: &Outcome) -> Status<'static> {
    match outcome {
        Outcome::Exited(0) => Status {
            metadata: Empty {},
            status: "Success",
            message: None,
            reason: None,
            details: None,
            code: None,
        },
        Outcome::Exited(code) => {
            let code = u8::try_from(*code).unwrap_or(u8::MAX);
            Status {
                metadata: Empty {},
                status: "Failure",
                message: Some(format!(
                    "command terminated with non-zero exit code: exit status {code}"
                )),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            }
        }
        Outcome::Error(e) => {
            let message = format!("error executing command in container: {e}");
            Status {
                metadata: Empty {},
                status: "Failure",
                message: Some(format!("Internal error occurred: {message}")),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message,
                    }],
                }),
                code: Some(500),
            }
        }
        Outcome::Refused { code, message } => Status {
            metadata: Empty {},
            status: "Failure",
            message: Some(message.clone()),
            reason: match code {
                400 => Some("BadRequest"),
                404 => Some("NotFound"),
                413 => Some("RequestEntityTooLarge"),
                503 => Some("ServiceUnavailable"),
                504 => Some("Timeout"),
                500 | 502 => Some("InternalError"),
                _ => None,
            },
            details: None,
            code: Some(*code),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lead_with_the_channel_byte() {
        assert_eq!(&frame(STDOUT, b"hi\n")[..], b"\x01hi\n");
        assert_eq!(&frame(STDERR, b"")[..], b"\x02");
        assert_eq!(&frame(ERROR, b"{}")[..], b"\x03{}");
    }

    #[test]
    fn client_messages() {
        let m = |b: &'static [u8]| Bytes::from_static(b);
        assert_eq!(
            parse(&m(b"\x00echo\n"), true),
            Incoming::Stdin(m(b"echo\n"))
        );
        assert_eq!(parse(&m(b"\x00"), true), Incoming::Ignored);
        assert_eq!(parse(&m(b""), true), Incoming::Ignored);
        assert_eq!(parse(&m(&[255, 0]), true), Incoming::Close(STDIN));
        // v4 has no close signal: 255 is just an unknown channel.
        assert_eq!(parse(&m(&[255, 0]), false), Incoming::Ignored);
        assert_eq!(parse(&m(&[255]), true), Incoming::Ignored);
        assert_eq!(parse(&m(&[255, 0, 1]), true), Incoming::Ignored);
        assert_eq!(
            parse(
                &m(b"\x04{\"Width\":120,\"Height\":40}\n{\"Width\":80,\"Height\":24}\n"),
                true
            ),
            Incoming::Resize(vec![
                TerminalSize {
                    width: 120,
                    height: 40
                },
                TerminalSize {
                    width: 80,
                    height: 24
                }
            ])
        );
        assert_eq!(parse(&m(b"\x04nope"), true), Incoming::Resize(vec![]));
        // Clients do not write stdout, stderr or the error channel.
        assert_eq!(parse(&m(b"\x01x"), true), Incoming::Ignored);
        assert_eq!(parse(&m(b"\x03x"), true), Incoming::Ignored);
    }

    fn json(b: Bytes) -> serde_json::Value {
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn success_status_is_the_kubelets_exact_json() {
        assert_eq!(
            &status(&Outcome::Exited(0))[..],
            br#"{"metadata":{},"status":"Success"}"#
        );
    }

    #[test]
    fn non_zero_exit_carries_the_code_as_an_exit_code_cause() {
        let v = json(status(&Outcome::Exited(7)));
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(
            v["details"]["causes"],
            serde_json::json!([{"reason": "ExitCode", "message": "7"}])
        );
        assert_eq!(v["metadata"], serde_json::json!({}));
        assert!(v.get("code").is_none());
        // Codes the client cannot parse as 8 bits become 255, never a success.
        for code in [-1, 256, 1000] {
            let v = json(status(&Outcome::Exited(code)));
            assert_eq!(v["details"]["causes"][0]["message"], "255", "{code}");
        }
    }

    #[test]
    fn refusals_carry_the_message_and_code() {
        let v = json(status(&Outcome::Refused {
            code: 501,
            message: "not supported by provider hpc: exec with a TTY".into(),
        }));
        assert_eq!(
            v,
            serde_json::json!({
                "metadata": {},
                "status": "Failure",
                "message": "not supported by provider hpc: exec with a TTY",
                "code": 501,
            })
        );
        let v = json(status(&Outcome::Refused {
            code: 400,
            message: "not running".into(),
        }));
        assert_eq!(v["reason"], "BadRequest");
    }

    #[test]
    fn provider_failures_are_internal_errors_with_a_message() {
        let v = json(status(&Outcome::Error("provider hpc: srun died".into())));
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(v["code"], 500);
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("provider hpc: srun died")
        );
    }
}
