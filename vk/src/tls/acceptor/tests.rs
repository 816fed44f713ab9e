//! Tests of the listener's limits: the connection cap and the handshake deadline.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::super::testing::{Handshake, configs, handshake, listen};
use super::*;

/// Whether the server closed `conn` (EOF or reset) within 5 s; it never sends anything
/// before the client's ClientHello.
async fn closed_by_server(conn: &mut TcpStream) -> bool {
    let mut buf = [0u8; 16];
    match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(n)) => panic!("the server sent {n} bytes unasked"),
        Err(_) => false,
    }
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_and_slots_come_back() {
    let (serving, configs) = configs();
    let limits = Limits {
        max_connections: 3,
        handshake_timeout: Duration::from_secs(60),
    };
    let (mut listener, addr) = listen(configs, limits).await;
    // Three clients connect and say nothing: they hold every slot.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut over = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut over).await,
        "the 4th connection was kept"
    );
    // Further attempts are closed too: the accept loop goes on.
    let mut again = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_server(&mut again).await);
    // The idle ones were not touched.
    for conn in &mut idle {
        let mut buf = [0u8; 1];
        assert!(
            conn.try_read(&mut buf).is_err(),
            "an idle connection was closed"
        );
    }

    // One leaves: its slot serves a real client (once the server noticed the close).
    drop(idle.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = tokio::time::timeout(
            Duration::from_millis(500),
            handshake(&mut listener, addr, &serving, None),
        )
        .await;
        if got == Ok(Handshake::Accepted { client_cert: false }) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no slot came back: {got:?}"
        );
    }
}

#[tokio::test]
async fn a_client_that_never_handshakes_is_closed_after_the_deadline() {
    let (serving, configs) = configs();
    let limits = Limits {
        max_connections: 1,
        handshake_timeout: Duration::from_millis(200),
    };
    let (mut listener, addr) = listen(configs, limits).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "kept past the handshake deadline"
    );
    // Its slot is free again.
    assert_eq!(
        handshake(&mut listener, addr, &serving, None).await,
        Handshake::Accepted { client_cert: false }
    );
}
