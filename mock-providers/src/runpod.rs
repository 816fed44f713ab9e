//! RunPod REST v2 emulator (`https://api.runpod.io/v2`): pods, pod actions and pod logs, with
//! RFC 9457 problem errors and IETF `RateLimit` headers, as in runpod/docs
//! `api-reference-v2/openapi.json`.

mod account;
mod catalog;
mod create;
mod images;
mod logs;
mod pods;
mod registries;
mod render;
mod reply;
mod validate;

use account::*;
use create::*;
use logs::*;
use pods::*;
use render::*;
use reply::*;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::stream::{self, Stream};
use serde_json::{Value, json};

use crate::config::EmulatorConfig;
use crate::engine::gate::{Admission, Denied, RouteKind, WindowState, bearer};
use crate::engine::logs::{LogLine, LogSource};
use crate::engine::{Engine, Extra, Flavor, NewWorkload, Phase, StopReason, Workload};
use crate::inventory::AllocError;
pub use images::command_line;
pub use validate::{CreatePod, GpuRequest, Invalid, PodAction};

/// CUDA version every emulated host reports.
pub const CUDA_VERSION: &str = "12.8";
/// Data center assigned when the request names none.
/// What an emulated GPU pod gets per GPU besides the GPU: vCPUs and system RAM (GB). The real
/// figures vary by GPU type and are shown only in RunPod's console; a VK reading this emulator
/// is told them as an operator would be (the RunPod provider's `gpuPodResources`).
pub const VCPUS_PER_GPU: u64 = 8;
pub const RAM_GB_PER_GPU: u64 = 32;
pub const DEFAULT_DATA_CENTER: &str = "EMU-LOCAL-1";
/// The real API's human-readable capacity message (no machine-readable code exists).
pub const CAPACITY_DETAIL: &str = "There are no longer any instances available with the requested specifications. Please refresh and try again.";

/// CPU flavors (`GET /v2/catalog/cpus`) and their GB of RAM per vCPU: compute-optimised
/// (c), general purpose (g), memory-optimised (m), in the 3rd and 5th generations.
pub const CPU_FLAVORS: &[(&str, u64)] = &[
    ("cpu3c", 2),
    ("cpu3g", 4),
    ("cpu3m", 8),
    ("cpu5c", 2),
    ("cpu5g", 4),
    ("cpu5m", 8),
];

/// The account behind the API key: which GPU pools it may use and whether it can pay.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    /// GPU types whose pool this account cannot access: create answers 403 ("your account
    /// cannot access the requested pool", v2 `POST /v2/pods`).
    pub restricted_gpu_types: Vec<String>,
    /// The balance ran out: create answers 402 ("insufficient balance"); running pods with a
    /// network volume are stopped (EXITED) and the others terminated (gone), as RunPod does at
    /// $0 (runpod/docs `accounts-billing/billing.mdx`: "Pods with a network volume attached
    /// are stopped [...] Pods without a network volume are terminated").
    pub balance_exhausted: bool,
    /// Registry credentials (`/v2/registries`); not part of the admin view.
    #[serde(skip)]
    pub registries: Vec<registries::Credential>,
}

/// Shared state of the RunPod emulator.
#[derive(Clone, Debug)]
pub struct State {
    engine: Arc<Engine>,
}

impl State {
    /// A fresh emulator.
    pub fn new(config: EmulatorConfig) -> Self {
        Self {
            engine: Engine::new(Flavor::RunPod, config),
        }
    }

    /// The engine (for direct inspection in tests).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

/// Pod fields kept for rendering.
#[derive(Clone, Debug, PartialEq)]
pub struct PodExtra {
    /// `args`.
    pub args: String,
    /// Container disk GB.
    pub disk: u64,
    /// Ports.
    pub ports: Vec<String>,
    /// Registry credential id.
    pub registry: Option<String>,
    /// Cloud tier.
    pub cloud: String,
    /// Assigned data center.
    pub data_center_id: String,
    /// Total vCPUs.
    pub vcpu_count: u64,
    /// Total RAM GB.
    pub memory_gb: u64,
    /// Mounts as sent.
    pub mounts: Value,
    /// Global networking.
    pub global_networking: bool,
    /// CPU pods: the flavor id (no `gpu` block then).
    pub cpu_flavor: Option<String>,
}

impl PodExtra {
    fn defaults(gpu_count: u32) -> Self {
        let n = u64::from(gpu_count.max(1));
        Self {
            args: String::new(),
            disk: 20,
            ports: Vec::new(),
            registry: None,
            cloud: "SECURE".into(),
            data_center_id: DEFAULT_DATA_CENTER.into(),
            vcpu_count: VCPUS_PER_GPU * n,
            memory_gb: RAM_GB_PER_GPU * n,
            mounts: json!({}),
            global_networking: false,
            cpu_flavor: None,
        }
    }
}

/// RunPod `status` for a phase.
pub fn status_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Provisioning => "PROVISIONING",
        Phase::Starting => "STARTING",
        // Host outages are emulated for Vast only (`HostOutage`): RunPod's v2 `Pod` has no
        // host-down status.
        Phase::Running | Phase::Offline => "RUNNING",
        Phase::Exited | Phase::Stopped | Phase::Preempted => "EXITED",
        Phase::Failed => "ERROR",
    }
}

/// Actions allowed in a phase, as published in the pod's `actions`.
pub fn allowed_actions(phase: Phase) -> &'static [PodAction] {
    match phase {
        Phase::Provisioning | Phase::Starting => &[PodAction::Stop, PodAction::Terminate],
        Phase::Running | Phase::Offline => {
            &[PodAction::Stop, PodAction::Restart, PodAction::Terminate]
        }
        Phase::Exited | Phase::Stopped | Phase::Preempted | Phase::Failed => {
            &[PodAction::Start, PodAction::Terminate]
        }
    }
}

/// The emulator's routes plus the shared `/_admin` routes.
pub fn router(state: State) -> Router {
    let admin = crate::admin::router(state.engine.clone());
    Router::new()
        .route("/v2/pods", post(create_pod).get(list_pods))
        .route("/v2/pods/{id}", get(get_pod).delete(delete_pod))
        .route("/v2/pods/{id}/action", post(pod_action))
        .route("/v2/pods/{id}/logs", get(pod_logs))
        .route("/v2/catalog/gpus", get(catalog::list_gpu_types))
        .route(
            "/v2/registries",
            get(registries::list).post(registries::create),
        )
        .route(
            "/v2/registries/{id}",
            get(registries::get).delete(registries::delete),
        )
        .route("/_admin/runpod/account", get(get_account).put(put_account))
        .fallback(not_found_route)
        .with_state(state)
        .merge(admin)
}
