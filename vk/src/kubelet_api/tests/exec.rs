//! Router tests of `/exec`, `/attach` and `/portForward`: refusals, and exec sessions over a
//! real WebSocket (v5 channel protocol, stdin close signal, exit status, disconnects).

use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::*;

#[tokio::test]
async fn exec_attach_and_port_forward_answer_501_naming_the_provider() {
    let s = setup(false);
    let req = Request::post("/exec/ml/train/main?command=ls&stdout=true")
        .header(header::AUTHORIZATION, "Bearer admin")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(body.trim(), "not supported by provider slurm: exec");
    let (status, body) = call(&s.app, get("/attach/ml/quiet/main?stdout=1")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert!(body.contains("provider runpod"), "{body}");
    let (status, _) = call(&s.app, get("/portForward/ml/train")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    let (status, _) = call(&s.app, get("/exec/ml/ghost/main?command=ls&stdout=1")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&s.app, get("/exec/ml/train/main?stdout=1")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &s.app,
        get("/exec/ml/train/wrong-uid/main?command=ls&stdout=1"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

// ---- exec over a real WebSocket -------------------------------------------------------------

/// Serves the router on a loopback port (plain HTTP: the upgrade is what is under test).
async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `path` as `kubectl exec` through a 1.36 API server does, offering `protocol`.
async fn open(addr: std::net::SocketAddr, path: &str, protocol: &str) -> (Client, String) {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    req.headers_mut()
        .insert("Authorization", "Bearer admin".parse().unwrap());
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    let chosen = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (ws, chosen)
}

/// Everything the server sent until it closed: the data per channel, in order, and whether the
/// close was a normal one.
#[derive(Debug, Default)]
struct Received {
    first: Option<Vec<u8>>,
    channels: HashMap<u8, Vec<u8>>,
    normal_close: bool,
}

async fn receive_all(ws: &mut Client) -> Received {
    let mut r = Received::default();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg.unwrap() {
            WsMessage::Binary(b) => {
                if r.first.is_none() {
                    r.first = Some(b.to_vec());
                }
                r.channels
                    .entry(b[0])
                    .or_default()
                    .extend_from_slice(&b[1..]);
            }
            WsMessage::Close(frame) => {
                r.normal_close = frame.is_some_and(|f| u16::from(f.code) == 1000);
            }
            _ => {}
        }
    }
    r
}

#[tokio::test]
async fn exec_streams_stdout_stderr_and_the_exit_code_over_v5() {
    let s = setup(false);
    let addr = serve(s.app.clone()).await;
    let (mut ws, chosen) = open(
        addr,
        "/exec/ml/shell/main?command=greet&command=a%20b&output=1&error=1",
        "v5.channel.k8s.io",
    )
    .await;
    assert_eq!(chosen, "v5.channel.k8s.io");
    let r = receive_all(&mut ws).await;
    // The kubelet's "streams ready" message: empty, on the lowest writable channel.
    assert_eq!(r.first.as_deref(), Some(&[1u8][..]));
    assert_eq!(r.channels[&1], b"out\n");
    assert_eq!(r.channels[&2], b"err\n");
    let status: serde_json::Value = serde_json::from_slice(&r.channels[&3]).unwrap();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "ExitCode", "message": "7"}])
    );
    assert!(r.normal_close, "{r:?}");
}

#[tokio::test]
async fn exec_stdin_ends_with_the_v5_close_signal() {
    let s = setup(false);
    let addr = serve(s.app.clone()).await;
    let (mut ws, _) = open(
        addr,
        "/exec/ml/shell/main?command=cat&input=1&output=1&error=1",
        "v4.channel.k8s.io, v5.channel.k8s.io",
    )
    .await;
    use futures::SinkExt;
    for chunk in [&b"\x00hello\n"[..], b"\x00world\n", &[255, 0]] {
        ws.send(WsMessage::Binary(Bytes::copy_from_slice(chunk)))
            .await
            .unwrap();
    }
    let r = receive_all(&mut ws).await;
    assert_eq!(r.channels[&1], b"hello\nworld\n");
    assert_eq!(r.channels[&3], br#"{"metadata":{},"status":"Success"}"#);
    assert!(r.normal_close);
}

#[tokio::test]
async fn a_client_that_goes_away_frees_the_provider_session() {
    let s = setup(false);
    let addr = serve(s.app.clone()).await;
    let (ws, _) = open(
        addr,
        "/exec/ml/shell/main?command=sleep&output=1",
        "v5.channel.k8s.io",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!s.exec_provider.exec_dropped.load(Ordering::SeqCst));
    drop(ws);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !s.exec_provider.exec_dropped.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "session kept after disconnect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exec_refusals_before_any_upgrade() {
    let s = setup(false);
    // SPDY (what an API server sends to a node that does not declare WebSocket support).
    let req = Request::post("/exec/ml/shell/main?command=ls&output=1")
        .header(header::AUTHORIZATION, "Bearer admin")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header("X-Stream-Protocol-Version", "v4.channel.k8s.io")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.starts_with("SPDY is not supported by this kubelet; use a WebSocket-capable client"),
        "{body}"
    );
    // No upgrade at all.
    let (status, body) = call(&s.app, get("/exec/ml/shell/main?command=ls&output=1")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("v5.channel.k8s.io"), "{body}");
    // Refused by the provider after the upgrade: its message and status in the error
    // channel (a refused upgrade would make kubectl retry with SPDY and hide the reason).
    let addr = serve(s.app.clone()).await;
    let (mut ws, _) = open(
        addr,
        "/exec/ml/shell/main?command=sh&tty=1&input=1&output=1",
        "v5.channel.k8s.io",
    )
    .await;
    let r = receive_all(&mut ws).await;
    let status: serde_json::Value = serde_json::from_slice(&r.channels[&3]).unwrap();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 501);
    assert_eq!(
        status["message"],
        "not supported by provider hpc: exec with a TTY"
    );
    assert!(r.normal_close);
    // A provider without exec answers 501 naming it, whatever the transport.
    let req = Request::get("/exec/ml/quiet/main?command=ls&output=1")
        .header(header::AUTHORIZATION, "Bearer admin")
        .header(header::UPGRADE, "SPDY/3.1")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(
        (status, body.trim()),
        (
            StatusCode::NOT_IMPLEMENTED,
            "not supported by provider runpod: exec"
        )
    );
}
