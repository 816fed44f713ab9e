//! `admission:`: the VK's validating admission webhook, which refuses at create time a pod that
//! targets this node and that the VK would refuse (see `crate::admission`).

use serde::Deserialize;

/// Where the webhook listens and how the API server reaches it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Admission {
    /// Serve the webhook and register it (a ValidatingWebhookConfiguration named after the node,
    /// owned by the Node so it goes with it).
    #[serde(default)]
    pub enabled: bool,
    /// Address the webhook's HTTPS listener binds (default `0.0.0.0:9443`).
    #[serde(default)]
    pub addr: Option<String>,
    /// In a cluster: `NAMESPACE/NAME` of the Service (port 443) in front of the listener.
    #[serde(default)]
    pub service: Option<String>,
    /// Outside a cluster: the URL the API server calls (`https://HOST:PORT/validate`).
    #[serde(default)]
    pub url: Option<String>,
}

impl Admission {
    pub fn addr(&self) -> &str {
        self.addr.as_deref().unwrap_or("0.0.0.0:9443")
    }

    /// `Err` says what is missing or contradictory.
    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        match (&self.service, &self.url) {
            (Some(_), Some(_)) => Err("admission: set service or url, not both".into()),
            (None, None) => Err("admission: set service (in a cluster) or url".into()),
            (Some(s), None) if !s.contains('/') => {
                Err("admission.service must be NAMESPACE/NAME".into())
            }
            (None, Some(u)) if !u.starts_with("https://") => {
                Err("admission.url must be an https:// URL".into())
            }
            _ => self
                .addr()
                .parse::<std::net::SocketAddr>()
                .map(|_| ())
                .map_err(|e| format!("admission.addr: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enabled_webhook_needs_one_way_in() {
        let parse = |y: &str| serde_saphyr::from_str::<Admission>(y).unwrap().validate();
        assert!(parse("enabled: false").is_ok());
        assert!(parse("enabled: true").unwrap_err().contains("service"));
        assert!(parse("enabled: true\nservice: gpu-vk/vk-admission").is_ok());
        assert!(
            parse("enabled: true\nservice: vk")
                .unwrap_err()
                .contains("NAMESPACE")
        );
        assert!(
            parse("enabled: true\nurl: http://x")
                .unwrap_err()
                .contains("https")
        );
        let both = "enabled: true\nurl: https://x\nservice: a/b";
        assert!(parse(both).unwrap_err().contains("not both"));
        assert!(
            parse("enabled: true\nurl: https://x\naddr: nowhere")
                .unwrap_err()
                .contains("addr")
        );
    }
}
