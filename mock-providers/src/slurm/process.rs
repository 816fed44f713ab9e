//! Process mode of the Slurm emulator: a job that reaches RUNNING runs its batch script with
//! bash on this machine, stdout and stderr appended to the job's output file, as slurmd would
//! (without changing user). The exit status is reported back as Slurm's raw wait status.
//!
//! Batch scripts that start job steps (`srun` inside the allocation: one step per container
//! of a pod) find an `srun` of the emulator first on their PATH. Within an allocation, srun
//! runs its command as a step on the job's node with the caller's environment, working
//! directory, stdout and stderr, and exits with the command's exit code (`srun(1)`); the shim
//! does the same on this machine: it skips srun's options and `exec`s the command. A real srun
//! outside a real allocation would ask the host's Slurm for a new job instead.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Weak;

use tokio::sync::oneshot;

use super::Emulator;
use super::jobs::Launch;

/// Starts `launch` on the current runtime (a no-op without one).
pub(crate) fn spawn(emulator: Weak<Emulator>, launch: Launch) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(run(emulator, launch));
    }
}

/// The shim, as `srun(1)` behaves inside an allocation (see the module docs): options come
/// as one word each (`--overlap`, `--job-name=NAME`), then `--` or the command;
/// `--output=FILE` (without `--error`) sends the step's stdout and stderr to FILE.
const SRUN_SHIM: &str = "#!/bin/bash\n\
# srun of the Slurm emulator: skips srun's options, runs the command in place.\n\
while [ \"$#\" -gt 0 ]; do\n\
  case $1 in\n\
    --) shift; break ;;\n\
    --output=*) exec >\"${1#--output=}\" 2>&1; shift ;;\n\
    -*) shift ;;\n\
    *) break ;;\n\
  esac\n\
done\n\
exec \"$@\"\n";

/// The directory holding the `srun` shim, made once per emulator process.
fn shim_dir() -> Option<&'static std::path::Path> {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mock-slurm-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let srun = dir.join("srun");
        std::fs::write(&srun, SRUN_SHIM).ok()?;
        std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).ok()?;
        Some(dir)
    })
    .as_deref()
}

async fn run(emulator: Weak<Emulator>, launch: Launch) {
    let Launch {
        job_id,
        generation,
        script,
        env,
        cwd,
        output,
    } = launch;
    let fail = |raw: i64| {
        if let Some(e) = emulator.upgrade() {
            e.proc_exited(job_id, generation, raw);
        }
    };
    // Unique per launch: emulators in one process (a test binary) number their jobs alike.
    static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let launch_no = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let script_path = std::env::temp_dir().join(format!(
        "mock-slurm-{}-{launch_no}-{job_id}-{generation}.sh",
        std::process::id()
    ));
    if std::fs::write(&script_path, &script).is_err() {
        return fail(1 << 8);
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&output);
    let (stdout, stderr) = match out.and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
        Err(_) => {
            let _ = std::fs::remove_file(&script_path);
            return fail(1 << 8);
        }
    };
    let dir = if std::path::Path::new(&cwd).is_dir() {
        cwd
    } else {
        std::env::temp_dir().to_string_lossy().into_owned()
    };
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(&script_path)
        .env_clear()
        .envs(&env)
        .env("SLURM_JOB_ID", job_id.to_string())
        .env("SLURM_JOBID", job_id.to_string())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true);
    let path = env.get("PATH").map_or(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        String::as_str,
    );
    match shim_dir() {
        Some(dir) => cmd.env("PATH", format!("{}:{path}", dir.display())),
        None => cmd.env("PATH", path),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(_) => {
            let _ = std::fs::remove_file(&script_path);
            return fail(1 << 8);
        }
    };
    let pid = child.id();
    let (kill_tx, kill_rx) = oneshot::channel();
    let current = emulator
        .upgrade()
        .is_some_and(|e| e.proc_started(job_id, generation, pid, kill_tx));
    if !current {
        kill_group(pid).await;
        let _ = child.kill().await;
        let _ = std::fs::remove_file(&script_path);
        return;
    }
    let status = tokio::select! {
        s = child.wait() => s.ok(),
        _ = kill_rx => {
            kill_group(pid).await;
            let _ = child.kill().await;
            None
        }
    };
    let _ = std::fs::remove_file(&script_path);
    if let Some(status) = status {
        let raw = match (status.code(), status.signal()) {
            (Some(code), _) => i64::from(code & 0xff) << 8,
            (None, Some(sig)) => i64::from(sig),
            (None, None) => 1 << 8,
        };
        fail(raw);
    }
}

/// SIGTERM, then SIGKILL, to the job's process group.
async fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid else {
        return;
    };
    for sig in ["TERM", "KILL"] {
        let _ = tokio::process::Command::new("kill")
            .args(["-s", sig, "--", &format!("-{pid}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}
