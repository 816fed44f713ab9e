//! The `kubeletApi` and `tls` blocks: bounds on the kubelet API's connections and sessions,
//! and its certificates.

use super::*;

/// The `kubeletApi` block: bounds on the kubelet API server's connections and exec sessions.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletApiConfig {
    /// TLS connections open at once (handshaking or established); more are closed at once.
    pub max_connections: usize,
    /// An exec session without a data message in either direction for this long is closed;
    /// 0 never closes one. The default is the kubelet's: its `streamingConnectionIdleTimeout`
    /// (`--streaming-connection-idle-timeout`) defaults to 4 hours.
    pub exec_idle_timeout_seconds: u64,
    /// Declare `ExtendWebSocketsToKubelet` in the Node's `status.declaredFeatures` (default).
    /// A 1.36 API server then passes `kubectl exec`'s WebSocket straight through; without it
    /// the API server translates WebSockets to SPDY/3.1 towards this node (served too).
    pub declare_extend_web_sockets_to_kubelet: bool,
}

impl Default for KubeletApiConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            exec_idle_timeout_seconds: 4 * 3600,
            declare_extend_web_sockets_to_kubelet: true,
        }
    }
}

impl KubeletApiConfig {
    /// `None` when sessions never time out.
    pub fn exec_idle_timeout(&self) -> Option<Duration> {
        (self.exec_idle_timeout_seconds > 0)
            .then(|| Duration::from_secs(self.exec_idle_timeout_seconds))
    }
}

/// The `tls` block of the config file: the kubelet API's serving certificate and client
/// certificate authentication (see `crate::tls`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsConfig {
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    #[serde(default = "yes")]
    pub client_ca_from_cluster: bool,
    /// Request the serving certificate from the cluster (`kubernetes.io/kubelet-serving` CSR).
    #[serde(default)]
    pub csr: bool,
    /// Approve our own serving CSR (needs `approve` on `signers/kubernetes.io/kubelet-serving`);
    /// otherwise an administrator or an approver controller must approve it.
    #[serde(default)]
    pub csr_auto_approve: bool,
    /// Requested certificate lifetime (the signer may cap it).
    #[serde(default)]
    pub csr_expiration_seconds: Option<i32>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            client_ca_from_cluster: true,
            csr: false,
            csr_auto_approve: false,
            csr_expiration_seconds: None,
        }
    }
}
