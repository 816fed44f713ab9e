//! Bridges an upgraded WebSocket to a provider's [`ExecSession`]: client stdin, close signals
//! and resizes go to the command; its stdout and stderr come back as channel messages, then the
//! exit status on the error channel, then a normal close.
//!
//! Two halves run at once, so neither direction can stall the other (a command that stops
//! reading its input until its output is drained must not deadlock):
//! - the input half reads client messages until the client closes or goes away;
//! - the output half forwards output as fast as the client takes it (each send waits for the
//!   socket: nothing is read from the provider ahead of a slow client).
//!
//! A client that goes away before the end drops the session, which stops the command. So do
//! the server's limits ([`super::SessionLimits`]): a client message over the size limit ends
//! the session with a `RequestEntityTooLarge` status and close code 1009 (message too big);
//! a session idle for the idle timeout ends with a `Timeout` status and a normal close whose
//! reason says so.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;
use tracing::debug;

use super::channel::{self, Incoming, Outcome};
use super::limits::{Activity, SessionLimits, too_big};
use crate::provider::{ExecSession, ExecStdin, LogStream, TerminalSize};

/// How long output may keep flowing after the command reported its exit (a background process
/// holding the pipes open must not keep the session open forever).
pub(super) const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// How long to wait for the client to answer our close.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What the session was opened with.
#[derive(Clone, Debug)]
pub struct Streams {
    pub stdout: bool,
    pub stderr: bool,
    /// The negotiated protocol has the v5 close signal.
    pub close_signal: bool,
    /// For log lines: `namespace/pod/container` and the provider.
    pub target: String,
    pub provider: String,
    pub limits: SessionLimits,
}

/// Why the input half stopped.
enum InputEnd {
    /// The client closed the connection or went away.
    Gone,
    /// The client sent a message of `size` bytes, over `limit`.
    TooBig {
        size: usize,
        limit: usize,
        /// Still read while the close is delivered: closing a socket with unread input resets
        /// it, and the client would lose the status and the close.
        source: SplitStream<WebSocket>,
    },
}

/// How a session ends when the server ends it.
struct Ending {
    outcome: Outcome,
    code: u16,
    reason: String,
    /// The input half has already ended, leaving the connection's reading side here (its
    /// handle must not be awaited again).
    input_done: Option<SplitStream<WebSocket>>,
}

/// Where a session's output goes, one chunk at a time (`None`: the client is gone).
pub(super) trait OutputSink: Send {
    fn send(&mut self, channel: u8, data: Bytes) -> impl Future<Output = Option<()>> + Send;
}

/// Output as WebSocket channel messages.
struct WsSink<'a>(&'a mut SplitSink<WebSocket, Message>);

impl OutputSink for WsSink<'_> {
    async fn send(&mut self, ch: u8, data: Bytes) -> Option<()> {
        self.0
            .send(Message::Binary(channel::frame(ch, &data)))
            .await
            .ok()
    }
}

/// Runs the session to its end.
pub async fn run(socket: WebSocket, mut session: ExecSession, streams: Streams) {
    let (mut sink, source) = socket.split();
    let stdin = session.stdin.take();
    let resize = session.resize.take();
    let activity = Activity::new();
    let mut input = tokio::spawn(input(
        source,
        stdin,
        resize,
        streams.close_signal,
        activity.clone(),
    ));

    let ready = channel::frame(first_channel(&streams), &[]);
    if sink.send(Message::Binary(ready)).await.is_err() {
        input.abort();
        return;
    }

    let ending = tokio::select! {
        o = async { output(&mut WsSink(&mut sink), session, &streams, &activity).await } => match o {
            Some(outcome) => Ending::finished(outcome),
            None => {
                debug!(target = %streams.target, provider = %streams.provider, "exec client stopped reading; stopping the command");
                input.abort();
                return;
            }
        },
        end = &mut input => match end {
            Ok(InputEnd::TooBig { size, limit, source }) => Ending::too_big(size, limit, source),
            Ok(InputEnd::Gone) | Err(_) => {
                debug!(target = %streams.target, provider = %streams.provider, "exec client went away; stopping the command");
                return;
            }
        },
        () = activity.idle(streams.limits.idle_timeout) => {
            Ending::idle(streams.limits.idle_timeout.unwrap_or_default())
        }
    };
    log_ending(&streams, &ending.outcome);
    deliver(&mut sink, ending, &mut input).await;
}

/// The channel whose empty message tells the client the streams are ready: as the kubelet
/// does, the lowest writable one.
fn first_channel(streams: &Streams) -> u8 {
    if streams.stdout {
        channel::STDOUT
    } else if streams.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    }
}

impl Ending {
    /// The command ended (or the provider failed): its outcome, and a normal close.
    fn finished(outcome: Outcome) -> Self {
        Self {
            outcome,
            code: close_code::NORMAL,
            reason: String::new(),
            input_done: None,
        }
    }

    /// The client sent a message of `size` bytes, over `limit`.
    fn too_big(size: usize, limit: usize, source: SplitStream<WebSocket>) -> Self {
        let message = format!(
            "exec input message of {size} bytes exceeds the limit of {limit} bytes; session closed"
        );
        Self {
            outcome: Outcome::Refused { code: 413, message },
            code: close_code::SIZE,
            reason: format!("message over {limit} bytes"),
            input_done: Some(source),
        }
    }

    /// Neither input nor output for `idle`.
    fn idle(idle: Duration) -> Self {
        Self {
            outcome: Outcome::Refused {
                code: 504,
                message: format!(
                    "exec session idle for {idle:?} (no input or output); session closed"
                ),
            },
            code: close_code::NORMAL,
            reason: "idle timeout".into(),
            input_done: None,
        }
    }
}

/// Logs how a session the server ends ended.
fn log_ending(streams: &Streams, outcome: &Outcome) {
    match outcome {
        Outcome::Exited(code) => {
            debug!(target = %streams.target, provider = %streams.provider, exit_code = code, "exec command ended")
        }
        Outcome::Error(e) | Outcome::Refused { message: e, .. } => {
            debug!(target = %streams.target, provider = %streams.provider, error = %e, "exec session ended")
        }
    }
}

/// Sends the client the ending's status and close, then gives it [`CLOSE_WAIT`] to answer the
/// close; a client that cannot take the status is gone, and the input half is stopped.
async fn deliver(
    sink: &mut SplitSink<WebSocket, Message>,
    ending: Ending,
    input: &mut JoinHandle<InputEnd>,
) {
    let status = channel::frame(channel::ERROR, &channel::status(&ending.outcome));
    if sink.send(Message::Binary(status)).await.is_ok() {
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: ending.code,
                reason: ending.reason.into(),
            })))
            .await;
        // The input half ends when the client answers the close.
        match ending.input_done {
            Some(source) => await_close(source).await,
            None => {
                if tokio::time::timeout(CLOSE_WAIT, &mut *input).await.is_err() {
                    input.abort();
                }
            }
        }
    } else {
        input.abort();
    }
}

/// Reads what is left of the client's input until it answers our close, for at most
/// [`CLOSE_WAIT`] (the input half has already ended, leaving its reading side here).
async fn await_close(mut source: SplitStream<WebSocket>) {
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        loop {
            match source.next().await {
                Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
                // The oversized message left the reader in error: hold the socket
                // (unread) until the wait is over, so the close gets through.
                Some(Err(_)) | None => tokio::time::sleep(CLOSE_WAIT).await,
            }
        }
    })
    .await;
}

/// Reports on an upgraded connection that the session could not start (so a client does not
/// fall back to SPDY and show a refusal of that instead of this one), then closes it.
pub async fn refuse(socket: WebSocket, outcome: Outcome) {
    let (mut sink, mut source) = socket.split();
    let status = channel::frame(channel::ERROR, &channel::status(&outcome));
    if sink.send(Message::Binary(status)).await.is_ok() {
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while let Some(Ok(msg)) = source.next().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}

/// Client to command. Returns when the client has closed the connection or gone away, or
/// sent a message over the limit.
async fn input(
    mut source: SplitStream<WebSocket>,
    mut stdin: Option<ExecStdin>,
    resize: Option<tokio::sync::mpsc::Sender<TerminalSize>>,
    close_signal: bool,
    activity: Activity,
) -> InputEnd {
    while let Some(msg) = source.next().await {
        let data = match msg {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Close(_)) => return InputEnd::Gone,
            // Pings are answered by the WebSocket layer; the protocol is binary only.
            Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_)) => continue,
            Err(e) => {
                return match too_big(e) {
                    Some((size, limit)) => InputEnd::TooBig {
                        size,
                        limit,
                        source,
                    },
                    None => InputEnd::Gone,
                };
            }
        };
        activity.touch();
        match channel::parse(&data, close_signal) {
            Incoming::Stdin(bytes) => {
                if let Some(w) = stdin.as_mut() {
                    let written = async {
                        w.write_all(&bytes).await?;
                        w.flush().await
                    };
                    if written.await.is_err() {
                        // The command closed its input; later input has nowhere to go.
                        stdin = None;
                    }
                }
            }
            Incoming::Close(channel::STDIN) => {
                if let Some(mut w) = stdin.take() {
                    let _ = w.shutdown().await;
                }
            }
            Incoming::Resize(sizes) => {
                if let Some(tx) = &resize {
                    for size in sizes {
                        let _ = tx.send(size).await;
                    }
                }
            }
            Incoming::Close(_) | Incoming::Ignored => {}
        }
    }
    InputEnd::Gone
}

/// Command to client: output until both streams end (or shortly after the exit), then the
/// outcome. `None` when the client can no longer be written to.
///
/// Shared by both transports: `sink` carries one chunk to the client on its channel
/// ([`channel::STDOUT`] or [`channel::STDERR`]).
pub(super) async fn output(
    sink: &mut impl OutputSink,
    session: ExecSession,
    streams: &Streams,
    activity: &Activity,
) -> Option<Outcome> {
    let ExecSession {
        stdout,
        stderr,
        mut exit,
        ..
    } = session;
    let tagged = |s: LogStream, ch: u8| s.map(move |item| (ch, item));
    let stderr: LogStream = stderr.unwrap_or_else(|| Box::pin(futures::stream::empty()));
    let mut merged = futures::stream::select(
        tagged(stdout, channel::STDOUT),
        tagged(stderr, channel::STDERR),
    );
    let mut code: Option<i32> = None;
    let drain = tokio::time::sleep(DRAIN_AFTER_EXIT);
    tokio::pin!(drain);
    loop {
        tokio::select! {
            item = merged.next() => match item {
                Some((ch, Ok(bytes))) => {
                    let wanted = match ch {
                        channel::STDOUT => streams.stdout,
                        _ => streams.stderr,
                    };
                    if wanted && !bytes.is_empty() {
                        sink.send(ch, bytes).await?;
                        activity.touch();
                    }
                }
                Some((_, Err(e))) => return Some(Outcome::Error(format!("provider {}: {e}", streams.provider))),
                None => break,
            },
            result = &mut exit, if code.is_none() => match result {
                Ok(c) => {
                    code = Some(c);
                    drain.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                }
                Err(e) => return Some(Outcome::Error(format!("provider {}: {e}", streams.provider))),
            },
            () = &mut drain, if code.is_some() => break,
        }
    }
    let code = match code {
        Some(c) => c,
        None => match exit.await {
            Ok(c) => c,
            Err(e) => {
                return Some(Outcome::Error(format!(
                    "provider {}: {e}",
                    streams.provider
                )));
            }
        },
    };
    Some(Outcome::Exited(code))
}
