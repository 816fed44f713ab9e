//! Pods of several containers as one batch job of several job steps: the script runs each
//! init container to its end, in order, then the regular containers side by side, each
//! container a step of its own (`srun` inside the job's allocation), with its own
//! environment, log file and exit-code file.
//!
//! What the script does, in order (see `docs/slurm.md`, "Several containers"):
//! - looks up `srun` (and the container runtime) before any pod variable is exported, then
//!   un-exports every transport variable (the values stay shell variables, read by each
//!   container's function in its own subshell: each container sees its own variables only);
//! - init containers, in order: each a step run to its end; a failure stops the native sidecars
//!   started so far and ends the job with its exit code (a pod with `restartPolicy: Never`
//!   fails; the framework restarts the whole job per the pod's policy otherwise);
//! - native sidecars (init containers with `restartPolicy: Always`): started in their place
//!   in the background, so the later init containers run beside them;
//! - the regular containers: each a step in the background, all waited for; the job exits with
//!   the exit code of the first container (in spec order) that failed, 0 when none did;
//! - then the sidecars get SIGTERM (`scancel --signal=TERM` of their step) and are waited
//!   for, 30 s at most (then SIGKILL).
//!
//! Steps start with `srun --overlap`: without it a step gets its CPUs exclusively and the
//! second of two side-by-side containers waits for the first to end ("Step creation
//! temporarily disabled", Slurm 20.11 on). With `outputDir` each container's stdout and stderr
//! go to `<outputDir>/slurm-<job id>.<container>.log` (srun's `--output`, written by the
//! step itself) and its exit code to
//! `slurm-<job id>.<container>.exit`; the batch script's own output (its messages) stays in
//! `slurm-<job id>.log`. No environment value is written into the script ([`super::script`]).

use std::collections::BTreeMap;

use super::script::{
    BatchJob, Container, Runtime, cd_line, comment_safe, container_lines, runtime_lookup,
    transport_prefix,
};
use crate::provider::{ContainerRole, EnvVar, PodContainer, ProviderError, Workload};
use crate::vocab::shell::quote;

/// The options of each container's step (shell text): with a log file, the step's stdout and
/// stderr go straight to it (`--output` without `--error` takes both), while srun's own
/// messages ("task 0: Exited with exit code 3") stay in the job's output.
fn step_options(name: &str, logs: bool) -> String {
    let mut o = format!("--overlap --nodes=1 --ntasks=1 --job-name={name}");
    if logs {
        o.push_str(&format!(" --output=\"$(log {} log)\"", quote(name)));
    }
    o
}

/// Renders the job running every container of `w` ([`Workload::containers`]) as its own step;
/// `output_dir` is where the per-container logs go (none: everything in the job's output).
pub fn steps_job(
    w: &Workload,
    runtime: Runtime,
    output_dir: Option<&str>,
) -> Result<BatchJob, ProviderError> {
    check_containers(&w.containers)?;
    let gpus = w.gpu.as_ref().is_some_and(|g| g.count > 0);
    let mut env = StepEnv::of(&w.containers);
    let logs = output_dir.is_some();
    let login = super::pull::login(w, runtime, &env.prefix)?;
    let mut out = prelude(w, runtime, output_dir, &env);
    if let Some(l) = login {
        out.push_str(&l.lines);
        env.environment.extend(l.environment);
    }
    // One function per container, run in a subshell: its variables, its directory, its step.
    for (i, (c, tr)) in w.containers.iter().zip(&env.transported).enumerate() {
        out.push_str(&container_function(i, c, tr, runtime, gpus, logs)?);
    }
    out.push_str(&run_function(logs));
    out.push_str(&stop_sidecars(logs));
    out.push_str(&run_containers(&w.containers));
    Ok(BatchJob {
        script: out,
        environment: env.environment,
    })
}

/// Refuses a container a step cannot run as written: a name that is no DNS label (it names
/// the step and its files), a variable the job's environment cannot carry, a NUL byte.
fn check_containers(containers: &[PodContainer]) -> Result<(), ProviderError> {
    let invalid = |message: String| ProviderError::Invalid { message };
    for c in containers {
        let dns_label = !c.name.is_empty()
            && c.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !dns_label {
            return Err(invalid(format!(
                "container name {:?} is not a DNS label",
                c.name
            )));
        }
        if let Some(bad) = c
            .env
            .iter()
            .find(|e| e.name.is_empty() || e.name.contains(['=', '\0']) || e.value.contains('\0'))
        {
            return Err(invalid(format!(
                "environment variable {:?} of container {:?} cannot be passed to a Slurm job \
                 (empty name, '=' or NUL)",
                bad.name, c.name
            )));
        }
        let words = c.command.iter().chain(&c.args);
        if words.chain(&c.working_dir).any(|a| a.contains('\0')) {
            return Err(invalid(format!(
                "the command or workingDir of container {:?} contains a NUL byte",
                c.name
            )));
        }
    }
    Ok(())
}

/// The pods' variables on their way through the job's environment: one transport name per
/// variable of each container (`<prefix><container>_<n>`).
struct StepEnv<'a> {
    prefix: String,
    /// Per container, in spec order: each variable with its transport name.
    transported: Vec<Vec<(&'a EnvVar, String)>>,
    /// Transport name -> value: the job's environment.
    environment: BTreeMap<String, String>,
}

impl<'a> StepEnv<'a> {
    /// The transport of every container's variables.
    fn of(containers: &'a [PodContainer]) -> Self {
        // Later duplicates win, as in Kubernetes.
        let envs: Vec<Vec<&EnvVar>> = containers
            .iter()
            .map(|c| {
                let mut env: Vec<&EnvVar> = Vec::new();
                for e in &c.env {
                    env.retain(|x| x.name != e.name);
                    env.push(e);
                }
                env
            })
            .collect();
        let all: Vec<&EnvVar> = envs.iter().flatten().copied().collect();
        let prefix = transport_prefix(&all);
        let transported: Vec<Vec<(&EnvVar, String)>> = envs
            .into_iter()
            .enumerate()
            .map(|(i, env)| {
                env.into_iter()
                    .enumerate()
                    .map(|(n, e)| (e, format!("{prefix}{i}_{n}")))
                    .collect()
            })
            .collect();
        let environment: BTreeMap<String, String> = transported
            .iter()
            .flatten()
            .map(|(e, t)| (t.clone(), e.value.clone()))
            .collect();
        StepEnv {
            prefix,
            transported,
            environment,
        }
    }
}

/// The script's first lines: what it runs, the lookups done before any pod variable counts,
/// the un-export of the transport variables and where each container's output goes.
fn prelude(w: &Workload, runtime: Runtime, output_dir: Option<&str>, env: &StepEnv<'_>) -> String {
    let prefix = &env.prefix;
    let names: Vec<&str> = w.containers.iter().map(|c| c.name.as_str()).collect();
    let mut out = String::from("#!/bin/bash\n");
    out.push_str(&format!(
        "# gpu-vk workload {} (pod {}/{}, containers {}): each container a job step\n",
        w.id,
        comment_safe(&w.namespace),
        comment_safe(&w.pod_name),
        names.join(", ")
    ));
    if !env.environment.is_empty() {
        out.push_str(&format!(
            "# The pod's variables come from the job's environment ({prefix}<container>_<n>), never from this script.\n"
        ));
    }
    out.push_str("set -eu\n");
    out.push_str(
        "srun=$(command -v srun) || { echo \"gpu-vk: srun is not installed on $(hostname)\" >&2; exit 127; }\n",
    );
    out.push_str(&runtime_lookup(runtime));
    if !env.environment.is_empty() {
        let keys: Vec<&str> = env.environment.keys().map(String::as_str).collect();
        out.push_str(&format!("export -n {}\n", keys.join(" ")));
    }
    match output_dir {
        Some(dir) => {
            out.push_str(&format!("out={}\n", quote(dir)));
            out.push_str(
                "# Container NAME's output and exit code: $out/slurm-<job id>.NAME.log and .exit\n\
                 log() { printf '%s/slurm-%s.%s.%s' \"$out\" \"$SLURM_JOB_ID\" \"$1\" \"$2\"; }\n",
            );
        }
        None => out.push_str("# No outputDir: every container's output goes to the job's.\n"),
    }
    out
}

/// `container_<i>`: the shell function running container `i` as a step, with its own variables
/// (`tr`) and directory.
fn container_function(
    i: usize,
    c: &PodContainer,
    tr: &[(&EnvVar, String)],
    runtime: Runtime,
    gpus: bool,
    logs: bool,
) -> Result<String, ProviderError> {
    let spec = Container {
        image: &c.image,
        command: &c.command,
        args: &c.args,
        working_dir: c.working_dir.as_deref(),
    };
    let step = step_options(&c.name, logs);
    let (setup, line) =
        container_lines(&spec, runtime, gpus, tr, Some(&step)).map_err(|e| in_container(e, c))?;
    let mut out = format!("# {} {}\n", role(c.role), c.name);
    out.push_str(&format!("container_{i}() {{\n"));
    for l in setup.lines() {
        out.push_str(&format!("  {l}\n"));
    }
    if let Some(cd) = cd_line(&spec, runtime) {
        out.push_str(&format!("  {} || exit\n", cd.trim_end()));
    }
    out.push_str(&format!("  exec {line}\n}}\n"));
    Ok(out)
}

/// `run N NAME`: container N to its end, its exit code in its file.
fn run_function(logs: bool) -> String {
    let record = if logs {
        "  echo \"$code\" >\"$(log \"$2\" exit)\"\n"
    } else {
        ""
    };
    format!(
        "run() {{\n  local code=0\n  (\"container_$1\") || code=$?\n{record}  return \"$code\"\n}}\n"
    )
}

/// `stop_sidecars`: SIGTERM to every sidecar started so far, then their end, 30 s at most.
fn stop_sidecars(logs: bool) -> String {
    // SIGTERM to a step's srun would kill the step ("forcing job termination", SIGKILL);
    // `scancel --signal=TERM <job>.<step>` delivers SIGTERM to its tasks, as the kubelet stops
    // a sidecar. The step is found by its name with the squeue and scancel beside that srun;
    // without them (the emulator's srun runs the command in place) the pid gets SIGTERM.
    // After 30 s (the default terminationGracePeriodSeconds) what is left is killed. A
    // sidecar's exit code is recorded like the others' (143 or 137 when the signal ended it).
    let record_sidecar = if logs {
        "    echo \"$code\" >\"$(log \"${sidecar_names[$i]}\" exit)\"\n"
    } else {
        ""
    };
    let mut out = String::from(
        "sidecars=()\n\
         sidecar_names=()\n\
         stop_sidecars() {\n  \
           local i step code\n  \
           for i in \"${!sidecars[@]}\"; do\n    \
             step=\n    \
             if [ -x \"${srun%/*}/squeue\" ] && [ -x \"${srun%/*}/scancel\" ]; then\n      \
               step=$(\"${srun%/*}/squeue\" -h -s -j \"$SLURM_JOB_ID\" -o '%i %j' 2>/dev/null \
                 | awk -v n=\"${sidecar_names[$i]}\" '$2 == n { print $1; exit }') || step=\n    \
             fi\n    \
             if [ -n \"$step\" ] && \"${srun%/*}/scancel\" --signal=TERM \"$step\"; then :\n    \
             else kill -TERM \"${sidecars[$i]}\" 2>/dev/null || true\n    \
             fi\n  \
           done\n  \
           for _ in $(seq 300); do\n    \
             alive=0\n    \
             for i in \"${!sidecars[@]}\"; do kill -0 \"${sidecars[$i]}\" 2>/dev/null && alive=1; done\n    \
             [ \"$alive\" -eq 1 ] || break\n    \
             sleep 0.1\n  \
           done\n  \
           for i in \"${!sidecars[@]}\"; do kill -KILL \"${sidecars[$i]}\" 2>/dev/null || true; done\n  \
           for i in \"${!sidecars[@]}\"; do\n    \
             code=0; wait \"${sidecars[$i]}\" || code=$?\n",
    );
    out.push_str(record_sidecar);
    out.push_str("  done\n}\n");
    out
}

/// The script's body: the init containers in order (sidecars started in their place), then
/// the regular containers side by side, the job's exit code that of the first that failed.
fn run_containers(containers: &[PodContainer]) -> String {
    let mut out = String::new();
    let mut regular = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let name = quote(&c.name);
        match c.role {
            ContainerRole::Init => out.push_str(&format!(
                "code=0; run {i} {name} || code=$?\n\
                 if [ \"$code\" -ne 0 ]; then\n  \
                   echo \"gpu-vk: init container {} exited with $code\" >&2\n  \
                   stop_sidecars\n  exit \"$code\"\nfi\n",
                c.name
            )),
            ContainerRole::Sidecar => {
                // `exec` in the function makes the background subshell the step's srun: the
                // pid SIGTERM goes to.
                out.push_str(&format!(
                    "container_{i} &\nsidecars+=(\"$!\")\nsidecar_names+=({name})\n"
                ));
            }
            ContainerRole::Regular => regular.push((i, name)),
        }
    }
    out.push_str("pids=()\n");
    for (i, name) in &regular {
        out.push_str(&format!("run {i} {name} &\npids+=(\"$!\")\n"));
    }
    out.push_str(
        "status=0\n\
         for pid in \"${pids[@]}\"; do\n  \
           code=0; wait \"$pid\" || code=$?\n  \
           if [ \"$status\" -eq 0 ]; then status=$code; fi\n\
         done\n\
         stop_sidecars\n\
         exit \"$status\"\n",
    );
    out
}

fn role(r: ContainerRole) -> &'static str {
    match r {
        ContainerRole::Init => "init container",
        ContainerRole::Sidecar => "sidecar",
        ContainerRole::Regular => "container",
    }
}

fn in_container(e: ProviderError, c: &PodContainer) -> ProviderError {
    match e {
        ProviderError::Invalid { message } => ProviderError::Invalid {
            message: format!("container {:?}: {message}", c.name),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Owner;
    use std::path::{Path, PathBuf};

    fn container(
        name: &str,
        role: ContainerRole,
        script: &str,
        env: &[(&str, &str)],
    ) -> PodContainer {
        PodContainer {
            name: name.into(),
            role,
            image: "busybox".into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            args: vec![],
            working_dir: None,
            env: env
                .iter()
                .map(|(n, v)| EnvVar {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    fn workload(containers: Vec<PodContainer>) -> Workload {
        Workload {
            id: Owner::new("cluster-a", "vk-node")
                .workload_id("8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b")
                .unwrap(),
            namespace: "ml".into(),
            pod_name: "serve-0".into(),
            container_name: containers
                .iter()
                .find(|c| c.role == ContainerRole::Regular)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            image: "busybox".into(),
            command: vec![],
            args: vec![],
            working_dir: None,
            env: vec![],
            gpu: None,
            cpu_millis: None,
            memory_bytes: None,
            ports: vec![],
            options: BTreeMap::new(),
            containers,
            hardening: Default::default(),
            registry_logins: Vec::new(),
        }
    }

    /// A scratch directory: the job's working directory and output directory, with an `srun`
    /// that runs its command in place (what srun does inside an allocation).
    fn scratch(name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("vk-steps-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let srun = dir.join("bin/srun");
        std::fs::write(
            &srun,
            "#!/bin/bash\nwhile [ $# -gt 0 ]; do case $1 in --) shift; break;; --output=*) exec >\"${1#--output=}\" 2>&1; shift;; -*) shift;; *) break;; esac; done\nexec \"$@\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// Runs the job's script as slurmd would (job environment only), returns its exit code.
    fn run(job: &BatchJob, dir: &Path) -> i32 {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&job.script)
            .env_clear()
            .envs(&job.environment)
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", dir.join("bin").display()),
            )
            .env("SLURM_JOB_ID", "42")
            .current_dir(dir)
            .output()
            .expect("bash runs");
        out.status.code().unwrap_or(-1)
    }

    fn file(dir: &Path, name: &str, kind: &str) -> Option<String> {
        std::fs::read_to_string(dir.join(format!("slurm-42.{name}.{kind}"))).ok()
    }

    fn pod() -> Vec<PodContainer> {
        vec![
            container(
                "logs",
                ContainerRole::Sidecar,
                "echo shipping; trap 'echo stopped; exit 0' TERM; while :; do sleep 0.05; done",
                &[],
            ),
            container(
                "fetch",
                ContainerRole::Init,
                "sleep 0.3; echo fetched > model; echo fetch done",
                &[("WHO", "init")],
            ),
            // Side by side: "main" waits for a file "metrics" makes, and fails with 3.
            container(
                "main",
                ContainerRole::Regular,
                "cat model; timeout 5 sh -c 'until [ -f up ]; do sleep 0.05; done' && echo main $WHO ${TOKEN-none}; exit 3",
                &[("WHO", "server")],
            ),
            container(
                "metrics",
                ContainerRole::Regular,
                "touch up; echo metrics $WHO $TOKEN",
                &[("WHO", "exporter"), ("TOKEN", "it's s3cret")],
            ),
        ]
    }

    #[test]
    fn init_containers_run_first_then_the_containers_side_by_side_each_with_its_log() {
        let dir = scratch("order");
        let w = workload(pod());
        let job = steps_job(&w, Runtime::Bare, Some(&dir.to_string_lossy())).unwrap();
        assert!(!job.script.contains("s3cret"), "a value is in the script");
        assert!(
            job.script.contains(
                "\"$srun\" --overlap --nodes=1 --ntasks=1 --job-name=main \
                 --output=\"$(log 'main' log)\" -- sh -c"
            ),
            "{}",
            job.script
        );
        // The job fails with the failing container's code.
        assert_eq!(run(&job, &dir), 3, "{}", job.script);
        assert_eq!(file(&dir, "fetch", "log").as_deref(), Some("fetch done\n"));
        // The init container ran before; the two containers ran at once; each its own env.
        assert_eq!(
            file(&dir, "main", "log").as_deref(),
            Some("fetched\nmain server none\n")
        );
        assert_eq!(
            file(&dir, "metrics", "log").as_deref(),
            Some("metrics exporter it's s3cret\n")
        );
        // The sidecar ran beside them and was stopped after they ended.
        assert_eq!(
            file(&dir, "logs", "log").as_deref(),
            Some("shipping\nstopped\n")
        );
        // The sidecar's trap exits 0 on SIGTERM: its own code, not the job's.
        for (name, code) in [
            ("fetch", "0"),
            ("main", "3"),
            ("metrics", "0"),
            ("logs", "0"),
        ] {
            assert_eq!(
                file(&dir, name, "exit").as_deref(),
                Some(format!("{code}\n").as_str()),
                "{name}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failing_init_container_ends_the_job_before_the_containers() {
        let dir = scratch("init-fails");
        let mut containers = pod();
        containers[1] = container(
            "fetch",
            ContainerRole::Init,
            "sleep 0.3; echo no model; exit 5",
            &[],
        );
        let job = steps_job(
            &workload(containers),
            Runtime::Bare,
            Some(&dir.to_string_lossy()),
        )
        .unwrap();
        assert_eq!(run(&job, &dir), 5);
        assert_eq!(file(&dir, "fetch", "exit").as_deref(), Some("5\n"));
        assert_eq!(file(&dir, "logs", "exit").as_deref(), Some("0\n"));
        assert_eq!(file(&dir, "main", "exit"), None, "never ran");
        assert_eq!(
            file(&dir, "main", "log"),
            None,
            "the containers never start"
        );
        assert_eq!(file(&dir, "metrics", "log"), None);
        assert_eq!(
            file(&dir, "logs", "log").as_deref(),
            Some("shipping\nstopped\n")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_container_succeeding_succeeds_and_without_output_dir_all_goes_to_the_job() {
        let dir = scratch("ok");
        let containers = vec![
            container("fetch", ContainerRole::Init, "echo one", &[]),
            container("main", ContainerRole::Regular, "echo two", &[]),
        ];
        let job = steps_job(&workload(containers), Runtime::Bare, None).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&job.script)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", dir.join("bin").display()),
            )
            .env("SLURM_JOB_ID", "42")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn steps_script() {
        let job = steps_job(&workload(pod()), Runtime::Bare, Some("/shared/out")).unwrap();
        insta::assert_snapshot!("steps", job.script);
    }

    #[test]
    fn enroot_steps_take_the_step_options_and_names_must_be_labels() {
        let w = workload(pod());
        let job = steps_job(&w, Runtime::Enroot, None).unwrap();
        assert!(
            job.script.contains(
                "exec \"$runtime\" --overlap --nodes=1 --ntasks=1 --job-name=fetch --container-image=busybox"
            ),
            "{}",
            job.script
        );
        let mut bad = pod();
        bad[0].name = "../x".into();
        assert!(matches!(
            steps_job(&workload(bad), Runtime::Bare, None),
            Err(ProviderError::Invalid { .. })
        ));
    }
}
