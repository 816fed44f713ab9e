//! Test helpers for TLS: CAs and client certificates, a listener on loopback and a client
//! that reports whether the server accepted its handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

use super::{Limits, ServingCert, TlsConfigs, TlsListener};
use crate::config::TlsConfig;
use axum::serve::Listener;

/// A CA that signs client certificates.
pub(super) struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
}

/// A client certificate and its key.
pub(super) struct ClientId {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_owned());
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = p.self_signed(&key).unwrap().pem();
        Self {
            issuer: rcgen::Issuer::new(p, key),
            pem,
        }
    }

    /// A client certificate for user `cn`.
    pub fn client(&self, cn: &str) -> ClientId {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, cn.to_owned());
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        ClientId {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        }
    }
}

/// The serving certificate (self-signed for `vk-node`) and configurations without client CA.
pub(super) fn configs() -> (Arc<ServingCert>, Arc<TlsConfigs>) {
    let serving = ServingCert::load(&TlsConfig::default(), "vk-node", "127.0.0.1").unwrap();
    let configs = TlsConfigs::new(serving.clone(), None).unwrap();
    (serving, configs)
}

/// A listener on a loopback port.
pub(super) async fn listen(configs: Arc<TlsConfigs>, limits: Limits) -> (TlsListener, SocketAddr) {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    (TlsListener::new(tcp, configs, limits), addr)
}

/// What became of a client's handshake.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Handshake {
    /// The server accepted the connection, with or without a verified client certificate.
    Accepted { client_cert: bool },
    /// The server refused the client's certificate.
    Refused,
}

/// Connects to `addr` trusting `serving`'s certificate, presenting `id` if any; whether and how
/// the server (served by `listener`) accepted it.
pub(super) async fn handshake(
    listener: &mut TlsListener,
    addr: SocketAddr,
    serving: &ServingCert,
    id: Option<&ClientId>,
) -> Handshake {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(serving.leaf().unwrap()).unwrap();
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match id {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("vk-node").unwrap();
    let client = async {
        // TLS 1.3: the client is done before the server checked its certificate; a refusal
        // arrives as an alert on the first read.
        let Ok(mut tls) = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
        else {
            return;
        };
        let mut buf = [0u8; 1];
        let _ = tls.read(&mut buf).await;
    };
    let verdict = async {
        tokio::select! {
            (conn, _) = listener.accept() => Handshake::Accepted {
                client_cert: conn.tls().get_ref().1.peer_certificates().is_some(),
            },
            () = client => Handshake::Refused,
        }
    };
    tokio::time::timeout(Duration::from_secs(10), verdict)
        .await
        .expect("the handshake neither completed nor failed")
}

/// A TLS connection to `addr` trusting `serving`'s certificate, without a client certificate
/// (no ALPN: HTTP/1.1).
pub(super) async fn connect(
    addr: SocketAddr,
    serving: &ServingCert,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(serving.leaf().unwrap()).unwrap();
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("vk-node").unwrap(), tcp)
        .await
        .unwrap()
}
