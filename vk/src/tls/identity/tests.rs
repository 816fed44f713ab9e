//! Tests of reading the identity and validity out of client certificates.

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
        let at = |d: jiff::civil::Date| d.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp();
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
