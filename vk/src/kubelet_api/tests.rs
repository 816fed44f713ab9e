//! Router-level tests of the kubelet API with a fake host, provider and reviewer: routes,
//! status codes, log streaming (limits, back-pressure, disconnects) and the auth filter.

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
    BoxFuture, Capabilities, LogOptions, LogStream, Observed, Provider, ProviderError, Usage,
    Workload, WorkloadState,
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
        }
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
}

/// Pods: `ml/train` on a provider with logs (usage reported), `ml/quiet` on one without
/// (no usage), `ml/pending` without a workload.
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
    let host = FakeHost {
        pods: vec![
            pod("ml", "train", uid_train),
            pod("ml", "quiet", uid_quiet),
            pod("ml", "pending", "0b1c2d3e-0000-4000-8000-000000000003"),
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
        ]),
    };
    let auth = Auth::new(Arc::new(FakeReviewer), false);
    Setup {
        app: router(Arc::new(host), "vk-node".into(), auth),
        logs_provider: with_logs,
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
    assert_eq!(names, ["pending", "quiet", "train"]);
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
