//! A pod's IP: the address its provider lists for the workload when that is a usable pod
//! address, else the provider's configured `podIpFallback`, with a condition saying which
//! (pure; `status.rs` applies it).
//!
//! A usable address is an IP literal that `config::pod_ip::unusable` accepts (one the API
//! server takes in an EndpointSlice, and not the node's own address, hostIP) and that lies in
//! none of the cluster's own networks (`networks`: its pod and Service ranges and node
//! addresses), unless its provider is trusted with them (`trustClusterAddresses`).
//!
//! A workload whose container ports the provider publishes at other port numbers (RunPod's
//! `tcp` ports and Vast's port mappings: container port 8080 at public port 43210) gets no pod
//! IP: the Service controller would list `<pod IP>:8080`, where nothing answers. Its published
//! ports go into the `gpu-vk.io/published-ports` annotation instead, and `crate::endpoints`
//! writes its Services' EndpointSlices from them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::provider::Endpoint;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

/// The pod condition saying whether `status.podIP` is where the workload can be reached.
pub use crate::vocab::names::POD_IP_ROUTABLE_CONDITION as CONDITION;
/// The provider listed a usable address for the workload.
pub const FROM_PROVIDER: &str = "ProviderAddress";
/// The provider listed none; the pod IP is the provider's `podIpFallback`.
pub const NO_ADDRESS: &str = "ProviderGaveNoAddress";
/// The provider listed an address that cannot be a pod IP (see [`check`]).
pub const REFUSED: &str = "ProviderAddressRefused";
/// The provider publishes the container ports at other port numbers: no pod IP (see the
/// module's documentation).
pub const PUBLISHED_ELSEWHERE: &str = "PortsPublishedElsewhere";

/// The pod IP chosen for a workload, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `status.podIP`, or none (no usable address and no fallback).
    pub ip: Option<IpAddr>,
    /// The condition's reason: [`FROM_PROVIDER`], [`NO_ADDRESS`] or [`REFUSED`].
    pub reason: &'static str,
    /// What the provider listed and why it was refused, for [`REFUSED`].
    pub refused: Option<(String, &'static str)>,
    /// Where each container port is published, for [`PUBLISHED_ELSEWHERE`] (usable addresses
    /// only).
    pub published: BTreeMap<u16, (IpAddr, u16)>,
}

/// Why `raw` cannot be a pod IP, or the address.
pub fn check(raw: &str, node: Option<IpAddr>, cluster: &[IpNet]) -> Result<IpAddr, &'static str> {
    let ip: IpAddr = raw.trim().parse().map_err(|_| "not an IP address")?;
    if let Some(why) = crate::config::pod_ip::unusable(ip, node) {
        return Err(why);
    }
    if cluster.iter().any(|n| n.contains(&ip)) {
        return Err("inside the cluster's own networks");
    }
    Ok(ip)
}

/// The pod IP for a workload whose provider lists `listed` and publishes its container ports at
/// `ports`, on a node whose address is `node`.
pub fn choose(
    listed: Option<&str>,
    ports: &BTreeMap<u16, Endpoint>,
    fallback: Option<IpAddr>,
    node: Option<IpAddr>,
    cluster: &[IpNet],
) -> Choice {
    let listed = listed.map(str::trim).filter(|s| !s.is_empty());
    let published: BTreeMap<u16, (IpAddr, u16)> = ports
        .iter()
        .filter_map(|(port, e)| Some((*port, (check(&e.host, node, cluster).ok()?, e.port))))
        .collect();
    let listed_ip = listed.and_then(|raw| raw.parse::<IpAddr>().ok());
    if published
        .iter()
        .any(|(port, (host, public))| public != port || Some(*host) != listed_ip)
    {
        return Choice {
            ip: None,
            reason: PUBLISHED_ELSEWHERE,
            refused: None,
            published,
        };
    }
    let (ip, reason, refused) = match listed.map(|raw| (raw, check(raw, node, cluster))) {
        Some((_, Ok(ip))) => (Some(ip), FROM_PROVIDER, None),
        // Bounded: it ends up in an Event and a condition.
        Some((raw, Err(why))) => (
            fallback,
            REFUSED,
            Some((raw.chars().take(64).collect(), why)),
        ),
        None => (fallback, NO_ADDRESS, None),
    };
    Choice {
        ip,
        reason,
        refused,
        published: BTreeMap::new(),
    }
}

/// The `gpu-vk.io/published-ports` annotation's value: `8080=203.0.113.7:43210,...`, by
/// container port; `None` for no published port.
pub fn published_text(published: &BTreeMap<u16, (IpAddr, u16)>) -> Option<String> {
    let parts: Vec<String> = published
        .iter()
        .map(|(port, (host, public))| match host {
            IpAddr::V6(h) => format!("{port}=[{h}]:{public}"),
            IpAddr::V4(h) => format!("{port}={h}:{public}"),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Reads a `gpu-vk.io/published-ports` value ([`crate::provider::parse_published`]), keeping
/// only addresses an EndpointSlice may hold.
pub fn parse_published(text: &str) -> BTreeMap<u16, (IpAddr, u16)> {
    crate::provider::parse_published(text)
        .into_iter()
        .filter_map(|(port, e)| Some((port, (check(&e.host, None, &[]).ok()?, e.port))))
        .collect()
}

impl Choice {
    /// The condition's message.
    pub fn message(&self, provider: &str) -> String {
        let fallback = match self.ip {
            Some(ip) => format!("the pod IP {ip} is provider {provider}'s podIpFallback"),
            None => format!("the pod has no IP (provider {provider} has no podIpFallback)"),
        };
        match (&self.refused, self.reason) {
            (_, PUBLISHED_ELSEWHERE) => format!(
                "provider {provider} publishes the workload's container ports elsewhere ({}): \
                 the pod has no IP, as nothing answers at its address on the container ports; \
                 Services reach it through EndpointSlices of the virtual kubelet",
                published_text(&self.published)
                    .unwrap_or_default()
                    .replace(',', ", ")
                    .replace('=', " at ")
            ),
            (_, FROM_PROVIDER) => {
                format!("provider {provider} lists this address for the workload")
            }
            (Some((raw, why)), _) => format!(
                "provider {provider} lists {raw:?} for the workload, which cannot be a pod IP \
                 ({why}); {fallback}, not where the workload is reached"
            ),
            _ => format!(
                "provider {provider} lists no address for the workload; {fallback}, not where \
                 the workload is reached"
            ),
        }
    }

    /// Sets `podIP`, `podIPs` and the [`CONDITION`] on `status` (transition time kept while
    /// the condition's status stays the same).
    pub fn apply(
        &self,
        status: &mut PodStatus,
        provider: &str,
        now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        let ip = self.ip.map(|ip| ip.to_string());
        status.pod_ips = ip
            .clone()
            .map(|ip| vec![k8s_openapi::api::core::v1::PodIP { ip }]);
        status.pod_ip = ip;
        let routable = if self.reason == FROM_PROVIDER {
            "True"
        } else {
            "False"
        };
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let old = conditions.iter().position(|c| c.type_ == CONDITION);
        let since = old
            .map(|i| &conditions[i])
            .filter(|c| c.status == routable)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        let cond = PodCondition {
            type_: CONDITION.to_owned(),
            status: routable.to_owned(),
            reason: Some(self.reason.to_owned()),
            message: Some(self.message(provider)),
            last_transition_time: Some(since),
            ..Default::default()
        };
        match old {
            Some(i) => conditions[i] = cond,
            None => conditions.push(cond),
        }
    }
}

/// Drops the [`CONDITION`] from a status without a pod IP (no workload observed).
pub fn forget(status: &mut PodStatus) {
    if status.pod_ip.is_none()
        && let Some(c) = status.conditions.as_mut()
    {
        c.retain(|c| c.type_ != CONDITION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn refuses_what_cannot_be_a_pod_ip() {
        let node = Some(ip("10.0.0.9"));
        for (raw, why) in [
            ("host-1.example", "not an IP address"),
            ("10.0.0.300", "not an IP address"),
            ("", "not an IP address"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("127.3.2.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("224.0.0.1", "multicast or broadcast"),
            ("255.255.255.255", "multicast or broadcast"),
            ("10.0.0.9", "the node's own address"),
        ] {
            assert_eq!(check(raw, node, &[]), Err(why), "{raw}");
        }
        for ok in ["198.18.0.7", " 203.0.113.7 ", "10.0.0.10", "2001:db8::7"] {
            assert_eq!(check(ok, node, &[]), Ok(ip(ok.trim())), "{ok}");
        }
    }

    #[test]
    fn refuses_the_clusters_own_networks() {
        let cluster: Vec<IpNet> = vec![
            "10.96.0.0/16".parse().unwrap(),
            "10.244.0.0/16".parse().unwrap(),
        ];
        for raw in ["10.96.0.1", "10.244.3.7"] {
            assert_eq!(
                check(raw, None, &cluster),
                Err("inside the cluster's own networks")
            );
        }
        assert_eq!(check("198.18.0.7", None, &cluster), Ok(ip("198.18.0.7")));
        let fb = Some(ip("192.0.2.50"));
        let c = choose(Some("10.244.3.7"), &BTreeMap::new(), fb, None, &cluster);
        assert_eq!((c.ip, c.reason), (fb, REFUSED));
        assert!(
            c.message("vast")
                .contains("inside the cluster's own networks"),
            "{}",
            c.message("vast")
        );
        // A published port inside them is not published: no slice is written to it.
        let ports = BTreeMap::from([(8080, at("10.244.3.7", 43210))]);
        let c = choose(Some("203.0.113.7"), &ports, fb, None, &cluster);
        assert!(c.published.is_empty());
        assert_eq!(c.reason, FROM_PROVIDER);
    }

    #[test]
    fn falls_back_and_says_why() {
        let fb = Some(ip("192.0.2.50"));
        let c = choose(Some("198.18.0.7"), &BTreeMap::new(), fb, None, &[]);
        assert_eq!((c.ip, c.reason), (Some(ip("198.18.0.7")), FROM_PROVIDER));
        let c = choose(None, &BTreeMap::new(), fb, None, &[]);
        assert_eq!((c.ip, c.reason, c.refused.clone()), (fb, NO_ADDRESS, None));
        assert!(
            c.message("rp").contains("lists no address"),
            "{}",
            c.message("rp")
        );
        let c = choose(Some("127.0.0.1"), &BTreeMap::new(), fb, None, &[]);
        assert_eq!(c.ip, fb);
        assert_eq!(c.refused, Some(("127.0.0.1".to_owned(), "loopback")));
        assert!(
            c.message("rp").contains("\"127.0.0.1\""),
            "{}",
            c.message("rp")
        );
        let c = choose(Some("  "), &BTreeMap::new(), None, None, &[]);
        assert_eq!((c.ip, c.reason), (None, NO_ADDRESS));
    }

    fn at(host: &str, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn ports_published_elsewhere_give_no_ip_and_say_where() {
        let fb = Some(ip("192.0.2.50"));
        // RunPod: container port 8080 at public port 43210 of the listed address.
        let ports = BTreeMap::from([
            (8080, at("203.0.113.7", 43210)),
            (9090, at("203.0.113.7", 43211)),
        ]);
        let c = choose(Some("203.0.113.7"), &ports, fb, None, &[]);
        assert_eq!(
            (c.ip, c.reason),
            (None, PUBLISHED_ELSEWHERE),
            "no fallback either"
        );
        let text = published_text(&c.published).unwrap();
        assert_eq!(text, "8080=203.0.113.7:43210,9090=203.0.113.7:43211");
        assert_eq!(parse_published(&text), c.published);
        let m = c.message("rp");
        assert!(m.contains("8080 at 203.0.113.7:43210, 9090 at"), "{m}");
        // The same port numbers at the listed address: the pod IP is where they are.
        let same = BTreeMap::from([(8080, at("203.0.113.7", 8080))]);
        let c = choose(Some("203.0.113.7"), &same, fb, None, &[]);
        assert_eq!((c.ip, c.reason), (Some(ip("203.0.113.7")), FROM_PROVIDER));
        assert!(c.published.is_empty());
        // Published at another host (same numbers) is elsewhere too.
        let other = BTreeMap::from([(8080, at("203.0.113.9", 8080))]);
        assert_eq!(
            choose(Some("203.0.113.7"), &other, fb, None, &[]).reason,
            PUBLISHED_ELSEWHERE
        );
        // A published address that cannot be in an EndpointSlice is not used.
        let lo = BTreeMap::from([(8080, at("127.0.0.1", 43210))]);
        let c = choose(Some("203.0.113.7"), &lo, fb, None, &[]);
        assert_eq!((c.ip, c.reason), (Some(ip("203.0.113.7")), FROM_PROVIDER));
        // IPv6, and what a user may have written by hand.
        let v6 = BTreeMap::from([(80, (ip("2001:db8::7"), 40000))]);
        assert_eq!(
            published_text(&v6).as_deref(),
            Some("80=[2001:db8::7]:40000")
        );
        assert_eq!(parse_published("80=[2001:db8::7]:40000"), v6);
        assert!(parse_published("x=1.2.3.4:5,80=127.0.0.1:9,81=nonsense,82=1.2.3.4:0").is_empty());
        assert_eq!(published_text(&BTreeMap::new()), None);
    }

    #[test]
    fn apply_sets_ips_and_keeps_the_transition_time() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t0 = Time(jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(2_000).unwrap());
        let mut st = PodStatus::default();
        choose(Some("198.18.0.7"), &BTreeMap::new(), None, None, &[]).apply(&mut st, "rp", &t0);
        assert_eq!(st.pod_ip.as_deref(), Some("198.18.0.7"));
        assert_eq!(st.pod_ips.as_ref().unwrap()[0].ip, "198.18.0.7");
        choose(Some("198.18.0.8"), &BTreeMap::new(), None, None, &[]).apply(&mut st, "rp", &t1);
        let c = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("True", Some(t0))
        );
        choose(None, &BTreeMap::new(), None, None, &[]).apply(&mut st, "rp", &t1);
        let c = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(st.conditions.as_ref().unwrap().len(), 1);
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("False", Some(t1))
        );
        assert_eq!((st.pod_ip.clone(), st.pod_ips.clone()), (None, None));
        forget(&mut st);
        assert_eq!(st.conditions.as_ref().map(Vec::len), Some(0));
    }
}
