//! Logs and exec sessions: what a provider streams to and from a workload.

use super::*;

/// Options for a log request, as the kubelet's `/containerLogs` takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub tail_lines: Option<u64>,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<u64>,
    pub timestamps: bool,
    pub follow: bool,
    pub previous: bool,
    /// The container asked for, set only for pods the provider runs container by container
    /// ([`Capabilities::containers`], [`Workload::containers`] of more than one): `None` is
    /// the workload's one log.
    pub container: Option<String>,
}

/// A stream of log bytes.
pub type LogStream =
    Pin<Box<dyn futures::Stream<Item = Result<bytes::Bytes, ProviderError>> + Send>>;

/// A command to run inside a running workload (`kubectl exec`).
///
/// The command is passed as an argument vector, never through a shell. Its arguments may hold
/// secrets: the `Debug` of this type shows only the program name and the argument count.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub command: Vec<String>,
    /// The client sends standard input (`kubectl exec -i`).
    pub stdin: bool,
    /// The client wants a terminal (`kubectl exec -t`): stdout and stderr are one stream.
    pub tty: bool,
}

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("program", &self.command.first())
            .field("args", &self.command.len().saturating_sub(1))
            .field("stdin", &self.stdin)
            .field("tty", &self.tty)
            .finish()
    }
}

/// A terminal size sent by the client of a TTY session (columns and rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width")]
    pub width: u16,
    #[serde(rename = "Height")]
    pub height: u16,
}

/// Where the standard input of an exec session is written; shutting it down (or dropping it)
/// is end of input.
pub type ExecStdin = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A running exec session, as a provider hands it to the kubelet API.
///
/// Dropping the session ends the command (the adapter stops it if it is still running), so a
/// client that goes away frees everything on the provider side. Output streams are pulled only
/// as fast as the client reads them: the adapter must not buffer without bound.
pub struct ExecSession {
    /// The command's standard input; `Some` exactly when [`ExecRequest::stdin`] was set.
    pub stdin: Option<ExecStdin>,
    /// Standard output (with a TTY: the terminal's output).
    pub stdout: LogStream,
    /// Standard error; `None` with a TTY.
    pub stderr: Option<LogStream>,
    /// Terminal size changes, for TTY sessions of providers that can apply them.
    pub resize: Option<tokio::sync::mpsc::Sender<TerminalSize>>,
    /// Resolves to the command's exit code once it has ended; `128 + n` for a signal `n`.
    pub exit: BoxFuture<'static, Result<i32, ProviderError>>,
}

impl fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSession")
            .field("stdin", &self.stdin.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("resize", &self.resize.is_some())
            .finish_non_exhaustive()
    }
}
