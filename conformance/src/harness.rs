//! Harness for cluster tests and the conformance suite: the real testbed (KUBECONFIG from
//! `make test`), provider emulators served in-process over HTTP, and the `vk` binary run as a
//! child process (so scenarios can `kill -9` it).
//!
//! Test support code: failing loudly (panics with a message) is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{EmulatorConfig, ExecutionMode, GpuStock};
use serde_json::{Value, json};

pub const API_KEY: &str = "emulator-key-7f3a";

/// A client for the testbed; fails loudly when not run under `make test`.
pub async fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: cluster tests run against the local testbed; use `make test` \
         (or `eval \"$(make -s testbed-up)\"` first)"
    );
    Client::try_default().await.expect("testbed reachable")
}

/// A unique, short suffix for names.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..8])
}

/// Creates a namespace and waits for its default ServiceAccount.
pub async fn namespace(c: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sa: Api<ServiceAccount> = Api::namespaced(c.clone(), &name);
    wait_for(
        Duration::from_secs(30),
        "default service account",
        || async { sa.get_opt("default").await.ok().flatten().map(|_| ()) },
    )
    .await;
    name
}

pub async fn delete_namespace(c: &Client, name: &str) {
    let _ = Api::<Namespace>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Polls `f` until it returns `Some`, or panics naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A RunPod v2 emulator served in-process.
pub struct Emulator {
    pub addr: SocketAddr,
    pub kind: &'static str,
    /// GPU type the VK asks for when a pod names none (the first stocked type).
    pub default_gpu: String,
    http: reqwest::Client,
    _task: tokio::task::JoinHandle<()>,
}

impl Emulator {
    pub async fn runpod(mode: ExecutionMode, gpus: Vec<GpuStock>) -> Self {
        let cfg = EmulatorConfig::new(API_KEY, gpus.clone()).with_mode(mode);
        let default_gpu = gpus.first().map(|g| g.gpu_type.clone()).unwrap_or_default();
        let router = mock_providers::runpod::router(mock_providers::runpod::State::new(cfg));
        Self::serve(router, "runpod", default_gpu).await
    }

    pub async fn vast(mode: ExecutionMode, gpus: Vec<GpuStock>) -> Self {
        let cfg = EmulatorConfig::new(API_KEY, gpus.clone()).with_mode(mode);
        let default_gpu = gpus.first().map(|g| g.gpu_type.clone()).unwrap_or_default();
        let router = mock_providers::vast::router(mock_providers::vast::State::new(cfg));
        Self::serve(router, "vast", default_gpu).await
    }

    async fn serve(router: axum::Router, kind: &'static str, default_gpu: String) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (addr, task) = mock_providers::spawn(router).await.unwrap();
        Self {
            addr,
            kind,
            default_gpu,
            http: reqwest::Client::new(),
            _task: task,
        }
    }

    pub fn base_url(&self) -> String {
        match self.kind {
            "runpod" => format!("http://{}/v2", self.addr),
            _ => format!("http://{}", self.addr),
        }
    }

    fn admin(&self, path: &str) -> String {
        format!("http://{}/_admin{path}", self.addr)
    }

    pub async fn workloads(&self) -> Vec<Value> {
        let v: Value = self
            .http
            .get(self.admin("/workloads"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v.as_array().cloned().unwrap_or_default()
    }

    /// Live workloads (not terminated) whose name carries this pod UID.
    pub async fn workloads_of(&self, uid: &str) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.ends_with(uid)))
            .filter(|w| !is_terminated(w))
            .collect()
    }

    pub async fn live(&self) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| !is_terminated(w))
            .collect()
    }

    pub async fn counters(&self) -> Value {
        self.http
            .get(self.admin("/counters"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn counter(&self, name: &str) -> u64 {
        self.counters().await[name].as_u64().unwrap_or(0)
    }

    /// Injects a running workload with the given name; returns its provider id.
    pub async fn inject(&self, name: &str) -> String {
        let r = self
            .http
            .post(self.admin("/workloads"))
            .json(
                &json!({"name": name, "image": "busybox", "gpu_type": "A100-80GB", "gpu_count": 1}),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "inject failed: {}", r.status());
        let v: Value = r.json().await.unwrap();
        v["id"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    }

    /// Makes a workload vanish silently (the provider lost it).
    pub async fn vanish(&self, id: &str) {
        let r = self
            .http
            .delete(self.admin(&format!("/workloads/{id}")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "vanish failed: {}", r.status());
    }

    pub async fn admin_post(&self, path: &str, body: Value) {
        let r = self
            .http
            .post(self.admin(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "admin {path} failed: {}",
            r.status()
        );
    }
}

pub fn is_terminated(w: &Value) -> bool {
    matches!(
        w["state"].as_str(),
        Some("TERMINATED" | "terminated" | "deleted" | "DELETED")
    )
}

/// The `vk` binary: `VK_BIN`, else `vk` next to the running test's `deps/` folder (where
/// `cargo test --workspace` and `cargo build -p vk` put it).
pub fn vk_binary() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("VK_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("exe dir");
    let bin = dir.join("vk");
    assert!(
        bin.exists(),
        "vk binary not found at {} (run `cargo build -p vk` or set VK_BIN)",
        bin.display()
    );
    bin
}

/// The ownership tag the VK embeds in workload names (documented format:
/// first 8 hex digits of SHA-256 of `<cluster id>/<node name>`).
pub fn owner_tag(cluster_id: &str, node: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{cluster_id}/{node}").as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The provider-side name of the workload of pod `uid` on `node`.
pub fn workload_name(cluster_id: &str, node: &str, uid: &str) -> String {
    format!("vk-{}-{uid}", owner_tag(cluster_id, node))
}

/// The `vk` binary running as a child process.
pub struct Vk {
    pub node: String,
    pub cluster_id: String,
    child: Option<tokio::process::Child>,
    dir: PathBuf,
    config: String,
    rust_log: String,
}

pub struct VkOptions {
    pub poll_ms: u64,
    pub gc_grace_ms: u64,
    pub restart_backoff_ms: u64,
    /// `RUST_LOG` of the VK process.
    pub rust_log: String,
}

impl Default for VkOptions {
    fn default() -> Self {
        Self {
            poll_ms: 500,
            gc_grace_ms: 2000,
            restart_backoff_ms: 500,
            rust_log: "info,vk=debug".into(),
        }
    }
}

impl Vk {
    /// Starts a VK for a fresh node name, with the given emulators as providers (in order).
    pub async fn start(emulators: &[(&str, &Emulator)], opts: VkOptions) -> Self {
        let node = unique("vk-test");
        let dir = std::env::temp_dir().join(&node);
        std::fs::create_dir_all(&dir).unwrap();
        let mut providers = String::new();
        for (name, e) in emulators {
            providers.push_str(&format!(
                "- name: {name}\n  kind: {kind}\n  apiKeyEnv: TEST_PROVIDER_KEY\n  settings:\n    baseUrl: {url}\n    defaultGpuType: {gpu}\n",
                kind = e.kind,
                url = e.base_url(),
                gpu = e.default_gpu,
            ));
        }
        let metrics_port = free_port();
        let kubelet_port = free_port();
        let config = format!(
            "nodeName: {node}\nclusterId: test-cluster\nkubeletPort: {kubelet_port}\nmetricsAddr: 127.0.0.1:{metrics_port}\n\
             workers: 8\ntimings:\n  pollIntervalMs: {}\n  gcGraceMs: {}\n  leaseRenewMs: 2000\n  restartBackoffMs: {}\n  restartBackoffMaxMs: 5000\nproviders:\n{providers}",
            opts.poll_ms, opts.gc_grace_ms, opts.restart_backoff_ms
        );
        std::fs::write(dir.join("config.yaml"), &config).unwrap();
        let mut vk = Self {
            node,
            cluster_id: "test-cluster".into(),
            child: None,
            dir,
            config,
            rust_log: opts.rust_log,
        };
        vk.spawn();
        vk
    }

    pub fn metrics_url(&self) -> String {
        let port = self
            .config
            .lines()
            .find_map(|l| l.strip_prefix("metricsAddr: 127.0.0.1:"))
            .unwrap();
        format!("http://127.0.0.1:{port}/metrics")
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("vk.log"))
            .unwrap();
        let child = tokio::process::Command::new(vk_binary())
            .args(["run", "--config"])
            .arg(self.dir.join("config.yaml"))
            .env("TEST_PROVIDER_KEY", API_KEY)
            .env("RUST_LOG", &self.rust_log)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("vk binary starts");
        self.child = Some(child);
    }

    /// SIGKILL, no clean-up of any kind.
    pub async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.start_kill().unwrap();
            let _ = c.wait().await;
        }
    }

    /// SIGTERM and wait.
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the VK before restarting it");
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vk.log")).unwrap_or_default()
    }

    /// Reads one of the VK's own Prometheus counters.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(self.metrics_url())
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Deletes the node object this VK registered (best effort).
    pub async fn cleanup(&mut self, c: &Client) {
        self.stop().await;
        let _ = Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
            .delete(&self.node, &DeleteParams::default())
            .await;
    }
}

impl Drop for Vk {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- vk log tail ({}) ----", self.node);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A pod asking for GPUs that tolerates the virtual node's taint and selects it.
pub fn gpu_pod(name: &str, node: &str, gpus: u32, annotations: &[(&str, &str)]) -> Pod {
    let ann: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": ann, "labels": {"app": name}},
        "spec": pod_spec(node, gpus),
    }))
    .unwrap()
}

pub fn pod_spec(node: &str, gpus: u32) -> Value {
    json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "echo started; sleep 3600"],
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}},
        }],
    })
}

pub async fn pods_with_label(c: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

/// Events recorded for a pod (events.k8s.io/v1).
pub async fn events_for(c: &Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}
