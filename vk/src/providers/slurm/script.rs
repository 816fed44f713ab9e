//! Pod to batch job: a pure translation of the container (command, args, env, working
//! directory, image) into the `#!/bin/bash` script a Slurm job runs, through the configured
//! container runtime, and the job environment that carries the pod's variables.
//!
//! No environment value is written into the script: Secret values must not sit in the one
//! artefact Slurm sites copy around (`AccountingStoreFlags=job_script` archives scripts in
//! slurmdbd, job_submit plugins and prologs read or save them, `scontrol write batch_script`
//! writes one to a file). Each value travels in the submission's `environment` field (the
//! `job_desc_msg` `environment` of slurmrestd's data_parser, "Environment variables to be set
//! for the job", `src/plugins/data_parser/v0.0.41/parsers.c` in SchedMD/slurm; an object in
//! v0.0.38) under a transport name (`_GPUVK_ENV_<n>`), and the script copies it to the pod's
//! name: `export MODE="$_GPUVK_ENV_0"`. Slurm guards a job's environment as it guards its
//! script: only the job's user and Slurm operators may read either (`scontrol`:
//! `_slurm_rpc_dump_batch_script` in `src/slurmctld/proc_req.c`; `sacct --env-vars` and
//! `--batch-script`: `as_mysql_jobacct_process.c`), and slurmdbd stores environments only with
//! `AccountingStoreFlags=job_env`. (slurmctld logs the first three entries at `debug3`, in its
//! own log.) An env file sourced by the script would need a file system the VK writes as the
//! job's user; the VK only talks to slurmrestd.
//!
//! Transport names, not the pod's own, because the job's environment is the environment of
//! the batch shell itself: a pod's `BASH_ENV`, `SHELLOPTS` or `PATH` would change how the
//! script runs (and where the runtime is looked up) before its first line. The transport
//! variables are un-exported (`export -n`) before the command runs, so the container sees the
//! pod's variables only; a missing one stops the script (`set -u`).
//!
//! The names and the rest of the script are single-quoted (`'...'`, a `'` becomes `'\''`),
//! the one quoting form in which bash interprets nothing, so any byte except NUL survives
//! intact. Variable names that are not shell identifiers (Kubernetes allows `my.var`) cannot be
//! `export`ed; they are passed through `env NAME=VALUE` on the command line instead.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::provider::{EnvVar, ProviderError, Workload};
use crate::vocab::shell::{quote, shell_join};

/// How the image is run on the compute node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// No container: the command runs directly on the node (the image is ignored).
    #[default]
    Bare,
    /// `apptainer exec docker://IMAGE ...` (Singularity's successor).
    Apptainer,
    /// NVIDIA enroot through the pyxis SPANK plugin: `srun --container-image=IMAGE ...`.
    Enroot,
}

/// A batch job: its script, and the job environment the script reads the pod's values from.
#[derive(Clone, PartialEq, Eq)]
pub struct BatchJob {
    pub script: String,
    /// Transport name -> value of each pod variable.
    pub environment: BTreeMap<String, String>,
}

impl std::fmt::Debug for BatchJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchJob")
            .field("script", &self.script)
            .field("environment", &self.environment.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The prefix of the transport names: one no pod variable starts with.
pub(super) fn transport_prefix(env: &[&EnvVar]) -> String {
    let mut prefix = String::from("_GPUVK_ENV_");
    while env.iter().any(|e| e.name.starts_with(&prefix)) {
        prefix.insert(0, '_');
    }
    prefix
}

/// Renders the batch job for `w`. Pure: the same workload always gives the same job.
pub fn batch_job(w: &Workload, runtime: Runtime) -> Result<BatchJob, ProviderError> {
    let invalid = |message: String| ProviderError::Invalid { message };
    if let Some(bad) = w
        .env
        .iter()
        .find(|e| e.name.is_empty() || e.name.contains(['=', '\0']) || e.value.contains('\0'))
    {
        return Err(invalid(format!(
            "environment variable {:?} cannot be passed to a Slurm job (empty name, '=' or NUL)",
            bad.name
        )));
    }
    if let Some(arg) = w.command.iter().chain(&w.args).find(|a| a.contains('\0')) {
        return Err(invalid(format!(
            "command argument {:?} contains a NUL byte",
            arg.replace('\0', "\\0")
        )));
    }
    if w.working_dir.as_deref().is_some_and(|d| d.contains('\0')) {
        return Err(invalid("workingDir contains a NUL byte".into()));
    }
    let gpus = w.gpu.as_ref().is_some_and(|g| g.count > 0);

    // Later duplicates win, as in Kubernetes.
    let mut env: Vec<&EnvVar> = Vec::new();
    for e in &w.env {
        env.retain(|x| x.name != e.name);
        env.push(e);
    }
    let prefix = transport_prefix(&env);
    let transported: Vec<(&EnvVar, String)> = env
        .into_iter()
        .enumerate()
        .map(|(i, e)| (e, format!("{prefix}{i}")))
        .collect();
    let mut environment: BTreeMap<String, String> = transported
        .iter()
        .map(|(e, t)| (t.clone(), e.value.clone()))
        .collect();
    let login = super::pull::login(w, runtime, &prefix)?;
    let keep_shell = login.as_ref().is_some_and(|l| l.keep_shell);
    let mut out = String::from("#!/bin/bash\n");
    out.push_str(&format!(
        "# gpu-vk workload {} (pod {}/{}, container {})\n",
        w.id,
        comment_safe(&w.namespace),
        comment_safe(&w.pod_name),
        comment_safe(&w.container_name)
    ));
    if !transported.is_empty() {
        out.push_str(&format!(
            "# The pod's variables come from the job's environment ({prefix}<n>), never from this script.\n"
        ));
    }
    out.push_str("set -eu\n");
    out.push_str(&runtime_lookup(runtime));
    if let Some(l) = login {
        out.push_str(&l.lines);
        environment.extend(l.environment);
    }
    let c = Container {
        image: &w.image,
        command: &w.command,
        args: &w.args,
        working_dir: w.working_dir.as_deref(),
    };
    let (setup, line) = container_lines(&c, runtime, gpus, &transported, None)?;
    out.push_str(&setup);
    if !transported.is_empty() {
        let names: Vec<&str> = transported.iter().map(|(_, t)| t.as_str()).collect();
        out.push_str(&format!("export -n {}\n", names.join(" ")));
    }
    if let Some(cd) = cd_line(&c, runtime) {
        out.push_str(&cd);
    }
    // A shell that must clean up after the runtime (`pull.rs`) runs it; else it becomes it.
    let exec = if keep_shell { "" } else { "exec " };
    out.push_str(&format!("{exec}{line}\n"));
    Ok(BatchJob {
        script: out,
        environment,
    })
}

/// What [`container_lines`] renders of one container.
pub(super) struct Container<'a> {
    pub image: &'a str,
    pub command: &'a [String],
    pub args: &'a [String],
    pub working_dir: Option<&'a str>,
}

/// The line looking the container runtime up (`runtime=...`), before the pod's variables
/// (PATH among them, meant for inside the container) are exported; empty for `bare`.
pub(super) fn runtime_lookup(runtime: Runtime) -> String {
    let Some((name, lookup)) = runtime_tool(runtime) else {
        return String::new();
    };
    format!(
        "runtime=$({lookup}) || {{ echo \"gpu-vk: {name} is not installed on $(hostname)\" >&2; exit 127; }}\n"
    )
}

fn runtime_tool(runtime: Runtime) -> Option<(&'static str, &'static str)> {
    match runtime {
        Runtime::Bare => None,
        Runtime::Apptainer => Some((
            "apptainer",
            "command -v apptainer || command -v singularity",
        )),
        Runtime::Enroot => Some(("srun", "command -v srun")),
    }
}

/// `cd` to the working directory where the runtime does not take it as an option (`bare`).
pub(super) fn cd_line(c: &Container<'_>, runtime: Runtime) -> Option<String> {
    match (runtime, c.working_dir) {
        (Runtime::Bare, Some(dir)) => Some(format!("cd {}\n", quote(dir))),
        _ => None,
    }
}

/// The `export` lines of the container's variables (copied from their transport names) and
/// the command line running it (the words after `exec`). `step`: the options (shell text)
/// launching it as a job step, run as `"$srun" <step> -- <command>`; with the enroot runtime
/// srun is the runtime itself and takes them before its own.
pub(super) fn container_lines(
    c: &Container<'_>,
    runtime: Runtime,
    gpus: bool,
    transported: &[(&EnvVar, String)],
    step: Option<&str>,
) -> Result<(String, String), ProviderError> {
    type Transported<'a> = Vec<&'a (&'a EnvVar, String)>;
    let (exportable, odd): (Transported<'_>, Transported<'_>) = transported
        .iter()
        .partition(|(e, _)| exportable_name(&e.name));
    let mut setup = String::new();
    for (e, t) in &exportable {
        setup.push_str(&format!("export {}=\"${t}\"\n", e.name));
    }
    // Names bash cannot (or must not) export go through env(1) on the command line; their
    // values are expanded there from the (no longer exported) transport variables.
    let mut prefix_words: Vec<String> = Vec::new();
    if !odd.is_empty() {
        prefix_words.push("/usr/bin/env".into());
        prefix_words.extend(
            odd.iter()
                .map(|(e, t)| format!("{}\"${t}\"", quote(&format!("{}=", e.name)))),
        );
    }
    let names: Vec<&str> = exportable.iter().map(|(e, _)| e.name.as_str()).collect();
    let words = runtime_words(c, runtime, gpus, &names, step)?;
    let line = command_line(runtime, step, prefix_words.join(" "), &words);
    Ok((setup, line))
}

/// What the runtime is given: its options for `c`, then the container's command and args
/// (`bare`: the command alone). `exported`: the variables enroot must carry into the container.
fn runtime_words(
    c: &Container<'_>,
    runtime: Runtime,
    gpus: bool,
    exported: &[&str],
    step: Option<&str>,
) -> Result<Vec<String>, ProviderError> {
    let invalid = |message: String| ProviderError::Invalid { message };
    let user_words: Vec<String> = c.command.iter().chain(c.args).cloned().collect();
    let mut words: Vec<String> = Vec::new();
    match runtime {
        Runtime::Bare => {
            if c.command.is_empty() {
                return Err(invalid(
                    "the bare Slurm runtime runs the container's command directly, but the pod \
                     sets no command (the image's entrypoint is unknown without a container \
                     runtime)"
                        .into(),
                ));
            }
            words.extend(user_words);
        }
        Runtime::Apptainer => {
            // `run` keeps the image's entrypoint (args only); `exec` replaces it.
            words.push(if c.command.is_empty() { "run" } else { "exec" }.into());
            if gpus {
                words.push("--nv".into());
            }
            if let Some(dir) = c.working_dir {
                words.push("--pwd".into());
                words.push(dir.to_owned());
            }
            words.push(apptainer_image(c.image));
            words.extend(user_words);
        }
        Runtime::Enroot => {
            if c.command.is_empty() {
                return Err(invalid(
                    "the enroot (pyxis) Slurm runtime needs the pod's command: srun does not \
                     run an image's entrypoint"
                        .into(),
                ));
            }
            if step.is_none() {
                words.push("--ntasks=1".into());
            }
            words.push(format!("--container-image={}", pyxis_image(c.image)));
            if let Some(dir) = c.working_dir {
                words.push(format!("--container-workdir={dir}"));
            }
            // The pod's variables override what the image sets.
            if !exported.is_empty() {
                words.push(format!("--container-env={}", exported.join(",")));
            }
            words.extend(user_words);
        }
    }
    Ok(words)
}

/// The command line in the order its parts take effect: the step's srun (with enroot, srun is
/// the runtime and takes the step's options itself), env(1) with the odd names (`env_prefix`),
/// the runtime, then `words`.
fn command_line(
    runtime: Runtime,
    step: Option<&str>,
    env_prefix: String,
    words: &[String],
) -> String {
    let mut line = String::new();
    let mut push = |part: String| {
        if !part.is_empty() {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&part);
        }
    };
    if runtime != Runtime::Enroot
        && let Some(step) = step
    {
        push("\"$srun\"".into());
        push(step.to_owned());
        push("--".into());
    }
    push(env_prefix);
    if runtime_tool(runtime).is_some() {
        push("\"$runtime\"".into());
    }
    if runtime == Runtime::Enroot
        && let Some(step) = step
    {
        push(step.to_owned());
    }
    push(shell_join(words.iter().map(String::as_str)));
    line
}

/// Variables bash itself maintains, marks read-only, or reads to change its own behaviour:
/// assigning them in the script would fail or misbehave, so they go through env(1).
const SHELL_SPECIAL: &[&str] = &[
    "_",
    "CDPATH",
    "DIRSTACK",
    "ENV",
    "EPOCHREALTIME",
    "EPOCHSECONDS",
    "EUID",
    "FUNCNAME",
    "GLOBIGNORE",
    "GROUPS",
    "HISTCMD",
    "IFS",
    "LINENO",
    "OLDPWD",
    "OPTARG",
    "OPTIND",
    "PIPESTATUS",
    "POSIXLY_CORRECT",
    "PPID",
    "PS4",
    "PWD",
    "RANDOM",
    "SECONDS",
    "SHELLOPTS",
    "SHLVL",
    "SRANDOM",
    "UID",
];

/// `[A-Za-z_][A-Za-z0-9_]*` and not special to bash: a name the script can `export`.
pub(super) fn exportable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let identifier = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    identifier && !name.starts_with("BASH") && !SHELL_SPECIAL.contains(&name)
}

/// Pod names are DNS labels, but a comment line must never be broken by anything.
pub(super) fn comment_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Apptainer pulls OCI images through the `docker://` transport; explicit transports and
/// local `.sif` files are kept as they are.
fn apptainer_image(image: &str) -> String {
    if image.contains("://") || image.starts_with('/') || image.ends_with(".sif") {
        image.to_owned()
    } else {
        format!("docker://{image}")
    }
}

/// Pyxis names images `[REGISTRY#]IMAGE[:TAG]`: the registry host is separated by `#`, not
/// `/` (`ghcr.io/acme/train:1` becomes `ghcr.io#acme/train:1`; Docker Hub names stay).
fn pyxis_image(image: &str) -> String {
    let image = image.strip_prefix("docker://").unwrap_or(image);
    if image.contains('#') {
        return image.to_owned();
    }
    match image.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            format!("{host}#{rest}")
        }
        _ => image.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Owner;
    use crate::provider::GpuRequest;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn workload() -> Workload {
        Workload {
            id: Owner::new("cluster-a", "vk-node")
                .workload_id("8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b")
                .unwrap(),
            namespace: "ml".into(),
            pod_name: "train-0".into(),
            container_name: "main".into(),
            image: "ghcr.io/acme/train:1.2".into(),
            command: vec!["python".into(), "-m".into(), "train".into()],
            args: vec!["--name".into(), "it's big".into(), "$HOME".into()],
            working_dir: Some("/work dir".into()),
            env: vec![
                EnvVar {
                    name: "MODE".into(),
                    value: "fast".into(),
                },
                EnvVar {
                    name: "QUOTE".into(),
                    value: "a'b\"c $(rm -rf /) `x`\nline2".into(),
                },
                EnvVar {
                    name: "my.dotted".into(),
                    value: "v".into(),
                },
                EnvVar {
                    name: "MODE".into(),
                    value: "slow".into(),
                },
            ],
            gpu: Some(GpuRequest {
                gpu_type: None,
                count: 2,
            }),
            cpu_millis: None,
            memory_bytes: None,
            ports: vec![],
            options: BTreeMap::new(),
            containers: Vec::new(),
            hardening: Default::default(),
            registry_logins: Vec::new(),
        }
    }

    fn script(w: &Workload, runtime: Runtime) -> String {
        batch_job(w, runtime).unwrap().script
    }

    #[test]
    fn no_value_is_written_into_the_script() {
        const SECRET: &str = "s3cr3t-Value-9c1e";
        const ODD: &str = "0dd-s3cr3t-77";
        let mut w = workload();
        w.command = vec!["/usr/bin/printenv".into()];
        w.args.clear();
        w.working_dir = None;
        w.env = vec![
            EnvVar {
                name: "HF_TOKEN".into(),
                value: SECRET.into(),
            },
            EnvVar {
                name: "my.token".into(),
                value: ODD.into(),
            },
            // A pod variable that looks like a transport name moves the transport names away.
            EnvVar {
                name: "_GPUVK_ENV_0".into(),
                value: "mine".into(),
            },
        ];
        for runtime in [Runtime::Bare, Runtime::Apptainer, Runtime::Enroot] {
            let job = batch_job(&w, runtime).unwrap();
            assert!(
                !job.script.contains(SECRET) && !job.script.contains(ODD),
                "{runtime:?}: a value is in the script:\n{}",
                job.script
            );
            let values: Vec<&str> = job.environment.values().map(String::as_str).collect();
            assert_eq!(values, [SECRET, ODD, "mine"], "{runtime:?}");
            assert!(
                job.environment
                    .keys()
                    .all(|k| k.starts_with("__GPUVK_ENV_")),
                "{:?}",
                job.environment.keys()
            );
            assert!(!format!("{job:?}").contains(SECRET), "Debug shows a value");
        }
        // The command gets the pod's variables, and no transport variable.
        let job = batch_job(&w, Runtime::Bare).unwrap();
        let out = String::from_utf8(run_bash(&job)).unwrap();
        assert!(out.contains(&format!("HF_TOKEN={SECRET}\n")), "{out}");
        assert!(out.contains(&format!("my.token={ODD}\n")), "{out}");
        assert!(out.contains("_GPUVK_ENV_0=mine\n"), "{out}");
        assert!(
            !out.contains("__GPUVK_ENV_"),
            "transport variables leak: {out}"
        );
        // Without its environment the job stops instead of running with empty values.
        let mut bare = job.clone();
        bare.environment.clear();
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(&bare.script)
            .env_clear()
            .output()
            .expect("bash runs")
            .status;
        assert!(!status.success());
    }

    #[test]
    fn bare_script() {
        insta::assert_snapshot!("bare", script(&workload(), Runtime::Bare));
    }

    #[test]
    fn apptainer_script() {
        insta::assert_snapshot!("apptainer", script(&workload(), Runtime::Apptainer));
        let mut w = workload();
        w.command.clear();
        w.working_dir = None;
        w.gpu = None;
        insta::assert_snapshot!("apptainer_entrypoint", script(&w, Runtime::Apptainer));
    }

    #[test]
    fn enroot_script() {
        insta::assert_snapshot!("enroot", script(&workload(), Runtime::Enroot));
    }

    #[test]
    fn refuses_what_cannot_run() {
        let mut w = workload();
        w.command.clear();
        assert!(matches!(
            batch_job(&w, Runtime::Bare),
            Err(ProviderError::Invalid { .. })
        ));
        assert!(matches!(
            batch_job(&w, Runtime::Enroot),
            Err(ProviderError::Invalid { .. })
        ));
        let mut w = workload();
        w.env.push(EnvVar {
            name: "NUL".into(),
            value: "a\0b".into(),
        });
        assert!(matches!(
            batch_job(&w, Runtime::Bare),
            Err(ProviderError::Invalid { .. })
        ));
    }

    #[test]
    fn image_names_per_runtime() {
        assert_eq!(pyxis_image("ghcr.io/acme/train:1"), "ghcr.io#acme/train:1");
        assert_eq!(pyxis_image("localhost:5000/x"), "localhost:5000#x");
        assert_eq!(pyxis_image("ubuntu:22.04"), "ubuntu:22.04");
        assert_eq!(pyxis_image("nvidia/cuda:12"), "nvidia/cuda:12");
        assert_eq!(
            pyxis_image("nvcr.io#nvidia/pytorch"),
            "nvcr.io#nvidia/pytorch"
        );
        assert_eq!(apptainer_image("ubuntu"), "docker://ubuntu");
        assert_eq!(apptainer_image("/images/x.sif"), "/images/x.sif");
        assert_eq!(apptainer_image("oras://r/x"), "oras://r/x");
    }

    /// Runs the whole script with bash in an environment of only the job's and returns its
    /// output.
    fn run_bash(job: &BatchJob) -> Vec<u8> {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&job.script)
            .env_clear()
            .envs(&job.environment)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn env_values_survive_bash(value in "[^\u{0}]{0,40}", name in "[A-Za-z_][A-Za-z0-9_.-]{0,12}") {
            let mut w = workload();
            w.command = vec!["/usr/bin/printenv".into(), name.clone()];
            w.args.clear();
            w.working_dir = None;
            w.env = vec![EnvVar { name: name.clone(), value: value.clone() }];
            let job = batch_job(&w, Runtime::Bare).unwrap();
            let got = run_bash(&job);
            prop_assert_eq!(got, format!("{value}\n").into_bytes(), "{}", job.script);
        }

        #[test]
        fn arguments_survive_bash(args in proptest::collection::vec("[^\u{0}]{0,20}", 0..5)) {
            let mut w = workload();
            w.command = vec!["printf".into(), "%s\\0".into()];
            w.args = args.clone();
            w.working_dir = None;
            w.env.clear();
            let job = batch_job(&w, Runtime::Bare).unwrap();
            let expected: Vec<u8> = if args.is_empty() {
                b"\0".to_vec()
            } else {
                args.iter().flat_map(|a| a.bytes().chain([0])).collect()
            };
            prop_assert_eq!(run_bash(&job), expected);
        }
    }
}
