//! Where a probe may connect, decided before any dial (pure): only the address the provider
//! publishes for the container port, never a host the pod names (`httpGet.host`,
//! `tcpSocket.host`: the VK would dial it from its own network position, next to the API
//! server, cloud metadata services and its own metrics port, and report the answer in
//! Events), never a loopback, link-local or unspecified address, and an HTTP redirect only to
//! the same host and port (the kubelet does not follow a redirect to another host either: it
//! takes the redirect itself as the answer).

use crate::provider::Endpoint;

/// The endpoint a `handler` probe on port `number` dials, or why it is not evaluated.
pub fn target(
    handler: &str,
    number: u16,
    pod_host: Option<&str>,
    published: Option<&Endpoint>,
    provider: &str,
    cluster_networks: &[ipnet::IpNet],
) -> Result<Endpoint, String> {
    if let Some(h) = pod_host {
        let h: String = h.chars().take(64).collect();
        return Err(format!(
            "{handler} on port {number} names host {h:?}: the virtual kubelet dials only the \
             address provider {provider} publishes for the port, not a host the pod names"
        ));
    }
    let Some(e) = published else {
        return Err(format!(
            "{handler} on port {number} cannot be evaluated: provider {provider} exposes no \
             address for that port"
        ));
    };
    if crate::config::pod_ip::is_local_host(&e.host) {
        return Err(format!(
            "{handler} on port {number}: provider {provider} publishes {}, a loopback or \
             link-local address, which the virtual kubelet does not dial",
            e.host
        ));
    }
    if crate::config::pod_ip::in_networks(&e.host, cluster_networks) {
        return Err(format!(
            "{handler} on port {number}: provider {provider} publishes {}, an address of the \
             cluster's own networks (clusterNetworks), which the virtual kubelet does not dial",
            e.host
        ));
    }
    Ok(e.clone())
}

/// Whether a redirect from `from` to `to` is followed: same scheme, host and port only.
pub fn follow_redirect(from: &reqwest::Url, to: &reqwest::Url) -> bool {
    from.scheme() == to.scheme()
        && from.host_str() == to.host_str()
        && from.port_or_known_default() == to.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str) -> Endpoint {
        Endpoint {
            host: host.into(),
            port: 43210,
        }
    }

    #[test]
    fn only_the_published_address_is_dialled() {
        let published = ep("203.0.113.7");
        let ok = target("httpGet", 8080, None, Some(&published), "rp", &[]).unwrap();
        assert_eq!(ok, published);
        for host in ["169.254.169.254", "kubernetes.default.svc", "127.0.0.1"] {
            let err = target("httpGet", 8080, Some(host), Some(&published), "rp", &[]).unwrap_err();
            assert!(err.contains(host) && err.contains("dials only"), "{err}");
        }
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "[fe80::1]",
        ] {
            let err = target("tcpSocket", 22, None, Some(&ep(bad)), "rp", &[]).unwrap_err();
            assert!(err.contains("loopback or link-local"), "{bad}: {err}");
        }
        let cluster: Vec<ipnet::IpNet> =
            vec!["10.96.0.0/12".parse().unwrap(), "fd00::/8".parse().unwrap()];
        for inside in ["10.96.0.10", "10.111.2.3", "[fd00::1]"] {
            let err = target("httpGet", 80, None, Some(&ep(inside)), "rp", &cluster).unwrap_err();
            assert!(err.contains("cluster's own networks"), "{inside}: {err}");
        }
        assert!(target("httpGet", 80, None, Some(&ep("10.112.0.1")), "rp", &cluster).is_ok());
        assert!(
            target("tcpSocket", 22, None, None, "rp", &[])
                .unwrap_err()
                .contains("no address")
        );
    }

    #[test]
    fn redirects_stay_on_the_same_host_and_port() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        let from = u("http://203.0.113.7:43210/healthz");
        assert!(follow_redirect(&from, &u("http://203.0.113.7:43210/ready")));
        for to in [
            "http://169.254.169.254/latest/meta-data/",
            "http://203.0.113.7:10250/pods",
            "https://203.0.113.7:43210/healthz",
            "http://kubernetes.default.svc/api",
        ] {
            assert!(!follow_redirect(&from, &u(to)), "{to}");
        }
    }
}
