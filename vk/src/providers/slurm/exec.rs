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

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tracing::{debug, warn};

use crate::provider::{
    ExecRequest, ExecSession, ExecStdin, LogStream, ProviderError, TerminalSize,
};

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
    let failed = |what: &str, e: std::io::Error| ProviderError::Transient {
        message: format!("could not {what} for exec into job {job_id}: {e}"),
        retry_after: None,
    };
    let pty = if req.tty {
        Some(open_pty().map_err(|e| failed("open a pseudo-terminal", e))?)
    } else {
        None
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", &s.path)
        .process_group(0)
        .kill_on_drop(true);
    match &pty {
        Some(p) => {
            let side = || {
                p.terminal
                    .try_clone()
                    .map_err(|e| failed("set up the terminal", e))
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
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(&format!("start {program}"), e))?;
    // Our copies of the terminal side must go, or its output would never end.
    drop(cmd);
    let group = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw);
    debug!(
        provider,
        job_id,
        pid = child.id(),
        stdin = req.stdin,
        tty = req.tty,
        "srun started for exec"
    );

    let (stdin, stdout, stderr, resize) = match pty {
        Some(Pty { control, terminal }) => {
            drop(terminal);
            let writer = control
                .try_clone()
                .map_err(|e| failed("set up the terminal", e))?;
            let resizer = control
                .try_clone()
                .map_err(|e| failed("set up the terminal", e))?;
            let stdin = req.stdin.then(|| -> ExecStdin {
                Box::pin(tokio::fs::File::from_std(std::fs::File::from(writer)))
            });
            let reader = tokio::fs::File::from_std(std::fs::File::from(control));
            // srun writes its task report to the terminal too.
            let stdout = reader_stream(reader, Some(SrunStderr::default()));
            let (tx, rx) = tokio::sync::mpsc::channel::<TerminalSize>(4);
            tokio::spawn(apply_sizes(rx, resizer, group));
            (stdin, stdout, None, Some(tx))
        }
        None => {
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
            (stdin, stdout, Some(stderr), None)
        }
    };

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
    let exit = Box::pin(async move {
        // Held while the exit is awaited: dropping the session drops it and stops srun.
        let _keep = keep_tx;
        done_rx
            .await
            .unwrap_or_else(|_| Err(ProviderError::transient("srun ended without a status")))
    });
    Ok(ExecSession {
        stdin,
        stdout,
        stderr,
        resize,
        exit,
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

/// Applies the client's terminal sizes and tells srun (`SIGWINCH` to its process group).
async fn apply_sizes(
    mut rx: tokio::sync::mpsc::Receiver<TerminalSize>,
    control: OwnedFd,
    group: Option<rustix::process::Pid>,
) {
    while let Some(size) = rx.recv().await {
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
        if let Some(g) = group {
            let _ = rustix::process::kill_process_group(g, rustix::process::Signal::WINCH);
        }
    }
}

/// SIGTERM (srun forwards it to the step), then SIGKILL after [`TERM_GRACE`].
async fn stop(provider: &str, job_id: u64, child: &mut Child) {
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw);
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

/// Removes srun's task reports (`srun: error: <node>: task 0: Exited with exit code 7`) from
/// its stderr, passing everything else through. Bytes that might begin such a report are held
/// back until the line is complete (at most [`SrunStderr::MAX_HELD`]).
#[derive(Debug, Default)]
pub(crate) struct SrunStderr {
    held: BytesMut,
}

impl SrunStderr {
    const MARK: &'static [u8] = b"srun: error: ";
    const MAX_HELD: usize = 4096;

    /// Feeds a chunk; returns what can be passed on now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.held.extend_from_slice(chunk);
        let mut out = BytesMut::new();
        loop {
            match find(&self.held, Self::MARK) {
                Some(i) => {
                    out.extend_from_slice(&self.held.split_to(i));
                    match self.held.iter().position(|b| *b == b'\n') {
                        Some(nl) => {
                            let line = self.held.split_to(nl + 1);
                            if !is_task_report(&line) {
                                out.extend_from_slice(&line);
                            }
                        }
                        None => {
                            if self.held.len() > Self::MAX_HELD {
                                out.extend_from_slice(&self.held.split());
                            }
                            break;
                        }
                    }
                }
                None => {
                    let keep = partial_suffix(&self.held, Self::MARK);
                    let emit = self.held.len() - keep;
                    out.extend_from_slice(&self.held.split_to(emit));
                    break;
                }
            }
        }
        out.freeze()
    }

    /// At end of stream: whatever is still held.
    pub(crate) fn finish(&mut self) -> Bytes {
        let rest = self.held.split().freeze();
        if is_task_report(&rest) {
            return Bytes::new();
        }
        rest
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of the longest end of `hay` that is a proper start of `mark`.
fn partial_suffix(hay: &[u8], mark: &[u8]) -> usize {
    (1..mark.len().min(hay.len() + 1))
        .rev()
        .find(|&n| hay.ends_with(&mark[..n]))
        .unwrap_or(0)
}

/// `srun: error: <node>: task[s] <ids>: <what>` (with or without the final newline).
fn is_task_report(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let Some(rest) = text.strip_prefix("srun: error: ") else {
        return false;
    };
    let Some((node, rest)) = rest.split_once(": ") else {
        return false;
    };
    if node.is_empty() || node.contains(char::is_whitespace) {
        return false;
    }
    let Some(rest) = rest
        .strip_prefix("tasks ")
        .or_else(|| rest.strip_prefix("task "))
    else {
        return false;
    };
    let Some((ids, what)) = rest.split_once(": ") else {
        return false;
    };
    !ids.is_empty()
        && ids
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ',' | '-' | '[' | ']'))
        && !what.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SrunSettings {
        SrunSettings {
            wrapper: vec!["runuser".into(), "-u".into(), "vkslurm".into(), "--".into()],
            srun: "/usr/bin/srun".into(),
            slurm_conf: None,
            work_dir: "/tmp".into(),
            path: "/usr/bin:/bin".into(),
        }
    }

    #[test]
    fn the_command_is_an_argument_vector_after_the_srun_options() {
        let req = ExecRequest {
            command: vec!["sh".into(), "-c".into(), "echo $HOME; rm -rf x".into()],
            stdin: true,
            tty: false,
        };
        assert_eq!(
            argv(&settings(), 42, &req),
            [
                "runuser",
                "-u",
                "vkslurm",
                "--",
                "/usr/bin/srun",
                "--jobid=42",
                "--overlap",
                "--quiet",
                "--nodes=1",
                "--ntasks=1",
                "--chdir=/tmp",
                "--",
                "sh",
                "-c",
                "echo $HOME; rm -rf x",
            ]
        );
    }

    #[test]
    fn tty_sessions_ask_srun_for_a_pty() {
        let req = ExecRequest {
            command: vec!["sh".into()],
            stdin: true,
            tty: true,
        };
        let v = argv(&settings(), 9, &req);
        assert_eq!(
            v[4..],
            [
                "/usr/bin/srun",
                "--jobid=9",
                "--overlap",
                "--quiet",
                "--nodes=1",
                "--ntasks=1",
                "--chdir=/tmp",
                "--pty",
                "--",
                "sh",
            ]
        );
    }

    #[tokio::test]
    async fn a_tty_session_runs_on_a_terminal_and_follows_resizes() {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        // `sh -c <script>` stands in for srun: it sees a terminal on stdin and stdout, and
        // reports the size after SIGWINCH.
        let script = "test -t 0 && test -t 1 && echo tty-ok; \
                      trap 'stty size; exit 3' WINCH; read x; echo \"got $x\"; \
                      while :; do sleep 0.05; done";
        let s = SrunSettings {
            wrapper: vec!["sh".into(), "-c".into(), script.into()],
            srun: "srun-stand-in".into(),
            slurm_conf: None,
            work_dir: "/tmp".into(),
            path: "/usr/bin:/bin".into(),
        };
        let req = ExecRequest {
            command: vec!["ignored".into()],
            stdin: true,
            tty: true,
        };
        let mut session = start("hpc", &s, 1, req).unwrap();
        assert!(session.stderr.is_none());
        let mut stdin = session.stdin.take().unwrap();
        stdin.write_all(b"hello\n").await.unwrap();
        stdin.flush().await.unwrap();
        let resize = session.resize.take().unwrap();
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut resized = false;
        while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, session.stdout.next()).await {
            out.extend_from_slice(&chunk.unwrap());
            let text = String::from_utf8_lossy(&out);
            if !resized && text.contains("got hello") {
                resized = true;
                resize
                    .send(TerminalSize {
                        width: 132,
                        height: 43,
                    })
                    .await
                    .unwrap();
            }
        }
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("tty-ok"), "{text:?}");
        // The terminal echoes input and turns \n into \r\n, as a terminal does.
        assert!(text.contains("got hello\r\n"), "{text:?}");
        assert!(text.contains("43 132"), "{text:?}");
        assert_eq!(session.exit.await.unwrap(), 3);
    }

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = SrunStderr::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&f.push(c));
        }
        out.extend_from_slice(&f.finish());
        out
    }

    #[test]
    fn task_reports_leave_stderr_and_everything_else_stays() {
        assert_eq!(
            run(&[b"err\nsrun: error: vm: task 0: Exited with exit code 7\n"]),
            b"err\n"
        );
        // The task's stderr does not end with a newline: the report follows on the same line.
        assert_eq!(
            run(&[b"partial", b"srun: error: vm: task 0: Terminated\n"]),
            b"partial"
        );
        assert_eq!(run(&[b"srun: error: node-7: tasks 0-1: Killed\n"]), b"");
        // On a terminal lines end with \r\n.
        assert_eq!(
            run(&[b"30 100\r\nsrun: error: vm: task 0: Exited with exit code 4\r\n"]),
            b"30 100\r\n"
        );
        // Split anywhere, even inside the marker.
        let all = b"a\nsrun: error: vm: task 0: Exited with exit code 3\nb".as_slice();
        for cut in 0..all.len() {
            assert_eq!(run(&[&all[..cut], &all[cut..]]), b"a\nb", "cut at {cut}");
        }
        // srun's other messages explain failures: they stay.
        let keep = b"srun: error: Unable to create step for job 15: Access/permission denied\n";
        assert_eq!(run(&[keep]), keep);
        assert_eq!(run(&[b"srun: error: x\n"]), b"srun: error: x\n");
        assert_eq!(run(&[b"plain sr", b"un text\n"]), b"plain srun text\n");
        assert_eq!(run(&[b"ends with s"]), b"ends with s");
    }

    #[test]
    fn nothing_is_held_longer_than_needed() {
        let mut f = SrunStderr::default();
        assert_eq!(&f.push(b"hello\n")[..], b"hello\n");
        assert_eq!(
            &f.push(b"line without newline")[..],
            b"line without newline"
        );
        // A possible marker start is held, then released when it turns out not to be one.
        assert_eq!(&f.push(b"x srun")[..], b"x ");
        assert_eq!(&f.push(b"ning\n")[..], b"srunning\n");
        // An unfinished report-looking line is held, but not without bound.
        let mut long = b"srun: error: ".to_vec();
        long.extend(std::iter::repeat_n(b'z', SrunStderr::MAX_HELD));
        assert_eq!(f.push(&long).len(), long.len());
    }

    #[tokio::test]
    async fn a_process_streams_output_and_its_exit_code() {
        // Any program stands in for srun: the wrapper and srun path make the argv
        // `sh -c <script> --jobid=...` (sh ignores the extra arguments).
        let s = SrunSettings {
            wrapper: vec![
                "sh".into(),
                "-c".into(),
                "read x; echo \"out $x\"; printf 'err' >&2; echo 'srun: error: vm: task 0: Exited with exit code 7' >&2; exit 7".into(),
            ],
            srun: "srun-stand-in".into(),
            slurm_conf: None,
            work_dir: "/tmp".into(),
            path: "/usr/bin:/bin".into(),
        };
        let req = ExecRequest {
            command: vec!["ignored".into()],
            stdin: true,
            tty: false,
        };
        let mut session = start("hpc", &s, 1, req).unwrap();
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let mut stdin = session.stdin.take().unwrap();
        stdin.write_all(b"hi\n").await.unwrap();
        drop(stdin);
        let out: Vec<u8> = session
            .stdout
            .flat_map(|c| futures::stream::iter(c.unwrap().to_vec()))
            .collect()
            .await;
        let err: Vec<u8> = session
            .stderr
            .take()
            .unwrap()
            .flat_map(|c| futures::stream::iter(c.unwrap().to_vec()))
            .collect()
            .await;
        assert_eq!(out, b"out hi\n");
        assert_eq!(err, b"err");
        assert_eq!(session.exit.await.unwrap(), 7);
    }

    #[tokio::test]
    async fn dropping_the_session_stops_the_process() {
        let dir = std::env::temp_dir().join(format!("vk-exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let script = format!(
            "echo $$ > {}; echo ready; while :; do sleep 0.1; done",
            pid_file.display()
        );
        let s = SrunSettings {
            wrapper: vec!["sh".into(), "-c".into(), script],
            srun: "srun-stand-in".into(),
            slurm_conf: None,
            work_dir: "/tmp".into(),
            path: "/usr/bin:/bin".into(),
        };
        let req = ExecRequest {
            command: vec!["ignored".into()],
            stdin: false,
            tty: false,
        };
        let mut session = start("hpc", &s, 1, req).unwrap();
        use futures::StreamExt;
        let first = session.stdout.next().await.unwrap().unwrap();
        assert_eq!(&first[..], b"ready\n");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_owned();
        let alive = |pid: &str| {
            // Gone, or a zombie waiting to be reaped: either way it no longer runs.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit(')')
                        .next()
                        .map(|r| !r.trim_start().starts_with('Z'))
                })
                .unwrap_or(false)
        };
        assert!(alive(&pid), "the command runs while the session is held");
        drop(session);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while alive(&pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the command still runs 15 s after its session was dropped"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
