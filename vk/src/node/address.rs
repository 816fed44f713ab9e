//! The node's advertised address taken from a Service in front of the VK's kubelet port
//! (`vk run --address-service NAMESPACE/NAME`): a ClusterIP outlives the VK's pod, so when
//! Kubernetes replaces the pod neither the Node's InternalIP nor any pod's `hostIP` changes, and
//! a replacement writes nothing to pods that did not change.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};

/// The ClusterIP of the Service `namespace/name`.
pub async fn service_address(client: &Client, service: &str) -> anyhow::Result<String> {
    let (namespace, name) = split(service)?;
    let svc = Api::<Service>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading Service {namespace}/{name}"))?;
    cluster_ip(&svc)
}

fn split(service: &str) -> anyhow::Result<(&str, &str)> {
    match service.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => bail!("{service:?} is not NAMESPACE/NAME"),
    }
}

fn cluster_ip(svc: &Service) -> anyhow::Result<String> {
    let ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.clone());
    match ip.as_deref() {
        Some(ip) if ip.parse::<std::net::IpAddr>().is_ok() => Ok(ip.to_owned()),
        Some("None") => bail!("the Service is headless (clusterIP: None); it needs a ClusterIP"),
        _ => bail!("the Service has no ClusterIP yet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(cluster_ip: Option<&str>) -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": "vk"}, "spec": {"clusterIP": cluster_ip}}),
        )
        .unwrap()
    }

    #[test]
    fn names_need_a_namespace_and_a_name() {
        assert_eq!(
            split("gpu-vk/vk-kubelet").unwrap(),
            ("gpu-vk", "vk-kubelet")
        );
        for bad in ["vk-kubelet", "/vk", "gpu-vk/", "a/b/c", ""] {
            assert!(split(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn only_a_real_cluster_ip_is_an_address() {
        assert_eq!(
            cluster_ip(&service(Some("10.96.12.7"))).unwrap(),
            "10.96.12.7"
        );
        let headless = cluster_ip(&service(Some("None"))).unwrap_err().to_string();
        assert!(headless.contains("headless"), "{headless}");
        assert!(cluster_ip(&service(None)).is_err());
        assert!(cluster_ip(&service(Some(""))).is_err());
    }
}
