//! A slurmrestd emulator on a local port for the tests, with the JWT headers of its user.

#![allow(dead_code)]

use mock_providers::config::ExecutionMode;
use mock_providers::slurm::{self, SlurmConfig};
use serde_json::Value;

pub const TOKEN: &str = "jwt-test-token";
pub const USER: &str = "vkslurm";

pub struct Emu {
    pub base: String,
    pub client: reqwest::Client,
    pub state: slurm::State,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Emu {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub async fn start(cfg: SlurmConfig) -> Emu {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = slurm::State::new(cfg);
    let (addr, server) = mock_providers::spawn(slurm::router(state.clone()))
        .await
        .unwrap();
    Emu {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        state,
        server,
    }
}

pub fn instant() -> SlurmConfig {
    SlurmConfig::new(TOKEN, USER)
        .with_mode(ExecutionMode::simulated(0, 0, None))
        .with_cluster(1, 2)
}

impl Emu {
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("X-SLURM-USER-NAME", USER)
            .header("X-SLURM-USER-TOKEN", TOKEN)
    }

    pub async fn submit(&self, v: &str, body: Value) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::POST, &format!("/slurm/{v}/job/submit"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn jobs(&self, v: &str) -> Vec<Value> {
        let r = self
            .req(reqwest::Method::GET, &format!("/slurm/{v}/jobs/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        body["jobs"].as_array().unwrap().clone()
    }

    pub async fn job(&self, v: &str, id: u64) -> Value {
        self.jobs(v)
            .await
            .into_iter()
            .find(|j| j["job_id"] == id)
            .unwrap()
    }

    pub async fn admin(&self, path: &str, body: Value) -> u16 {
        self.client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}
