//! The webhook's serving certificate: self-signed at start for the webhook Service's DNS names,
//! and published as the `caBundle` of the MutatingWebhookConfiguration before the webhook serves,
//! so the API server trusts exactly the certificate this process holds (no cert-manager needed).

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::PostParams;
use kube::{Api, Client};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use crate::tls::ServingCert;

/// Errors making or publishing the certificate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to generate the webhook certificate")]
    Generate(#[from] rcgen::Error),
    #[error("failed to build the TLS configuration")]
    Tls(#[from] rustls::Error),
    #[error("failed to read MutatingWebhookConfiguration {0}")]
    Read(String, #[source] kube::Error),
    #[error("failed to write the caBundle of MutatingWebhookConfiguration {0}")]
    Write(String, #[source] kube::Error),
    #[error("MutatingWebhookConfiguration {0} kept changing under our writes")]
    Conflict(String),
}

/// A certificate for the Service `name` in `namespace`, ready to serve.
pub struct WebhookCert {
    /// PEM of the certificate: the `caBundle` the API server verifies it with.
    pub pem: String,
    pub serving: Arc<ServingCert>,
}

/// Generates a self-signed certificate valid for the Service's in-cluster DNS names.
pub fn self_signed(name: &str, namespace: &str) -> Result<WebhookCert, Error> {
    self_signed_for(vec![
        name.to_owned(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
    ])
}

/// A self-signed certificate for `names` (DNS names, or IP addresses: rcgen makes those IP
/// SANs), ready to serve.
pub fn self_signed_for(names: Vec<String>) -> Result<WebhookCert, Error> {
    let rcgen::CertifiedKey { cert, signing_key } = rcgen::generate_simple_self_signed(names)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)?;
    Ok(WebhookCert {
        pem: cert.pem(),
        serving: ServingCert::fixed(CertifiedKey::new(vec![cert.der().clone()], signer)),
    })
}

/// Sets `pem` as the `caBundle` of every webhook in the MutatingWebhookConfiguration `name`.
pub async fn publish_ca_bundle(client: &Client, name: &str, pem: &str) -> Result<(), Error> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    // A conflict means someone else wrote it between our read and write: read again.
    for _ in 0..5 {
        let mut cfg = api
            .get(name)
            .await
            .map_err(|e| Error::Read(name.to_owned(), e))?;
        for w in cfg.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ByteString(pem.as_bytes().to_vec()));
        }
        match api.replace(name, &PostParams::default(), &cfg).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(Error::Write(name.to_owned(), e)),
        }
    }
    Err(Error::Conflict(name.to_owned()))
}
