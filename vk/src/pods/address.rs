//! A pod's IP: the address its provider lists for the workload when that is a usable pod
//! address, else the provider's configured `podIpFallback`, with a condition saying which
//! (pure; `status.rs` applies it).
//!
//! A usable address is an IP literal that `config::pod_ip::unusable` accepts: one the API
//! server takes in an EndpointSlice, and not the node's own address (hostIP).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

/// The pod condition saying whether `status.podIP` is where the workload can be reached.
pub const CONDITION: &str = "gpu-vk.io/PodIPRoutable";
/// The provider listed a usable address for the workload.
pub const FROM_PROVIDER: &str = "ProviderAddress";
/// The provider listed none; the pod IP is the provider's `podIpFallback`.
pub const NO_ADDRESS: &str = "ProviderGaveNoAddress";
/// The provider listed an address that cannot be a pod IP (see [`check`]).
pub const REFUSED: &str = "ProviderAddressRefused";

/// The pod IP chosen for a workload, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `status.podIP`, or none (no usable address and no fallback).
    pub ip: Option<IpAddr>,
    /// The condition's reason: [`FROM_PROVIDER`], [`NO_ADDRESS`] or [`REFUSED`].
    pub reason: &'static str,
    /// What the provider listed and why it was refused, for [`REFUSED`].
    pub refused: Option<(String, &'static str)>,
}

/// Why `raw` cannot be a pod IP, or the address.
pub fn check(raw: &str, node: Option<IpAddr>) -> Result<IpAddr, &'static str> {
    let ip: IpAddr = raw.trim().parse().map_err(|_| "not an IP address")?;
    crate::config::pod_ip::unusable(ip, node).map_or(Ok(ip), Err)
}

/// The pod IP for a workload whose provider lists `listed`, on a node whose address is `node`.
pub fn choose(listed: Option<&str>, fallback: Option<IpAddr>, node: Option<IpAddr>) -> Choice {
    let listed = listed.map(str::trim).filter(|s| !s.is_empty());
    match listed.map(|raw| (raw, check(raw, node))) {
        Some((_, Ok(ip))) => Choice {
            ip: Some(ip),
            reason: FROM_PROVIDER,
            refused: None,
        },
        Some((raw, Err(why))) => Choice {
            ip: fallback,
            reason: REFUSED,
            // Bounded: it ends up in an Event and a condition.
            refused: Some((raw.chars().take(64).collect(), why)),
        },
        None => Choice {
            ip: fallback,
            reason: NO_ADDRESS,
            refused: None,
        },
    }
}

impl Choice {
    /// The condition's message.
    pub fn message(&self, provider: &str) -> String {
        let fallback = match self.ip {
            Some(ip) => format!("the pod IP {ip} is provider {provider}'s podIpFallback"),
            None => format!("the pod has no IP (provider {provider} has no podIpFallback)"),
        };
        match (&self.refused, self.reason) {
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
            assert_eq!(check(raw, node), Err(why), "{raw}");
        }
        for ok in ["198.18.0.7", " 203.0.113.7 ", "10.0.0.10", "2001:db8::7"] {
            assert_eq!(check(ok, node), Ok(ip(ok.trim())), "{ok}");
        }
    }

    #[test]
    fn falls_back_and_says_why() {
        let fb = Some(ip("192.0.2.50"));
        let c = choose(Some("198.18.0.7"), fb, None);
        assert_eq!((c.ip, c.reason), (Some(ip("198.18.0.7")), FROM_PROVIDER));
        let c = choose(None, fb, None);
        assert_eq!((c.ip, c.reason, c.refused.clone()), (fb, NO_ADDRESS, None));
        assert!(
            c.message("rp").contains("lists no address"),
            "{}",
            c.message("rp")
        );
        let c = choose(Some("127.0.0.1"), fb, None);
        assert_eq!(c.ip, fb);
        assert_eq!(c.refused, Some(("127.0.0.1".to_owned(), "loopback")));
        assert!(
            c.message("rp").contains("\"127.0.0.1\""),
            "{}",
            c.message("rp")
        );
        let c = choose(Some("  "), None, None);
        assert_eq!((c.ip, c.reason), (None, NO_ADDRESS));
    }

    #[test]
    fn apply_sets_ips_and_keeps_the_transition_time() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t0 = Time(jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(2_000).unwrap());
        let mut st = PodStatus::default();
        choose(Some("198.18.0.7"), None, None).apply(&mut st, "rp", &t0);
        assert_eq!(st.pod_ip.as_deref(), Some("198.18.0.7"));
        assert_eq!(st.pod_ips.as_ref().unwrap()[0].ip, "198.18.0.7");
        choose(Some("198.18.0.8"), None, None).apply(&mut st, "rp", &t1);
        let c = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("True", Some(t0))
        );
        choose(None, None, None).apply(&mut st, "rp", &t1);
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
