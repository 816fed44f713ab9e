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
    // A metav1.Status in JSON: plain text would be read as YAML by client-go (see
    // `ApiError::status_response`).
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&v["kind"], &v["status"], &v["code"]),
        (&json!("Status"), &json!("Failure"), &json!(501))
    );
    assert_eq!(v["message"], "not supported by provider slurm: exec");
    // An attach follows the container's log: refused where the provider serves none.
    let (status, body) = call(&s.app, get("/attach/ml/quiet/main?stdout=1")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert!(
        body.contains("not supported by provider runpod: attach"),
        "{body}"
    );
    // A workload without published ports (the test providers publish none).
    let (status, body) = call(&s.app, get("/portForward/ml/train")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert!(
        body.contains("not supported by provider slurm: port forwarding"),
        "{body}"
    );
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
pub(super) async fn serve(app: axum::Router) -> std::net::SocketAddr {
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
    /// The close frame's code and reason.
    close: Option<(u16, String)>,
}

impl Received {
    /// The status on the error channel.
    fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&self.channels[&3]).unwrap()
    }
}

async fn receive_all<S>(ws: &mut S) -> Received
where
    S: futures::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut r = Received::default();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        // The server may reset the connection after its close (unread client data).
        let Ok(msg) = msg else { break };
        match msg {
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
                r.normal_close = frame.as_ref().is_some_and(|f| u16::from(f.code) == 1000);
                r.close = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
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
async fn attach_streams_the_log_followed_from_its_end_then_success() {
    use futures::SinkExt;
    let s = setup(false);
    let addr = serve(s.app.clone()).await;
    let (mut ws, chosen) = open(
        addr,
        "/attach/ml/train/main?output=1&error=1&input=1",
        "v5.channel.k8s.io",
    )
    .await;
    assert_eq!(chosen, "v5.channel.k8s.io");
    // Input to a container that does not read stdin is taken and dropped, as its runtime does.
    ws.send(stdin(b"typed\n")).await.unwrap();
    let r = receive_all(&mut ws).await;
    assert_eq!(r.channels[&1], b"hello world\nsecond line\n");
    let status: serde_json::Value = serde_json::from_slice(&r.channels[&3]).unwrap();
    assert_eq!(status["status"], "Success", "{status}");
    assert!(r.normal_close, "{r:?}");
    let opts = s.logs_provider.last_opts.lock().unwrap().clone().unwrap();
    assert!(opts.follow, "{opts:?}");
    assert_eq!(
        opts.tail_lines,
        Some(0),
        "output from the attach on: {opts:?}"
    );
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
    // Without a connection to take over (an in-process call), the upgrade cannot happen.
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("exec over SPDY needs an HTTP/1.1 connection upgrade"),
        "{body}"
    );
    // No protocol in common: 403, as the kubelet's handshake answers.
    let req = Request::post("/exec/ml/shell/main?command=ls&output=1")
        .header(header::AUTHORIZATION, "Bearer admin")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header("X-Stream-Protocol-Version", "v9.channel.k8s.io")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("unable to negotiate protocol"), "{body}");
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
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["message"].as_str()),
        (
            StatusCode::NOT_IMPLEMENTED,
            Some("not supported by provider runpod: exec")
        )
    );
}

// ---- limits ---------------------------------------------------------------------------------

fn stdin(data: &[u8]) -> WsMessage {
    let mut m = vec![0u8];
    m.extend_from_slice(data);
    WsMessage::Binary(Bytes::from(m))
}

const CLOSE_STDIN: &[u8] = &[255, 0];

#[tokio::test]
async fn large_stdin_chunks_pass_and_an_oversized_message_ends_the_session() {
    use futures::SinkExt;
    let s = setup(false);
    let addr = serve(s.app.clone()).await;
    let path = "/exec/ml/shell/main?command=cat&input=1&output=1";
    // A 64 KiB chunk (more than kubectl ever sends at once) is served whole.
    let (ws, _) = open(addr, path, "v5.channel.k8s.io").await;
    let (mut tx, mut rx) = ws.split();
    let chunk = vec![b'x'; 64 << 10];
    let sent = chunk.clone();
    tokio::spawn(async move {
        tx.send(stdin(&sent)).await.unwrap();
        tx.send(WsMessage::Binary(Bytes::from_static(CLOSE_STDIN)))
            .await
            .unwrap();
        tx
    });
    let r = receive_all(&mut rx).await;
    assert_eq!(r.channels[&1], chunk);
    assert_eq!(r.status()["status"], "Success");

    // One byte over the limit: the session ends, the client is told why, the command stops.
    let (ws, _) = open(addr, path, "v5.channel.k8s.io").await;
    let (mut tx, mut rx) = ws.split();
    let big = vec![b'y'; MAX_MESSAGE_BYTES];
    // Sending may fail half-way: the server stops reading at the frame header.
    let sender = tokio::spawn(async move { tx.send(stdin(&big)).await.is_ok() });
    let r = receive_all(&mut rx).await;
    let status = r.status();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 413);
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(
        status["message"],
        "exec input message of 1048577 bytes exceeds the limit of 1048576 bytes; session closed"
    );
    assert_eq!(
        r.close,
        Some((1009, "message over 1048576 bytes".to_owned()))
    );
    assert!(!r.channels.get(&1).is_some_and(|out| out.contains(&b'y')));
    wait_dropped(&s).await;
    let _ = sender.await;
}

/// Waits (up to 5 s) for the provider session to be dropped, i.e. the command stopped.
async fn wait_dropped(s: &Setup) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !s.exec_provider.exec_dropped.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command was not stopped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn idle_after(ms: u64) -> SessionLimits {
    SessionLimits {
        idle_timeout: Some(std::time::Duration::from_millis(ms)),
        ..SessionLimits::default()
    }
}

#[tokio::test]
async fn an_idle_exec_session_is_closed_even_while_the_client_pings() {
    use futures::SinkExt;
    let s = setup_with(false, idle_after(300));
    let addr = serve(s.app.clone()).await;
    // `sleep` never writes; the client only pings (control frames are no traffic).
    let (ws, _) = open(
        addr,
        "/exec/ml/shell/main?command=sleep&output=1",
        "v5.channel.k8s.io",
    )
    .await;
    let (mut tx, mut rx) = ws.split();
    let pinger = tokio::spawn(async move {
        while tx.send(WsMessage::Ping(Bytes::new())).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let r = receive_all(&mut rx).await;
    let status = r.status();
    assert_eq!(status["code"], 504);
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "exec session idle for 300ms (no input or output); session closed"
    );
    assert_eq!(r.close, Some((1000, "idle timeout".to_owned())));
    wait_dropped(&s).await;
    pinger.abort();
}

#[tokio::test]
async fn stdin_traffic_keeps_an_exec_session_open() {
    use futures::SinkExt;
    let s = setup_with(false, idle_after(1000));
    let addr = serve(s.app.clone()).await;
    let (ws, _) = open(
        addr,
        "/exec/ml/shell/main?command=cat&input=1&output=1",
        "v5.channel.k8s.io",
    )
    .await;
    let (mut tx, mut rx) = ws.split();
    // Input for 2.5 s, far beyond the idle timeout, each piece well within it.
    let sender = tokio::spawn(async move {
        for _ in 0..16 {
            tx.send(stdin(b"tick\n")).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        }
        tx.send(WsMessage::Binary(Bytes::from_static(CLOSE_STDIN)))
            .await
            .unwrap();
        tx
    });
    let r = receive_all(&mut rx).await;
    assert_eq!(r.channels[&1], b"tick\n".repeat(16));
    assert_eq!(r.status()["status"], "Success", "{:?}", r.status());
    assert!(r.normal_close);
    let _ = sender.await;
}
