//! Which addresses can be a pod IP (the rule `pods::address` applies to what providers list,
//! and configuration applies to `podIpFallback`), and which addresses a provider hands us are
//! this host's own or its link's (never dialled on a provider's word: probes, Vast's log URLs).

use std::net::IpAddr;

/// `ip` with an IPv4-mapped IPv6 address as its IPv4 address (`::ffff:127.0.0.1` is
/// loopback too), and whether it is link-local.
fn unmapped(ip: IpAddr) -> (IpAddr, bool) {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    (ip, link_local)
}

/// Loopback, link-local or unspecified (IPv4-mapped IPv6 addresses as their IPv4 address).
pub fn is_local(ip: IpAddr) -> bool {
    let (ip, link_local) = unmapped(ip);
    ip.is_loopback() || ip.is_unspecified() || link_local
}

/// [`is_local`] for a host as a URL or an endpoint writes it (`[fe80::1]`, `localhost`); a
/// name other than `localhost` is not judged (false).
pub fn is_local_host(host: &str) -> bool {
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => is_local(ip),
        Err(_) => host.is_empty() || host.eq_ignore_ascii_case("localhost"),
    }
}

/// Whether `host` (an address as an endpoint or URL writes it) lies in one of `nets`; a name
/// is not judged (false).
pub fn in_networks(host: &str, nets: &[ipnet::IpNet]) -> bool {
    host.trim_matches(['[', ']'])
        .parse::<IpAddr>()
        .is_ok_and(|ip| nets.iter().any(|n| n.contains(&ip)))
}

/// Why `ip` cannot be a pod IP on a node whose address is `node`, or `None` when it can: the
/// API server refuses unspecified, loopback, link-local and multicast addresses in
/// EndpointSlices, and the node's own address would make the pod look like a host-network
/// pod.
pub fn unusable(ip: IpAddr, node: Option<IpAddr>) -> Option<&'static str> {
    let (ip, link_local) = unmapped(ip);
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if link_local {
        Some("link-local")
    } else if ip.is_multicast() || ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST) {
        Some("multicast or broadcast")
    } else if Some(ip) == node {
        Some("the node's own address")
    } else {
        None
    }
}
