//! Which addresses can be a pod IP: the rule `pods::address` applies to what providers list,
//! and configuration applies to `podIpFallback`.

use std::net::IpAddr;

/// Why `ip` cannot be a pod IP on a node whose address is `node`, or `None` when it can: the
/// API server refuses unspecified, loopback, link-local and multicast addresses in
/// EndpointSlices, and the node's own address would make the pod look like a host-network
/// pod.
pub fn unusable(ip: IpAddr, node: Option<IpAddr>) -> Option<&'static str> {
    // `::ffff:127.0.0.1` is loopback too.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
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
