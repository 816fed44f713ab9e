//! Cluster tests of the kubelet API on the real testbed: resource metrics, stats and the pod
//! list requested with the API server's kubelet client certificate, metrics-server scraping the
//! VK, `kubectl logs` (through the API server) answered 501 for a provider without logs, bad
//! requests, and the kubelet's authentication and authorization (401 without credentials, 403
//! without rights).
//!
//! The API server's node proxy (`/api/v1/nodes/{node}/proxy/...`) refuses loopback node
//! addresses ("address not allowed"), and testbed nodes live on 127.0.0.1, so raw kubelet paths
//! are requested directly, authenticating exactly as the API server does: with the testbed's
//! `--kubelet-client-certificate`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::time::Duration;

use harness::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{LogParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;

fn gpus() -> Vec<GpuStock> {
    vec![GpuStock::new("A100-80GB", 64, 1.89)]
}

/// The kubelet port the VK advertises on its Node (what the API server and metrics-server use).
async fn kubelet_port(c: &Client, node: &str) -> u16 {
    wait_for(
        Duration::from_secs(20),
        "node with a kubelet endpoint",
        || async {
            let n = Api::<Node>::all(c.clone()).get_opt(node).await.ok()??;
            let port = n.status?.daemon_endpoints?.kubelet_endpoint?.port;
            u16::try_from(port).ok().filter(|p| *p > 0)
        },
    )
    .await
}

fn insecure_https() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

/// An HTTPS client presenting the API server's kubelet client certificate (CN
/// kube-apiserver-kubelet-client, O system:masters), accepting the VK's self-signed cert.
fn as_apiserver() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = testbed_env("TESTBED_KUBELET_CLIENT_CERT").expect("testbed env file");
    let key = testbed_env("TESTBED_KUBELET_CLIENT_KEY").expect("testbed env file");
    let mut pem = std::fs::read(cert).unwrap();
    pem.extend(std::fs::read(key).unwrap());
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap()
}

/// Status and body of a request to the VK's kubelet API.
async fn kubelet(
    http: &reqwest::Client,
    method: reqwest::Method,
    port: u16,
    path: impl AsRef<str>,
) -> (u16, String) {
    let path = path.as_ref();
    let r = http
        .request(method, format!("https://127.0.0.1:{port}{path}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// GET through the API server (for aggregated APIs such as metrics.k8s.io).
async fn api_get(c: &Client, path: &str) -> Option<String> {
    let req = axum::http::Request::get(path).body(Vec::new()).unwrap();
    c.request_text(req).await.ok()
}

/// A running pod on a fresh VK with a RunPod emulator; its emulator workload reports `usage`.
struct Scenario {
    c: Client,
    rp: Emulator,
    vk: Vk,
    ns: String,
    pod: String,
}

impl Scenario {
    /// On the RunPod emulator (no log API), its workload reporting `usage`.
    async fn start(usage: Value) -> Self {
        let rp = Emulator::runpod(ExecutionMode::simulated(200, 200, None), gpus()).await;
        let s = Self::start_on(rp).await;
        let id = s.workload_id().await;
        s.rp.admin_post(&format!("/workloads/{id}/usage"), usage)
            .await;
        s
    }

    /// The emulator's id of the pod's workload.
    async fn workload_id(&self) -> String {
        let pods: Api<Pod> = Api::namespaced(self.c.clone(), &self.ns);
        let uid = uid(&pods.get(&self.pod).await.unwrap());
        wait_for(Duration::from_secs(10), "emulator workload", || async {
            let w = self.rp.workloads_of(&uid).await.into_iter().next()?;
            match &w["id"] {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        })
        .await
    }

    async fn start_on(rp: Emulator) -> Self {
        let c = client().await;
        let vk = Vk::start(&[(rp.kind, &rp)], VkOptions::default()).await;
        let ns = namespace(&c, "kubelet-api").await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
        pods.create(&PostParams::default(), &gpu_pod("train", &vk.node, 1, &[]))
            .await
            .unwrap();
        let running = wait_for(Duration::from_secs(60), "pod train Running", || async {
            pods.get_opt("train")
                .await
                .ok()
                .flatten()
                .filter(|p| phase(p) == "Running")
        })
        .await;
        assert_eq!(running.metadata.name.as_deref(), Some("train"));
        Self {
            c,
            rp,
            vk,
            ns,
            pod: "train".into(),
        }
    }

    async fn finish(mut self) {
        delete_namespace(&self.c, &self.ns).await;
        self.vk.cleanup(&self.c).await;
        drop(self.rp);
    }
}

/// A resource quantity as the metrics API prints them (`1999123456n`, `2`, `7812500Ki`).
fn quantity(q: &str) -> f64 {
    vk::vocab::quantity::value(q).unwrap_or_else(|| panic!("not a quantity: {q}"))
}

/// The value of the first sample of `metric` whose labels contain `labels`.
fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(labels))
        .find_map(|l| {
            let mut parts = l.rsplitn(3, ' ');
            let last = parts.next()?;
            let before = parts.next()?;
            // `<series> <value> <timestamp ms>` or `<series> <value>`.
            if before.ends_with('}') || before == metric {
                last.parse().ok()
            } else {
                before.parse().ok()
            }
        })
}

#[tokio::test]
async fn resource_metrics_stats_and_pods_for_the_api_server() {
    let s = Scenario::start(json!({"cpu_millis": 2000, "memory_bytes": 8 * GIB})).await;
    let port = kubelet_port(&s.c, &s.vk.node).await;
    let http = as_apiserver();
    let get = |path: &'static str| kubelet(&http, reqwest::Method::GET, port, path);
    let labels = format!(
        "container=\"main\",namespace=\"{}\",pod=\"{}\"",
        s.ns, s.pod
    );
    let text = wait_for(Duration::from_secs(30), "container metrics", || async {
        let (code, text) = get("/metrics/resource").await;
        assert_eq!(code, 200, "{text}");
        let cpu = sample(&text, "container_cpu_usage_seconds_total", &labels)?;
        (cpu > 0.0).then_some(text)
    })
    .await;
    // The emulator reports usage as whole percents of the pod's 8 vCPUs and 32 GB: 25% each.
    let mem = sample(&text, "container_memory_working_set_bytes", &labels).unwrap();
    assert!((7.0e9..9.0e9).contains(&mem), "memory {mem}\n{text}");
    assert!(sample(&text, "container_start_time_seconds", &labels).unwrap() > 1.7e9);
    let pod_labels = format!("namespace=\"{}\",pod=\"{}\"", s.ns, s.pod);
    assert_eq!(
        sample(&text, "pod_memory_working_set_bytes", &pod_labels),
        Some(mem)
    );
    assert!(sample(&text, "node_memory_working_set_bytes", "").unwrap() >= mem);
    assert!(sample(&text, "node_cpu_usage_seconds_total", "").unwrap() > 0.0);
    assert_eq!(sample(&text, "scrape_error", ""), Some(0.0));
    // Samples carry millisecond timestamps, as the kubelet's do.
    let line = text
        .lines()
        .find(|l| l.starts_with("container_memory_working_set_bytes{"))
        .unwrap();
    let ts: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (jiff::Timestamp::now().as_millisecond() - ts).abs() < 60_000,
        "{line}"
    );

    let (code, body) = get("/stats/summary").await;
    assert_eq!(code, 200, "{body}");
    let summary: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(summary["node"]["nodeName"], s.vk.node.as_str());
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "train")
        .unwrap()
        .clone();
    let nano_cores = pod["cpu"]["usageNanoCores"].as_u64().unwrap();
    assert!(
        (1_800_000_000..2_200_000_000).contains(&nano_cores),
        "{pod}"
    );
    assert_eq!(pod["containers"][0]["name"], "main");

    let (code, body) = get("/pods").await;
    assert_eq!(code, 200, "{body}");
    let pods: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(pods["kind"], "PodList");
    assert!(
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "train")
    );
    assert_eq!(get("/healthz").await, (200, "ok".to_owned()));
    s.finish().await;
}

#[tokio::test]
async fn metrics_server_reports_the_provider_usage() {
    let s = Scenario::start(json!({"cpu_millis": 2000, "memory_bytes": 8 * GIB})).await;
    let path = format!(
        "/apis/metrics.k8s.io/v1beta1/namespaces/{}/pods/{}",
        s.ns, s.pod
    );
    // metrics-server scrapes every 15 s; the first CPU rate needs a scrape after the pod's
    // counter started.
    let m: Value = wait_for(
        Duration::from_secs(90),
        "pod metrics from metrics-server",
        || async { serde_json::from_str(&api_get(&s.c, &path).await?).ok() },
    )
    .await;
    let usage = &m["containers"][0]["usage"];
    assert_eq!(m["containers"][0]["name"], "main", "{m}");
    // 2000 millicores and 8 GiB reported (as 25% of 8 vCPUs and 32 GB) by the emulator.
    let cores = quantity(usage["cpu"].as_str().unwrap());
    let memory = quantity(usage["memory"].as_str().unwrap());
    assert!((1.0..3.0).contains(&cores), "{m}");
    assert!((7.0e9..9.0e9).contains(&memory), "{m}");
    s.finish().await;
}

#[tokio::test]
async fn logs_through_the_api_server_and_bad_requests() {
    let s = Scenario::start(json!({"cpu_millis": 500, "memory_bytes": GIB})).await;
    let pods: Api<Pod> = Api::namespaced(s.c.clone(), &s.ns);
    // RunPod's log stream (the emulator's container lines) through the API server.
    let text = pods.logs(&s.pod, &LogParams::default()).await.unwrap();
    assert!(
        text.contains("simulated container started from image busybox:1.36"),
        "{text:?}"
    );

    // Straight to the kubelet API, as the API server would forward them.
    let port = kubelet_port(&s.c, &s.vk.node).await;
    let http = as_apiserver();
    let get = |path: String| kubelet(&http, reqwest::Method::GET, port, path);
    let base = format!("/containerLogs/{}", s.ns);
    let (code, msg) = get(format!("{base}/train/sidecar")).await;
    assert_eq!(code, 404, "{msg}");
    assert!(
        msg.contains("\"sidecar\"") && msg.contains("/train"),
        "{msg}"
    );
    let (code, msg) = get(format!("{base}/ghost/main")).await;
    assert_eq!(code, 404, "{msg}");
    assert!(msg.contains("/ghost"), "{msg}");
    let (code, msg) = get(format!("{base}/train/main?tailLines=lots")).await;
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("tailLines"), "{msg}");
    let (code, msg) = get(format!(
        "{base}/train/main?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z"
    ))
    .await;
    assert_eq!(code, 400, "{msg}");
    let (code, msg) = get(format!("{base}/train/main?limitBytes=10")).await;
    assert_eq!((code, msg.len()), (200, 10), "{msg:?}");
    // A streaming refusal is a JSON Status (see `ApiError::status_response`).
    let exec = format!("/exec/{}/train/main?command=ls&stdout=true", s.ns);
    let (code, msg) = kubelet(&http, reqwest::Method::POST, port, exec).await;
    let status: serde_json::Value = serde_json::from_str(&msg).unwrap();
    assert_eq!(
        (code, status["message"].as_str()),
        (501, Some("not supported by provider runpod: exec"))
    );
    s.finish().await;
}

#[tokio::test]
async fn requests_without_credentials_or_rights_are_refused() {
    let s = Scenario::start(json!({"cpu_millis": 500, "memory_bytes": GIB})).await;
    let port = kubelet_port(&s.c, &s.vk.node).await;
    let http = insecure_https();
    let url = |path: &str| format!("https://127.0.0.1:{port}{path}");
    for path in [
        "/metrics/resource",
        "/pods",
        "/healthz",
        "/containerLogs/a/b/c",
    ] {
        let r = http.get(url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
    }

    // A ServiceAccount without any rights on nodes authenticates but is forbidden.
    let sas: Api<ServiceAccount> = Api::namespaced(s.c.clone(), &s.ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = sas
        .create_token_request("nobody", &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let r = http
        .get(url("/metrics/resource"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body = r.text().await.unwrap();
    assert!(
        body.contains(&format!("user=system:serviceaccount:{}:nobody", s.ns))
            && body.contains("subresource(s)=[metrics]"),
        "{body}"
    );
    let r = http
        .get(url("/pods"))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // The token never reaches the VK's log.
    assert!(!s.vk.log().contains(&token));
    s.finish().await;
}

/// Logs from a provider with a log API (the Vast emulator), through the API server as
/// `kubectl logs` gets them, with `--tail` and `--limit-bytes`.
#[tokio::test]
async fn logs_stream_from_a_provider_with_logs() {
    let vast = Emulator::vast(ExecutionMode::simulated(200, 200, None), gpus()).await;
    let s = Scenario::start_on(vast).await;
    let id = s.workload_id().await;
    s.rp.admin_post(
        &format!("/workloads/{id}/logs"),
        json!({"lines": ["epoch 1 loss 0.9", "epoch 2 loss 0.5", "epoch 3 loss 0.2"]}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(s.c.clone(), &s.ns);
    let all = wait_for(Duration::from_secs(30), "logs", || async {
        let text = pods.logs(&s.pod, &LogParams::default()).await.ok()?;
        text.contains("epoch 3").then_some(text)
    })
    .await;
    assert!(all.contains("epoch 1 loss 0.9\n"), "{all}");
    let tail = pods
        .logs(
            &s.pod,
            &LogParams {
                tail_lines: Some(2),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail, "epoch 2 loss 0.5\nepoch 3 loss 0.2\n");
    let cut = pods
        .logs(
            &s.pod,
            &LogParams {
                limit_bytes: Some(7),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cut.len(), 7, "{cut:?}");
    s.finish().await;
}

#[path = "kubelet_api/csr.rs"]
mod csr;
