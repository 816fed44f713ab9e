//! Exec over SPDY/3.1, as the kubelet serves it (`cri-streaming`'s
//! `pkg/streaming/remotecommand/httpstream.go` and `exec.go`, 1.36):
//!
//! - The handshake picks the first protocol of the client's `X-Stream-Protocol-Version` list
//!   that the server speaks ([`PROTOCOLS`]: `v4.channel.k8s.io`, `v3`, `v2`, `channel.k8s.io`),
//!   answers it in the 101's `X-Stream-Protocol-Version`; no header is a 400, no common
//!   protocol a 403 (`k8s.io/streaming`'s `httpstream.Handshake`).
//! - The client opens one stream per channel, each named by its `streamtype` header (`error`,
//!   `stdin`, `stdout`, `stderr`, and `resize` with a TTY on v3 and later); each gets its
//!   SYN_REPLY at once. The server waits for the expected number (1 + stdin + stdout + stderr +
//!   resize) for 30 s (`DefaultStreamCreationTimeout`); then the command runs.
//! - Output goes on the stdout and stderr streams; stdin ends with the client's FIN; resize
//!   carries JSON `{"Width":..,"Height":..}` objects one after the other.
//! - The end: on `v4.channel.k8s.io` the error stream carries the JSON `metav1.Status` (the
//!   same as the WebSocket path's, [`channel::status`]); on v1-v3 the failure message as plain
//!   text and nothing on success. Then every stream gets a FIN and the connection a GOAWAY.
//!
//! Refusals once upgraded (container not running, the provider's answer) and the server's
//! limits (a frame over 1 MiB, the idle timeout) end the session with a failure status on the
//! error stream, as on WebSocket.

mod conn;
pub mod portforward;

use std::time::Duration;

use axum::http::HeaderMap;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::debug;

use super::bridge::{self, OutputSink, Streams};
use super::channel::{self, Outcome};
use super::limits::Activity;
use crate::kubelet_api::ApiError;
use crate::kubelet_api::spdy::goaway;
use crate::provider::{ExecSession, TerminalSize};
use conn::{Event, Writer};

/// `v4.channel.k8s.io`: JSON status with the exit code.
pub const V4: &str = "v4.channel.k8s.io";
pub const V3: &str = "v3.channel.k8s.io";
pub const V2: &str = "v2.channel.k8s.io";
pub const V1: &str = "channel.k8s.io";
/// The SPDY protocols served (the kubelet's `SupportedStreamingProtocols`).
pub const PROTOCOLS: &[&str] = &[V4, V3, V2, V1];
/// How long the client has to open its streams (the kubelet's `DefaultStreamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Client data held while the session waits for the rest of its streams (stdin sent before
/// the last stream is opened); more ends the session.
pub const EARLY_BYTES: usize = 256 * 1024;

/// The header naming the protocols (request) and the chosen one (response).
pub const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// The protocols a client offers in its `X-Stream-Protocol-Version` headers (one or several,
/// each possibly a comma-separated list), in its order of preference.
pub fn offered(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Picks the protocol as the kubelet's handshake does: the client's first that is served.
pub fn negotiate(headers: &HeaderMap) -> Result<&'static str, ApiError> {
    let offered = offered(headers);
    if offered.is_empty() {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade: header X-Stream-Protocol-Version does not name a protocol (this \
             kubelet serves {})",
            PROTOCOLS.join(", ")
        )));
    }
    offered
        .iter()
        .find_map(|o| PROTOCOLS.iter().find(|p| **p == o.as_str()).copied())
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, \
                     server accepts {PROTOCOLS:?}"
                ),
            )
        })
}

/// What the session was asked for.
#[derive(Clone, Debug)]
pub struct Setup {
    pub protocol: &'static str,
    pub stdin: bool,
    pub tty: bool,
    pub streams: Streams,
}

/// The client's streams by type.
#[derive(Default, Debug)]
struct Ids {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

impl Ids {
    fn all(&self) -> impl Iterator<Item = u32> {
        [
            self.error,
            self.stdin,
            self.stdout,
            self.stderr,
            self.resize,
        ]
        .into_iter()
        .flatten()
    }
}

/// Output as data frames on the stdout and stderr streams.
struct SpdySink<'a, W> {
    writer: &'a Writer<W>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    activity: &'a Activity,
}

impl<W: AsyncWrite + Unpin + Send> OutputSink for SpdySink<'_, W> {
    async fn send(&mut self, ch: u8, data: Bytes) -> Option<()> {
        let id = if ch == channel::STDOUT {
            self.stdout
        } else {
            self.stderr
        };
        match id {
            Some(id) => {
                self.writer.data(id, data, false).await?;
                self.activity.touch();
                Some(())
            }
            None => Some(()),
        }
    }
}

/// Why the input side stopped.
enum InputEnd {
    Gone,
    TooBig { size: usize, limit: usize },
}

/// Runs a session on an upgraded connection: waits for the client's streams, then runs
/// `started` (or reports why it could not start) to its end.
pub async fn run<IO>(io: IO, setup: Setup, started: Result<ExecSession, Outcome>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let limits = setup.streams.limits;
    let Some(conn::Started {
        writer,
        activity,
        mut events,
        reader,
    }) = conn::start(io, limits.max_message_bytes, 4)
    else {
        return;
    };
    let target = setup.streams.target.clone();
    let provider = setup.streams.provider.clone();

    let Some(Opened { ids, early }) = open_streams(&mut events, expected(&setup)).await else {
        debug!(%target, %provider, "exec client did not open its SPDY streams; closing");
        let _ = writer.go_away(0, goaway::OK).await;
        writer.shutdown().await;
        reader.abort();
        return;
    };

    let ending = match started {
        Err(outcome) => outcome,
        Ok(session) => {
            match pump(
                &writer,
                &ids,
                &mut events,
                early,
                session,
                &setup,
                &activity,
            )
            .await
            {
                Some(outcome) => outcome,
                None => {
                    debug!(%target, %provider, "exec client went away; stopping the command");
                    reader.abort();
                    writer.shutdown().await;
                    return;
                }
            }
        }
    };
    match &ending {
        Outcome::Exited(code) => {
            debug!(%target, %provider, exit_code = code, "exec command ended")
        }
        Outcome::Error(e) | Outcome::Refused { message: e, .. } => {
            debug!(%target, %provider, error = %e, "exec session ended")
        }
    }
    end(&writer, &ids, &mut events, setup.protocol, &ending).await;
    reader.abort();
    writer.shutdown().await;
}

/// How many streams the kubelet waits for: error, and one per stream asked for (resize with
/// a TTY on v3 and later).
fn expected(setup: &Setup) -> usize {
    let resize = setup.tty && setup.protocol != V2 && setup.protocol != V1;
    1 + usize::from(setup.stdin)
        + usize::from(setup.streams.stdout)
        + usize::from(setup.streams.stderr)
        + usize::from(resize)
}

/// The client's streams, once all of them are open.
struct Opened {
    ids: Ids,
    /// What the client sent before its last stream came: at most [`EARLY_BYTES`] of data.
    early: Vec<Event>,
}

/// Waits up to [`STREAM_CREATION_TIMEOUT`] for the client to open `expected` streams; `None`
/// when it does not, goes away, or sends more than [`EARLY_BYTES`] before it has.
async fn open_streams(events: &mut mpsc::Receiver<Event>, expected: usize) -> Option<Opened> {
    let mut ids = Ids::default();
    let mut early = Vec::new();
    let mut early_bytes = 0usize;
    let mut seen = 0usize;
    let waited = tokio::time::timeout(STREAM_CREATION_TIMEOUT, async {
        while seen < expected {
            match events.recv().await {
                Some(Event::Stream { id, kind, .. }) => {
                    let slot = match kind.as_str() {
                        "error" => &mut ids.error,
                        "stdin" => &mut ids.stdin,
                        "stdout" => &mut ids.stdout,
                        "stderr" => &mut ids.stderr,
                        "resize" => &mut ids.resize,
                        // Replied to but unused, as the kubelet does.
                        _ => continue,
                    };
                    *slot = Some(id);
                    seen += 1;
                }
                Some(Event::Gone) | None => return false,
                Some(e) => {
                    if let Event::Data { data, .. } = &e {
                        early_bytes += data.len();
                        if early_bytes > EARLY_BYTES {
                            return false;
                        }
                    }
                    early.push(e);
                }
            }
        }
        true
    })
    .await;
    matches!(waited, Ok(true)).then_some(Opened { ids, early })
}

/// Ends a session the command's end or a refusal ended: the status on the error stream (JSON
/// on v4, the failure as text before), FIN on every stream, GOAWAY, then up to
/// [`bridge::CLOSE_WAIT`] for the client to close.
async fn end<W: AsyncWrite + Unpin + Send>(
    writer: &Writer<W>,
    ids: &Ids,
    events: &mut mpsc::Receiver<Event>,
    protocol: &str,
    ending: &Outcome,
) {
    if let Some(id) = ids.error {
        let status = if protocol == V4 {
            Some(channel::status(ending))
        } else {
            channel::status_text(ending).map(Bytes::from)
        };
        if let Some(s) = status {
            let _ = writer.data(id, s, false).await;
        }
    }
    for id in ids.all() {
        let _ = writer.data(id, Bytes::new(), true).await;
    }
    let last = ids.all().max().unwrap_or(0);
    let _ = writer.go_away(last, goaway::OK).await;
    // The client closes once it has read everything.
    let _ = tokio::time::timeout(bridge::CLOSE_WAIT, async {
        while let Some(e) = events.recv().await {
            if matches!(e, Event::Gone) {
                break;
            }
        }
    })
    .await;
}

/// Pumps a started command until it ends (`Some(outcome)`) or the client goes away (`None`).
async fn pump<W: AsyncWrite + Unpin + Send>(
    writer: &Writer<W>,
    ids: &Ids,
    events: &mut mpsc::Receiver<Event>,
    early: Vec<Event>,
    mut session: ExecSession,
    setup: &Setup,
    activity: &Activity,
) -> Option<Outcome> {
    let limits = setup.streams.limits;
    let mut stdin = session.stdin.take();
    let resize = session.resize.take();
    let mut resize_buf: Vec<u8> = Vec::new();
    let mut sink = SpdySink {
        writer,
        stdout: ids.stdout,
        stderr: ids.stderr,
        activity,
    };
    let input = async {
        let mut early = early.into_iter();
        loop {
            let e = match early.next() {
                Some(e) => e,
                None => match events.recv().await {
                    Some(e) => e,
                    None => return InputEnd::Gone,
                },
            };
            match e {
                Event::Data { id, data, fin } if Some(id) == ids.stdin => {
                    if let Some(w) = stdin.as_mut()
                        && !data.is_empty()
                    {
                        let written = async {
                            w.write_all(&data).await?;
                            w.flush().await
                        };
                        if written.await.is_err() {
                            stdin = None;
                        }
                    }
                    if fin && let Some(mut w) = stdin.take() {
                        let _ = w.shutdown().await;
                    }
                }
                Event::Reset { id } if Some(id) == ids.stdin => {
                    if let Some(mut w) = stdin.take() {
                        let _ = w.shutdown().await;
                    }
                }
                Event::Data { id, data, .. } if Some(id) == ids.resize => {
                    resize_buf.extend_from_slice(&data);
                    let sizes = take_sizes(&mut resize_buf, limits.max_message_bytes);
                    if let Some(tx) = &resize {
                        for s in sizes {
                            let _ = tx.send(s).await;
                        }
                    }
                }
                Event::TooBig { size, limit } => return InputEnd::TooBig { size, limit },
                Event::Gone => return InputEnd::Gone,
                _ => {}
            }
        }
    };
    tokio::select! {
        o = bridge::output(&mut sink, session, &setup.streams, activity) => o,
        end = input => match end {
            InputEnd::TooBig { size, limit } => Some(Outcome::Refused {
                code: 413,
                message: format!("exec input frame of {size} bytes exceeds the limit of {limit} bytes; session closed"),
            }),
            InputEnd::Gone => None,
        },
        () = activity.idle(limits.idle_timeout) => {
            let idle = limits.idle_timeout.unwrap_or_default();
            Some(Outcome::Refused {
                code: 504,
                message: format!("exec session idle for {idle:?} (no input or output); session closed"),
            })
        }
    }
}

/// The whole JSON terminal sizes at the front of `buf` (removed); a partial object stays for
/// the next frame. Garbage, or more than `max` bytes without a whole object, is dropped.
fn take_sizes(buf: &mut Vec<u8>, max: usize) -> Vec<TerminalSize> {
    let mut sizes = Vec::new();
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<TerminalSize>();
    let mut used = 0;
    loop {
        match it.next() {
            Some(Ok(s)) => {
                sizes.push(s);
                used = it.byte_offset();
            }
            Some(Err(e)) if e.is_eof() => break,
            Some(Err(_)) => {
                used = buf.len();
                break;
            }
            None => {
                used = buf.len();
                break;
            }
        }
    }
    buf.drain(..used.min(buf.len()));
    if buf.len() > max {
        buf.clear();
    }
    sizes
}

#[cfg(test)]
mod attack_tests;
#[cfg(test)]
mod tests;
