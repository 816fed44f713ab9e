//! What the virtual Node says of itself, as pure functions of the configuration and the
//! providers' facts: its object (labels, taint) and its status (capacity, conditions, addresses,
//! declared features, system info).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use super::{
    DECLARED_FEATURES, GPUS_FROM_INVENTORY, OWNER_ANNOTATION, PROVIDER_CONDITION_PREFIX,
    ProviderFacts,
};
use crate::config::Config;
use crate::provider::health::Health;
use crate::vocab::{TYPE_LABEL, node_taint};

/// The Node object as we want it (metadata and spec).
pub fn desired(cfg: &Config) -> Node {
    let mut labels = BTreeMap::from([
        (TYPE_LABEL.0.to_owned(), TYPE_LABEL.1.to_owned()),
        ("kubernetes.io/role".to_owned(), "agent".to_owned()),
        ("kubernetes.io/hostname".to_owned(), cfg.node_name.clone()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    // The highest CUDA version a provider's hosts run, as GPU feature discovery labels a GPU
    // node: node affinity on it schedules here, and the VK reads it as the pod's floor.
    if let Some((major, minor)) = cfg
        .providers
        .iter()
        .filter_map(|p| crate::vocab::cuda_version(p.settings.get("maxCudaVersion")?.as_str()?))
        .max()
    {
        labels.insert(
            crate::vocab::CUDA_DRIVER_MAJOR.to_owned(),
            major.to_string(),
        );
        labels.insert(
            crate::vocab::CUDA_DRIVER_MINOR.to_owned(),
            minor.to_string(),
        );
    }
    for p in &cfg.providers {
        labels.insert(
            format!("{PROVIDER_CONDITION_PREFIX}{}", p.name),
            "true".to_owned(),
        );
        labels.extend(p.labels.clone());
    }
    let taints = cfg.taint.then(|| vec![node_taint(&cfg.node_name)]);
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                OWNER_ANNOTATION.to_owned(),
                crate::naming::Owner::new(&cfg.cluster_id, &cfg.node_name)
                    .tag()
                    .to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints,
            ..Default::default()
        }),
        status: None,
    }
}

/// The Node's status: `ready` false on shutdown, with what `facts` say of the providers.
pub fn status(
    cfg: &Config,
    provider_names: &[String],
    ready: bool,
    now: Timestamp,
    facts: &ProviderFacts,
) -> NodeStatus {
    let c = &cfg.capacity;
    let gpus = if c.gpus == GPUS_FROM_INVENTORY {
        facts.free_gpus.to_string()
    } else {
        c.gpus.clone()
    };
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity(c.cpu.clone())),
        ("memory".to_owned(), Quantity(c.memory.clone())),
        ("pods".to_owned(), Quantity(c.pods.clone())),
        (crate::vocab::GPU_RESOURCE.to_owned(), Quantity(gpus)),
        ("ephemeral-storage".to_owned(), Quantity("100Ti".into())),
    ]);
    let conditions = conditions(ready, now, facts);
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: cfg.internal_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: cfg.node_name.clone(),
            },
        ]),
        declared_features: Some(if cfg.kubelet_api.declare_extend_web_sockets_to_kubelet {
            DECLARED_FEATURES.iter().map(|f| (*f).to_owned()).collect()
        } else {
            Vec::new()
        }),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(cfg.kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: String::new(),
            container_runtime_version: format!("gpu-vk://{}", env!("CARGO_PKG_VERSION")),
            kernel_version: String::new(),
            kube_proxy_version: String::new(),
            kubelet_version: format!("v1.36.0-gpu-vk.{}", env!("CARGO_PKG_VERSION")),
            machine_id: String::new(),
            operating_system: "linux".into(),
            os_image: format!("providers: {}", provider_names.join(",")),
            system_uuid: String::new(),
            swap: None,
        }),
        ..Default::default()
    }
}

/// The kubelet's conditions (Ready, no pressure) and one per provider (its circuit breaker).
fn conditions(ready: bool, now: Timestamp, facts: &ProviderFacts) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: bool, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    let ready_cond = if ready {
        cond("Ready", true, "KubeletReady", "virtual kubelet is ready")
    } else {
        cond(
            "Ready",
            false,
            "KubeletNotReady",
            "virtual kubelet is shutting down",
        )
    };
    let providers = facts.health.iter().map(|(name, h)| {
        let (ok, reason, message) = match h {
            Health::Healthy => (
                true,
                "ProviderHealthy",
                "new pods are sent to it".to_owned(),
            ),
            Health::Probing { reason } => (
                true,
                "ProviderProbing",
                format!("the next call decides; it failed before: {reason}"),
            ),
            Health::Unhealthy { reason, retry_in } => (
                false,
                "CircuitOpen",
                format!("no new pods for {}s: {reason}", retry_in.as_secs().max(1)),
            ),
        };
        cond(
            &format!("{PROVIDER_CONDITION_PREFIX}{name}"),
            ok,
            reason,
            &message,
        )
    });
    let mut conditions = vec![
        ready_cond,
        cond(
            "MemoryPressure",
            false,
            "KubeletHasSufficientMemory",
            "no memory pressure on a virtual node",
        ),
        cond(
            "DiskPressure",
            false,
            "KubeletHasNoDiskPressure",
            "no disk pressure on a virtual node",
        ),
        cond(
            "PIDPressure",
            false,
            "KubeletHasSufficientPID",
            "no PID pressure on a virtual node",
        ),
        cond(
            "NetworkUnavailable",
            false,
            "RouteCreated",
            "virtual node network is provider-managed",
        ),
    ];
    conditions.extend(providers);
    conditions
}
