//! Tests of loading, generating and rotating the serving certificate.

use super::*;
use crate::tls::subject;

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
