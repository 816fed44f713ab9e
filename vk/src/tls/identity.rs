//! The client identity of a kubelet API connection: the user a verified client certificate
//! names, read from its X.509 subject (and the certificate's validity, for renewals).

use std::net::SocketAddr;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use x509_parser::asn1_rs::{FromDer, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::x509::AttributeTypeAndValue;

use super::{TlsConn, TlsListener};

#[cfg(test)]
mod tests;

/// The client of one connection: its address and, if it presented a verified certificate,
/// the identity in it.
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub cert_subject: Option<Subject>,
}

/// What a verified client certificate's subject says: its common name and organizations
/// (the kubelet API reads them as a user and its groups).
#[derive(Clone, Debug, PartialEq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

impl Peer {
    /// The client of `conn`, connected from `addr`.
    pub fn of(conn: &TlsConn, addr: SocketAddr) -> Self {
        let (_, tls) = conn.tls().get_ref();
        let cert_subject = tls
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| subject(leaf.as_ref()))
            .map(|(common_name, organizations)| Subject {
                common_name,
                organizations,
            });
        Self { addr, cert_subject }
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        Self::of(stream.io(), *stream.remote_addr())
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
