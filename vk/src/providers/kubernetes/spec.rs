//! The remote pod for a workload: one pure function, checked before any network call.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, LocalObjectReference, Pod,
    PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, Secret, SecretKeySelector,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::KubernetesConfig;
use crate::naming::Owner;
use crate::provider::{Hardening, ProviderError, Workload};

/// Label carrying the ownership tag: `list()` selects on it.
pub use crate::vocab::names::OWNER as LABEL_OWNER;
/// Label carrying the local pod's UID (for people and `kubectl -l`).
pub use crate::vocab::names::POD_UID_LABEL as LABEL_POD_UID;
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "gpu-vk";
/// Annotations naming where the remote pod comes from. Not under `gpu-vk.io/`: a VK that is
/// the remote cluster's node (offload chained on) refuses pods with `gpu-vk.io/*` annotations
/// it does not know, as it must for a user's typo.
pub use crate::vocab::names::REMOTE_CLUSTER_ANNOTATION as ANN_CLUSTER;
pub use crate::vocab::names::REMOTE_NODE_ANNOTATION as ANN_NODE;
pub use crate::vocab::names::REMOTE_SOURCE_POD_ANNOTATION as ANN_SOURCE_POD;

/// The label selector of every remote pod of this VK.
pub fn selector(owner: &Owner) -> String {
    format!("{LABEL_OWNER}={}", owner.tag())
}

/// The remote pod running `w`, in the namespace `cfg` maps its pod's namespace to.
pub fn remote_pod(
    cfg: &KubernetesConfig,
    owner: &Owner,
    w: &Workload,
) -> Result<Pod, ProviderError> {
    if w.image.trim().is_empty() {
        return Err(ProviderError::Invalid {
            message: "the container has no image".into(),
        });
    }
    let placement = Placement::of(cfg, w)?;
    let container = container(w, placement.resources);
    let mut annotations = cfg.annotations.clone();
    annotations.insert(ANN_CLUSTER.to_owned(), owner.cluster_id().to_owned());
    annotations.insert(ANN_NODE.to_owned(), owner.node().to_owned());
    annotations.insert(
        ANN_SOURCE_POD.to_owned(),
        format!("{}/{}", w.namespace, w.pod_name),
    );
    let node_selector = placement.node_selector;
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(w.id.as_str().to_owned()),
            namespace: Some(cfg.remote_namespace(&w.namespace).to_owned()),
            labels: Some(labels(cfg, owner, w)),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            // The framework restarts per the local pod's policy.
            restart_policy: Some("Never".into()),
            // No credentials of the remote cluster inside the workload.
            automount_service_account_token: Some(false),
            security_context: pod_security_context(&w.hardening),
            enable_service_links: Some(false),
            node_selector: (!node_selector.is_empty()).then_some(node_selector),
            tolerations: (!cfg.tolerations.is_empty()).then(|| cfg.tolerations.clone()),
            priority_class_name: cfg.priority_class_name.clone(),
            runtime_class_name: cfg.runtime_class_name.clone(),
            image_pull_secrets: pull_secret_names(cfg, w),
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// Where the remote pod may run and what it takes there: the GPUs (within the provider's
/// bounds, of a configured type), CPU and memory.
struct Placement {
    resources: Option<ResourceRequirements>,
    node_selector: BTreeMap<String, String>,
}

impl Placement {
    /// The placement of `w`; refuses more GPUs than allowed or a GPU type not configured.
    fn of(cfg: &KubernetesConfig, w: &Workload) -> Result<Self, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        let mut limits = BTreeMap::new();
        let mut requests = BTreeMap::new();
        let mut node_selector = cfg.node_selector.clone();
        if let Some(g) = w.gpu.as_ref().filter(|g| g.count > 0) {
            if g.count > cfg.max_gpus_per_workload {
                return Err(invalid(format!(
                    "the pod requests {} GPUs, more than the {} allowed on this provider",
                    g.count, cfg.max_gpus_per_workload
                )));
            }
            limits.insert(cfg.gpu_resource.clone(), Quantity(g.count.to_string()));
            if let Some(t) = &g.gpu_type
                && !cfg.gpu_types.is_empty()
            {
                let Some(value) = cfg.gpu_types.get(t) else {
                    return Err(invalid(format!(
                        "GPU type {t} is not offered by this provider (configured: {})",
                        cfg.gpu_types.keys().cloned().collect::<Vec<_>>().join(", ")
                    )));
                };
                node_selector.insert(cfg.gpu_type_label.clone(), value.clone());
            }
        }
        if let Some(m) = w.cpu_millis {
            requests.insert("cpu".to_owned(), Quantity(format!("{m}m")));
        }
        if let Some(b) = w.memory_bytes {
            requests.insert("memory".to_owned(), Quantity(b.to_string()));
        }
        let resources =
            (!limits.is_empty() || !requests.is_empty()).then(|| ResourceRequirements {
                limits: (!limits.is_empty()).then_some(limits),
                requests: (!requests.is_empty()).then_some(requests),
                ..ResourceRequirements::default()
            });
        Ok(Placement {
            resources,
            node_selector,
        })
    }
}

/// The remote pod's one container: `w`'s image, command, ports and hardening, its variables
/// read from the workload's Secret.
fn container(w: &Workload, resources: Option<ResourceRequirements>) -> Container {
    let nonempty = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    Container {
        name: w.container_name.clone(),
        image: Some(w.image.clone()),
        command: nonempty(&w.command),
        args: nonempty(&w.args),
        working_dir: w.working_dir.clone(),
        // Values may be Secret values: they travel in the workload's own remote Secret
        // ([`env_secret`]), never in the pod spec that anyone who may read pods there can see.
        env: (!w.env.is_empty()).then(|| {
            w.env
                .iter()
                .map(|e| EnvVar {
                    name: e.name.clone(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: w.id.as_str().to_owned(),
                            key: e.name.clone(),
                            optional: Some(false),
                        }),
                        ..EnvVarSource::default()
                    }),
                })
                .collect()
        }),
        ports: (!w.ports.is_empty()).then(|| {
            w.ports
                .iter()
                .map(|p| ContainerPort {
                    container_port: i32::from(*p),
                    ..ContainerPort::default()
                })
                .collect()
        }),
        security_context: security_context(&w.hardening),
        resources,
        ..Container::default()
    }
}

/// The labels of everything this VK makes for `w` remotely: the configured ones, then ours.
fn labels(cfg: &KubernetesConfig, owner: &Owner, w: &Workload) -> BTreeMap<String, String> {
    let mut labels = cfg.labels.clone();
    labels.insert(LABEL_OWNER.to_owned(), owner.tag().to_owned());
    labels.insert(LABEL_POD_UID.to_owned(), w.id.pod_uid().to_owned());
    labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned());
    labels
}

/// The Secret holding `w`'s environment values (named after the workload, one key per variable;
/// a later variable of the same name wins, as in a pod), owned by the remote pod `pod_uid` so
/// the remote cluster deletes it with the pod; `None` without environment.
pub fn env_secret(
    cfg: &KubernetesConfig,
    owner: &Owner,
    w: &Workload,
    pod_uid: &str,
) -> Option<Secret> {
    if w.env.is_empty() {
        return None;
    }
    let data: BTreeMap<String, String> = w
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    Some(Secret {
        string_data: Some(data),
        type_: Some("Opaque".into()),
        ..owned_secret(cfg, owner, w, pod_uid, w.id.as_str().to_owned())
    })
}

/// The remote pod's pull Secrets: the operator's (`imagePullSecrets`) and, when the pod has
/// registry logins, the copy of them the adapter writes ([`pull_secret`]).
fn pull_secret_names(cfg: &KubernetesConfig, w: &Workload) -> Option<Vec<LocalObjectReference>> {
    let mut names: Vec<LocalObjectReference> = cfg
        .image_pull_secrets
        .iter()
        .map(|n| LocalObjectReference { name: n.clone() })
        .collect();
    if !w.registry_logins.is_empty() {
        names.push(LocalObjectReference {
            name: pull_secret_name(w),
        });
    }
    (!names.is_empty()).then_some(names)
}

fn pull_secret_name(w: &Workload) -> String {
    format!("{}-pull", w.id.as_str())
}

/// The `kubernetes.io/dockerconfigjson` Secret of `w`'s registry logins, owned by the remote
/// pod `pod_uid` as its environment Secret is; `None` without logins.
pub fn pull_secret(
    cfg: &KubernetesConfig,
    owner: &Owner,
    w: &Workload,
    pod_uid: &str,
) -> Option<Secret> {
    use base64::Engine as _;
    if w.registry_logins.is_empty() {
        return None;
    }
    let auths: serde_json::Map<String, serde_json::Value> = w
        .registry_logins
        .iter()
        .map(|l| {
            let auth = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", l.username, l.password));
            (
                l.registry.clone(),
                serde_json::json!({"username": l.username, "password": l.password, "auth": auth}),
            )
        })
        .collect();
    let mut secret = owned_secret(cfg, owner, w, pod_uid, pull_secret_name(w));
    secret.string_data = Some(BTreeMap::from([(
        ".dockerconfigjson".to_owned(),
        serde_json::json!({ "auths": auths }).to_string(),
    )]));
    secret.type_ = Some("kubernetes.io/dockerconfigjson".into());
    Some(secret)
}

/// A Secret named `name` in `w`'s remote namespace, labelled as its workloads are and owned by
/// the remote pod `pod_uid`, without data.
fn owned_secret(
    cfg: &KubernetesConfig,
    owner: &Owner,
    w: &Workload,
    pod_uid: &str,
    name: String,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(cfg.remote_namespace(&w.namespace).to_owned()),
            labels: Some(labels(cfg, owner, w)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: w.id.as_str().to_owned(),
                uid: pod_uid.to_owned(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

/// The remote container's `securityContext`: the local pod's narrowing settings, so the remote
/// cluster's admission (Pod Security "restricted") and runtime hold the workload to them too.
fn security_context(h: &Hardening) -> Option<SecurityContext> {
    (!h.is_empty()).then(|| SecurityContext {
        run_as_non_root: h.run_as_non_root.then_some(true),
        run_as_user: h.run_as_user,
        run_as_group: h.run_as_group,
        read_only_root_filesystem: h.read_only_root_filesystem.then_some(true),
        allow_privilege_escalation: h.no_privilege_escalation.then_some(false),
        capabilities: (!h.drop_capabilities.is_empty()).then(|| Capabilities {
            drop: Some(h.drop_capabilities.clone()),
            add: None,
        }),
        ..SecurityContext::default()
    })
}

/// The pod's `securityContext`: non-root and the runtime's default seccomp profile, when the
/// local pod asks for them.
fn pod_security_context(h: &Hardening) -> Option<PodSecurityContext> {
    (h.run_as_non_root || h.seccomp_runtime_default).then(|| PodSecurityContext {
        run_as_non_root: h.run_as_non_root.then_some(true),
        seccomp_profile: h.seccomp_runtime_default.then(|| SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    })
}
