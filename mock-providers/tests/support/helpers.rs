//! Test helpers shared by the integration tests: start an emulator in-process, build a client,
//! poll until a condition holds.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mock_providers::{EmulatorConfig, ExecutionMode, GpuStock, runpod, spawn, vast};
use serde_json::Value;

pub const KEY: &str = "test-key";

pub struct Emu {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Emu {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Emu {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(KEY)
    }

    /// GET with query parameters (percent-encoded here: reqwest's `query` needs a feature).
    pub fn get_q(&self, path: &str, params: &[(&str, &str)]) -> reqwest::RequestBuilder {
        let qs: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        self.get(&format!("{path}?{}", qs.join("&")))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(self.url(path)).bearer_auth(KEY)
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.put(self.url(path)).bearer_auth(KEY)
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.delete(self.url(path)).bearer_auth(KEY)
    }

    /// Admin calls need no key.
    pub async fn admin_get(&self, path: &str) -> Value {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    pub async fn admin_post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn workloads(&self) -> Vec<Value> {
        match self.admin_get("/_admin/workloads").await {
            Value::Array(a) => a,
            other => panic!("workloads: {other}"),
        }
    }

    pub async fn workload(&self, id: &str) -> Option<Value> {
        self.workloads()
            .await
            .into_iter()
            .find(|w| w["id"].as_str() == Some(id))
    }

    pub async fn counters(&self) -> Value {
        self.admin_get("/_admin/counters").await
    }
}

pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub fn gpus() -> Vec<GpuStock> {
    vec![
        GpuStock::new("A100-80GB", 8, 1.89),
        GpuStock::new("RTX4090", 16, 0.69),
    ]
}

/// The Vast emulator's stock under Vast's exact `gpu_name`s (its search matches them exactly).
pub fn vast_gpus() -> Vec<GpuStock> {
    vec![
        GpuStock::new("A100 SXM4", 8, 1.89),
        GpuStock::new("RTX 4090", 16, 0.69),
    ]
}

pub fn vast_config(mode: ExecutionMode) -> EmulatorConfig {
    EmulatorConfig::new(KEY, vast_gpus()).with_mode(mode)
}

pub fn config(mode: ExecutionMode) -> EmulatorConfig {
    EmulatorConfig::new(KEY, gpus()).with_mode(mode)
}

pub async fn start_runpod(config: EmulatorConfig) -> Emu {
    let (addr, server) = spawn(runpod::router(runpod::State::new(config)))
        .await
        .unwrap();
    Emu {
        addr,
        client: client(),
        server,
    }
}

pub async fn start_vast(config: EmulatorConfig) -> Emu {
    let (addr, server) = spawn(vast::router(vast::State::new(config))).await.unwrap();
    Emu {
        addr,
        client: client(),
        server,
    }
}

/// Poll `f` every 20 ms until it yields `Some`, or panic after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
