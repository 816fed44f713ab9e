//! The CAs client certificates of kubelet API requests are verified against: a configured
//! file, or the cluster's client CA.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tracing::{debug, warn};

use super::Error;
use crate::config::TlsConfig;

const CLUSTER_CA_TIMEOUT: Duration = Duration::from_secs(10);

/// The CAs client certificates are verified against: the configured file, else the cluster's
/// client CA (see the module docs); `None` disables client certificate authentication.
pub async fn client_roots(
    cfg: &TlsConfig,
    client: &Client,
) -> Result<Option<RootCertStore>, Error> {
    if let Some(path) = &cfg.client_ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|source| Error::ReadClientCa {
                path: path.clone(),
                source,
            })?;
        return match roots_of(certs) {
            Some(r) => Ok(Some(r)),
            None => Err(Error::NoClientCa { path: path.clone() }),
        };
    }
    if !cfg.client_ca_from_cluster {
        return Ok(None);
    }
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
            return Ok(None);
        }
        Err(_) => {
            warn!(
                "timed out reading the cluster's client CA: client certificates will not authenticate"
            );
            return Ok(None);
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
    Ok(roots)
}

fn roots_of(certs: Vec<CertificateDer<'static>>) -> Option<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(certs);
    if ignored > 0 {
        debug!(ignored, "ignored unparsable client CA certificates");
    }
    (added > 0).then_some(roots)
}
