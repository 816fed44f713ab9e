//! TLS for the kubelet API: the serving certificate, client certificate verification and the
//! listener that hands axum finished TLS connections together with the client's identity.
//!
//! Configuration (the `tls` block of the VK's config file):
//!
//! ```yaml
//! tls:
//!   certFile: /etc/gpu-vk/tls/tls.crt     # PEM chain, leaf first
//!   keyFile: /etc/gpu-vk/tls/tls.key      # PEM private key (PKCS#8, PKCS#1 or SEC1)
//!   clientCaFile: /etc/kubernetes/ca.crt  # CA bundle client certificates are verified against
//!   clientCaFromCluster: true             # default; see below
//!   csr: false                            # or: request the certificate from the cluster
//!   csrAutoApprove: false                 # approve our own CSR (see `super::csr`)
//!   csrExpirationSeconds: 31536000        # optional, the signer may cap it
//! anonymousAuth: false                    # default
//! ```
//!
//! - **Serving certificate.** With `certFile` and `keyFile` the pair is loaded at start and
//!   re-read when either file changes (checked every 10 seconds; a pair that does not load or
//!   whose key does not match is logged and the previous one kept), so cert-manager or a
//!   kubelet-serving CSR renewal can rotate it in place. Without them a self-signed
//!   certificate (ECDSA P-256, valid one year, SANs: the node name and `internalIp`) is
//!   generated at each start, as the kubelet does without `--tls-cert-file`; API servers
//!   started without `--kubelet-certificate-authority` accept it. With `csr: true` that
//!   self-signed certificate is only served until the cluster issued one through a
//!   `kubernetes.io/kubelet-serving` CSR, which is renewed before expiry ([`super::csr`]).
//! - **Client certificates** are verified against `clientCaFile`. Without it, and unless
//!   `clientCaFromCluster: false`, the VK reads the API server's client CA from the
//!   `kube-system/extension-apiserver-authentication` ConfigMap (key `client-ca-file`), the
//!   source aggregated API servers use (its RBAC: the `extension-apiserver-authentication-reader`
//!   Role). If neither is available only bearer tokens authenticate. Clients may connect
//!   without a certificate (they then authenticate with a token or not at all); a certificate
//!   that does not verify fails the handshake, as on the kubelet.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};
use x509_parser::asn1_rs::{FromDer, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::x509::AttributeTypeAndValue;

use super::auth::User;
use crate::config::TlsConfig;
use crate::telemetry::ErrorChain;

const RELOAD_INTERVAL: Duration = Duration::from_secs(10);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshakes in progress at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;
const CLUSTER_CA_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tls: set both certFile and keyFile, or neither")]
    Incomplete,
    #[error("tls: csr and certFile/keyFile exclude each other")]
    CsrWithFiles,
    #[error("failed to read certificate file {path}")]
    ReadCert {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("no certificate in {path}")]
    NoCert { path: PathBuf },
    #[error("failed to read private key file {path}")]
    ReadKey {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("failed to load the private key in {path}")]
    LoadKey {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("failed to match certificate {cert} with private key {key}")]
    MatchKey {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("failed to read client CA file {path}")]
    ReadClientCa {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("no usable CA certificate in client CA file {path}")]
    NoClientCa { path: PathBuf },
    #[error("failed to generate a self-signed serving certificate")]
    GenerateSelfSigned(#[from] rcgen::Error),
    #[error("failed to build the TLS configuration")]
    BuildConfig(#[source] rustls::Error),
    #[error("failed to build the client certificate verifier")]
    BuildVerifier(#[from] rustls::server::VerifierBuilderError),
}

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

/// Accepts TCP connections and completes TLS handshakes concurrently (a slow client cannot hold
/// up others), handing finished connections to axum.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: Option<SocketAddr>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        let local = tcp.local_addr().ok();
        let (tx, rx) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let task = tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(permit);
                    match handshake {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => debug!(peer = %addr, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Self { rx, local, task }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            // The accept task is gone (it only ends with the listener): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| std::io::Error::other("listener has no local address"))
    }
}

/// The client of one connection: its address and, if it presented a verified certificate,
/// the identity in it.
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub cert_user: Option<User>,
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let (_, conn) = stream.io().get_ref();
        let cert_user = conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| subject(leaf.as_ref()))
            .and_then(|(cn, orgs)| User::from_certificate(cn, orgs));
        Self {
            addr: *stream.remote_addr(),
            cert_user,
        }
    }
}

// ---- X.509 --------------------------------------------------------------------------------
// Only what the identity and the renewal need: the subject's CN and O values, and the validity.
// The certificate was verified by rustls before `subject` runs; x509-parser still treats it as
// untrusted bytes (errors, not panics).

/// A DER certificate, or `None` when it does not parse.
fn parse(cert: &[u8]) -> Option<X509Certificate<'_>> {
    X509Certificate::from_der(cert).ok().map(|(_, c)| c)
}

/// A directory string as text: UTF8String, PrintableString, IA5String and TeletexString
/// (invalid UTF-8 replaced), BMPString (UTF-16); other types are no name.
fn directory_string(atv: &AttributeTypeAndValue<'_>) -> Option<String> {
    let value = atv.attr_value();
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::TeletexString => {
            Some(String::from_utf8_lossy(value.data).into_owned())
        }
        Tag::BmpString => {
            let units: Vec<u16> = value
                .data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

/// `notBefore` and `notAfter` of a DER certificate.
pub fn validity(cert: &[u8]) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
    let cert = parse(cert)?;
    let v = cert.validity();
    let at = |t: &x509_parser::time::ASN1Time| jiff::Timestamp::from_second(t.timestamp()).ok();
    Some((at(&v.not_before)?, at(&v.not_after)?))
}

/// The subject's common name (the last one when there are several; empty when none) and
/// organizations of a DER certificate.
pub fn subject(cert: &[u8]) -> Option<(String, Vec<String>)> {
    let cert = parse(cert)?;
    let name = cert.subject();
    let cn = name
        .iter_common_name()
        .filter_map(directory_string)
        .last()
        .unwrap_or_default();
    let orgs = name
        .iter_organization()
        .filter_map(directory_string)
        .collect();
    Some((cn, orgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate whose subject holds `names` in this order.
    fn cert_with(names: &[(rcgen::DnType, rcgen::DnValue)]) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(vec!["x.example".to_owned()]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        for (ty, value) in names {
            p.distinguished_name.push(ty.clone(), value.clone());
        }
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    fn cn(v: &str) -> (rcgen::DnType, rcgen::DnValue) {
        (
            rcgen::DnType::CommonName,
            rcgen::DnValue::Utf8String(v.into()),
        )
    }

    fn org(v: &str) -> (rcgen::DnType, rcgen::DnValue) {
        (
            rcgen::DnType::OrganizationName,
            rcgen::DnValue::Utf8String(v.into()),
        )
    }

    #[test]
    fn reads_cn_and_organizations() {
        let der = cert_with(&[org("system:masters"), cn("kube-apiserver-kubelet-client")]);
        assert_eq!(
            subject(&der),
            Some((
                "kube-apiserver-kubelet-client".to_owned(),
                vec!["system:masters".to_owned()]
            ))
        );
        assert_eq!(
            subject(&cert_with(&[cn("bob")])),
            Some(("bob".into(), vec![]))
        );
        assert_eq!(
            subject(&cert_with(&[org("g")])),
            Some((String::new(), vec!["g".into()]))
        );
    }

    /// A DER element: `tag` around `content`.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match u8::try_from(content.len()) {
            Ok(n) if n < 0x80 => out.push(n),
            _ => {
                let len = content.len().to_be_bytes();
                let skip = len.iter().take_while(|b| **b == 0).count();
                out.push(0x80 | (len.len() - skip) as u8);
                out.extend_from_slice(&len[skip..]);
            }
        }
        out.extend_from_slice(content);
        out
    }

    /// `cert` with its subject replaced by a Name of one attribute per RDN, in order:
    /// (attribute OID, string tag, value). The signature no longer matches, which `subject`
    /// does not look at (rustls verified the chain before). rcgen keeps one value per
    /// attribute type, hence the splicing.
    fn with_subject(cert: &[u8], atvs: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let rdns: Vec<u8> = atvs
            .iter()
            .flat_map(|(oid, tag, value)| {
                let atv = [der(0x06, oid), der(*tag, value)].concat();
                der(0x31, &der(0x30, &atv))
            })
            .collect();
        let subject = der(0x30, &rdns);
        let (_, parsed) = X509Certificate::from_der(cert).unwrap();
        let tbs = parsed.tbs_certificate.as_ref();
        let old = parsed.subject().as_raw();
        // The issuer comes first and is the same name in a self-signed certificate.
        let at = tbs.windows(old.len()).rposition(|w| w == old).unwrap();
        let header = |d: &[u8]| {
            2 + if d[1] < 0x80 {
                0
            } else {
                usize::from(d[1] & 0x7f)
            }
        };
        let tbs_content = [&tbs[header(tbs)..at], &subject, &tbs[at + old.len()..]].concat();
        let rest = &cert[header(cert) + tbs.len()..];
        der(0x30, &[der(0x30, &tbs_content), rest.to_vec()].concat())
    }

    #[test]
    fn reads_several_organizations_in_order_and_every_string_type() {
        const CN: &[u8] = &[0x55, 0x04, 0x03];
        const O: &[u8] = &[0x55, 0x04, 0x0a];
        const OU: &[u8] = &[0x55, 0x04, 0x0b];
        let bmp: Vec<u8> = "gr\u{fc}n"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        let der = with_subject(
            &cert_with(&[cn("placeholder")]),
            &[
                (O, 0x0c, b"system:nodes"),
                (CN, 0x0c, b"first"),
                (O, 0x13, b"team-a"),
                (OU, 0x0c, b"not-a-group"),
                (O, 0x1e, &bmp),
                (O, 0x14, b"teletex"),
                (O, 0x04, b"an OCTET STRING is no name"),
                (CN, 0x16, b"system:node:vk"),
            ],
        );
        assert_eq!(
            subject(&der),
            Some((
                "system:node:vk".to_owned(),
                vec![
                    "system:nodes".to_owned(),
                    "team-a".to_owned(),
                    "gr\u{fc}n".to_owned(),
                    "teletex".to_owned()
                ]
            ))
        );
    }

    #[test]
    fn reads_validity() {
        // UTCTime before 2050, GeneralizedTime from 2050 on.
        for (from, to) in [("1999-12-31", "2026-05-01"), ("2026-05-01", "2051-01-02")] {
            let date = |s: &str| s.parse::<jiff::civil::Date>().unwrap();
            let ymd = |d: jiff::civil::Date| {
                rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
            };
            let at =
                |d: jiff::civil::Date| d.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp();
            let mut p = rcgen::CertificateParams::new(vec!["x.example".to_owned()]).unwrap();
            p.not_before = ymd(date(from));
            p.not_after = ymd(date(to));
            let key = rcgen::KeyPair::generate().unwrap();
            let der = p.self_signed(&key).unwrap().der().to_vec();
            assert_eq!(validity(&der), Some((at(date(from)), at(date(to)))));
        }
    }

    #[test]
    fn garbage_is_no_identity() {
        let der = cert_with(&[cn("bob")]);
        for cut in [0, 1, 2, 10, der.len() / 2, der.len() - 1] {
            assert_eq!(subject(&der[..cut]), None, "cut at {cut}");
            assert_eq!(validity(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(subject(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(subject(&[]), None);
        assert_eq!(subject(b"-----BEGIN CERTIFICATE-----"), None);
        // A well-formed DER SEQUENCE that is no certificate.
        assert_eq!(subject(&[0x30, 0x03, 0x02, 0x01, 0x05]), None);
    }

    #[test]
    fn self_signed_certificate_names_the_node() {
        let ck = self_signed("vk-node", "10.1.2.3").unwrap();
        ck.keys_match().unwrap();
        let (cn, _) = subject(ck.cert[0].as_ref()).unwrap();
        assert_eq!(cn, "vk-node@gpu-vk");
    }

    #[test]
    fn incomplete_file_configuration_is_rejected() {
        let cfg = TlsConfig {
            cert_file: Some("/nonexistent.crt".into()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            ServingCert::load(&cfg, "n", "127.0.0.1"),
            Err(Error::Incomplete)
        ));
        let cfg = TlsConfig {
            cert_file: Some("/a.crt".into()),
            key_file: Some("/a.key".into()),
            csr: true,
            ..TlsConfig::default()
        };
        assert!(matches!(
            ServingCert::load(&cfg, "n", "127.0.0.1"),
            Err(Error::CsrWithFiles)
        ));
    }

    #[test]
    fn pairs_load_from_files_and_mismatches_are_refused() {
        let dir = std::env::temp_dir().join(format!("vk-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["vk".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
        load_pair(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
        assert!(matches!(
            load_pair(&dir.join("tls.crt"), &dir.join("other.key")),
            Err(Error::MatchKey { .. })
        ));
        assert!(matches!(
            load_pair(&dir.join("missing.crt"), &dir.join("tls.key")),
            Err(Error::ReadCert { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        cert.der().to_vec()
    }

    #[tokio::test]
    async fn rotated_files_are_picked_up_and_broken_ones_ignored() {
        let dir = std::env::temp_dir().join(format!("vk-tls-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = write_pair(&dir, "one.example");
        let cfg = TlsConfig {
            cert_file: Some(dir.join("tls.crt")),
            key_file: Some(dir.join("tls.key")),
            ..TlsConfig::default()
        };
        let serving = ServingCert::load(&cfg, "n", "127.0.0.1").unwrap();
        assert_eq!(serving.source(), "files");
        assert_eq!(serving.leaf().unwrap().as_ref(), &first[..]);
        serving.watch_every(Duration::from_millis(20));

        // A half-written rotation (new certificate, old key) keeps the old pair in service.
        let key = std::fs::read(dir.join("tls.key")).unwrap();
        let second = write_pair(&dir, "two.example-longer-name");
        let new_key = std::fs::read(dir.join("tls.key")).unwrap();
        std::fs::write(dir.join("tls.key"), &key).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(serving.leaf().unwrap().as_ref(), &first[..]);

        std::fs::write(dir.join("tls.key"), new_key).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while serving.leaf().unwrap().as_ref() != &second[..] {
            assert!(
                std::time::Instant::now() < deadline,
                "rotation not picked up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
