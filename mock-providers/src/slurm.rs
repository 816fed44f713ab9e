//! slurmrestd emulator: the job endpoints of the `openapi/v0.0.38` plugin (Slurm 22.05, what
//! Debian ships) and of data_parser `v0.0.41` (Slurm 24.05 to 25.05), with JWT header auth,
//! Slurm's error numbers, and the shared `/_admin` API plus Slurm-specific admin actions
//! (node failure, time limit, requeue, OOM, suspend).
//!
//! Behaviour copied from a real 22.05.8 (`scripts/slurm/up`): missing auth headers answer 401
//! `Authentication failure` in plain text; a wrong token answers 500 with error -1
//! (v0.0.38); an unknown job 500 with error 2017; an impossible GPU count 500 with 2014 *and*
//! a FAILED job with reason BadConstraints; a body that is not JSON 400 `Unable to parse
//! query.`; deleting a finished job 200. v0.0.41 shapes follow the generated OpenAPI
//! specification; its answer to a wrong token (500, error 1007) is assumed.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mock_providers::{ExecutionMode, slurm, spawn};
//! let cfg = slurm::SlurmConfig::new("jwt-token", "vkslurm")
//!     .with_mode(ExecutionMode::process());
//! let (addr, _server) = spawn(slurm::router(slurm::State::new(cfg))).await?;
//! // base URL: format!("http://{addr}"), paths /slurm/v0.0.38/... and /slurm/v0.0.41/...
//! # let _ = addr; Ok(()) }
//! ```

mod admin;
pub mod jobs;
mod nodes;
mod process;
mod query;
mod render;
mod reply;
mod strict;
mod submit;

use query::*;
pub use render::render;
use render::*;
use reply::*;
use submit::*;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::ExecutionMode;
use crate::engine::gate::{Denied, GateState, RouteKind, same_secret};
use jobs::{Cluster, Job, JobState, Jobs, NewJob, SlurmErr};

/// An OpenAPI plugin version the emulator serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `openapi/v0.0.38`.
    V0038,
    /// data_parser `v0.0.41`.
    V0041,
}

impl Dialect {
    /// Parses `v0.0.38` / `v0.0.41`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "v0.0.38" => Some(Self::V0038),
            "v0.0.41" => Some(Self::V0041),
            _ => None,
        }
    }

    /// The URL segment.
    pub fn version(self) -> &'static str {
        match self {
            Self::V0038 => "v0.0.38",
            Self::V0041 => "v0.0.41",
        }
    }
}

/// Everything the Slurm emulator needs to start.
#[derive(Clone)]
pub struct SlurmConfig {
    /// The only JWT accepted (`X-SLURM-USER-TOKEN`).
    pub token: String,
    /// The user the token belongs to (`X-SLURM-USER-NAME`); jobs run as this user.
    pub user: String,
    /// Served plugin versions.
    pub dialects: Vec<Dialect>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Partitions; the first is the default.
    pub partitions: Vec<String>,
    /// Simulated (PENDING for `provision_ms`, CONFIGURING for `start_ms`, RUNNING for
    /// `run_ms` then COMPLETED) or process mode (the batch script runs with bash).
    pub mode: ExecutionMode,
}

impl std::fmt::Debug for SlurmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmConfig")
            .field("token", &"<redacted>")
            .field("user", &self.user)
            .field("dialects", &self.dialects)
            .field("nodes", &self.nodes)
            .field("gpus_per_node", &self.gpus_per_node)
            .field("partitions", &self.partitions)
            .field("mode", &self.mode)
            .finish()
    }
}

impl SlurmConfig {
    /// Both dialects, 4 nodes with 8 GPUs, partition `debug`, simulated with 1 s pending
    /// and 1 s configuring.
    pub fn new(token: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            user: user.into(),
            dialects: vec![Dialect::V0038, Dialect::V0041],
            nodes: 4,
            gpus_per_node: 8,
            partitions: vec!["debug".into()],
            mode: ExecutionMode::default(),
        }
    }

    pub fn with_mode(mut self, mode: ExecutionMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_cluster(mut self, nodes: u32, gpus_per_node: u32) -> Self {
        self.nodes = nodes;
        self.gpus_per_node = gpus_per_node;
        self
    }
}

/// The emulator: jobs, counters and faults behind one lock.
#[derive(Debug)]
pub struct Emulator {
    cfg: SlurmConfig,
    weak: Weak<Emulator>,
    inner: Mutex<Inner>,
}

/// Mutable state.
#[derive(Debug)]
pub struct Inner {
    pub jobs: Jobs,
    pub gate: GateState,
    /// What the node records list as every node's address instead of its own (`POST
    /// /_admin/addresses`).
    pub listed: Option<String>,
}

impl Emulator {
    fn new(cfg: SlurmConfig) -> Arc<Self> {
        let cluster = Cluster {
            nodes: cfg.nodes,
            gpus_per_node: cfg.gpus_per_node,
            partitions: cfg.partitions.clone(),
        };
        let jobs = Jobs::new(cluster, cfg.mode.clone());
        Arc::new_cyclic(|weak| Self {
            cfg,
            weak: weak.clone(),
            inner: Mutex::new(Inner {
                jobs,
                gate: GateState::default(),
                listed: None,
            }),
        })
    }

    /// Locks the state (a poisoned lock is recovered).
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Advances the job table and starts due processes; call with the lock held.
    fn settle(&self, inner: &mut Inner) {
        for launch in inner.jobs.settle(Instant::now()) {
            process::spawn(self.weak.clone(), launch);
        }
    }

    fn proc_started(
        &self,
        id: u32,
        generation: u64,
        pid: Option<u32>,
        kill: tokio::sync::oneshot::Sender<()>,
    ) -> bool {
        self.lock().jobs.proc_started(id, generation, pid, kill)
    }

    fn proc_exited(&self, id: u32, generation: u64, raw: i64) {
        let mut inner = self.lock();
        inner.jobs.proc_exited(id, generation, raw, Instant::now());
        self.settle(&mut inner);
    }

    /// Every job, settled (for tests and the admin API).
    pub fn snapshot(&self) -> Vec<Value> {
        let mut inner = self.lock();
        self.settle(&mut inner);
        let listed = inner.listed.clone();
        inner
            .jobs
            .jobs
            .values()
            .map(|j| {
                let mut v = admin::render(j);
                // Where the job runs, as the node records list it.
                v["address"] = json!(
                    j.node
                        .filter(|_| j.state.holds_node())
                        .map(|n| nodes::address(listed.as_deref(), n as u32))
                );
                v
            })
            .collect()
    }

    pub fn config(&self) -> &SlurmConfig {
        &self.cfg
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        inner.jobs.reset();
    }
}

/// Shared state of the router.
#[derive(Clone, Debug)]
pub struct State {
    emulator: Arc<Emulator>,
}

impl State {
    pub fn new(cfg: SlurmConfig) -> Self {
        Self {
            emulator: Emulator::new(cfg),
        }
    }

    pub fn emulator(&self) -> &Arc<Emulator> {
        &self.emulator
    }
}

/// The slurmrestd routes plus `/_admin`.
pub fn router(state: State) -> Router {
    let admin = admin::router(state.emulator.clone());
    Router::new()
        .route("/slurm/{version}/job/submit", post(submit))
        .route("/slurm/{version}/jobs", get(list))
        .route("/slurm/{version}/jobs/", get(list))
        .route("/slurm/{version}/job/{id}", get(get_job).delete(cancel))
        .route("/slurm/{version}/nodes", get(nodes::list))
        .route("/slurm/{version}/nodes/", get(nodes::list))
        .route("/openapi/v3", get(openapi))
        .fallback(unknown_url)
        .with_state(state)
        .merge(admin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_specs_parse() {
        assert_eq!(parse_gpus(Dialect::V0038, "2"), Some(2));
        assert_eq!(parse_gpus(Dialect::V0038, "a100:4"), Some(4));
        assert_eq!(parse_gpus(Dialect::V0041, "gres/gpu:2"), Some(2));
        assert_eq!(parse_gpus(Dialect::V0041, "gres/gpu:a100:3"), Some(3));
        assert_eq!(parse_gpus(Dialect::V0041, "gres:gpu:1"), Some(1));
        assert_eq!(parse_gpus(Dialect::V0041, "2"), None);
        assert_eq!(parse_gpus(Dialect::V0038, "many"), None);
    }
}
