//! `kubectl exec` into a Slurm job: a child process of the VK running
//! `[execWrapper...] srun --jobid=<job> --overlap --quiet --nodes=1 --ntasks=1
//! --chdir=<workDir> -- <command...>`, with its stdin, stdout, stderr and exit code as the exec
//! session's.
//!
//! Facts this rests on (checked on the real Slurm 22.05 of `scripts/slurm/up`):
//! - `srun --jobid --overlap` starts a new step inside the running allocation, sharing its
//!   CPUs with the batch step; srun exits with the task's exit code (`128 + n` when a signal
//!   `n` killed it) and forwards its stdin to the task.
//! - Only the job's owner may add a step: even root gets "Unable to create step for job N:
//!   Access/permission denied". So srun must run as the jobs' user (`userName`): run the VK as
//!   that user, or set `execWrapper` (e.g. `[runuser, -u, vkslurm, --]` when the VK runs as
//!   root).
//! - srun needs its configuration: `slurmConf` (passed as `SLURM_CONF`), else the VK's own
//!   `SLURM_CONF`, else Slurm's default (`/etc/slurm/slurm.conf` or configless DNS).
//! - After a non-zero exit srun adds `srun: error: <node>: task 0: Exited with exit code N` to
//!   its stderr, even with `--quiet` (and `Killed`, `Terminated`, ... after signals), right
//!   after the task's own stderr and without a line break of its own before it. That report
//!   is taken out of stderr (or of the terminal's output, where srun writes it too)
//!   ([`SrunStderr`]), since the exit code already says it; srun's other
//!   messages (a step that cannot be created, ...) are kept: they explain a failure.
//! - `--pty` needs srun's own stdin to be a terminal ("Not using a pseudo-terminal,
//!   disregarding --pty option"). For a TTY session (`kubectl exec -t`) the VK therefore opens
//!   a pseudo-terminal pair, gives srun the terminal side as stdin, stdout and stderr, and
//!   streams the other side: srun puts it in raw mode and relays it to the pty of the remote
//!   task. Terminal sizes from the client are set on the pair, then srun gets `SIGWINCH`
//!   (it re-reads the size and passes it on); srun has no controlling terminal, so the
//!   kernel does not send that signal by itself.
//!
//! The command is an argument vector handed to `execve`: nothing goes through a shell. srun's
//! environment is cleared down to `PATH` (the configured `path`) and `SLURM_CONF`, so the VK's
//! own variables (credentials) never reach the job; srun exports that environment to the
//! step.
//!
//! srun runs in a process group of its own (with its wrapper); signals go to that group.
//! Dropping the session stops srun: SIGTERM first (srun forwards it to the step, which ends
//! it), SIGKILL after [`TERM_GRACE`].

mod srun_stderr;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tracing::{debug, warn};

use crate::provider::{
    ExecRequest, ExecSession, ExecStdin, LogStream, ProviderError, TerminalSize,
};
pub(crate) use srun_stderr::SrunStderr;

/// How `kubectl exec` reaches a job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// No exec: the kubelet API answers 501 naming the provider.
    #[default]
    Off,
    /// `srun --jobid=<job> --overlap` from the VK's host (needs the Slurm client and munge).
    Srun,
}

/// What [`start`] needs from the provider's settings.
#[derive(Clone, Debug)]
pub(crate) struct SrunSettings {
    pub wrapper: Vec<String>,
    pub srun: String,
    pub slurm_conf: Option<PathBuf>,
    pub work_dir: String,
    pub path: String,
}

/// Time srun gets to end the step after SIGTERM before it is killed.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(10);
/// Largest piece read from srun's output at once.
const CHUNK: usize = 16 * 1024;

/// srun's argument vector (wrapper first) for `req` in job `job_id`.
pub(crate) fn argv(s: &SrunSettings, job_id: u64, req: &ExecRequest) -> Vec<String> {
    let mut v = s.wrapper.clone();
    v.push(s.srun.clone());
    v.extend([
        format!("--jobid={job_id}"),
        "--overlap".into(),
        "--quiet".into(),
        "--nodes=1".into(),
        "--ntasks=1".into(),
        format!("--chdir={}", s.work_dir),
    ]);
    if req.tty {
        v.push("--pty".into());
    }
    v.push("--".into());
    v.extend(req.command.iter().cloned());
    v
}

/// Starts `req` in job `job_id`; `provider` names the provider in errors.
pub(crate) fn start(
    provider: &str,
    s: &SrunSettings,
    job_id: u64,
    req: ExecRequest,
) -> Result<ExecSession, ProviderError> {
    if req.command.is_empty() {
        return Err(ProviderError::Invalid {
            message: "exec needs a command".into(),
        });
    }
    let argv = argv(s, job_id, &req);
    let (program, args) = argv.split_first().ok_or_else(|| ProviderError::Invalid {
        message: "srun command line is empty".into(),
    })?;
    let failed = |what: &str, e: std::io::Error| io_failure(job_id, what, e);
    let pty = if req.tty {
        Some(open_pty().map_err(|e| failed("open a pseudo-terminal", e))?)
    } else {
        None
    };
    let mut cmd = srun_command(s, job_id, program, args, &req, pty.as_ref())?;
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(&format!("start {program}"), e))?;
    // Our copies of the terminal side must go, or its output would never end.
    drop(cmd);
    let group = process_group(&child);
    debug!(
        provider,
        job_id,
        pid = child.id(),
        stdin = req.stdin,
        tty = req.tty,
        "srun started for exec"
    );

    let streams = match pty {
        Some(pty) => Streams::terminal(pty, req.stdin, group, job_id)?,
        None => Streams::pipes(&mut child)?,
    };
    Ok(ExecSession {
        stdin: streams.stdin,
        stdout: streams.stdout,
        stderr: streams.stderr,
        resize: streams.resize,
        exit: watch(provider, job_id, child),
    })
}

/// The error of a local step of starting an exec (`what`: "open a pseudo-terminal", ...).
fn io_failure(job_id: u64, what: &str, e: std::io::Error) -> ProviderError {
    ProviderError::Transient {
        message: format!("could not {what} for exec into job {job_id}: {e}"),
        retry_after: None,
    }
}

/// srun's process group: srun leads it (`process_group(0)`), so its id is srun's pid.
fn process_group(child: &Child) -> Option<rustix::process::Pid> {
    child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
}

/// The srun command for `program args` (srun, or its wrapper): a cleared environment, its own
/// process group, and as stdio either the terminal side of `pty` or pipes.
fn srun_command(
    s: &SrunSettings,
    job_id: u64,
    program: &str,
    args: &[String],
    req: &ExecRequest,
    pty: Option<&Pty>,
) -> Result<Command, ProviderError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", &s.path)
        .process_group(0)
        .kill_on_drop(true);
    match pty {
        Some(p) => {
            let side = || {
                p.terminal
                    .try_clone()
                    .map_err(|e| io_failure(job_id, "set up the terminal", e))
            };
            cmd.stdin(Stdio::from(side()?))
                .stdout(Stdio::from(side()?))
                .stderr(Stdio::from(side()?));
        }
        None => {
            cmd.stdin(if req.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        }
    }
    match (&s.slurm_conf, std::env::var_os("SLURM_CONF")) {
        (Some(conf), _) => {
            cmd.env("SLURM_CONF", conf);
        }
        (None, Some(conf)) => {
            cmd.env("SLURM_CONF", conf);
        }
        (None, None) => {}
    }
    Ok(cmd)
}

/// The session's streams, from srun's pipes or from the control side of its terminal.
struct Streams {
    stdin: Option<ExecStdin>,
    stdout: LogStream,
    stderr: Option<LogStream>,
    resize: Option<tokio::sync::mpsc::Sender<TerminalSize>>,
}

impl Streams {
    /// A TTY session: everything goes through the control side of `pty`, whose terminal side
    /// (srun has its own copies) is closed here; sizes go to `group`.
    fn terminal(
        pty: Pty,
        stdin: bool,
        group: Option<rustix::process::Pid>,
        job_id: u64,
    ) -> Result<Self, ProviderError> {
        let Pty { control, terminal } = pty;
        drop(terminal);
        let writer = control
            .try_clone()
            .map_err(|e| io_failure(job_id, "set up the terminal", e))?;
        let resizer = control
            .try_clone()
            .map_err(|e| io_failure(job_id, "set up the terminal", e))?;
        let stdin = stdin.then(|| -> ExecStdin {
            Box::pin(tokio::fs::File::from_std(std::fs::File::from(writer)))
        });
        let reader = tokio::fs::File::from_std(std::fs::File::from(control));
        // srun writes its task report to the terminal too.
        let stdout = reader_stream(reader, Some(SrunStderr::default()));
        let (tx, rx) = tokio::sync::mpsc::channel::<TerminalSize>(4);
        tokio::spawn(apply_sizes(rx, resizer, group));
        Ok(Streams {
            stdin,
            stdout,
            stderr: None,
            resize: Some(tx),
        })
    }

    /// A session without TTY: srun's own pipes (stdin only when the client sends one).
    fn pipes(child: &mut Child) -> Result<Self, ProviderError> {
        let stdin = child.stdin.take().map(|w| -> ExecStdin { Box::pin(w) });
        let stdout = child
            .stdout
            .take()
            .map(|r| reader_stream(r, None))
            .ok_or_else(|| ProviderError::transient("srun has no stdout pipe"))?;
        let stderr = child
            .stderr
            .take()
            .map(|r| reader_stream(r, Some(SrunStderr::default())))
            .ok_or_else(|| ProviderError::transient("srun has no stderr pipe"))?;
        Ok(Streams {
            stdin,
            stdout,
            stderr: Some(stderr),
            resize: None,
        })
    }
}

/// The session's exit: srun's exit code once it ends; dropping it before stops srun ([`stop`]).
fn watch(
    provider: &str,
    job_id: u64,
    mut child: Child,
) -> BoxFuture<'static, Result<i32, ProviderError>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<i32, ProviderError>>();
    let (keep_tx, keep_rx) = tokio::sync::oneshot::channel::<()>();
    let name = provider.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            status = child.wait() => {
                let code = status
                    .map(|st| st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)))
                    .map_err(|e| ProviderError::transient(format!("waiting for srun failed: {e}")));
                let _ = done_tx.send(code);
            }
            // The session was dropped before the command ended.
            _ = keep_rx => stop(&name, job_id, &mut child).await,
        }
    });
    Box::pin(async move {
        // Held while the exit is awaited: dropping the session drops it and stops srun.
        let _keep = keep_tx;
        done_rx
            .await
            .unwrap_or_else(|_| Err(ProviderError::transient("srun ended without a status")))
    })
}

/// A pseudo-terminal pair: `control` is streamed, `terminal` is srun's stdin, stdout, stderr.
struct Pty {
    control: OwnedFd,
    terminal: OwnedFd,
}

/// Opens a pair (never as the VK's controlling terminal), 80x24 until the client says more.
fn open_pty() -> std::io::Result<Pty> {
    use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let control = openpt(flags)?;
    grantpt(&control)?;
    unlockpt(&control)?;
    let terminal = ioctl_tiocgptpeer(&control, flags)?;
    rustix::termios::tcsetwinsize(
        &terminal,
        rustix::termios::Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(Pty { control, terminal })
}

/// When the latest size is signalled again, after its arrival. srun reads the terminal's size
/// once as it starts the step and handles `SIGWINCH` only once its pty thread runs (the signal's
/// default is to be ignored): a size that arrives in between, as the client's first size does
/// when it follows the session's start, would never reach the remote terminal. A repeated
/// signal makes srun send the same size again, which changes nothing remotely. (Slurm's
/// `src/srun/srun_pty.c`: the size goes to the step at launch, and the pty thread installs the
/// SIGWINCH handler; seen here as a lost first size, `24 80`, on a loaded 2-core machine.)
const RESIGNAL_AFTER: [Duration; 5] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Applies the client's terminal sizes and tells srun (`SIGWINCH` to its process group), the
/// latest size again after each of [`RESIGNAL_AFTER`]. Ends once the client is gone and no
/// signal is due (or the terminal is closed).
async fn apply_sizes(
    mut rx: tokio::sync::mpsc::Receiver<TerminalSize>,
    control: OwnedFd,
    group: Option<rustix::process::Pid>,
) {
    let winch = || {
        if let Some(g) = group {
            let _ = rustix::process::kill_process_group(g, rustix::process::Signal::WINCH);
        }
    };
    let mut again: Vec<tokio::time::Instant> = Vec::new();
    let mut open = true;
    loop {
        let next = again.first().copied();
        if !open && next.is_none() {
            return;
        }
        tokio::select! {
            size = rx.recv(), if open => {
                // The client is gone: the signals still due are sent all the same.
                let Some(size) = size else {
                    open = false;
                    continue;
                };
                if size.width == 0 || size.height == 0 {
                    continue;
                }
                let ws = rustix::termios::Winsize {
                    ws_row: size.height,
                    ws_col: size.width,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                };
                if rustix::termios::tcsetwinsize(&control, ws).is_err() {
                    return;
                }
                winch();
                let now = tokio::time::Instant::now();
                again = RESIGNAL_AFTER.iter().map(|d| now + *d).collect();
            }
            () = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if next.is_some() => {
                again.remove(0);
                winch();
            }
        }
    }
}

/// SIGTERM (srun forwards it to the step), then SIGKILL after [`TERM_GRACE`].
async fn stop(provider: &str, job_id: u64, child: &mut Child) {
    let pid = process_group(child);
    // srun leads its own process group (with the wrapper, if any): signal all of it.
    if let Some(pid) = pid
        && rustix::process::kill_process_group(pid, rustix::process::Signal::TERM).is_ok()
        && tokio::time::timeout(TERM_GRACE, child.wait()).await.is_ok()
    {
        debug!(provider, job_id, "exec client gone: srun stopped");
        return;
    }
    if let Err(e) = child.kill().await {
        warn!(provider, job_id, error = %e, "could not kill the srun of an abandoned exec");
    }
}

/// A pipe as a stream of chunks, read only when the stream is polled; `filter` cleans srun's
/// own reports out of stderr.
fn reader_stream<R>(reader: R, filter: Option<SrunStderr>) -> LogStream
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let s = futures::stream::unfold(
        (reader, filter, false),
        |(mut r, mut filter, done)| async move {
            if done {
                return None;
            }
            loop {
                let mut buf = vec![0u8; CHUNK];
                let read = match r.read(&mut buf).await {
                    // A terminal whose other side is closed reads as EIO: that is its end.
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => {
                        Ok(0)
                    }
                    other => other,
                };
                match read {
                    Ok(0) => {
                        let rest = filter.as_mut().map(SrunStderr::finish).unwrap_or_default();
                        return (!rest.is_empty()).then(|| (Ok(rest), (r, filter, true)));
                    }
                    Ok(n) => {
                        buf.truncate(n);
                        let out = match filter.as_mut() {
                            Some(f) => f.push(&buf),
                            None => Bytes::from(buf),
                        };
                        if !out.is_empty() {
                            return Some((Ok(out), (r, filter, false)));
                        }
                    }
                    Err(e) => {
                        return Some((
                            Err(ProviderError::transient(format!(
                                "reading srun output: {e}"
                            ))),
                            (r, filter, true),
                        ));
                    }
                }
            }
        },
    );
    Box::pin(s)
}
