//! The CAs client certificates of kubelet API requests are verified against: a configured
//! file (re-read when it changes), or the cluster's client CA.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use super::{Error, TlsConfigs};
use crate::config::TlsConfig;
use crate::telemetry::ErrorChain;

#[cfg(test)]
mod tests;

const CLUSTER_CA_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the client CA file is checked for changes.
pub const CLIENT_CA_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// What a client CA file held when it was read: the SHA-256 of its bytes (`None` when it
/// could not be read), so a rewrite with new content is noticed whatever its mtime says.
type Fingerprint = Option<[u8; 32]>;

/// Sets up the CAs client certificates of new connections are verified against: the
/// configured file, watched for changes ([`CLIENT_CA_RELOAD_INTERVAL`]), else the cluster's
/// client CA (see the module docs), else none. A configured file that does not load yet is
/// not an error: only bearer tokens authenticate until it does. Returns whether client
/// certificates authenticate now.
pub async fn install_client_ca(
    cfg: &TlsConfig,
    client: &Client,
    configs: &Arc<TlsConfigs>,
) -> Result<bool, Error> {
    if let Some(path) = &cfg.client_ca_file {
        watch_file(path.clone(), configs, CLIENT_CA_RELOAD_INTERVAL)?;
        return Ok(configs.x509());
    }
    if cfg.client_ca_from_cluster {
        let roots = cluster_roots(client).await;
        configs.set_client_roots(roots)?;
    }
    Ok(configs.x509())
}

/// Loads the client CA file into `configs` now, then again whenever its content changes, for
/// as long as `configs` is in use. A file that is removed or does not load keeps the last good
/// CAs (and is logged).
fn watch_file(path: PathBuf, configs: &Arc<TlsConfigs>, interval: Duration) -> Result<(), Error> {
    let (loaded, mut seen) = load_file(&path);
    match loaded {
        Ok(roots) => configs.set_client_roots(Some(roots))?,
        Err(e) => warn!(
            file = %path.display(),
            error = %ErrorChain(&e),
            retry_seconds = interval.as_secs(),
            "client CA file does not load: client certificates will not authenticate until it does (bearer tokens still do)"
        ),
    }
    let weak: Weak<TlsConfigs> = Arc::downgrade(configs);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let Some(configs) = weak.upgrade() else {
                return;
            };
            if fingerprint(&path) == seen {
                continue;
            }
            let (loaded, read) = load_file(&path);
            seen = read;
            match loaded.and_then(|roots| configs.set_client_roots(Some(roots))) {
                Ok(()) => info!(
                    file = %path.display(),
                    "loaded the client CA file: client certificates of new connections are verified against it"
                ),
                Err(e) if configs.x509() => warn!(
                    file = %path.display(),
                    error = %ErrorChain(&e),
                    "client CA file changed but does not load: keeping the previous client CA"
                ),
                Err(e) => warn!(
                    file = %path.display(),
                    error = %ErrorChain(&e),
                    "client CA file changed but does not load: client certificates still do not authenticate"
                ),
            }
        }
    });
    Ok(())
}

fn fingerprint(path: &Path) -> Fingerprint {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(&bytes).into())
}

/// The CAs in a PEM file, and the fingerprint of the bytes they were read from.
fn load_file(path: &Path) -> (Result<RootCertStore, Error>, Fingerprint) {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            let source = rustls::pki_types::pem::Error::Io(e);
            let err = Error::ReadClientCa {
                path: path.to_owned(),
                source,
            };
            return (Err(err), None);
        }
    };
    let seen = Some(Sha256::digest(&bytes).into());
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::ReadClientCa {
            path: path.to_owned(),
            source,
        });
    let roots = certs.and_then(|certs| {
        roots_of(certs).ok_or_else(|| Error::NoClientCa {
            path: path.to_owned(),
        })
    });
    (roots, seen)
}

/// The API server's client CA, published in `kube-system/extension-apiserver-authentication`.
async fn cluster_roots(client: &Client) -> Option<RootCertStore> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let cm = match tokio::time::timeout(
        CLUSTER_CA_TIMEOUT,
        api.get("extension-apiserver-authentication"),
    )
    .await
    {
        Ok(Ok(cm)) => cm,
        Ok(Err(e)) => {
            warn!(error = %e, "cannot read the cluster's client CA: client certificates will not authenticate");
            return None;
        }
        Err(_) => {
            warn!(
                "timed out reading the cluster's client CA: client certificates will not authenticate"
            );
            return None;
        }
    };
    let pem = cm
        .data
        .as_ref()
        .and_then(|d| d.get("client-ca-file"))
        .cloned()
        .unwrap_or_default();
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect();
    let roots = roots_of(certs);
    if roots.is_none() {
        warn!("the cluster publishes no client CA: client certificates will not authenticate");
    }
    roots
}

fn roots_of(certs: Vec<CertificateDer<'static>>) -> Option<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(certs);
    if ignored > 0 {
        debug!(ignored, "ignored unparsable client CA certificates");
    }
    (added > 0).then_some(roots)
}
