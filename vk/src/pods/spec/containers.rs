//! Which containers of a pod run, and how: the main one, init containers and native sidecars,
//! those left out by annotation, and the one-container policy of providers that run one.

use super::*;
use crate::vocab::shell::quote;

/// The names in [`ANN_OMIT_CONTAINERS`], as written (empty entries dropped).
pub fn omitted(pod: &Pod) -> Vec<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_OMIT_CONTAINERS))
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The container the provider runs: the first of `spec.containers` not left out by
/// [`ANN_OMIT_CONTAINERS`] (validated by [`request`] to be the only one).
pub fn main_container(pod: &Pod) -> Option<&Container> {
    let omitted = omitted(pod);
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| !omitted.contains(&c.name.as_str()))
}

/// True for an init container that is a native sidecar (`restartPolicy: Always`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The init containers run before the main command (native sidecars excluded).
pub fn run_init_containers(pod: &Pod) -> Vec<&Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|v| v.iter().filter(|c| !is_sidecar(c)).collect())
        .unwrap_or_default()
}

/// Every container that runs, in the order a provider running each of them starts them: the
/// init containers (native sidecars among them) in their order, then the regular containers;
/// those listed in [`ANN_OMIT_CONTAINERS`] left out.
pub fn running_containers(pod: &Pod) -> Vec<&Container> {
    let omitted = omitted(pod);
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| !omitted.contains(&c.name.as_str()))
        .collect()
}

/// Checks the containers: the names in [`ANN_OMIT_CONTAINERS`], something left to run, no
/// privileged container or one without an image; then against the one-container policy
/// ([`one_container`]). Returns the main container and, when that policy refuses the pod,
/// why (only a provider running every container can take it).
pub(super) fn run_containers(pod: &Pod) -> Result<(&Container, Option<String>), SpecError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| SpecError("pod has no spec".into()))?;
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    let omitted = omitted(pod);
    for name in &omitted {
        let container = spec.containers.iter().any(|c| c.name == *name);
        let sidecar = inits.iter().any(|c| c.name == *name && is_sidecar(c));
        if !container && !sidecar {
            return Err(SpecError(format!(
                "annotation {ANN_OMIT_CONTAINERS} names {name:?}, which is not a container or \
                 a sidecar (init container with restartPolicy Always) of this pod"
            )));
        }
    }
    let run: Vec<&Container> = spec
        .containers
        .iter()
        .filter(|c| !omitted.contains(&c.name.as_str()))
        .collect();
    let Some(main) = run.first().copied() else {
        return Err(SpecError(format!(
            "annotation {ANN_OMIT_CONTAINERS} leaves out every container: nothing would run"
        )));
    };
    for c in running_containers(pod) {
        if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
            return Err(SpecError(format!(
                "container {:?}: privileged containers are not supported",
                c.name
            )));
        }
        if c.image.as_deref().unwrap_or_default().is_empty() {
            return Err(SpecError(format!("container {:?} has no image", c.name)));
        }
    }
    let one = one_container(pod, &run, main).err().map(|e| e.0);
    Ok((main, one))
}

/// The policy of providers that run one container (see `docs/status.md`, "Several
/// containers"): the others, and native sidecars, listed in [`ANN_OMIT_CONTAINERS`]; init
/// containers only where they can run before the main command in the same workload (same
/// image, own command, the main container's environment).
fn one_container(pod: &Pod, run: &[&Container], main: &Container) -> Result<(), SpecError> {
    let inits = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let omitted = omitted(pod);
    match run {
        [_] => {}
        more => {
            let names: Vec<String> = more.iter().map(|c| format!("{:?}", c.name)).collect();
            return Err(SpecError(format!(
                "pods with {} containers to run ({}) are not supported: a provider runs exactly \
                 one container; list the sidecars to leave out in {ANN_OMIT_CONTAINERS}",
                more.len(),
                names.join(", ")
            )));
        }
    }
    for c in inits {
        if is_sidecar(c) {
            if !omitted.contains(&c.name.as_str()) {
                return Err(SpecError(format!(
                    "init container {:?} is a sidecar (restartPolicy Always): a provider runs \
                     exactly one container; list it in {ANN_OMIT_CONTAINERS} to leave it out",
                    c.name
                )));
            }
            continue;
        }
        if c.image != main.image {
            return Err(SpecError(format!(
                "init container {:?} uses image {:?}, not the image of container {:?} ({:?}): \
                 init containers run before the main command, in the same workload, only with \
                 the same image",
                c.name,
                c.image.as_deref().unwrap_or_default(),
                main.name,
                main.image.as_deref().unwrap_or_default()
            )));
        }
        if c.command.as_ref().is_none_or(Vec::is_empty) {
            return Err(SpecError(format!(
                "init container {:?} has no command: it runs before the main command in one \
                 shell, so its command must be given (the image's entrypoint is not known here)",
                c.name
            )));
        }
        if c.env.as_ref().is_some_and(|e| !e.is_empty()) && c.env != main.env
            || c.env_from.as_ref().is_some_and(|e| !e.is_empty()) && c.env_from != main.env_from
        {
            return Err(SpecError(format!(
                "init container {:?} sets an environment of its own: it runs in the environment \
                 of container {:?}; give it none or the same",
                c.name, main.name
            )));
        }
        if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
            return Err(SpecError(format!(
                "init container {:?}: privileged containers are not supported",
                c.name
            )));
        }
    }
    if !run_init_containers(pod).is_empty() && main.command.as_ref().is_none_or(Vec::is_empty) {
        return Err(SpecError(format!(
            "container {:?} has no command: with init containers, they and then the main \
             command run in one shell, so its command must be given (the image's entrypoint is \
             not known here)",
            main.name
        )));
    }
    Ok(())
}

/// The command running the init containers in order (each in its working directory, the
/// first failure ending the workload with its exit code) and then the main command.
pub(super) fn with_init_containers(inits: &[&Container], main: &Container) -> Vec<String> {
    let line = |c: &Container| {
        let words: Vec<String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(|w| quote(w))
            .collect();
        words.join(" ")
    };
    let mut script = String::from("set -e\n");
    for c in inits {
        script.push_str(&format!("# init container {}\n", c.name.replace('\n', " ")));
        match &c.working_dir {
            Some(dir) => script.push_str(&format!("(cd {} && {})\n", quote(dir), line(c))),
            None => script.push_str(&format!("{}\n", line(c))),
        }
    }
    script.push_str(&format!("exec {}\n", line(main)));
    vec!["/bin/sh".into(), "-c".into(), script]
}
