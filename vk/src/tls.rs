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
//!   csrAutoApprove: false                 # approve our own CSR (see `crate::kubelet_api::csr`)
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
//!   `kubernetes.io/kubelet-serving` CSR, which is renewed before expiry ([`crate::kubelet_api::csr`]).
//! - **Client certificates** are verified against `clientCaFile`, re-read when its content
//!   changes (checked every 5 seconds) so a CA rotation needs no restart: new connections are
//!   verified against the new bundle. A file that is missing or does not load at start is
//!   logged and only bearer tokens authenticate until it loads; a file that later disappears or
//!   stops loading keeps the last good CAs (logged as a warning). Without it, and unless
//!   `clientCaFromCluster: false`, the VK reads the API server's client CA from the
//!   `kube-system/extension-apiserver-authentication` ConfigMap (key `client-ca-file`), the
//!   source aggregated API servers use (its RBAC: the `extension-apiserver-authentication-reader`
//!   Role). If neither is available only bearer tokens authenticate. Clients may connect
//!   without a certificate (they then authenticate with a token or not at all); a certificate
//!   that does not verify fails the handshake, as on the kubelet.
//!
//! - **Connections.** At most `kubeletApi.maxConnections` at once (handshaking or
//!   established); a connection above it is closed as soon as it is accepted, without holding
//!   up the accept loop. A client must finish its handshake within 10 seconds, then send each
//!   request's headers within 10 seconds; a connection with no request in flight for 90
//!   seconds is closed (`serve`).
//!
//! The pieces: `serving` (loading, rotating or generating the serving certificate),
//! `client_ca` (the CAs client certificates are verified against, and their reload), `config`
//! (the rustls configuration, replaced when the client CA changes), `acceptor` (the listener
//! and its limits), `serve` (the connections' deadlines), `bind` (an address a previous process may still hold) and `identity` (the client's identity from its certificate).

mod acceptor;
mod bind;
mod client_ca;
mod config;
mod identity;
pub mod review;
mod serve;
mod serving;
#[cfg(test)]
mod testing;

use std::path::PathBuf;

pub use acceptor::{Limits, TlsConn, TlsListener};
pub use bind::{BIND_PATIENCE, bind_when_free};
pub use client_ca::{CLIENT_CA_RELOAD_INTERVAL, install_client_ca};
pub use config::{TlsConfigs, server_config};
pub use identity::{Peer, Subject, subject, validity};
pub use serve::{Deadlines, serve};
pub use serving::{ServingCert, self_signed};

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
