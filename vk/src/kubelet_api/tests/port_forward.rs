//! Router tests of `/portForward`: the refusals of each transport, and a port-forward session
//! over the WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`) as a 1.36 API server passes
//! kubectl's through, with SPDY frames cut across and packed into messages.

use bytes::BytesMut;
use futures::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::exec::serve;
use super::*;
use crate::kubelet_api::spdy::headers::Deflater;
use crate::kubelet_api::spdy::{Decoder, Frame, encode};

const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

/// A port-forward request with `headers`, as the API server sends it (no connection to take
/// over: these are answered before any upgrade).
fn request(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::get(path).header(header::AUTHORIZATION, "Bearer admin");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

fn websocket(protocol: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Connection", "Upgrade".into()),
        ("Upgrade", "websocket".into()),
        ("Sec-WebSocket-Version", "13".into()),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==".into()),
        ("Sec-WebSocket-Protocol", protocol.into()),
    ]
}

async fn status_of(s: &Setup, path: &str, headers: &[(&'static str, String)]) -> (u16, String) {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, body) = call(&s.app, request(path, &h)).await;
    (status.as_u16(), body)
}

#[tokio::test]
async fn port_forward_refusals_come_before_any_upgrade_in_the_kubelets_order() {
    let s = setup(false);
    let ws = websocket(TUNNEL);
    // Unknown pod and wrong UID: 404, whatever the transport.
    assert_eq!(status_of(&s, "/portForward/ml/ghost", &ws).await.0, 404);
    let wrong_uid = "/portForward/ml/model/0b1c2d3e-0000-4000-8000-00000000ffff";
    assert_eq!(status_of(&s, wrong_uid, &ws).await.0, 404);
    // No published port: 501 naming the provider, over the tunnel as over SPDY.
    let (code, body) = status_of(&s, "/portForward/ml/train", &ws).await;
    assert_eq!(code, 501, "{body}");
    assert!(
        body.contains("not supported by provider slurm: port forwarding"),
        "{body}"
    );
    let model = "/portForward/ml/model";
    // A WebSocket without a tunnelling subprotocol.
    let (code, body) = status_of(&s, model, &websocket("v5.channel.k8s.io")).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("no tunneling spdy protocols provided") && body.contains(TUNNEL),
        "{body}"
    );
    // A tunnel of another SPDY protocol: the SPDY handshake's 403.
    let (code, body) = status_of(&s, model, &websocket("SPDY/3.1+v4.channel.k8s.io")).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("unable to negotiate protocol"), "{body}");
    // The tunnel protocol, but no connection to upgrade.
    let (code, body) = status_of(&s, model, &ws).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("over a WebSocket needs a GET"), "{body}");
    // No upgrade at all, and SPDY without a protocol (unchanged).
    let (code, body) = status_of(&s, model, &[]).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("portforward.k8s.io") && body.contains(TUNNEL),
        "{body}"
    );
    let spdy = [
        ("Connection", "Upgrade".to_owned()),
        ("Upgrade", "SPDY/3.1".to_owned()),
    ];
    let (code, body) = status_of(&s, model, &spdy).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("X-Stream-Protocol-Version"), "{body}");
}

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A SPDY/3.1 client in the binary messages of a WebSocket, as client-go's tunnel.
struct Tunnelled {
    ws: Client,
    buf: BytesMut,
    deflater: Deflater,
    /// The close frame's code, once the server closed.
    close: Option<u16>,
}

impl Tunnelled {
    async fn open(addr: std::net::SocketAddr, path: &str) -> Self {
        let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
        req.headers_mut()
            .insert("Authorization", "Bearer admin".parse().unwrap());
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            format!("{TUNNEL}, v5.channel.k8s.io").parse().unwrap(),
        );
        let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(
            resp.headers()
                .get("Sec-WebSocket-Protocol")
                .and_then(|v| v.to_str().ok()),
            Some(TUNNEL)
        );
        Self {
            ws,
            buf: BytesMut::new(),
            deflater: Deflater::new().unwrap(),
            close: None,
        }
    }

    fn syn(&mut self, id: u32, headers: &[(&str, &str)], out: &mut BytesMut) {
        let pairs: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let headers = self.deflater.compress(&pairs).unwrap();
        let f = Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: headers.into(),
        };
        encode(&f, out);
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.ws
            .send(WsMessage::Binary(Bytes::copy_from_slice(bytes)))
            .await
            .unwrap();
    }

    /// The next frame from the server; `None` once the WebSocket ends.
    async fn next(&mut self) -> Option<Frame> {
        let d = Decoder::new(1 << 24);
        loop {
            if let Some(f) = d.decode(&mut self.buf).unwrap() {
                return Some(f);
            }
            let m = tokio::time::timeout(std::time::Duration::from_secs(10), self.ws.next())
                .await
                .expect("the server answers");
            match m {
                Some(Ok(WsMessage::Binary(b))) => self.buf.extend_from_slice(&b),
                Some(Ok(WsMessage::Close(f))) => {
                    self.close = f.map(|f| u16::from(f.code));
                }
                Some(Ok(m)) => panic!("unexpected message {m:?}"),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

fn data(id: u32, fin: bool, bytes: &'static [u8], out: &mut BytesMut) {
    let f = Frame::Data {
        stream_id: id,
        fin,
        data: Bytes::from_static(bytes),
    };
    encode(&f, out);
}

/// A listener that answers what it reads, once its input ends, with `echo:<input>`.
async fn echo_listener() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        let answer = format!("echo:{}", String::from_utf8_lossy(&got));
        s.write_all(answer.as_bytes()).await.unwrap();
    });
    port
}

#[tokio::test]
async fn port_forward_runs_over_the_websocket_tunnel_whatever_the_message_cuts() {
    let port = echo_listener().await;
    let s = setup_full(false, SessionLimits::default(), port);
    let addr = serve(s.app.clone()).await;
    let mut c = Tunnelled::open(addr, "/portForward/ml/model").await;
    let h = |t: &'static str, port: &'static str, rid: &'static str| {
        [("streamtype", t), ("port", port), ("requestid", rid)]
    };
    // Both streams of one connection and its data, cut at odd places across four messages.
    let mut out = BytesMut::new();
    c.syn(1, &h("error", "8080", "0"), &mut out);
    data(1, true, b"", &mut out);
    c.syn(3, &h("data", "8080", "0"), &mut out);
    data(3, false, b"hel", &mut out);
    data(3, true, b"lo", &mut out);
    let bytes = out.freeze();
    for cut in [&bytes[..5], &bytes[5..9], &bytes[9..bytes.len() - 3]] {
        c.send(cut).await;
    }
    c.send(&bytes[bytes.len() - 3..]).await;
    // And one to a port the pod does not publish, packed into one message.
    let mut out = BytesMut::new();
    c.syn(5, &h("error", "9999", "1"), &mut out);
    c.syn(7, &h("data", "9999", "1"), &mut out);
    c.send(&out).await;

    let mut got: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut fins = Vec::new();
    while !([1, 3, 5, 7].iter().all(|id| fins.contains(id))) {
        match c.next().await {
            Some(Frame::Data {
                stream_id,
                fin,
                data,
            }) => {
                got.entry(stream_id).or_default().extend_from_slice(&data);
                if fin {
                    fins.push(stream_id);
                }
            }
            Some(_) => {}
            None => panic!("the tunnel ended early: {got:?} {fins:?}"),
        }
    }
    assert_eq!(got.get(&3).map(Vec::as_slice), Some(&b"echo:hello"[..]));
    let err = String::from_utf8_lossy(got.get(&5).map(Vec::as_slice).unwrap_or_default());
    assert_eq!(
        err,
        "error forwarding port 9999 to pod ml/model, uid 0b1c2d3e-0000-4000-8000-000000000006: \
         provider runpod publishes no address for port 9999"
    );
    // The client's normal close ends the session.
    c.ws.close(None).await.unwrap();
    while c.next().await.is_some() {}
}

#[tokio::test]
async fn an_oversized_tunnel_message_ends_the_session_with_goaway_and_a_normal_close() {
    let limits = SessionLimits {
        max_message_bytes: 4096,
        ..SessionLimits::default()
    };
    let s = setup_full(false, limits, 9);
    let addr = serve(s.app.clone()).await;
    let mut c = Tunnelled::open(addr, "/portForward/ml/model").await;
    // Within the limit: a ping (SPDY's, inside the tunnel) is answered.
    let mut out = BytesMut::new();
    encode(&Frame::Ping { id: 1 }, &mut out);
    c.send(&out).await;
    assert!(
        matches!(c.next().await, Some(Frame::Ping { id: 1 })),
        "no PING answer"
    );
    // One message over it, whatever it holds.
    let _ =
        c.ws.send(WsMessage::Binary(Bytes::from(vec![0u8; 4097])))
            .await;
    let mut goaway = false;
    while let Some(f) = c.next().await {
        goaway |= matches!(f, Frame::GoAway { .. });
    }
    assert!(goaway, "no GOAWAY");
    assert_eq!(c.close, Some(1000));
}
