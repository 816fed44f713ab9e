//! Reads what a pod asks for: validates fields the VK cannot honour, parses the `gpu-vk.io/*`
//! annotations and resources, and builds the provider-neutral [`Workload`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::provider::{ContainerRole, GpuRequest, PodContainer, Workload};

pub use super::quantity::{parse_cpu, parse_memory};

/// Annotation prefix for everything the VK reads or writes on pods.
pub const PREFIX: &str = "gpu-vk.io/";
/// Pins the pod to one configured provider.
pub const ANN_PROVIDER: &str = "gpu-vk.io/provider";
/// Written by the VK: the provider chosen for this pod, so the choice survives restarts.
pub const ANN_ASSIGNED: &str = "gpu-vk.io/assigned-provider";
/// GPU type wanted (e.g. `A100-80GB`), or a comma-separated set of acceptable types in order
/// of preference (`H100,A100-80GB`); any type when absent.
pub const ANN_GPU_TYPE: &str = "gpu-vk.io/gpu-type";
/// The pod's dispatch policy (`preference` or `cheapest`), where `dispatch.podPolicy` allows.
pub const ANN_DISPATCH_POLICY: &str = "gpu-vk.io/dispatch-policy";
/// The pod's own start deadline in seconds (see `providers[].startDeadlineSeconds`).
pub const ANN_START_DEADLINE: &str = "gpu-vk.io/start-deadline-seconds";
/// Written by the VK: the dispatch decision and its inputs (policy, choice, prices).
pub const ANN_DISPATCH: &str = "gpu-vk.io/dispatch";
/// Containers and native sidecars the provider leaves out, comma-separated (`metrics,logs`):
/// a provider runs one container, and a chart's exporter or log shipper need not come along.
pub const ANN_OMIT_CONTAINERS: &str = "gpu-vk.io/omit-containers";
/// The resource name of GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Enrichment annotations passed to the adapter as options (`gpu-vk.io/<key>` -> `<key>`),
/// with a validator each.
/// Checks an option value.
type Validator = fn(&str) -> bool;

const OPTIONS: &[(&str, Validator)] = &[
    ("cloud", |v| !v.is_empty()),
    ("region", |v| !v.is_empty()),
    ("bid-price", |v| {
        v.parse::<f64>().is_ok_and(|p| p.is_finite() && p > 0.0)
    }),
    ("interruptible", |v| v == "true" || v == "false"),
    ("max-price-per-hour", |v| {
        v.parse::<f64>().is_ok_and(|p| p.is_finite() && p > 0.0)
    }),
    ("partition", |v| !v.is_empty()),
    ("account", |v| !v.is_empty()),
    ("qos", |v| !v.is_empty()),
    ("time-limit", |v| v.parse::<u32>().is_ok_and(|m| m > 0)),
    ("disk-gb", |v| v.parse::<u32>().is_ok_and(|g| g > 0)),
    // Read by the framework (`decide`), within the provider's ceiling.
    ("start-deadline-seconds", |v| {
        v.parse::<u64>().is_ok_and(|s| s > 0)
    }),
];

/// Why a pod cannot be run as it is. The message is shown to the user on the pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// What the pod asks for, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pinned_provider: Option<String>,
    pub gpu: Option<GpuRequest>,
    /// Every GPU type the pod accepts, in its order (empty: the one in `gpu`, or any).
    pub gpu_types: Vec<String>,
    /// The pod's own dispatch policy, if it names one.
    pub policy: Option<crate::config::DispatchPolicy>,
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub options: BTreeMap<String, String>,
    /// Why the one-container policy refuses the pod, when only a provider that runs every
    /// container ([`crate::provider::Capabilities::containers`]) can take it.
    pub steps_only: Option<String>,
}

/// Validates the pod and extracts its request.
pub fn request(pod: &Pod) -> Result<Request, SpecError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| SpecError("pod has no spec".into()))?;
    let (c, steps_only) = run_containers(pod)?;
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        return Err(SpecError(
            "hostNetwork, hostPID and hostIPC are not supported".into(),
        ));
    }
    for v in spec.volumes.iter().flatten() {
        let supported = v.projected.is_some() || v.empty_dir.is_some();
        if !supported {
            let kind = volume_kind(v);
            return Err(SpecError(format!(
                "volume {:?} of type {kind} is not supported: providers run outside the cluster \
                 (use env from ConfigMaps/Secrets, or emptyDir scratch space)",
                v.name
            )));
        }
    }
    if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
        return Err(SpecError(format!(
            "container {:?}: privileged containers are not supported",
            c.name
        )));
    }
    for rc in running_containers(pod) {
        if let Some(e) = rc
            .env
            .iter()
            .flatten()
            .find(|e| !crate::provider::is_env_name(&e.name))
        {
            let name: String = e.name.chars().take(64).collect();
            return Err(SpecError(format!(
                "container {:?}: env name {name:?} is not a variable name every provider takes \
                 (letters, digits and _, not starting with a digit; Vast would read it as a \
                 docker option)",
                rc.name
            )));
        }
    }
    if c.image.as_deref().unwrap_or_default().is_empty() {
        return Err(SpecError(format!("container {:?} has no image", c.name)));
    }

    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let mut options = BTreeMap::new();
    let mut pinned_provider = None;
    let mut gpu_type = None;
    let mut gpu_types = Vec::new();
    let mut policy = None;
    for (k, v) in &annotations {
        let Some(key) = k.strip_prefix(PREFIX) else {
            continue;
        };
        match k.as_str() {
            ANN_PROVIDER => {
                if v.is_empty() {
                    return Err(SpecError(format!("annotation {ANN_PROVIDER} is empty")));
                }
                pinned_provider = Some(v.clone());
            }
            ANN_ASSIGNED | ANN_DISPATCH | ANN_OMIT_CONTAINERS => {}
            ANN_GPU_TYPE => {
                let set: Vec<&str> = v.split(',').collect();
                if set
                    .iter()
                    .any(|t| t.is_empty() || t.contains(char::is_whitespace))
                {
                    return Err(SpecError(format!(
                        "annotation {ANN_GPU_TYPE} has invalid value {v:?} (a GPU type, or \
                         types separated by commas without spaces)"
                    )));
                }
                gpu_type = set.first().map(|t| (*t).to_owned());
                if set.len() > 1 {
                    gpu_types = set.iter().map(|t| (*t).to_owned()).collect();
                }
            }
            ANN_DISPATCH_POLICY => {
                policy = Some(match v.as_str() {
                    "preference" => crate::config::DispatchPolicy::Preference,
                    "cheapest" => crate::config::DispatchPolicy::Cheapest,
                    _ => {
                        return Err(SpecError(format!(
                            "annotation {ANN_DISPATCH_POLICY} has invalid value {v:?} \
                             (expected preference or cheapest)"
                        )));
                    }
                });
            }
            _ => match OPTIONS.iter().find(|(name, _)| *name == key) {
                Some((_, valid)) if valid(v) => {
                    // Adapters read options in snake_case (`bid-price` -> `bid_price`).
                    options.insert(key.replace('-', "_"), v.clone());
                }
                Some(_) => {
                    return Err(SpecError(format!("annotation {k} has invalid value {v:?}")));
                }
                None => {
                    let known: Vec<_> = OPTIONS.iter().map(|(n, _)| *n).collect();
                    return Err(SpecError(format!(
                        "unknown annotation {k} (known: provider, gpu-type, dispatch-policy, \
                         omit-containers, {})",
                        known.join(", ")
                    )));
                }
            },
        }
    }

    let res = c.resources.as_ref();
    let get = |name: &str| {
        res.and_then(|r| r.limits.as_ref().and_then(|l| l.get(name)))
            .or_else(|| res.and_then(|r| r.requests.as_ref().and_then(|l| l.get(name))))
            .map(|q| q.0.clone())
    };
    let gpu_count = match get(GPU_RESOURCE) {
        Some(q) => Some(
            q.parse::<u32>()
                .map_err(|_| SpecError(format!("{GPU_RESOURCE} {q:?} is not a whole number")))?,
        ),
        None => None,
    };
    let gpu = match (gpu_count, gpu_type) {
        (Some(0) | None, None) => None,
        (Some(0) | None, Some(t)) => Some(GpuRequest {
            gpu_type: Some(t),
            count: 1,
        }),
        (Some(n), t) => Some(GpuRequest {
            gpu_type: t,
            count: n,
        }),
    };
    let cpu_millis = get("cpu").map(|q| parse_cpu(&q)).transpose()?;
    let memory_bytes = get("memory").map(|q| parse_memory(&q)).transpose()?;
    Ok(Request {
        pinned_provider,
        gpu,
        gpu_types,
        policy,
        cpu_millis,
        memory_bytes,
        options,
        steps_only,
    })
}

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
fn run_containers(pod: &Pod) -> Result<(&Container, Option<String>), SpecError> {
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

/// Quotes `word` for a POSIX shell.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The command running the init containers in order (each in its working directory, the
/// first failure ending the workload with its exit code) and then the main command.
fn with_init_containers(inits: &[&Container], main: &Container) -> Vec<String> {
    let line = |c: &Container| {
        let words: Vec<String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(|w| sh_quote(w))
            .collect();
        words.join(" ")
    };
    let mut script = String::from("set -e\n");
    for c in inits {
        script.push_str(&format!("# init container {}\n", c.name.replace('\n', " ")));
        match &c.working_dir {
            Some(dir) => script.push_str(&format!("(cd {} && {})\n", sh_quote(dir), line(c))),
            None => script.push_str(&format!("{}\n", line(c))),
        }
    }
    script.push_str(&format!("exec {}\n", line(main)));
    vec!["/bin/sh".into(), "-c".into(), script]
}

fn volume_kind(v: &k8s_openapi::api::core::v1::Volume) -> &'static str {
    let json = serde_json::to_value(v).unwrap_or_default();
    const KINDS: &[&str] = &[
        "hostPath",
        "persistentVolumeClaim",
        "configMap",
        "secret",
        "downwardAPI",
        "nfs",
        "csi",
        "ephemeral",
        "image",
        "iscsi",
        "emptyDir",
    ];
    KINDS
        .iter()
        .copied()
        .find(|k| json.get(*k).is_some())
        .unwrap_or("unknown")
}

/// Builds the neutral workload from a validated request and already resolved env: `env` of
/// the main container, `others` of every other container that runs, by name.
pub fn workload(
    pod: &Pod,
    req: &Request,
    id: crate::naming::WorkloadId,
    env: Vec<crate::provider::EnvVar>,
    others: &BTreeMap<String, Vec<crate::provider::EnvVar>>,
) -> Workload {
    let c: Container = main_container(pod).cloned().unwrap_or_default();
    let containers = running_containers(pod)
        .into_iter()
        .map(|k| {
            let in_init = pod
                .spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .is_some_and(|v| v.iter().any(|i| i.name == k.name));
            let role = match (in_init, is_sidecar(k)) {
                (true, true) => ContainerRole::Sidecar,
                (true, false) => ContainerRole::Init,
                (false, _) => ContainerRole::Regular,
            };
            let env = if k.name == c.name {
                env.clone()
            } else {
                others.get(&k.name).cloned().unwrap_or_default()
            };
            PodContainer {
                name: k.name.clone(),
                role,
                image: k.image.clone().unwrap_or_default(),
                command: k.command.clone().unwrap_or_default(),
                args: k.args.clone().unwrap_or_default(),
                working_dir: k.working_dir.clone(),
                env,
            }
        })
        .collect();
    let inits = run_init_containers(pod);
    let (command, args) = if inits.is_empty() {
        (
            c.command.clone().unwrap_or_default(),
            c.args.clone().unwrap_or_default(),
        )
    } else {
        (with_init_containers(&inits, &c), Vec::new())
    };
    Workload {
        id,
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        container_name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        command,
        args,
        working_dir: c.working_dir.clone(),
        env,
        gpu: req.gpu.clone(),
        cpu_millis: req.cpu_millis,
        memory_bytes: req.memory_bytes,
        ports: c
            .ports
            .iter()
            .flatten()
            .filter_map(|p| u16::try_from(p.container_port).ok())
            .collect(),
        options: req.options.clone(),
        containers,
        hardening: super::hardening::of(pod, &c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::PodBuilder;
    use k8s_openapi::api::core::v1::Volume;

    fn pod_with(ann: &[(&str, &str)], gpus: Option<&str>) -> Pod {
        let mut b = PodBuilder::new()
            .container_name("main")
            .image("busybox")
            .limit("cpu", "1500m")
            .limit("memory", "2Gi");
        if let Some(g) = gpus {
            b = b.gpus(g);
        }
        for (k, v) in ann {
            b = b.annotation(k, v);
        }
        b.build()
    }

    #[test]
    fn reads_gpus_resources_and_options() {
        let r = request(&pod_with(
            &[
                (ANN_PROVIDER, "runpod"),
                (ANN_GPU_TYPE, "A100-80GB"),
                ("gpu-vk.io/bid-price", "0.45"),
                ("other.io/x", "y"),
            ],
            Some("2"),
        ))
        .unwrap();
        assert_eq!(r.pinned_provider.as_deref(), Some("runpod"));
        assert_eq!(
            r.gpu,
            Some(GpuRequest {
                gpu_type: Some("A100-80GB".into()),
                count: 2
            })
        );
        assert_eq!(r.cpu_millis, Some(1500));
        assert_eq!(r.memory_bytes, Some(2 * 1024 * 1024 * 1024));
        assert_eq!(r.options.get("bid_price").map(String::as_str), Some("0.45"));
    }

    #[test]
    fn rejects_bad_annotations_with_the_key_in_the_message() {
        for (ann, needle) in [
            (("gpu-vk.io/bid-price", "cheap"), "bid-price"),
            (("gpu-vk.io/interruptible", "yes"), "interruptible"),
            (
                ("gpu-vk.io/colour", "blue"),
                "unknown annotation gpu-vk.io/colour",
            ),
            ((ANN_PROVIDER, ""), "empty"),
            ((ANN_GPU_TYPE, "A 100"), "gpu-type"),
        ] {
            let err = request(&pod_with(&[ann], Some("1"))).unwrap_err();
            assert!(err.0.contains(needle), "{err}");
        }
        assert!(request(&pod_with(&[], Some("half"))).is_err());
    }

    #[test]
    fn rejects_unsupported_fields() {
        let mut p = pod_with(&[], Some("1"));
        p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "data".into(),
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: "/data".into(),
                type_: None,
            }),
            ..Default::default()
        }]);
        assert!(request(&p).unwrap_err().0.contains("hostPath"));
        let mut p = pod_with(&[], Some("1"));
        p.spec.as_mut().unwrap().host_network = Some(true);
        assert!(request(&p).is_err());
        let mut p = pod_with(&[], Some("1"));
        let c2 = p.spec.as_ref().unwrap().containers[0].clone();
        p.spec.as_mut().unwrap().containers.push(c2);
        assert!(
            request(&p)
                .unwrap()
                .steps_only
                .unwrap()
                .contains("2 containers")
        );
        // A privileged second container is refused everywhere.
        let mut c3 = p.spec.as_ref().unwrap().containers[0].clone();
        c3.name = "root".into();
        c3.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        p.spec.as_mut().unwrap().containers.push(c3);
        assert!(request(&p).unwrap_err().0.contains("\"root\": privileged"));
    }

    #[test]
    fn env_names_that_are_not_variable_names_are_refused() {
        // Kubernetes accepts any printable name; Vast would read this one as a docker option.
        for name in ["-v /:/host", "A=B", "1X", "my.var"] {
            let mut p = pod_with(&[], Some("1"));
            p.spec.as_mut().unwrap().containers[0].env =
                Some(vec![k8s_openapi::api::core::v1::EnvVar {
                    name: name.into(),
                    value: Some("x".into()),
                    ..Default::default()
                }]);
            let err = request(&p).unwrap_err().0;
            assert!(
                err.contains("env name") && err.contains(&format!("{name:?}")),
                "{err}"
            );
        }
    }

    /// A pod whose main container runs `serve --port 8080` in image `img`, with `extra`
    /// containers and `inits` init containers added as given.
    fn multi(extra: &[Container], inits: &[Container], omit: Option<&str>) -> Pod {
        let ann: Vec<(&str, &str)> = omit.map(|o| (ANN_OMIT_CONTAINERS, o)).into_iter().collect();
        let mut p = pod_with(&ann, Some("1"));
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].image = Some("img".into());
        spec.containers[0].command = Some(vec!["serve".into()]);
        spec.containers[0].args = Some(vec!["--port".into(), "8080".into()]);
        spec.containers.extend(extra.iter().cloned());
        if !inits.is_empty() {
            spec.init_containers = Some(inits.to_vec());
        }
        p
    }

    fn container(name: &str, image: &str, command: &[&str]) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            command: (!command.is_empty())
                .then(|| command.iter().map(|c| (*c).to_owned()).collect()),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..container(name, "exporter", &["export"])
        }
    }

    #[test]
    fn a_sidecar_listed_in_omit_containers_is_left_out_and_the_main_container_runs() {
        let exporter = container("metrics", "exporter", &[]);
        let p = multi(
            std::slice::from_ref(&exporter),
            &[sidecar("logs")],
            Some("metrics, logs"),
        );
        request(&p).unwrap();
        assert_eq!(main_container(&p).unwrap().name, "main");
        assert_eq!(omitted(&p), ["metrics", "logs"]);
        // The main container need not be the first.
        let mut p = multi(&[], &[], Some("metrics"));
        p.spec.as_mut().unwrap().containers.insert(0, exporter);
        let w = workload(
            &p,
            &request(&p).unwrap(),
            crate::test_support::workload_id(),
            vec![],
            &BTreeMap::new(),
        );
        assert_eq!(
            (w.container_name.as_str(), w.image.as_str()),
            ("main", "img")
        );
        assert_eq!(w.command, ["serve"]);
        assert_eq!(w.args, ["--port", "8080"]);
    }

    #[test]
    fn containers_a_provider_cannot_run_fail_naming_the_container_and_the_way_out() {
        let exporter = container("metrics", "exporter", &[]);
        // Refused by the one-container policy only: a provider running every container
        // (Slurm) may take these.
        let one_container: Vec<(Pod, Vec<&str>)> = vec![
            (
                multi(std::slice::from_ref(&exporter), &[], None),
                vec![
                    "2 containers to run",
                    r#""main", "metrics""#,
                    ANN_OMIT_CONTAINERS,
                ],
            ),
            (
                multi(&[], &[sidecar("logs")], None),
                vec![r#"init container "logs" is a sidecar"#, ANN_OMIT_CONTAINERS],
            ),
            (
                multi(
                    &[],
                    &[container("fetch", "curl", &["curl", "-O", "x"])],
                    None,
                ),
                vec![r#"init container "fetch" uses image "curl""#, r#""img""#],
            ),
            (
                multi(&[], &[container("fetch", "img", &[])], None),
                vec![r#"init container "fetch" has no command"#],
            ),
        ];
        for (p, needles) in one_container {
            let why = request(&p)
                .unwrap()
                .steps_only
                .expect("refused by the policy");
            for n in needles {
                assert!(why.contains(n), "{why:?} lacks {n:?}");
            }
        }
        // Refused everywhere.
        let cases: Vec<(Pod, Vec<&str>)> = vec![
            (
                multi(&[], &[], Some("nosuch")),
                vec![r#""nosuch""#, "not a container"],
            ),
            (
                multi(&[], &[], Some("main")),
                vec!["leaves out every container"],
            ),
            // A regular init container cannot be left out: the main command may need it.
            (
                multi(&[], &[container("fetch", "img", &["fetch"])], Some("fetch")),
                vec![r#""fetch", which is not a container or a sidecar"#],
            ),
        ];
        for (p, needles) in cases {
            let err = request(&p).unwrap_err().0;
            for n in needles {
                assert!(err.contains(n), "{err:?} lacks {n:?}");
            }
        }
        // With init containers the main command must be known.
        let mut p = multi(&[], &[container("fetch", "img", &["fetch"])], None);
        p.spec.as_mut().unwrap().containers[0].command = None;
        let err = request(&p).unwrap().steps_only.unwrap();
        assert!(err.contains(r#"container "main" has no command"#), "{err}");
        // An init container with an environment of its own.
        let mut init = container("fetch", "img", &["fetch"]);
        init.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "TOKEN".into(),
            value: Some("x".into()),
            ..Default::default()
        }]);
        let err = request(&multi(&[], &[init], None))
            .unwrap()
            .steps_only
            .unwrap();
        assert!(
            err.contains(r#"init container "fetch" sets an environment of its own"#),
            "{err}"
        );
    }

    #[test]
    fn init_containers_of_the_main_image_run_in_order_before_the_main_command() {
        let mut second = container("warm", "img", &["printf", "%s|%s\\n"]);
        second.args = Some(vec!["it's warm".into()]);
        second.working_dir = Some("/".into());
        let first = container("fetch", "img", &["echo", "fetched", "$HOME"]);
        let p = multi(&[], &[first, second], None);
        let w = workload(
            &p,
            &request(&p).unwrap(),
            crate::test_support::workload_id(),
            vec![],
            &BTreeMap::new(),
        );
        assert_eq!(w.command[..2], ["/bin/sh", "-c"]);
        assert!(w.args.is_empty());
        assert_eq!(
            w.command[2],
            "set -e\n# init container fetch\n'echo' 'fetched' '$HOME'\n# init container warm\n\
             (cd '/' && 'printf' '%s|%s\\n' 'it'\\''s warm')\nexec 'serve' '--port' '8080'\n"
        );
        // The script runs as a shell runs it: in order, words intact, nothing expanded.
        let script = w.command[2].replace("exec 'serve'", "exec 'echo' 'serve'");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "fetched $HOME\nit's warm|\nserve --port 8080\n"
        );
        // The first failure ends the workload with its exit code; the main command never runs.
        let failing = w.command[2].replace("'echo' 'fetched' '$HOME'", "exit 3");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &failing])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_cpu("250m").unwrap(), 250);
        assert_eq!(parse_cpu("2").unwrap(), 2000);
        assert_eq!(parse_cpu("0.5").unwrap(), 500);
        assert!(parse_cpu("lots").is_err());
        assert_eq!(parse_memory("512Mi").unwrap(), 512 * 1024 * 1024);
        assert_eq!(parse_memory("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_memory("1000").unwrap(), 1000);
        assert!(parse_memory("1Xi").is_err());
    }
}
