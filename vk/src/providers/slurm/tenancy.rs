//! What a pod may not hand a Slurm job, whatever else it asks: its jobs run as the VK's one
//! Slurm user beside other namespaces' jobs, so a pod must not steer Slurm's own tools.
//! - No env name starting with `SLURM_`: Slurm's tools read them, and `SLURM_JOB_ID` (or
//!   `SLURM_JOBID`) set by a pod makes an `srun` inside its job attach to another job's
//!   allocation, where it can read that job's environment (its Secrets) and files.
//! - No command starting with `-` (an executable never does), and with the enroot runtime,
//!   which places the words right after `srun`'s own options, no first argument starting with
//!   `-` either: srun would read it as an option of its own (`--jobid=<another job>`). The
//!   other runtimes end srun's options with `--`.
//!
//! Checked in the pure job request, before any call to slurmrestd.

use super::script::Runtime;
use crate::provider::{EnvVar, Workload};

/// Why `w` may not run on Slurm with `runtime`, or `Ok`.
pub fn check(w: &Workload, runtime: Runtime) -> Result<(), String> {
    let main = (w.container_name.as_str(), &w.env, &w.command, &w.args);
    let others = w
        .containers
        .iter()
        .map(|c| (c.name.as_str(), &c.env, &c.command, &c.args));
    for (container, env, command, args) in std::iter::once(main).chain(others) {
        if let Some(e) = env.iter().find(|e| slurm_variable(e)) {
            return Err(format!(
                "container {container:?}: env {:?} sets a Slurm variable; Slurm's tools in the \
                 job would act on it (SLURM_JOB_ID attaches them to another job)",
                e.name
            ));
        }
        let first = match command.first() {
            None if runtime == Runtime::Enroot => args.first(),
            first => first,
        };
        if let Some(word) = first.filter(|w| w.starts_with('-')) {
            let word: String = word.chars().take(64).collect();
            return Err(format!(
                "container {container:?}: the command starts with {word:?}, which srun would \
                 read as an option of its own"
            ));
        }
    }
    Ok(())
}

fn slurm_variable(e: &EnvVar) -> bool {
    e.name.to_ascii_uppercase().starts_with("SLURM_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Owner;
    use crate::provider::{ContainerRole, EnvVar, PodContainer};

    fn workload(command: &[&str], env: &[&str]) -> Workload {
        let owner = Owner::new("c", "n");
        let id = owner
            .workload_id("8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b")
            .unwrap();
        Workload {
            id,
            namespace: "ns".into(),
            pod_name: "p".into(),
            container_name: "main".into(),
            image: "img".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|n| EnvVar {
                    name: (*n).into(),
                    value: "1".into(),
                })
                .collect(),
            args: vec![],
            working_dir: None,
            gpu: None,
            cpu_millis: None,
            memory_bytes: None,
            ports: vec![],
            options: Default::default(),
            containers: vec![],
            hardening: Default::default(),
            registry_logins: Vec::new(),
        }
    }

    #[test]
    fn slurm_variables_and_option_commands_are_refused() {
        let bare = Runtime::Bare;
        assert!(check(&workload(&["python", "-m", "x"], &["HF_TOKEN"]), bare).is_ok());
        for env in ["SLURM_JOB_ID", "SLURM_JOBID", "slurm_conf"] {
            let err = check(&workload(&["sh"], &[env]), bare).unwrap_err();
            assert!(err.contains(env), "{err}");
        }
        let attach = workload(&["--jobid=42", "cat", "/proc/1/environ"], &[]);
        let err = check(&attach, bare).unwrap_err();
        assert!(err.contains("--jobid=42"), "{err}");
        // The image's entrypoint with options as arguments: fine after srun's `--`, not with
        // enroot, where they would follow srun's options.
        let mut args_only = workload(&[], &[]);
        args_only.args = vec!["--model".into(), "llama".into()];
        assert!(check(&args_only, Runtime::Apptainer).is_ok());
        assert!(check(&args_only, Runtime::Enroot).is_err());
        // In another container of the pod too.
        let mut w = workload(&["sh"], &[]);
        w.containers.push(PodContainer {
            name: "side".into(),
            role: ContainerRole::Sidecar,
            image: "img".into(),
            command: vec!["-x".into()],
            args: vec![],
            working_dir: None,
            env: vec![],
        });
        assert!(check(&w, bare).unwrap_err().contains("\"side\""));
    }
}
