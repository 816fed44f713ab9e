//! A SPDY exec session against a hand-written client speaking as client-go does: streams by
//! `streamtype`, stdin ended by FIN, the status on the error stream; with a client that never
//! grants window (as `moby/spdystream`) and with one that does flow control.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};

use super::*;
use crate::kubelet_api::exec::SessionLimits;
use crate::kubelet_api::spdy::headers::{Deflater, Inflater};
use crate::kubelet_api::spdy::{Decoder, Frame, Setting, encode};

const BIG: usize = 200 * 1024;

/// Echoes stdin to stdout until its end, then `BIG` bytes of `x`, `err` on stderr, exit 3.
fn session() -> ExecSession {
    let (stdin_w, mut stdin_r) = tokio::io::duplex(1024);
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let (err_tx, err_rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<i32>();
    tokio::spawn(async move {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdin_r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let _ = out_tx.send(Bytes::copy_from_slice(&buf[..n])).await;
        }
        for _ in 0..BIG / 8192 {
            let _ = out_tx.send(Bytes::from(vec![b'x'; 8192])).await;
        }
        let _ = err_tx.send(Bytes::from_static(b"err\n")).await;
        drop((out_tx, err_tx));
        let _ = exit_tx.send(3);
    });
    let rx = |r: tokio::sync::mpsc::Receiver<Bytes>| -> crate::provider::LogStream {
        Box::pin(futures::stream::unfold(r, |mut r| async move {
            r.recv().await.map(|b| (Ok(b), r))
        }))
    };
    ExecSession {
        stdin: Some(Box::pin(stdin_w)),
        stdout: rx(out_rx),
        stderr: Some(rx(err_rx)),
        resize: None,
        exit: Box::pin(async move {
            exit_rx
                .await
                .map_err(|_| crate::provider::ProviderError::transient("gone"))
        }),
    }
}

pub(super) fn setup(protocol: &'static str) -> Setup {
    Setup {
        protocol,
        stdin: true,
        tty: false,
        streams: Streams {
            stdout: true,
            stderr: true,
            close_signal: false,
            target: "ns/pod/main".into(),
            provider: "fake".into(),
            limits: SessionLimits::default(),
        },
    }
}

pub(super) struct Client {
    r: ReadHalf<DuplexStream>,
    w: WriteHalf<DuplexStream>,
    buf: BytesMut,
    pub(super) deflater: Deflater,
    inflater: Inflater,
}

impl Client {
    pub(super) fn new(io: DuplexStream) -> Self {
        let (r, w) = tokio::io::split(io);
        Self {
            r,
            w,
            buf: BytesMut::new(),
            deflater: Deflater::new().unwrap(),
            inflater: Inflater::new(1 << 20),
        }
    }

    pub(super) async fn send(&mut self, f: Frame) {
        let mut b = BytesMut::new();
        encode(&f, &mut b);
        self.w.write_all(&b).await.unwrap();
    }

    /// Sends `f`; false when the server has closed the connection.
    pub(super) async fn try_send(&mut self, f: Frame) -> bool {
        let mut b = BytesMut::new();
        encode(&f, &mut b);
        self.w.write_all(&b).await.is_ok()
    }

    pub(super) async fn open(&mut self, id: u32, kind: &str) {
        let headers = self
            .deflater
            .compress(&[("streamtype".into(), kind.into())])
            .unwrap();
        self.send(Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: headers.into(),
        })
        .await;
    }

    pub(super) async fn next(&mut self) -> Option<Frame> {
        let d = Decoder::new(1 << 24);
        loop {
            if let Some(f) = d.decode(&mut self.buf).unwrap() {
                return Some(f);
            }
            let n = tokio::time::timeout(Duration::from_secs(10), self.r.read_buf(&mut self.buf))
                .await
                .expect("the server answers")
                .unwrap();
            if n == 0 {
                return None;
            }
        }
    }
}

/// The DATA of each stream until every stream of `fins` has ended (10 s at most: a panic
/// showing what came).
pub(super) async fn data_until_fins(c: &mut Client, fins: &[u32]) -> Seen {
    let mut seen = Seen::default();
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(f) = c.next().await {
            if let Frame::Data {
                stream_id,
                fin,
                data,
            } = f
            {
                seen.data
                    .entry(stream_id)
                    .or_default()
                    .extend_from_slice(&data);
                if fin {
                    seen.fins.push(stream_id);
                }
            }
            if fins.iter().all(|id| seen.fins.contains(id)) {
                break;
            }
        }
    })
    .await;
    assert!(done.is_ok(), "streams {fins:?} did not all end: {seen:?}");
    seen
}

/// Waits (5 s at most) for a session task to end, and for it not to have panicked.
pub(super) async fn ends(task: tokio::task::JoinHandle<()>, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap();
}

/// What the client saw until GOAWAY.
#[derive(Default, Debug)]
pub(super) struct Seen {
    pub(super) replies: Vec<u32>,
    pub(super) data: std::collections::HashMap<u32, Vec<u8>>,
    pub(super) fins: Vec<u32>,
    pub(super) window_updates: Vec<(u32, u32)>,
}

async fn exchange(c: &mut Client, mut on_frame: impl FnMut(&Frame, &Seen) -> Vec<Frame>) -> Seen {
    let mut seen = Seen::default();
    while let Some(f) = c.next().await {
        for reply in on_frame(&f, &seen) {
            c.send(reply).await;
        }
        match f {
            Frame::SynReply {
                stream_id, headers, ..
            } => {
                assert_eq!(c.inflater.decompress(&headers).unwrap(), vec![]);
                seen.replies.push(stream_id);
            }
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                seen.data
                    .entry(stream_id)
                    .or_default()
                    .extend_from_slice(&data);
                if fin {
                    seen.fins.push(stream_id);
                }
            }
            Frame::WindowUpdate { stream_id, delta } => {
                seen.window_updates.push((stream_id, delta))
            }
            Frame::GoAway { .. } => break,
            _ => {}
        }
    }
    seen
}

#[tokio::test]
async fn v4_session_with_a_client_that_never_grants_window() {
    let (server, client) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(run(server, setup(V4), Ok(session())));
    let mut c = Client::new(client);
    c.open(1, "error").await;
    c.open(3, "stdin").await;
    c.open(5, "stdout").await;
    c.open(7, "stderr").await;
    // A ping is answered in kind.
    c.send(Frame::Ping { id: 1 }).await;
    c.send(Frame::Data {
        stream_id: 3,
        fin: true,
        data: Bytes::from_static(b"hello\n"),
    })
    .await;
    let mut pinged = false;
    let seen = exchange(&mut c, |f, _| {
        if matches!(f, Frame::Ping { id: 1 }) {
            pinged = true;
        }
        vec![]
    })
    .await;
    assert!(pinged);
    assert_eq!(seen.replies, [1, 3, 5, 7]);
    let out = &seen.data[&5];
    assert_eq!(out.len(), 6 + BIG, "all output, past the 64 KiB window");
    assert!(out.starts_with(b"hello\nxxx"));
    assert_eq!(seen.data[&7], b"err\n");
    let status: serde_json::Value = serde_json::from_slice(&seen.data[&1]).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "3");
    for id in [1, 5, 7] {
        assert!(seen.fins.contains(&id), "{id} {:?}", seen.fins);
    }
    // Stdin consumed is granted back, per stream and for the connection.
    assert!(
        seen.window_updates.contains(&(3, 6)),
        "{:?}",
        seen.window_updates
    );
    assert!(
        seen.window_updates.contains(&(0, 6)),
        "{:?}",
        seen.window_updates
    );
    drop(c);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_flow_controlling_client_gets_no_more_than_its_window() {
    let (server, client) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(run(server, setup(V4), Ok(session())));
    let mut c = Client::new(client);
    c.send(Frame::Settings {
        clear: false,
        entries: vec![Setting {
            flags: 0,
            id: crate::kubelet_api::spdy::SETTINGS_INITIAL_WINDOW_SIZE,
            value: 1000,
        }],
    })
    .await;
    c.open(1, "error").await;
    c.open(3, "stdin").await;
    c.open(5, "stdout").await;
    c.open(7, "stderr").await;
    c.send(Frame::Data {
        stream_id: 3,
        fin: true,
        data: Bytes::new(),
    })
    .await;
    // Grant only after 1000 bytes of stdout arrived, checking none came beyond the window.
    let mut granted = 0usize;
    let mut received = 0usize;
    let seen = exchange(&mut c, |f, _| {
        if let Frame::Data {
            stream_id: 5, data, ..
        } = f
        {
            received += data.len();
            assert!(received <= 1000 + granted, "{received} over the window");
            if received == 1000 + granted {
                granted += 50_000;
                return vec![
                    Frame::WindowUpdate {
                        stream_id: 5,
                        delta: 50_000,
                    },
                    Frame::WindowUpdate {
                        stream_id: 0,
                        delta: 50_000,
                    },
                ];
            }
        }
        vec![]
    })
    .await;
    assert_eq!(seen.data[&5].len(), BIG);
    drop(c);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn older_protocols_write_the_failure_as_text_and_refusals_go_inside() {
    let (server, client) = tokio::io::duplex(64 * 1024);
    let refused = Outcome::Refused {
        code: 400,
        message: "container \"main\" is not running".into(),
    };
    let mut s = setup(V2);
    s.stdin = false;
    let task = tokio::spawn(run(server, s, Err(refused)));
    let mut c = Client::new(client);
    c.open(1, "error").await;
    c.open(3, "stdout").await;
    c.open(5, "stderr").await;
    let seen = exchange(&mut c, |_, _| vec![]).await;
    assert_eq!(
        String::from_utf8_lossy(&seen.data[&1]),
        "container \"main\" is not running"
    );
    drop(c);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn negotiation_follows_the_clients_order() {
    use axum::http::HeaderValue;
    let mut h = HeaderMap::new();
    assert_eq!(negotiate(&h).unwrap_err().status.as_u16(), 400);
    h.insert(
        PROTOCOL_HEADER,
        HeaderValue::from_static("v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io"),
    );
    assert_eq!(negotiate(&h).unwrap(), V4);
    h.insert(
        PROTOCOL_HEADER,
        HeaderValue::from_static("v2.channel.k8s.io"),
    );
    h.append(PROTOCOL_HEADER, HeaderValue::from_static("channel.k8s.io"));
    assert_eq!(negotiate(&h).unwrap(), V2);
    h.insert(
        PROTOCOL_HEADER,
        HeaderValue::from_static("v9.channel.k8s.io"),
    );
    assert_eq!(negotiate(&h).unwrap_err().status.as_u16(), 403);
}

#[test]
fn resize_objects_may_span_frames() {
    let mut buf = br#"{"Width":80,"Height":24}{"Wid"#.to_vec();
    let s = take_sizes(&mut buf, 1024);
    assert_eq!(
        s,
        [TerminalSize {
            width: 80,
            height: 24
        }]
    );
    buf.extend_from_slice(br#"th":100,"Height":30}"#);
    assert_eq!(
        take_sizes(&mut buf, 1024),
        [TerminalSize {
            width: 100,
            height: 30
        }]
    );
    assert!(buf.is_empty());
}

impl Client {
    pub(super) async fn open_with(&mut self, id: u32, headers: &[(&str, &str)]) {
        let pairs: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let headers = self.deflater.compress(&pairs).unwrap();
        self.send(Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: headers.into(),
        })
        .await;
    }
}

/// Port forwarding as client-go does it: an error and a data stream per connection, paired by
/// `requestID`; bytes go both ways to the published address; a port without an address gets
/// the kubelet's error text on the error stream.
#[tokio::test]
async fn port_forward_copies_both_ways_and_reports_unpublished_ports() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(format!("echo:{}", String::from_utf8_lossy(&got)).as_bytes())
            .await
            .unwrap();
    });
    let (server, client) = tokio::io::duplex(64 * 1024);
    let setup = portforward::Setup {
        pod: "ns/model".into(),
        uid: "u-1".into(),
        provider: "fake".into(),
        ports: [(
            8080,
            crate::provider::Endpoint {
                host: "127.0.0.1".into(),
                port: addr.port(),
            },
        )]
        .into(),
        limits: SessionLimits {
            dial_local_targets: true,
            ..SessionLimits::default()
        },
        cluster_networks: std::sync::Arc::from([]),
    };
    let task = tokio::spawn(portforward::run(server, setup));
    let mut c = Client::new(client);
    let h = |t: &'static str, port: &'static str, rid: &'static str| {
        [("streamtype", t), ("port", port), ("requestid", rid)]
    };
    c.open_with(1, &h("error", "8080", "0")).await;
    c.send(Frame::Data {
        stream_id: 1,
        fin: true,
        data: Bytes::new(),
    })
    .await;
    c.open_with(3, &h("data", "8080", "0")).await;
    c.send(Frame::Data {
        stream_id: 3,
        fin: true,
        data: Bytes::from_static(b"hello"),
    })
    .await;
    // A second connection to a port the pod does not publish.
    c.open_with(5, &h("error", "9999", "1")).await;
    c.open_with(7, &h("data", "9999", "1")).await;
    let seen = data_until_fins(&mut c, &[1, 3, 5, 7]).await;
    assert_eq!(
        seen.data.get(&3).map(Vec::as_slice),
        Some(&b"echo:hello"[..])
    );
    assert!(seen.data.get(&1).is_none_or(Vec::is_empty), "{seen:?}");
    let err = String::from_utf8_lossy(seen.data.get(&5).unwrap());
    assert_eq!(
        err,
        "error forwarding port 9999 to pod ns/model, uid u-1: provider fake publishes no \
         address for port 9999"
    );
    drop(c);
    ends(task, "the session ends with the client").await;
}
