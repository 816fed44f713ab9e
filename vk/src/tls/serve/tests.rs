//! The connection deadlines of the kubelet API's server, against a real TLS client on loopback.

use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::testing::{configs, connect, listen};
use super::super::{Limits, Peer};
use super::*;

const SHORT: Duration = Duration::from_millis(300);

/// A server with the given deadlines: `/` answers the client's address, `/slow` streams three
/// chunks over 0.9 s.
async fn server(
    deadlines: Deadlines,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<super::super::ServingCert>,
) {
    let (serving, configs) = configs();
    let (listener, addr) = listen(configs, Limits::new(8)).await;
    let router = Router::new()
        .route(
            "/",
            get(|ConnectInfo(peer): ConnectInfo<Peer>| async move { peer.addr.ip().to_string() }),
        )
        .route(
            "/slow",
            get(|| async {
                let chunks = futures::stream::unfold(0, |i| async move {
                    (i < 3).then_some(())?;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from(format!("chunk{i};"))),
                        i + 1,
                    ))
                });
                Body::from_stream(chunks)
            }),
        );
    tokio::spawn(serve(listener, router, deadlines));
    (addr, serving)
}

/// Reads until the server closes the connection (or 5 s pass: `None`); what was read.
async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut all = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&all).into_owned())
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed_after_the_header_deadline() {
    let (addr, serving) = server(Deadlines {
        header: SHORT,
        idle: Duration::from_secs(60),
    })
    .await;
    let mut tls = connect(addr, &serving).await;
    // Slowloris: a request line and one header, then nothing.
    tls.write_all(b"GET / HTTP/1.1\r\nHost: vk-node\r\n")
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let got = read_to_close(&mut tls).await;
    assert!(got.is_some(), "the connection was still open after 5 s");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "closed after {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn a_kept_alive_connection_with_no_request_is_closed_after_the_idle_deadline() {
    let (addr, serving) = server(Deadlines {
        header: Duration::from_secs(60),
        idle: SHORT,
    })
    .await;
    let mut tls = connect(addr, &serving).await;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: vk-node\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut tls)
        .await
        .expect("the idle connection stayed open");
    // The request was answered (with the client's address from ConnectInfo), then closed.
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.ends_with("127.0.0.1"), "{got}");
}

#[tokio::test]
async fn a_response_streaming_longer_than_the_idle_deadline_is_not_cut() {
    let (addr, serving) = server(Deadlines {
        header: SHORT,
        idle: SHORT,
    })
    .await;
    let mut tls = connect(addr, &serving).await;
    tls.write_all(b"GET /slow HTTP/1.1\r\nHost: vk-node\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut tls)
        .await
        .expect("the connection stayed open");
    for i in 0..3 {
        assert!(
            got.contains(&format!("chunk{i};")),
            "chunk {i} missing: {got}"
        );
    }
}
