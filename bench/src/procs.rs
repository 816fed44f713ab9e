//! Processes the bench starts (emulators, the VK) and what it reads about processes and the
//! machine from `/proc`: description, resident memory, CPU seconds, machine-wide CPU busy time.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

/// What the figures were measured on; printed with every table.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_mib: u64,
    pub kernel: String,
    /// 1, 5 and 15 minute load averages when the bench started (other work on the host).
    pub loadavg_at_start: String,
}

impl Machine {
    pub fn describe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_mib = kib_field(&meminfo, "MemTotal:").unwrap_or(0) / 1024;
        Self {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            mem_total_mib,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            loadavg_at_start: loadavg(),
        }
    }

    pub fn one_line(&self) -> String {
        format!(
            "{} cores ({}), {} MiB RAM, Linux {}, load average at start {}",
            self.nproc, self.cpu_model, self.mem_total_mib, self.kernel, self.loadavg_at_start
        )
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User plus system CPU seconds of a process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after it are space separated.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

/// Resident and peak resident memory of a process, MiB.
pub fn rss_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = kib_field(&status, "VmRSS:")? as f64 / 1024.0;
    let hwm = kib_field(&status, "VmHWM:").map_or(rss, |v| v as f64 / 1024.0);
    Some((rss, hwm))
}

/// Machine-wide (busy, total) CPU ticks from `/proc/stat`.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU counters of the processes of interest at one instant.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    at: Instant,
    machine: (u64, u64),
    procs: BTreeMap<String, (u32, f64)>,
}

/// CPU used between two snapshots.
#[derive(Debug, Clone, Serialize)]
pub struct CpuPhase {
    pub wall_s: f64,
    /// Machine-wide busy share of all cores, percent.
    pub machine_busy_pct: f64,
    /// CPU seconds per process (only processes alive at both ends, same pid).
    pub cpu_s: BTreeMap<String, f64>,
    /// Busy CPU seconds of everything else on the machine (not the bench, the VK, the
    /// emulators or the testbed): other work sharing the host.
    pub other_processes_s: f64,
}

impl CpuSnapshot {
    pub fn take(pids: &[(String, u32)]) -> Self {
        let procs = pids
            .iter()
            .filter_map(|(name, pid)| cpu_seconds(*pid).map(|c| (name.clone(), (*pid, c))))
            .collect();
        Self {
            at: Instant::now(),
            machine: machine_ticks(),
            procs,
        }
    }

    pub fn until(&self, later: &CpuSnapshot) -> CpuPhase {
        let busy = later.machine.0.saturating_sub(self.machine.0) as f64;
        let total = later.machine.1.saturating_sub(self.machine.1) as f64;
        let cpu_s: BTreeMap<String, f64> = self
            .procs
            .iter()
            .filter_map(|(name, (pid, c0))| match later.procs.get(name) {
                Some((p, c1)) if p == pid => Some((name.clone(), round3(c1 - c0))),
                _ => None,
            })
            .collect();
        CpuPhase {
            wall_s: round3(later.at.duration_since(self.at).as_secs_f64()),
            machine_busy_pct: if total > 0.0 {
                round3(100.0 * busy / total)
            } else {
                0.0
            },
            other_processes_s: round3((busy / clk_tck() - cpu_s.values().sum::<f64>()).max(0.0)),
            cpu_s,
        }
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Pids of the testbed's control plane from `<testbed>/run/<component>.pid`.
pub fn testbed_pids(dir: Option<&Path>) -> Vec<(String, u32)> {
    let Some(dir) = dir else { return Vec::new() };
    [
        "kube-apiserver",
        "etcd",
        "kube-controller-manager",
        "kube-scheduler",
        "metrics-server",
    ]
    .iter()
    .filter_map(|c| {
        let pid = std::fs::read_to_string(dir.join("run").join(format!("{c}.pid"))).ok()?;
        let pid: u32 = pid.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}"))
            .exists()
            .then(|| ((*c).to_owned(), pid))
    })
    .collect()
}

/// Child processes by role; killed when the bench ends, however it ends.
#[derive(Default)]
pub struct Children {
    procs: Mutex<HashMap<String, tokio::process::Child>>,
}

impl Children {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::process::Child>> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `bin` with `args` and `env` as `role`, stderr appended to `log`.
    pub fn spawn(
        &self,
        role: &str,
        bin: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> anyhow::Result<u32> {
        if self.lock().contains_key(role) {
            bail!("{role} is already running");
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("failed to open {}", log.display()))?;
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start {}", bin.display()))?;
        let pid = child.id().context("child has no pid")?;
        self.lock().insert(role.to_owned(), child);
        Ok(pid)
    }

    pub fn pid(&self, role: &str) -> Option<u32> {
        self.lock().get(role).and_then(|c| c.id())
    }

    /// True while the process of `role` has not exited.
    pub fn alive(&self, role: &str) -> bool {
        self.lock()
            .get_mut(role)
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL, and wait for it to be gone.
    pub async fn kill9(&self, role: &str) {
        let child = self.lock().remove(role);
        if let Some(mut c) = child {
            let _ = c.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&self, role: &str, grace: Duration) {
        let child = self.lock().remove(role);
        if let Some(mut c) = child {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
            if tokio::time::timeout(grace, c.wait()).await.is_err() {
                let _ = c.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), c.wait()).await;
            }
        }
    }

    pub async fn stop_all(&self) {
        let roles: Vec<String> = self.lock().keys().cloned().collect();
        for r in roles {
            self.stop(&r, Duration::from_secs(5)).await;
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: a small race, fine for a bench).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("failed to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// A sibling binary of the running one (cargo puts workspace binaries side by side).
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the running binary")?;
    let dir = exe.parent().context("the running binary has no folder")?;
    let bin = dir.join(name);
    if !bin.exists() {
        bail!(
            "{} not found (build it with `cargo build --release -p vk -p mock-providers`, or pass its path)",
            bin.display()
        );
    }
    Ok(bin)
}
