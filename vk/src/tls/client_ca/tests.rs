//! Tests of the client CA file: loaded late, reloaded on change, kept when it breaks.

use std::time::{Duration, Instant};

use super::super::testing::{Ca, Handshake, configs, handshake, listen};
use super::super::{Limits, TlsListener};
use super::*;

const TICK: Duration = Duration::from_millis(20);

/// Handshakes with `id` until one ends as `want` (the watcher reloads in the background), or
/// fails the test after 10 s.
async fn until(
    listener: &mut TlsListener,
    addr: std::net::SocketAddr,
    serving: &super::super::ServingCert,
    id: &super::super::testing::ClientId,
    want: Handshake,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = handshake(listener, addr, serving, Some(id)).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "still {got:?}, want {want:?}");
        tokio::time::sleep(TICK).await;
    }
}

#[tokio::test]
async fn the_client_ca_file_is_picked_up_when_it_appears_and_reloaded_when_it_changes() {
    let dir = std::env::temp_dir().join(format!("vk-client-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ca.crt");
    let _ = std::fs::remove_file(&path);
    let (serving, configs) = configs();
    let (mut listener, addr) = listen(configs.clone(), Limits::new(16)).await;
    let (old, new) = (Ca::new("old-ca"), Ca::new("new-ca"));
    let (alice, bob) = (old.client("alice"), new.client("bob"));

    // No file at start: the server serves, without asking for certificates.
    watch_file(path.clone(), &configs, TICK).unwrap();
    assert!(!configs.x509());
    assert_eq!(
        handshake(&mut listener, addr, &serving, Some(&alice)).await,
        Handshake::Accepted { client_cert: false }
    );

    // The file appears: its CA's certificates authenticate.
    std::fs::write(&path, &old.pem).unwrap();
    until(
        &mut listener,
        addr,
        &serving,
        &alice,
        Handshake::Accepted { client_cert: true },
    )
    .await;
    assert!(configs.x509());

    // Rotated to a new CA: without a restart, its certificates authenticate, the old CA's no
    // longer do.
    std::fs::write(&path, &new.pem).unwrap();
    until(
        &mut listener,
        addr,
        &serving,
        &bob,
        Handshake::Accepted { client_cert: true },
    )
    .await;
    assert_eq!(
        handshake(&mut listener, addr, &serving, Some(&alice)).await,
        Handshake::Refused
    );

    // Garbage, then no file: the last good CA stays. Each state lasts several reload
    // intervals, and every handshake meanwhile still sees the new CA.
    let garbage = |p: &Path| std::fs::write(p, "not a certificate").unwrap();
    let removed = |p: &Path| std::fs::remove_file(p).unwrap();
    for change in [garbage, removed] {
        change(&path);
        let until_then = Instant::now() + 10 * TICK;
        while Instant::now() < until_then {
            assert_eq!(
                handshake(&mut listener, addr, &serving, Some(&bob)).await,
                Handshake::Accepted { client_cert: true }
            );
        }
    }
    assert!(configs.x509());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_without_certificates_does_not_load() {
    let dir = std::env::temp_dir().join(format!("vk-client-ca-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ca.crt");
    std::fs::write(&path, "not a certificate").unwrap();
    let (loaded, seen) = load_file(&path);
    assert!(matches!(loaded, Err(Error::NoClientCa { .. })));
    assert_eq!(seen, fingerprint(&path));
    let (loaded, seen) = load_file(&dir.join("missing.crt"));
    assert!(matches!(loaded, Err(Error::ReadClientCa { .. })));
    assert_eq!(seen, None);
    let _ = std::fs::remove_dir_all(&dir);
}
