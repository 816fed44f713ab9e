//! The serving certificate requested from the cluster through a `kubernetes.io/kubelet-serving`
//! CertificateSigningRequest, and renewed before it expires (`tls.csr: true`).
//!
//! As the kubelet's certificate manager: a fresh ECDSA P-256 key per request; subject
//! `CN=system:node:<node>, O=system:nodes`; SANs the node name and `internalIp`; usages
//! `digital signature` and `server auth` (what the signer requires of non-RSA keys, see
//! `ValidateKubeletServingCSR`). Until the first certificate is issued the API serves a
//! self-signed one. A new certificate is requested at a random point between 70% and 90% of
//! the current one's lifetime; failures (denied, failed, not approved within
//! [`ISSUE_TIMEOUT`]) are retried with back-off, and the current certificate stays in use
//! meanwhile.
//!
//! Approval: the `csrapproving` controller does not approve serving certificates. Either an
//! administrator or an approver approves them, or with `tls.csrAutoApprove: true` the VK
//! approves its own request; that needs `update` on `certificatesigningrequests/approval` and
//! `approve` on `signers` named `kubernetes.io/kubelet-serving` (creating CSRs needs `create`
//! and `get` on `certificatesigningrequests`).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::config::TlsConfig;
use crate::telemetry::ErrorChain;
use crate::tls::{ServingCert, validity};

pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How long one request may wait for approval and signing.
pub const ISSUE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const POLL: Duration = Duration::from_secs(2);
const RETRY_MIN: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Errors of one certificate request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to build the certificate request")]
    BuildRequest(#[from] rcgen::Error),
    #[error("failed to create the CertificateSigningRequest")]
    Create(#[source] kube::Error),
    #[error("failed to approve CertificateSigningRequest {name}")]
    Approve {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to read CertificateSigningRequest {name}")]
    Get {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CertificateSigningRequest {name} was {condition}: {message}")]
    Refused {
        name: String,
        condition: String,
        message: String,
    },
    #[error("CertificateSigningRequest {name} was not issued within {}s", ISSUE_TIMEOUT.as_secs())]
    Timeout { name: String },
    #[error("the certificate issued for {name} is unusable: {message}")]
    Unusable { name: String, message: String },
}

/// One issued certificate with its key.
pub struct Issued {
    pub key: CertifiedKey,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
}

/// Keeps `serving` supplied with a cluster-signed certificate, in the background.
pub fn spawn(
    serving: Arc<ServingCert>,
    client: Client,
    cfg: TlsConfig,
    node_name: String,
    internal_ip: String,
) {
    tokio::spawn(async move {
        let mut retry = RETRY_MIN;
        loop {
            match request(&client, &cfg, &node_name, &internal_ip).await {
                Ok(issued) => {
                    retry = RETRY_MIN;
                    let renew = renew_at(
                        issued.not_before,
                        issued.not_after,
                        rand::random_range(0.7..0.9),
                    );
                    serving.set(issued.key);
                    info!(
                        not_after = %issued.not_after,
                        renew_at = %renew,
                        "serving certificate issued by the cluster"
                    );
                    let wait = renew.duration_since(Timestamp::now());
                    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
                }
                Err(e) => {
                    warn!(error = %ErrorChain(&e), retry_in_s = retry.as_secs(), "serving certificate request failed");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    });
}

/// When to request the next certificate: `fraction` of the way through the validity.
pub fn renew_at(not_before: Timestamp, not_after: Timestamp, fraction: f64) -> Timestamp {
    let life = not_after.duration_since(not_before);
    let part = life.mul_f64(fraction.clamp(0.0, 1.0));
    not_before.checked_add(part).unwrap_or(not_after)
}

/// The certificate request (PEM) and its key.
pub fn build_request(
    node_name: &str,
    internal_ip: &str,
) -> Result<(String, rcgen::KeyPair), Error> {
    let mut names = vec![node_name.to_owned()];
    if !internal_ip.is_empty() && internal_ip != node_name {
        names.push(internal_ip.to_owned());
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{node_name}"),
    );
    let key = rcgen::KeyPair::generate()?;
    let pem = params.serialize_request(&key)?.pem()?;
    Ok((pem, key))
}

/// Requests, optionally approves, and waits for one certificate.
pub async fn request(
    client: &Client,
    cfg: &TlsConfig,
    node_name: &str,
    internal_ip: &str,
) -> Result<Issued, Error> {
    let (pem, key) = build_request(node_name, internal_ip)?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("gpu-vk-serving-{node_name}-")),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            expiration_seconds: cfg.csr_expiration_seconds,
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let created = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(Error::Create)?;
    let name = created.metadata.name.unwrap_or_default();
    info!(csr = %name, "requested a serving certificate");
    if cfg.csr_auto_approve {
        let approval = serde_json::json!({
            "status": {"conditions": [{
                "type": "Approved",
                "status": "True",
                "reason": "GpuVkSelfApproved",
                "message": "serving certificate of the virtual kubelet, approved by itself",
            }]}
        });
        api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
            .await
            .map_err(|source| Error::Approve {
                name: name.clone(),
                source,
            })?;
    }
    let deadline = tokio::time::Instant::now() + ISSUE_TIMEOUT;
    let chain = loop {
        let current = api.get(&name).await.map_err(|source| Error::Get {
            name: name.clone(),
            source,
        })?;
        let status = current.status.unwrap_or_default();
        if let Some(refused) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
        {
            return Err(Error::Refused {
                name,
                condition: refused.type_.to_lowercase(),
                message: refused.message.clone().unwrap_or_default(),
            });
        }
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            break cert.0;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout { name });
        }
        tokio::time::sleep(POLL).await;
    };
    let unusable = |message: String| Error::Unusable {
        name: name.clone(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<_, _>>()
        .map_err(|e| unusable(e.to_string()))?;
    let leaf = chain
        .first()
        .ok_or_else(|| unusable("no certificate".into()))?;
    let (not_before, not_after) =
        validity(leaf.as_ref()).ok_or_else(|| unusable("unreadable validity".into()))?;
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = rustls::crypto::ring::sign::any_supported_type(&der)
        .map_err(|e| unusable(e.to_string()))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| unusable(e.to_string()))?;
    Ok(Issued {
        key: ck,
        not_before,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_inside_the_validity() {
        let nb: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let na: Timestamp = "2026-01-11T00:00:00Z".parse().unwrap();
        assert_eq!(
            renew_at(nb, na, 0.8),
            "2026-01-09T00:00:00Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(renew_at(nb, na, 7.0), na);
        // An already expired certificate is renewed at once.
        assert!(renew_at(nb, na, 0.7) < Timestamp::now());
    }

    #[test]
    fn the_request_is_a_kubelet_serving_request() {
        let (pem, _key) = build_request("vk-node", "10.0.0.7").unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        // The subject is inside the DER; spot-check the names in it.
        let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
            .unwrap();
        let bytes = der.as_ref();
        let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"system:node:vk-node"));
        assert!(has(b"system:nodes"));
        assert!(has(b"vk-node"));
        assert!(has(&[10, 0, 0, 7]));
    }
}
