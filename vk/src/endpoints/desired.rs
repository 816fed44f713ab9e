//! The EndpointSlices that the Services selecting this node's pods should have for the pods
//! whose ports their provider publishes elsewhere (pure: Services and pods in, slices out).
//!
//! One slice per Service and pod, as Kubernetes documents for slices of other managers
//! ("EndpointSlices", Ownership: the `endpointslice.kubernetes.io/managed-by` label; kube-proxy
//! and CoreDNS read every slice labelled `kubernetes.io/service-name`, whoever wrote it). A
//! slice's ports apply to all its endpoints, and each offloaded pod has public port numbers of
//! its own, so pods cannot share one. Endpoint conditions follow the Service controller's:
//! `serving` is the pod's Ready condition, `terminating` its deletion, `ready` is serving and not
//! terminating.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

use crate::pods::address::parse_published;
use crate::pods::spec::ANN_PUBLISHED;

/// The value of `endpointslice.kubernetes.io/managed-by` on our slices (the Service controller
/// leaves slices of other managers alone).
pub use crate::vocab::names::ENDPOINTSLICE_MANAGER as MANAGER;
/// Label naming the VK (its owner tag, `naming::Owner`) that wrote a slice.
pub use crate::vocab::names::OWNER as OWNER_LABEL;
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// Whose slices these are.
#[derive(Clone, Debug)]
pub struct Writer {
    pub node: String,
    pub owner_tag: String,
}

impl Writer {
    /// The label selector of the slices this VK wrote.
    pub fn selector(&self) -> String {
        format!(
            "{MANAGED_BY_LABEL}={MANAGER},{OWNER_LABEL}={}",
            self.owner_tag
        )
    }
}

/// A Service port that selects a pod but whose container port the provider does not publish:
/// the Service cannot reach that pod on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreachable {
    pub namespace: String,
    pub pod: String,
    pub service: String,
    pub port: String,
}

/// The slices wanted, by (namespace, name), and the Service ports that cannot reach a pod.
pub fn desired(
    services: &[Service],
    pods: &[Pod],
    w: &Writer,
) -> (BTreeMap<(String, String), EndpointSlice>, Vec<Unreachable>) {
    let mut slices = BTreeMap::new();
    let mut unreachable = Vec::new();
    for pod in pods.iter().filter(|p| running(p)) {
        let published = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_PUBLISHED))
            .map(|t| parse_published(t))
            .unwrap_or_default();
        if published.is_empty() {
            continue;
        }
        for svc in services.iter().filter(|s| selects(s, pod)) {
            let (slice, missing) = slice_for(svc, pod, &published, w);
            for port in missing {
                unreachable.push(Unreachable {
                    namespace: ns(&pod.metadata),
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                    service: svc.metadata.name.clone().unwrap_or_default(),
                    port,
                });
            }
            if let Some(slice) = slice {
                let key = (
                    ns(&slice.metadata),
                    slice.metadata.name.clone().unwrap_or_default(),
                );
                slices.insert(key, slice);
            }
        }
    }
    (slices, unreachable)
}

/// What of a slice this VK sets, for comparing a wanted slice with one read back.
pub fn ours(s: &EndpointSlice) -> serde_json::Value {
    let labels: BTreeMap<&String, &String> = s
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| [SERVICE_NAME_LABEL, MANAGED_BY_LABEL, OWNER_LABEL].contains(&k.as_str()))
        .collect();
    serde_json::json!({
        "labels": labels,
        "owners": s.metadata.owner_references,
        "addressType": s.address_type,
        "endpoints": s.endpoints,
        "ports": s.ports,
    })
}

fn ns(m: &ObjectMeta) -> String {
    m.namespace.clone().unwrap_or_default()
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A Service with a selector (not ExternalName) in the pod's namespace whose selector the pod's
/// labels match.
fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(spec) = &svc.spec else { return false };
    if spec.type_.as_deref() == Some("ExternalName") || ns(&svc.metadata) != ns(&pod.metadata) {
        return false;
    }
    let Some(selector) = spec.selector.as_ref().filter(|s| !s.is_empty()) else {
        return false;
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The container port a Service port targets on `pod` (a number, a port name of one of the
/// pod's containers, or the Service port itself when unset), as the Service controller finds it.
fn target(port: &k8s_openapi::api::core::v1::ServicePort, pod: &Pod) -> Option<u16> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        None => u16::try_from(port.port).ok(),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| {
                p.name.as_deref() == Some(name.as_str())
                    && p.protocol.as_deref().unwrap_or("TCP") == protocol
            })
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// The slice of `svc` for `pod`, and the names of the Service's ports the pod does not publish.
fn slice_for(
    svc: &Service,
    pod: &Pod,
    published: &BTreeMap<u16, (IpAddr, u16)>,
    w: &Writer,
) -> (Option<EndpointSlice>, Vec<String>) {
    let mut host: Option<IpAddr> = None;
    let mut ports = Vec::new();
    let mut missing = Vec::new();
    for port in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
        let name = port.name.clone().unwrap_or_default();
        let tcp = port.protocol.as_deref().unwrap_or("TCP") == "TCP";
        // Providers publish TCP only; one address per slice.
        let found = target(port, pod)
            .and_then(|p| published.get(&p))
            .filter(|(h, _)| tcp && host.is_none_or(|first| first == *h));
        match found {
            Some((h, public)) => {
                host = Some(*h);
                ports.push(EndpointPort {
                    name: Some(name),
                    port: Some(i32::from(*public)),
                    protocol: Some("TCP".into()),
                    app_protocol: port.app_protocol.clone(),
                });
            }
            None => missing.push(if name.is_empty() {
                port.port.to_string()
            } else {
                name
            }),
        }
    }
    let Some(host) = host else {
        return (None, missing);
    };
    let (svc_name, svc_uid) = (
        svc.metadata.name.clone().unwrap_or_default(),
        svc.metadata.uid.clone().unwrap_or_default(),
    );
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    let digest = Sha256::digest(format!("{svc_uid}/{pod_uid}").as_bytes());
    let suffix: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let prefix: String = svc_name.chars().take(40).collect();
    let serving = ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}-gpuvk-{suffix}")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_owned(), svc_name.clone()),
                (MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned()),
                (OWNER_LABEL.to_owned(), w.owner_tag.clone()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: svc_name,
                uid: svc_uid,
                controller: Some(false),
                block_owner_deletion: Some(false),
            }]),
            ..Default::default()
        },
        address_type: if host.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![host.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(serving && !terminating),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            node_name: Some(w.node.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(ports),
    };
    (Some(slice), missing)
}

#[cfg(test)]
mod tests;
