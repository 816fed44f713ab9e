//! The cluster's own networks: its pod ranges, Service ranges and node addresses, which no
//! provider address may name (as a pod IP, a published port, a probe's or a port-forward's
//! target). Configured (`clusterNetworks`) and learnt from the cluster where it publishes them
//! (every Node's `spec.podCIDRs` and addresses, the `networking.k8s.io/v1` ServiceCIDRs), read
//! again every [`REFRESH`]. A provider answer that names one of them (a Vast host, a remote
//! cluster whose pod range overlaps ours, a compromised API) would otherwise make a Service
//! send a tenant's traffic to another namespace's pod, a node's kubelet or a cluster Service.

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::ListParams;
use kube::{Api, Client};
use tracing::{debug, warn};

/// How often the cluster's networks are read again (nodes come and go; a new ServiceCIDR may
/// be added).
pub const REFRESH: Duration = Duration::from_secs(60);
/// The longest one read of them may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured networks and those learnt from the cluster (owned state; a snapshot is an
/// `Arc` clone).
pub struct ClusterNetworks {
    configured: Vec<IpNet>,
    all: RwLock<Arc<[IpNet]>>,
}

impl ClusterNetworks {
    /// The configured networks only, until [`Self::learnt`] adds the cluster's own.
    pub fn new(configured: Vec<IpNet>) -> Self {
        let all = configured.clone().into();
        Self {
            configured,
            all: RwLock::new(all),
        }
    }

    /// Every network now, configured and learnt.
    pub fn snapshot(&self) -> Arc<[IpNet]> {
        self.all.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `ip` lies in one of them.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.snapshot().iter().any(|n| n.contains(&ip))
    }

    /// Replaces what was learnt from the cluster with `learnt`.
    pub fn learnt(&self, learnt: Vec<IpNet>) {
        let mut all = self.configured.clone();
        for n in learnt {
            if !all.contains(&n) {
                all.push(n);
            }
        }
        *self.all.write().unwrap_or_else(|e| e.into_inner()) = all.into();
    }
}

/// The address to dial for `host:port` a provider published: an IP literal as it is, a name
/// resolved now; refused when it (or any address the name resolves to) is loopback,
/// link-local or unspecified (unless `allow_local`, for tests), or inside `cluster`. The
/// caller dials the address returned, never the name again, so a name cannot pass this check
/// and then resolve elsewhere (`metadata.google.internal`, a name of the cluster's DNS).
pub async fn dial_address(
    host: &str,
    port: u16,
    cluster: &[IpNet],
    allow_local: bool,
) -> Result<std::net::SocketAddr, String> {
    let host = host.trim_matches(['[', ']']);
    let addrs: Vec<std::net::SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![std::net::SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect(),
    };
    for a in &addrs {
        let ip = a.ip();
        if !allow_local && crate::config::pod_ip::is_local(ip) {
            return Err(format!(
                "{host} is {ip}, a loopback or link-local address, which the virtual kubelet \
                 does not dial"
            ));
        }
        if cluster.iter().any(|n| n.contains(&ip)) {
            return Err(format!(
                "{host} is {ip}, inside the cluster's own networks, which the virtual kubelet \
                 does not dial"
            ));
        }
    }
    addrs
        .first()
        .copied()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// What the cluster publishes of its own networks (pure): each Node's pod ranges and
/// addresses (a host route each), each ServiceCIDR's ranges. Entries that do not parse are
/// left out.
pub fn published(nodes: &[Node], cidrs: &[ServiceCIDR]) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = Vec::new();
    let mut add = |n: IpNet| {
        if !out.contains(&n) {
            out.push(n);
        }
    };
    for node in nodes {
        let spec = node.spec.as_ref();
        let ranges = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        let single = spec.and_then(|s| s.pod_cidr.clone());
        for r in ranges.iter().chain(single.iter()) {
            if let Ok(n) = r.parse() {
                add(n);
            }
        }
        let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        for a in addresses.into_iter().flatten() {
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                add(IpNet::from(ip));
            }
        }
    }
    for c in cidrs {
        for r in c
            .spec
            .as_ref()
            .and_then(|s| s.cidrs.as_ref())
            .into_iter()
            .flatten()
        {
            if let Ok(n) = r.parse() {
                add(n);
            }
        }
    }
    out
}

/// Reads the cluster's networks into `nets` once (at most [`READ_TIMEOUT`]); a read that
/// fails keeps what was learnt before and is logged.
pub async fn learn(nets: &ClusterNetworks, client: &Client) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
    // Served from the API server's watch cache: no quorum read of every Node each minute.
    let lp = ListParams::default().match_any();
    let read = async {
        let n = nodes.list(&lp).await?.items;
        let c = cidrs.list(&lp).await?.items;
        Ok::<_, kube::Error>((n, c))
    };
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok((n, c))) => {
            let learnt = published(&n, &c);
            debug!(networks = learnt.len(), "cluster networks learnt");
            nets.learnt(learnt);
            true
        }
        Ok(Err(e)) => {
            warn!(error = %e, "cannot read the cluster's Nodes or ServiceCIDRs; provider addresses are checked against clusterNetworks and what was learnt before");
            false
        }
        Err(_) => {
            warn!(
                "reading the cluster's Nodes and ServiceCIDRs timed out; provider addresses are checked against clusterNetworks and what was learnt before"
            );
            false
        }
    }
}

/// [`learn`] every [`REFRESH`] until the process ends.
pub async fn run(nets: Arc<ClusterNetworks>, client: Client) {
    loop {
        tokio::time::sleep(REFRESH).await;
        learn(&nets, &client).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_published_name_is_dialled_at_the_address_it_was_checked_at() {
        let cluster: Vec<IpNet> = vec!["10.96.0.0/16".parse().unwrap()];
        let got = dial_address("198.18.0.7", 80, &cluster, false).await;
        assert_eq!(got, Ok("198.18.0.7:80".parse().unwrap()));
        let got = dial_address("[2001:db8::7]", 80, &cluster, false).await;
        assert_eq!(got, Ok("[2001:db8::7]:80".parse().unwrap()));
        for (host, why) in [
            ("10.96.0.10", "inside the cluster's own networks"),
            ("169.254.169.254", "loopback or link-local"),
            // A name is resolved first, and what it resolves to is what is judged.
            ("localhost", "loopback or link-local"),
        ] {
            let err = dial_address(host, 80, &cluster, false).await.unwrap_err();
            assert!(err.contains(why), "{host}: {err}");
        }
        assert!(dial_address("localhost", 80, &cluster, true).await.is_ok());
    }

    #[test]
    fn learns_pod_ranges_node_addresses_and_service_ranges() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "w1"},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"]},
            "status": {"addresses": [
                {"type": "InternalIP", "address": "172.18.0.3"},
                {"type": "Hostname", "address": "w1"}
            ]}
        }))
        .unwrap();
        let cidr: ServiceCIDR = serde_json::from_value(json!({
            "metadata": {"name": "kubernetes"},
            "spec": {"cidrs": ["10.96.0.0/16", "not a cidr"]}
        }))
        .unwrap();
        let got: Vec<String> = published(&[node], &[cidr])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "10.244.1.0/24",
                "fd00:10:244:1::/64",
                "172.18.0.3/32",
                "10.96.0.0/16"
            ]
        );
        let nets = ClusterNetworks::new(vec!["192.168.0.0/16".parse().unwrap()]);
        assert!(!nets.contains("10.96.0.10".parse().unwrap()));
        nets.learnt(vec!["10.96.0.0/16".parse().unwrap()]);
        assert!(nets.contains("10.96.0.10".parse().unwrap()));
        assert!(
            nets.contains("192.168.3.4".parse().unwrap()),
            "configured kept"
        );
        nets.learnt(vec![]);
        assert!(!nets.contains("10.96.0.10".parse().unwrap()), "forgotten");
    }
}
