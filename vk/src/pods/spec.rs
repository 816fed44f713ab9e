//! Reads what a pod asks for: validates fields the VK cannot honour, parses the `gpu-vk.io/*`
//! annotations and resources, and builds the provider-neutral [`Workload`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use crate::provider::{ContainerRole, GpuRequest, PodContainer, Workload};
use crate::vocab::quantity::{QuantityError, parse_cpu, parse_memory};

mod asks;
mod containers;

pub use containers::{
    is_sidecar, main_container, omitted, run_init_containers, running_containers,
};
use containers::{run_containers, with_init_containers};

/// Written by the VK: the provider chosen for this pod, so the choice survives restarts.
pub use crate::vocab::names::ANN_ASSIGNED;
/// Written by the VK: the dispatch decision and its inputs (policy, choice, prices).
pub use crate::vocab::names::ANN_DISPATCH;
/// The pod's dispatch policy (`preference` or `cheapest`), where `dispatch.podPolicy` allows.
pub use crate::vocab::names::ANN_DISPATCH_POLICY;
/// GPU type wanted (e.g. `A100-80GB`), or a comma-separated set of acceptable types in order
/// of preference (`H100,A100-80GB`); any type when absent.
pub use crate::vocab::names::ANN_GPU_TYPE;
/// Pins the pod to one configured provider.
pub use crate::vocab::names::ANN_PROVIDER;
/// Written by the VK: how many pulls of the pod's image failed in a row and when the last did
/// (`3 2026-12-07T10:00:00Z`), which the image pull back-off counts from.
pub use crate::vocab::names::ANN_PULL_FAILURES;
/// Written by the VK: how many of the pod's workloads were given up at the start deadline
/// (see `providers[].startAttempts`), so the count survives restarts.
pub use crate::vocab::names::ANN_START_ATTEMPTS;
/// The pod's own start deadline in seconds (see `providers[].startDeadlineSeconds`).
pub use crate::vocab::names::ANN_START_DEADLINE;
/// Annotation prefix for everything the VK reads or writes on pods.
pub use crate::vocab::names::PREFIX;
/// Written by the VK (with the status): where the provider publishes the pod's container ports
/// when that is not the pod's own address and port (`8080=203.0.113.7:43210,...`, RunPod's and
/// Vast's public port mappings); the EndpointSlices of the pod's Services are written from it
/// (`crate::endpoints`).
pub const ANN_PUBLISHED: &str = crate::provider::PUBLISHED_ANNOTATION;
/// The annotations only the VK writes on its pods: read back as its own records, never as a
/// user's request. The chart's `*-owned-annotations` ValidatingAdmissionPolicy refuses them to
/// everyone else (a test checks the two lists agree).
pub const VK_OWNED: [&str; 5] = [
    ANN_PUBLISHED,
    ANN_ASSIGNED,
    ANN_DISPATCH,
    ANN_START_ATTEMPTS,
    ANN_PULL_FAILURES,
];
/// Containers and native sidecars the provider leaves out, comma-separated (`metrics,logs`):
/// a provider runs one container, and a chart's exporter or log shipper need not come along.
pub use crate::vocab::names::ANN_OMIT_CONTAINERS;
/// The option carrying the main container's `ephemeral-storage` in GB (set by the VK, not an
/// annotation a pod can write: `gpu-vk.io/ephemeral-storage-gb` is refused as unknown).
pub const EPHEMERAL_OPTION: &str = "ephemeral_storage_gb";
/// The resource name of GPUs.
pub use crate::vocab::GPU_RESOURCE;

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
    // Container ports the provider must not publish (`9090,9100`): they stay inside the
    // workload (RunPod and Vast publish every other declared port to the internet).
    ("private-ports", |v| {
        v.split(',')
            .all(|p| p.trim().parse::<u16>().is_ok_and(|p| p > 0))
    }),
    // The lowest CUDA version the image needs (`12.8`): RunPod's `gpu.minCudaVersion`, Vast's
    // `cuda_max_good` filter.
    ("min-cuda", |v| {
        v.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty() && !b.is_empty() && (a.to_owned() + b).bytes().all(|c| c.is_ascii_digit())
        })
    }),
    // Read by the framework (`decide`), within the provider's ceiling.
    ("start-deadline-seconds", |v| {
        v.parse::<u64>().is_ok_and(|s| s > 0)
    }),
];

/// Why a pod cannot be run as it is. The message is shown to the user on the pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl From<QuantityError> for SpecError {
    fn from(e: QuantityError) -> Self {
        SpecError(e.0)
    }
}

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
    /// The UDP ports the main container declares: only a provider that serves UDP
    /// ([`crate::provider::Capabilities::udp`]) may take the pod.
    pub udp_ports: Vec<i32>,
}

pub use crate::vocab::cuda_version;

/// Validates the pod and extracts its request.
pub fn request(pod: &Pod) -> Result<Request, SpecError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| SpecError("pod has no spec".into()))?;
    let (c, steps_only) = run_containers(pod)?;
    unsupported(pod, spec, c)?;
    let mut ann = annotations(pod)?;
    // A CUDA floor set by node affinity counts as the annotation's (the higher wins), so the
    // adapters send it to the provider too.
    if let Some(floor) = asks::affinity_cuda_floor(spec)
        && ann
            .options
            .get("min_cuda")
            .and_then(|v| cuda_version(v))
            .is_none_or(|asked| asked < floor)
    {
        ann.options
            .insert("min_cuda".into(), format!("{}.{}", floor.0, floor.1));
    }
    let res = Resources::of(c, ann.gpu_type.clone())?;
    // The container's `ephemeral-storage` in whole GB (rounded up), for the adapters that size
    // a container disk (`Options::disk_gb`: it raises their default, never lowers it).
    if let Some(bytes) = res.ephemeral_bytes {
        ann.options.insert(
            EPHEMERAL_OPTION.to_owned(),
            bytes.div_ceil(1_000_000_000).max(1).to_string(),
        );
    }
    Ok(Request {
        pinned_provider: ann.pinned_provider,
        gpu: res.gpu,
        gpu_types: ann.gpu_types,
        policy: ann.policy,
        cpu_millis: res.cpu_millis,
        memory_bytes: res.memory_bytes,
        options: ann.options,
        steps_only,
        udp_ports: c
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref() == Some("UDP"))
            .map(|p| p.container_port)
            .collect(),
    })
}

/// Refuses what no provider can do outside the cluster: the host's namespaces, volumes
/// other than scratch space and projected ones, a privileged main container `c`, env names a
/// provider would misread, and a main container without an image.
fn unsupported(pod: &Pod, spec: &PodSpec, c: &Container) -> Result<(), SpecError> {
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
    Ok(())
}

/// What the pod's `gpu-vk.io/*` annotations ask for.
struct Annotated {
    pinned_provider: Option<String>,
    /// The GPU type wanted, or the first of the set the pod accepts.
    gpu_type: Option<String>,
    /// The whole set, when the pod names more than one type.
    gpu_types: Vec<String>,
    policy: Option<crate::config::DispatchPolicy>,
    options: BTreeMap<String, String>,
}

/// Reads the pod's `gpu-vk.io/*` annotations; an unknown one or an invalid value refuses the
/// pod.
fn annotations(pod: &Pod) -> Result<Annotated, SpecError> {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let mut out = Annotated {
        pinned_provider: None,
        gpu_type: None,
        gpu_types: Vec::new(),
        policy: None,
        options: BTreeMap::new(),
    };
    for (k, v) in &annotations {
        let Some(key) = k.strip_prefix(PREFIX) else {
            continue;
        };
        match k.as_str() {
            ANN_PROVIDER => {
                if v.is_empty() {
                    return Err(SpecError(format!("annotation {ANN_PROVIDER} is empty")));
                }
                out.pinned_provider = Some(v.clone());
            }
            ANN_ASSIGNED | ANN_DISPATCH | ANN_PUBLISHED | ANN_OMIT_CONTAINERS
            | ANN_START_ATTEMPTS | ANN_PULL_FAILURES => {}
            ANN_GPU_TYPE => {
                let set = gpu_type_set(v)?;
                out.gpu_type = set.first().map(|t| (*t).to_owned());
                if set.len() > 1 {
                    out.gpu_types = set.iter().map(|t| (*t).to_owned()).collect();
                }
            }
            ANN_DISPATCH_POLICY => out.policy = Some(dispatch_policy(v)?),
            _ => match OPTIONS.iter().find(|(name, _)| *name == key) {
                Some((_, valid)) if valid(v) => {
                    // Adapters read options in snake_case (`bid-price` -> `bid_price`).
                    out.options.insert(key.replace('-', "_"), v.clone());
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
    Ok(out)
}

/// The GPU types of an [`ANN_GPU_TYPE`] value, in the pod's order of preference.
fn gpu_type_set(v: &str) -> Result<Vec<&str>, SpecError> {
    let set: Vec<&str> = v.split(',').collect();
    if set
        .iter()
        .any(|t| t.is_empty() || t.contains(char::is_whitespace))
    {
        return Err(SpecError(format!(
            "annotation {ANN_GPU_TYPE} has invalid value {v:?} (a GPU type, or types separated \
             by commas without spaces)"
        )));
    }
    Ok(set)
}

/// The policy an [`ANN_DISPATCH_POLICY`] value names.
fn dispatch_policy(v: &str) -> Result<crate::config::DispatchPolicy, SpecError> {
    match v {
        "preference" => Ok(crate::config::DispatchPolicy::Preference),
        "cheapest" => Ok(crate::config::DispatchPolicy::Cheapest),
        _ => Err(SpecError(format!(
            "annotation {ANN_DISPATCH_POLICY} has invalid value {v:?} (expected preference or \
             cheapest)"
        ))),
    }
}

/// What the main container's resources ask for (a limit before a request).
struct Resources {
    gpu: Option<GpuRequest>,
    cpu_millis: Option<u64>,
    memory_bytes: Option<u64>,
    ephemeral_bytes: Option<u64>,
}

impl Resources {
    /// The resources of container `c`; `gpu_type` from the annotations makes a pod that
    /// asks for no GPU count ask for one GPU of that type.
    fn of(c: &Container, gpu_type: Option<String>) -> Result<Self, SpecError> {
        let res = c.resources.as_ref();
        let get = |name: &str| {
            res.and_then(|r| r.limits.as_ref().and_then(|l| l.get(name)))
                .or_else(|| res.and_then(|r| r.requests.as_ref().and_then(|l| l.get(name))))
                .map(|q| q.0.clone())
        };
        let gpu_count = get(GPU_RESOURCE)
            .map(|q| {
                q.parse::<u32>()
                    .map_err(|_| SpecError(format!("{GPU_RESOURCE} {q:?} is not a whole number")))
            })
            .transpose()?;
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
        Ok(Self {
            gpu,
            cpu_millis: get("cpu").map(|q| parse_cpu(&q)).transpose()?,
            memory_bytes: get("memory").map(|q| parse_memory(&q)).transpose()?,
            ephemeral_bytes: get("ephemeral-storage")
                .map(|q| {
                    parse_memory(&q).map_err(|_| {
                        SpecError(format!(
                            "ephemeral-storage {q:?} is not a quantity of bytes"
                        ))
                    })
                })
                .transpose()?,
        })
    }
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

/// The main container's declared ports the provider publishes: all but the pod's
/// `gpu-vk.io/private-ports`.
fn published_ports(c: &Container, req: &Request) -> Vec<u16> {
    let private: Vec<u16> = req
        .options
        .get("private_ports")
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_default();
    c.ports
        .iter()
        .flatten()
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .filter(|p| !private.contains(p))
        .collect()
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
        ports: published_ports(&c, req),
        options: req.options.clone(),
        containers,
        hardening: super::hardening::of(pod, &c),
        registry_logins: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
