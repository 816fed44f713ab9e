//! Process execution mode: run a workload's command as a local child process (`sh -c`) and
//! read its real CPU time and memory from `/proc`.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;

use super::Engine;
use super::logs::LogSource;

/// Linux `USER_HZ`: clock ticks per second in `/proc/<pid>/stat`.
const TICKS_PER_SECOND: u64 = 100;
/// Page size used for `/proc/<pid>/statm`.
const PAGE_SIZE: u64 = 4096;

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub seq: u64,
    pub generation: u64,
    /// Shell command line; `None` means "nothing to run, the container just stays up".
    pub command: Option<String>,
    pub env: BTreeMap<String, String>,
    pub delay: Duration,
}

/// Child process bookkeeping kept on the workload.
#[derive(Debug, Default)]
pub(crate) struct ProcState {
    /// The command was started (or there was nothing to start).
    pub started: bool,
    /// Process (and process group) id while it runs.
    pub pid: Option<u32>,
    /// Dropping or sending on this kills the process group.
    pub kill: Option<oneshot::Sender<()>>,
    /// When the process was started.
    pub started_at: Option<Instant>,
    /// CPU-rate sampler.
    pub cpu: CpuSampler,
}

impl ProcState {
    /// Ask the process to die (no-op when none runs).
    pub fn kill(&mut self) {
        if let Some(tx) = self.kill.take() {
            let _ = tx.send(());
        }
        self.pid = None;
    }
}

/// Turns cumulative CPU time into a rate in millicores.
#[derive(Debug, Default)]
pub(crate) struct CpuSampler {
    last: Option<(Instant, u64)>,
    rate_millis: u64,
}

impl CpuSampler {
    /// Feed the cumulative CPU milliseconds seen at `now` for a process started at
    /// `started`; returns the current rate (lifetime average until a 500 ms window exists).
    pub fn sample(&mut self, now: Instant, cpu_ms: u64, started: Instant) -> u64 {
        let window = Duration::from_millis(500);
        match self.last {
            None => {
                let wall = now.saturating_duration_since(started).as_millis().max(1) as u64;
                self.rate_millis = cpu_ms * 1000 / wall;
                self.last = Some((now, cpu_ms));
            }
            Some((at, ms)) if now.saturating_duration_since(at) >= window => {
                let wall = now.saturating_duration_since(at).as_millis().max(1) as u64;
                self.rate_millis = cpu_ms.saturating_sub(ms) * 1000 / wall;
                self.last = Some((now, cpu_ms));
            }
            Some(_) => {}
        }
        self.rate_millis
    }
}

/// Cumulative CPU milliseconds and resident bytes of every process in process group `pgid`.
pub(crate) fn group_usage(pgid: u32) -> Option<(u64, u64)> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut ticks = 0u64;
    let mut rss = 0u64;
    let mut found = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields after the command name start at field 3 (state): pgrp is field 5,
        // utime 14, stime 15.
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        if field(5) != Some(u64::from(pgid)) {
            continue;
        }
        found = true;
        ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            && let Some(pages) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        {
            rss += pages * PAGE_SIZE;
        }
    }
    found.then_some((ticks * 1000 / TICKS_PER_SECOND, rss))
}

/// Start the launch task (after `delay`).
pub(crate) fn launch(engine: Weak<Engine>, launch: Launch) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(run(engine, launch));
        }
        Err(_) => {
            if let Some(e) = engine.upgrade() {
                e.proc_failed(
                    launch.seq,
                    launch.generation,
                    "no async runtime to start the process".into(),
                );
            }
        }
    }
}

async fn run(engine: Weak<Engine>, launch: Launch) {
    tokio::time::sleep(launch.delay).await;
    let Launch {
        seq,
        generation,
        command,
        env,
        ..
    } = launch;
    let Some(command_line) = command else {
        if let Some(e) = engine.upgrade() {
            e.proc_started(seq, generation, None, None);
        }
        return;
    };
    let workdir = std::env::temp_dir();
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&command_line)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", &workdir)
        .envs(&env)
        .current_dir(&workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => {
            if let Some(e) = engine.upgrade() {
                e.proc_failed(seq, generation, format!("failed to start process: {err}"));
            }
            return;
        }
    };
    let pid = child.id();
    let (kill_tx, kill_rx) = oneshot::channel();
    let alive = engine
        .upgrade()
        .is_some_and(|e| e.proc_started(seq, generation, pid, Some(kill_tx)));
    if !alive {
        kill_group(pid).await;
        let _ = child.kill().await;
        return;
    }
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| tokio::spawn(pump(engine.clone(), seq, s))),
        child
            .stderr
            .take()
            .map(|s| tokio::spawn(pump(engine.clone(), seq, s))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let status = tokio::select! {
        status = child.wait() => Some(status),
        _ = kill_rx => {
            kill_group(pid).await;
            let _ = child.kill().await;
            None
        }
    };
    for reader in readers {
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    }
    let Some(status) = status else {
        return;
    };
    let Some(e) = engine.upgrade() else {
        return;
    };
    match status {
        Ok(status) => {
            let code = status
                .code()
                .or_else(|| status.signal().map(|sig| 128 + sig))
                .unwrap_or(-1);
            e.proc_exited(seq, generation, code);
        }
        Err(err) => e.proc_failed(
            seq,
            generation,
            format!("failed to wait for process: {err}"),
        ),
    }
}

async fn pump(engine: Weak<Engine>, seq: u64, stream: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                let line = text.trim_end_matches(['\n', '\r']).to_owned();
                match engine.upgrade() {
                    Some(e) => e.proc_log(seq, LogSource::Container, line),
                    None => return,
                }
            }
        }
    }
}

async fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid else {
        return;
    };
    let _ = tokio::process::Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_computes_rate() {
        let mut s = CpuSampler::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(1000);
        assert_eq!(s.sample(t1, 250, t0), 250);
        assert_eq!(s.sample(t1 + Duration::from_millis(100), 300, t0), 250);
        assert_eq!(s.sample(t1 + Duration::from_millis(1000), 750, t0), 500);
    }

    #[test]
    fn reads_own_group() {
        // The test binary's own process group exists and has used some CPU.
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        let pgrp: u32 = rest.split_whitespace().nth(2).unwrap().parse().unwrap();
        let (_, rss) = group_usage(pgrp).unwrap();
        assert!(rss > 0);
    }
}
