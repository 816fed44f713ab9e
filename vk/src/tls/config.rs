//! The rustls server configuration of the kubelet API, rebuilt when the client CA changes
//! (each new handshake uses the configuration current when it starts).

use std::sync::{Arc, RwLock};

use rustls::RootCertStore;
use rustls::server::{ServerConfig, WebPkiClientVerifier};

use super::{Error, ServingCert};

/// The rustls server configuration: our certificate, optional client certificates verified
/// against `roots`, HTTP/2 and HTTP/1.1 (upgrades for exec need the latter).
pub fn server_config(
    cert: Arc<ServingCert>,
    roots: Option<RootCertStore>,
) -> Result<Arc<ServerConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::BuildConfig)?;
    let builder = match roots {
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The configuration new connections are served with; the serving certificate rotates inside
/// it (see [`ServingCert`]), the client CA by replacing it.
pub struct TlsConfigs {
    serving: Arc<ServingCert>,
    current: RwLock<(Arc<ServerConfig>, bool)>,
}

impl TlsConfigs {
    pub fn new(
        serving: Arc<ServingCert>,
        roots: Option<RootCertStore>,
    ) -> Result<Arc<Self>, Error> {
        let x509 = roots.is_some();
        let config = server_config(serving.clone(), roots)?;
        Ok(Arc::new(Self {
            serving,
            current: RwLock::new((config, x509)),
        }))
    }

    /// The configuration for a handshake starting now.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Whether client certificates authenticate (a client CA is loaded).
    pub fn x509(&self) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Verifies client certificates of new connections against `roots` (`None`: none).
    pub fn set_client_roots(&self, roots: Option<RootCertStore>) -> Result<(), Error> {
        let x509 = roots.is_some();
        let config = server_config(self.serving.clone(), roots)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (config, x509);
        Ok(())
    }
}
