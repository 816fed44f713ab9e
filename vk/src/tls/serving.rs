//! The kubelet API's serving certificate: loaded from files and re-read when they change,
//! or self-signed for the node.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use super::Error;
use crate::config::TlsConfig;
use crate::telemetry::ErrorChain;

#[cfg(test)]
mod tests;

const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The serving certificate, swapped in place when its files change.
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
    files: Option<(PathBuf, PathBuf)>,
    csr: bool,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServingCert {
    /// Loads the configured pair, or generates a self-signed certificate.
    pub fn load(cfg: &TlsConfig, node_name: &str, internal_ip: &str) -> Result<Arc<Self>, Error> {
        let (key, files) = match (&cfg.cert_file, &cfg.key_file) {
            (Some(_), _) | (_, Some(_)) if cfg.csr => return Err(Error::CsrWithFiles),
            (Some(c), Some(k)) => (load_pair(c, k)?, Some((c.clone(), k.clone()))),
            (None, None) => (self_signed(node_name, internal_ip)?, None),
            _ => return Err(Error::Incomplete),
        };
        Ok(Arc::new(Self {
            current: RwLock::new(Arc::new(key)),
            files,
            csr: cfg.csr,
        }))
    }

    /// Serves `key`, made elsewhere, and nothing else (no files to watch, no CSR).
    pub fn fixed(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(key)),
            files: None,
            csr: false,
        })
    }

    /// `files`, `csr` (self-signed until the cluster signed ours) or `self-signed`, for logs.
    pub fn source(&self) -> &'static str {
        if self.files.is_some() {
            "files"
        } else if self.csr {
            "csr"
        } else {
            "self-signed"
        }
    }

    /// Serves `key` from now on.
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
    }

    /// The leaf certificate currently served.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cert
            .first()
            .cloned()
    }

    /// Re-reads the files whenever they change, for as long as the certificate is in use.
    pub fn watch(self: &Arc<Self>) {
        self.watch_every(RELOAD_INTERVAL);
    }

    fn watch_every(self: &Arc<Self>, interval: Duration) {
        let Some((cert, key)) = self.files.clone() else {
            return;
        };
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut seen = fingerprint(&cert, &key);
            loop {
                tokio::time::sleep(interval).await;
                let Some(this) = weak.upgrade() else { return };
                let now = fingerprint(&cert, &key);
                if now == seen {
                    continue;
                }
                match load_pair(&cert, &key) {
                    Ok(k) => {
                        this.set(k);
                        seen = now;
                        info!(cert = %cert.display(), "reloaded the kubelet API serving certificate");
                    }
                    // Half-written rotation: keep serving the old pair, retry next tick.
                    Err(e) => {
                        warn!(error = %ErrorChain(&e), "serving certificate changed but does not load")
                    }
                }
            }
        });
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn fingerprint(cert: &Path, key: &Path) -> [(Option<SystemTime>, u64); 2] {
    let f = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.modified().ok(), m.len()))
            .unwrap_or((None, 0))
    };
    [f(cert), f(key)]
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| Error::ReadCert {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(Error::NoCert {
            path: cert.to_owned(),
        });
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|source| Error::ReadKey {
        path: key.to_owned(),
        source,
    })?;
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(|source| Error::LoadKey {
            path: key.to_owned(),
            source,
        })?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|source| Error::MatchKey {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    })?;
    Ok(ck)
}

/// A self-signed serving certificate for the node name and its internal IP.
pub fn self_signed(node_name: &str, internal_ip: &str) -> Result<CertifiedKey, Error> {
    let mut names = vec![node_name.to_owned()];
    if !internal_ip.is_empty() && internal_ip != node_name {
        names.push(internal_ip.to_owned());
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{node_name}@gpu-vk"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let ymd = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
    };
    if let (Ok(from), Ok(to)) = (
        today.yesterday(),
        today.checked_add(jiff::Span::new().years(1)),
    ) {
        params.not_before = ymd(from);
        params.not_after = ymd(to);
    }
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(Error::BuildConfig)?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}
