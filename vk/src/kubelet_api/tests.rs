//! Router-level tests of the kubelet API with a fake host, provider and reviewer: routes,
//! status codes, log streaming (limits, back-pressure, disconnects), exec over a real
//! WebSocket (v5 channel protocol, stdin close signal, exit status, disconnects) and the auth
//! filter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tower::ServiceExt;

use super::auth::{Auth, ReviewError, Reviewer, User};
use super::tls::Peer;
use super::*;
use crate::naming::Owner;
use crate::provider::{
    BoxFuture, Capabilities, ExecRequest, ExecSession, LogOptions, LogStream, Observed, Provider,
    ProviderError, Usage, Workload, WorkloadState,
};

/// Logs: `None` means the provider has no log API; `Some(lines)` serves them, then (with
/// `endless`) keeps producing lines for as long as it is polled.
struct FakeProvider {
    name: &'static str,
    lines: Option<Vec<&'static str>>,
    endless: bool,
    last_opts: Mutex<Option<LogOptions>>,
    polls: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
    /// Offers exec: `greet` (stdout `out`, stderr `err`, exit 7), `cat` (stdin to stdout
    /// until the close signal), anything else runs until the session is dropped.
    exec: bool,
    exec_dropped: Arc<AtomicBool>,
}

impl FakeProvider {
    fn new(name: &'static str, lines: Option<Vec<&'static str>>) -> Self {
        Self {
            name,
            lines,
            endless: false,
            last_opts: Mutex::default(),
            polls: Arc::default(),
            dropped: Arc::default(),
            exec: false,
            exec_dropped: Arc::default(),
        }
    }
}

/// An in-process stand-in for a command (see [`FakeProvider::exec`]).
fn fake_session(req: &ExecRequest, dropped: Arc<AtomicBool>) -> ExecSession {
    use tokio::io::AsyncReadExt;
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let (err_tx, err_rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<i32>();
    let (stdin_w, mut stdin_r) = tokio::io::duplex(1024);
    let program = req.command.first().cloned().unwrap_or_default();
    tokio::spawn(async move {
        match program.as_str() {
            "greet" => {
                let _ = out_tx.send(Bytes::from_static(b"out\n")).await;
                let _ = err_tx.send(Bytes::from_static(b"err\n")).await;
                drop((out_tx, err_tx));
                let _ = exit_tx.send(7);
            }
            "cat" => {
                let mut buf = [0u8; 64];
                while let Ok(n) = stdin_r.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let _ = out_tx.send(Bytes::copy_from_slice(&buf[..n])).await;
                }
                drop((out_tx, err_tx));
                let _ = exit_tx.send(0);
            }
            _ => {
                let _keep = (out_tx, err_tx, exit_tx, stdin_r);
                std::future::pending::<()>().await;
            }
        }
    });
    let flag = DropFlag(dropped);
    let stdout = futures::stream::unfold((out_rx, flag), |(mut rx, flag)| async move {
        rx.recv().await.map(|b| (Ok(b), (rx, flag)))
    });
    let stderr = futures::stream::unfold(err_rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(b), rx))
    });
    ExecSession {
        stdin: req
            .stdin
            .then(|| Box::pin(stdin_w) as crate::provider::ExecStdin),
        stdout: Box::pin(stdout),
        stderr: Some(Box::pin(stderr)),
        resize: None,
        exit: Box::pin(async move {
            exit_rx
                .await
                .map_err(|_| ProviderError::transient("fake command vanished"))
        }),
    }
}

/// Sets a flag when the stream holding it is dropped.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Provider for FakeProvider {
    fn name(&self) -> &str {
        self.name
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logs: self.lines.is_some(),
            exec: self.exec,
            ..Capabilities::default()
        }
    }
    async fn create(&self, _w: &Workload) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn delete(&self, _id: &str) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        Ok(vec![])
    }
    fn logs(
        &self,
        _provider_id: &str,
        opts: &LogOptions,
    ) -> impl Future<Output = Result<LogStream, ProviderError>> + Send {
        *self.last_opts.lock().unwrap() = Some(opts.clone());
        let result = match &self.lines {
            None => Err(ProviderError::Unsupported {
                provider: self.name.to_owned(),
                what: "logs".into(),
            }),
            Some(lines) => {
                let head: Vec<Bytes> = lines
                    .iter()
                    .map(|l| Bytes::from(format!("{l}\n")))
                    .collect();
                let polls = self.polls.clone();
                let flag = DropFlag(self.dropped.clone());
                let endless = self.endless;
                let tail = futures::stream::unfold(0u64, move |n| async move {
                    endless.then(|| (Bytes::from(format!("line {n}\n")), n + 1))
                });
                let s = futures::stream::iter(head).chain(tail).map(move |b| {
                    let _keep = &flag;
                    polls.fetch_add(1, Ordering::SeqCst);
                    Ok(b)
                });
                Ok(Box::pin(s) as LogStream)
            }
        };
        async move { result }
    }
    fn exec(
        &self,
        _provider_id: &str,
        req: ExecRequest,
    ) -> impl Future<Output = Result<ExecSession, ProviderError>> + Send {
        let result = if !self.exec {
            Err(ProviderError::Unsupported {
                provider: self.name.to_owned(),
                what: "exec".into(),
            })
        } else if req.tty {
            Err(ProviderError::Unsupported {
                provider: self.name.to_owned(),
                what: "exec with a TTY".into(),
            })
        } else {
            Ok(fake_session(&req, self.exec_dropped.clone()))
        };
        async move { result }
    }
}

struct FakeHost {
    pods: Vec<Arc<Pod>>,
    workloads: HashMap<String, (Arc<dyn DynProvider>, Observed)>,
}

impl Host for FakeHost {
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods
            .iter()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }
    fn workload_of(&self, uid: &str) -> Option<(Arc<dyn DynProvider>, Observed)> {
        self.workloads.get(uid).cloned()
    }
}

/// Token `admin` may do anything; `nobody` authenticates but may do nothing.
struct FakeReviewer;
impl Reviewer for FakeReviewer {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        let user = matches!(token, "admin" | "nobody").then(|| User {
            name: token.to_owned(),
            ..User::default()
        });
        Box::pin(async move { Ok(user) })
    }
    fn review_access<'a>(
        &'a self,
        user: &'a User,
        _node: &'a str,
        _verb: &'a str,
        _sub: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        let ok = user.name == "admin" || user.name == "apiserver";
        Box::pin(async move { Ok(ok) })
    }
}

fn pod(ns: &str, name: &str, uid: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running", "startTime": "2026-05-01T11:00:00Z"},
        }))
        .unwrap(),
    )
}

fn observed(uid: &str, usage: Option<Usage>) -> Observed {
    let owner = Owner::new("c", "vk-node");
    Observed {
        id: owner.workload_id(uid).unwrap(),
        provider_id: format!("p-{uid}"),
        state: WorkloadState::Running,
        message: None,
        created_at: None,
        started_at: Some("2026-05-01T11:00:05Z".parse().unwrap()),
        finished_at: None,
        ip: None,
        provider_restarts: 0,
        usage,
    }
}

struct Setup {
    app: axum::Router,
    logs_provider: Arc<FakeProvider>,
    exec_provider: Arc<FakeProvider>,
}

/// Pods: `ml/train` on a provider with logs (usage reported), `ml/quiet` on one without
/// (no usage), `ml/pending` without a workload, `ml/shell` on a provider with exec.
fn setup(endless: bool) -> Setup {
    let mut with_logs = FakeProvider::new("slurm", Some(vec!["hello world", "second line"]));
    with_logs.endless = endless;
    let with_logs = Arc::new(with_logs);
    let without: Arc<dyn DynProvider> = Arc::new(FakeProvider::new("runpod", None));
    let usage = Usage {
        cpu_usage_nanos: 42_000_000_000,
        cpu_millis: 700,
        memory_bytes: 1 << 30,
        timestamp: Timestamp::now(),
    };
    let uid_train = "0b1c2d3e-0000-4000-8000-000000000001";
    let uid_quiet = "0b1c2d3e-0000-4000-8000-000000000002";
    let uid_shell = "0b1c2d3e-0000-4000-8000-000000000004";
    let mut with_exec = FakeProvider::new("hpc", None);
    with_exec.exec = true;
    let with_exec = Arc::new(with_exec);
    let host = FakeHost {
        pods: vec![
            pod("ml", "train", uid_train),
            pod("ml", "quiet", uid_quiet),
            pod("ml", "pending", "0b1c2d3e-0000-4000-8000-000000000003"),
            pod("ml", "shell", uid_shell),
        ],
        workloads: HashMap::from([
            (
                uid_train.to_owned(),
                (
                    with_logs.clone() as Arc<dyn DynProvider>,
                    observed(uid_train, Some(usage)),
                ),
            ),
            (uid_quiet.to_owned(), (without, observed(uid_quiet, None))),
            (
                uid_shell.to_owned(),
                (
                    with_exec.clone() as Arc<dyn DynProvider>,
                    observed(uid_shell, None),
                ),
            ),
        ]),
    };
    let auth = Auth::new(Arc::new(FakeReviewer), false);
    Setup {
        app: router(Arc::new(host), "vk-node".into(), auth),
        logs_provider: with_logs,
        exec_provider: with_exec,
    }
}

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header(header::AUTHORIZATION, "Bearer admin")
        .body(Body::empty())
        .unwrap()
}

async fn call(app: &axum::Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn every_path_needs_credentials_and_authorization() {
    let s = setup(false);
    for path in [
        "/healthz",
        "/pods",
        "/metrics/resource",
        "/containerLogs/ml/train/main",
        "/nope",
    ] {
        let (status, body) = call(&s.app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body.trim(), "Unauthorized");
    }
    let req = Request::get("/healthz")
        .header(header::AUTHORIZATION, "Bearer nobody")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("user=nobody") && body.contains("healthz,proxy"),
        "{body}"
    );

    // A verified client certificate identifies the caller without a token.
    let mut req = Request::get("/healthz").body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo(Peer {
        addr: ([127, 0, 0, 1], 1).into(),
        cert_user: User::from_certificate("apiserver".into(), vec!["system:masters".into()]),
    }));
    assert_eq!(call(&s.app, req).await, (StatusCode::OK, "ok".into()));
}

#[tokio::test]
async fn pods_lists_the_node_pods() {
    let s = setup(false);
    let (status, body) = call(&s.app, get("/pods")).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PodList");
    assert_eq!(v["apiVersion"], "v1");
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pending", "quiet", "shell", "train"]);
}

#[tokio::test]
async fn logs_errors_name_what_is_wrong() {
    let s = setup(false);
    let (status, body) = call(&s.app, get("/containerLogs/ml/ghost/main")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("ml/ghost"), "{body}");
    let (status, body) = call(&s.app, get("/containerLogs/ml/train/sidecar")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("\"sidecar\"") && body.contains("ml/train"),
        "{body}"
    );
    let (status, body) = call(&s.app, get("/containerLogs/ml/train/main?tailLines=ten")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("tailLines"), "{body}");
    let (status, body) = call(&s.app, get("/containerLogs/ml/quiet/main")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(body.trim(), "not supported by provider runpod: logs");
    let (status, body) = call(&s.app, get("/containerLogs/ml/pending/main")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("no workload"), "{body}");
}

#[tokio::test]
async fn logs_stream_with_options_and_limit_bytes() {
    let s = setup(false);
    let (status, body) = call(
        &s.app,
        get("/containerLogs/ml/train/main?tailLines=2&timestamps=true&sinceTime=2026-05-01T10:00:00Z"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "hello world\nsecond line\n");
    let opts = s.logs_provider.last_opts.lock().unwrap().clone().unwrap();
    assert_eq!(opts.tail_lines, Some(2));
    assert!(opts.timestamps);
    assert_eq!(opts.since, Some("2026-05-01T10:00:00Z".parse().unwrap()));

    let (_, body) = call(&s.app, get("/containerLogs/ml/train/main?limitBytes=5")).await;
    assert_eq!(body, "hello");
}

#[tokio::test]
async fn a_follow_stream_is_pulled_on_demand_and_dropped_with_the_client() {
    let s = setup(true);
    let resp = s
        .app
        .clone()
        .oneshot(get("/containerLogs/ml/train/main?follow=true"))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    for _ in 0..3 {
        assert!(!body.next().await.unwrap().unwrap().is_empty());
    }
    // Nothing is read ahead of the client: an endless provider stream was polled only for
    // the frames taken.
    assert_eq!(s.logs_provider.polls.load(Ordering::SeqCst), 3);
    assert!(!s.logs_provider.dropped.load(Ordering::SeqCst));
    drop(body);
    assert!(s.logs_provider.dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn resource_metrics_and_summary_come_from_provider_usage() {
    let s = setup(false);
    let (status, text) = call(&s.app, get("/metrics/resource")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(
            "container_memory_working_set_bytes{container=\"main\",namespace=\"ml\",pod=\"train\"} 1073741824 "
        ),
        "{text}"
    );
    assert!(text.contains(
        "container_cpu_usage_seconds_total{container=\"main\",namespace=\"ml\",pod=\"train\"} 42 "
    ));
    assert!(text.contains("node_memory_working_set_bytes 1073741824 "));
    // The pod whose provider reports no usage gets no samples, never zeros.
    assert!(!text.contains("pod=\"quiet\""), "{text}");

    let (status, body) = call(&s.app, get("/stats/summary")).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["node"]["nodeName"], "vk-node");
    assert_eq!(v["node"]["cpu"]["usageNanoCores"], 700_000_000);
    assert_eq!(v["pods"][0]["podRef"]["name"], "train");
    assert_eq!(
        v["pods"][0]["containers"][0]["memory"]["workingSetBytes"],
        1u64 << 30
    );
    assert_eq!(v["pods"].as_array().unwrap().len(), 1);
}

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

use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

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
