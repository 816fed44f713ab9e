//! Router-level tests of the kubelet API with a fake host, provider and reviewer: routes,
//! status codes, log streaming (limits, back-pressure, disconnects), exec over a real
//! WebSocket (v5 channel protocol, stdin close signal, exit status, disconnects), port
//! forwarding over the WebSocket tunnel, and the auth filter.
//!
//! This module holds the fakes and helpers; the tests are in `routes` (the auth filter, the
//! pod list, stats), `logs`, `exec` (refusals, and sessions over a real WebSocket) and
//! `port_forward` (refusals, and sessions over the SPDY-over-WebSocket tunnel).

mod exec;
mod logs;
mod port_forward;
mod routes;

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

use super::auth::{Access, Auth, ReviewError, Reviewer, User};
use super::exec::{MAX_MESSAGE_BYTES, SessionLimits};
use super::*;
use crate::naming::Owner;
use crate::provider::{
    BoxFuture, Capabilities, ExecRequest, ExecSession, LogOptions, LogStream, Observed, Provider,
    ProviderError, Usage, Workload, WorkloadState,
};
use crate::tls::Peer;

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
            follow_logs: self.lines.is_some(),
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
    fn review_access<'a>(&'a self, a: Access<'a>) -> BoxFuture<'a, Result<bool, ReviewError>> {
        let ok = a.user.name == "admin" || a.user.name == "apiserver";
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

/// `ml/chart`: container `main` runs; `metrics` is left out; init container `fetch` runs
/// before `main`'s command (no workload yet).
fn chart_pod() -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "ml", "name": "chart", "uid": "0b1c2d3e-0000-4000-8000-000000000005",
                "annotations": {"gpu-vk.io/omit-containers": "metrics"}},
            "spec": {
                "containers": [{"name": "metrics", "image": "exporter"},
                               {"name": "main", "image": "busybox", "command": ["serve"]}],
                "initContainers": [{"name": "fetch", "image": "busybox", "command": ["fetch"]}],
            },
        }))
        .unwrap(),
    )
}

#[tokio::test]
async fn logs_of_a_container_left_out_or_run_inside_the_main_one_say_so() {
    let app = setup(false).app;
    let (status, body) = call(&app, get("/containerLogs/ml/chart/metrics")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("left out by gpu-vk.io/omit-containers"),
        "{body}"
    );
    let (status, body) = call(&app, get("/containerLogs/ml/chart/fetch")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("in the workload of container \"main\""),
        "{body}"
    );
    let (status, body) = call(&app, get("/containerLogs/ml/chart/nosuch")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // The container that runs gets past these checks (to "no workload yet").
    let (status, body) = call(&app, get("/containerLogs/ml/chart/main")).await;
    assert!(
        !body.contains("left out") && !body.contains("not found"),
        "{status} {body}"
    );
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
        ports: Default::default(),
        usage,
        price: None,
        container_exits: Default::default(),
        pull_failure: None,
    }
}

struct Setup {
    app: axum::Router,
    logs_provider: Arc<FakeProvider>,
    exec_provider: Arc<FakeProvider>,
}

/// Pods: `ml/train` on a provider with logs (usage reported), `ml/quiet` on one without
/// (no usage), `ml/pending` without a workload, `ml/shell` on a provider with exec, `ml/model`
/// publishing port 8080 (to a port nothing listens on).
fn setup(endless: bool) -> Setup {
    setup_with(endless, SessionLimits::default())
}

/// [`setup`] with exec sessions bounded by `limits`.
fn setup_with(endless: bool, limits: SessionLimits) -> Setup {
    setup_full(endless, limits, 9)
}

/// [`setup_with`], the published port 8080 of `ml/model` (on `runpod`) forwarding to
/// `127.0.0.1:<forward_to>`.
fn setup_full(endless: bool, mut limits: SessionLimits, forward_to: u16) -> Setup {
    // The forward target is a loopback listener of the test.
    limits.dial_local_targets = true;
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
    let uid_model = "0b1c2d3e-0000-4000-8000-000000000006";
    let mut model = observed(uid_model, None);
    model.ports = [(
        8080,
        crate::provider::Endpoint {
            host: "127.0.0.1".into(),
            port: forward_to,
        },
    )]
    .into();
    let mut with_exec = FakeProvider::new("hpc", None);
    with_exec.exec = true;
    let with_exec = Arc::new(with_exec);
    let host = FakeHost {
        pods: vec![
            pod("ml", "train", uid_train),
            pod("ml", "quiet", uid_quiet),
            pod("ml", "pending", "0b1c2d3e-0000-4000-8000-000000000003"),
            pod("ml", "shell", uid_shell),
            pod("ml", "model", uid_model),
            chart_pod(),
        ],
        workloads: HashMap::from([
            (
                uid_train.to_owned(),
                (
                    with_logs.clone() as Arc<dyn DynProvider>,
                    observed(uid_train, Some(usage)),
                ),
            ),
            (
                uid_quiet.to_owned(),
                (without.clone(), observed(uid_quiet, None)),
            ),
            (uid_model.to_owned(), (without, model)),
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
        app: router_with(
            Arc::new(host),
            "vk-node".into(),
            auth,
            limits,
            Arc::new(crate::pods::networks::ClusterNetworks::new(Vec::new())),
        ),
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
