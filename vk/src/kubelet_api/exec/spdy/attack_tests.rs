//! What a hostile SPDY client can make the VK hold (issue "Security and robustness, round
//! two", item 3): DATA on streams it never opened, small header blocks that inflate to
//! megabytes, thousands of streams, data sent before a port-forward pair or an exec session's
//! streams are complete. Each is refused at a bound, so a session's memory stays within a few
//! frames plus the bounds of `conn` and `portforward::pending`. And a forward to an address a
//! provider publishes on the VK's own host (item 7): never dialled.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::conn::{MAX_HEADER_BLOCK, MAX_OPEN_STREAMS};
use super::portforward;
use super::tests::{Client, data_until_fins, ends, setup};
use super::*;
use crate::kubelet_api::exec::SessionLimits;
use crate::kubelet_api::spdy::{Frame, goaway, rst};

fn forward_setup() -> portforward::Setup {
    portforward::Setup {
        pod: "ns/pod".into(),
        uid: "u".into(),
        provider: "fake".into(),
        ports: BTreeMap::new(),
        limits: SessionLimits::default(),
        cluster_networks: std::sync::Arc::from([]),
    }
}

/// Sends `frames`, then reads until `n` frames matching `want` came back (or the end).
async fn count_answers(c: &mut Client, n: usize, want: impl Fn(&Frame) -> bool) -> usize {
    let mut got = 0;
    while got < n {
        match c.next().await {
            Some(f) if want(&f) => got += 1,
            Some(_) => {}
            None => break,
        }
    }
    got
}

#[tokio::test]
async fn data_on_streams_never_opened_is_reset_and_not_kept() {
    let (server, client) = tokio::io::duplex(1 << 20);
    let task = tokio::spawn(portforward::run(server, forward_setup()));
    let mut c = Client::new(client);
    // DATA on ids 1, 3, 5, ... of 1 KiB each: nothing opened them.
    let n = 500;
    for i in 0..n {
        c.send(Frame::Data {
            stream_id: 2 * i + 1,
            fin: false,
            data: Bytes::from(vec![b'x'; 1024]),
        })
        .await;
    }
    let resets = count_answers(
        &mut c,
        n as usize,
        |f| matches!(f, Frame::RstStream { status, .. } if *status == rst::INVALID_STREAM),
    )
    .await;
    assert_eq!(resets, n as usize);
    drop(c);
    ends(task, "the session ends with its client").await;
}

#[tokio::test]
async fn a_small_header_block_that_inflates_past_the_limit_ends_the_connection() {
    let (server, client) = tokio::io::duplex(1 << 20);
    let task = tokio::spawn(portforward::run(server, forward_setup()));
    let mut c = Client::new(client);
    // 1 MiB of one byte deflates to about a kilobyte.
    let value = "a".repeat(1 << 20);
    let block = c
        .deflater
        .compress(&[("streamtype".into(), "data".into()), ("x".into(), value)])
        .unwrap();
    assert!(block.len() < 4096, "{} bytes compressed", block.len());
    c.send(Frame::SynStream {
        stream_id: 1,
        associated_to: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers: block.into(),
    })
    .await;
    let mut status = None;
    while let Some(f) = c.next().await {
        if let Frame::GoAway { status: s, .. } = f {
            status = Some(s);
            break;
        }
    }
    assert_eq!(status, Some(goaway::PROTOCOL_ERROR));
    const { assert!(MAX_HEADER_BLOCK < 1 << 20) };
    ends(task, "the session ends").await;
}

#[tokio::test]
async fn streams_beyond_the_open_limit_are_refused() {
    let (server, client) = tokio::io::duplex(1 << 20);
    let task = tokio::spawn(portforward::run(server, forward_setup()));
    let mut c = Client::new(client);
    // Streams of an unknown type: replied to, then closed by the session, but still open on
    // the client's side, so they count.
    let extra = 10;
    for i in 0..(MAX_OPEN_STREAMS + extra) as u32 {
        c.open(2 * i + 1, "data").await;
    }
    let refused = count_answers(
        &mut c,
        extra,
        |f| matches!(f, Frame::RstStream { status, .. } if *status == rst::REFUSED_STREAM),
    )
    .await;
    assert_eq!(refused, extra);
    drop(c);
    ends(task, "the session ends with its client").await;
}

#[tokio::test]
async fn exec_data_before_the_streams_are_complete_is_bounded() {
    let (server, client) = tokio::io::duplex(1 << 20);
    let failed = Err(Outcome::Error("never started".into()));
    let task = tokio::spawn(run(server, setup(V4), failed));
    let mut c = Client::new(client);
    // stdin opened, stdout and stderr never: the session waits, and holds what stdin sends.
    c.open(1, "error").await;
    c.open(3, "stdin").await;
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let mut sent = 0;
    let mut ended = false;
    while sent <= 4 * EARLY_BYTES {
        let open = c
            .try_send(Frame::Data {
                stream_id: 3,
                fin: false,
                data: chunk.clone(),
            })
            .await;
        sent += chunk.len();
        if !open || task.is_finished() {
            ended = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    // Past EARLY_BYTES the session gives up instead of holding more.
    let waited = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(
        ended || waited.is_ok(),
        "the session still holds {sent} bytes of early stdin"
    );
}

/// A provider that publishes a loopback or link-local address for a port (the VK's own host,
/// the metadata service), or one of the cluster's own networks, gets no dial: the error stream says why, and nothing connects.
#[tokio::test]
async fn port_forward_never_dials_a_loopback_or_link_local_published_address() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (server, client) = tokio::io::duplex(64 * 1024);
    let endpoint = |host: &str, port: u16| crate::provider::Endpoint {
        host: host.into(),
        port,
    };
    let setup = portforward::Setup {
        pod: "ns/model".into(),
        uid: "u-1".into(),
        provider: "fake".into(),
        ports: [
            (8080, endpoint("127.0.0.1", port)),
            (8081, endpoint("169.254.169.254", 80)),
            (8082, endpoint("10.96.0.1", 443)),
        ]
        .into(),
        limits: SessionLimits::default(),
        cluster_networks: std::sync::Arc::from(["10.96.0.0/12".parse::<ipnet::IpNet>().unwrap()]),
    };
    tokio::spawn(portforward::run(server, setup));
    let mut c = Client::new(client);
    let h = |t: &'static str, port: &'static str, rid: &'static str| {
        [("streamtype", t), ("port", port), ("requestid", rid)]
    };
    c.open_with(1, &h("error", "8080", "0")).await;
    c.open_with(3, &h("data", "8080", "0")).await;
    c.open_with(5, &h("error", "8081", "1")).await;
    c.open_with(7, &h("data", "8081", "1")).await;
    c.open_with(9, &h("error", "8082", "2")).await;
    c.open_with(11, &h("data", "8082", "2")).await;
    let seen = data_until_fins(&mut c, &[1, 5, 9]).await;
    for (stream, published) in [
        (1, format!("127.0.0.1:{port}")),
        (5, "169.254.169.254:80".into()),
    ] {
        let err = String::from_utf8_lossy(seen.data.get(&stream).unwrap()).into_owned();
        assert!(
            err.contains(&published) && err.contains("loopback or link-local"),
            "{err}"
        );
    }
    let err = String::from_utf8_lossy(seen.data.get(&9).unwrap()).into_owned();
    assert!(
        err.contains("10.96.0.1:443") && err.contains("cluster's own networks"),
        "{err}"
    );
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the loopback listener was dialled");
}
