//! RunPod REST v2 emulator (`https://api.runpod.io/v2`): pods, pod actions and pod logs, with
//! RFC 9457 problem errors and IETF `RateLimit` headers, as in runpod/docs
//! `api-reference-v2/openapi.json`.

mod catalog;
mod images;
mod validate;

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
        Phase::Running => "RUNNING",
        Phase::Exited | Phase::Stopped | Phase::Preempted => "EXITED",
        Phase::Failed => "ERROR",
    }
}

/// Actions allowed in a phase, as published in the pod's `actions`.
pub fn allowed_actions(phase: Phase) -> &'static [PodAction] {
    match phase {
        Phase::Provisioning | Phase::Starting => &[PodAction::Stop, PodAction::Terminate],
        Phase::Running => &[PodAction::Stop, PodAction::Restart, PodAction::Terminate],
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
        .route("/_admin/runpod/account", get(get_account).put(put_account))
        .fallback(not_found_route)
        .with_state(state)
        .merge(admin)
}

// ---- responses --------------------------------------------------------------------------

fn title(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Error")
}

/// An RFC 9457 problem response.
fn problem(status: StatusCode, detail: impl Into<String>, errors: Vec<String>) -> Response {
    let mut body = json!({
        "title": title(status),
        "status": status.as_u16(),
        "detail": detail.into(),
    });
    if !errors.is_empty() {
        body["errors"] = json!(errors);
    }
    problem_body(status, body)
}

fn problem_body(status: StatusCode, body: Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

/// `RateLimit` and `RateLimit-Policy`, one member per window: runpod/docs
/// `api-reference-v2/openapi.json`, `components.schemas.RateLimitHeader` ("one member per
/// window (`minute`, `hour`, `day`), each carrying the remaining request count `r` and
/// seconds until the window resets `t`", e.g. `"minute";r=0;t=12, "hour";r=2800;t=1812,
/// "day";r=49500;t=45012`) and `RateLimitPolicyHeader` (quota `q`, window length `w`, e.g.
/// `"minute";q=60;w=60, "hour";q=3000;w=3600, "day";q=50000;w=86400`), sent "on responses to
/// authenticated requests, not only on 429s".
fn rate_headers(headers: &mut HeaderMap, windows: &[WindowState]) {
    let state: Vec<String> = windows
        .iter()
        .map(|w| format!("\"{}\";r={};t={}", w.name, w.remaining, w.reset_s))
        .collect();
    let policy: Vec<String> = windows
        .iter()
        .map(|w| format!("\"{}\";q={};w={}", w.name, w.limit, w.width_s))
        .collect();
    if let Ok(v) = HeaderValue::from_str(&state.join(", ")) {
        headers.insert("ratelimit", v);
    }
    if let Ok(v) = HeaderValue::from_str(&policy.join(", ")) {
        headers.insert("ratelimit-policy", v);
    }
}

fn admitted(mut resp: Response, admission: &Admission) -> Response {
    if let Some(rate) = &admission.rate {
        rate_headers(resp.headers_mut(), &rate.windows);
    }
    resp
}

fn denied(d: Denied) -> Response {
    match d {
        Denied::Fault {
            status,
            body,
            retry_after_s,
        } => {
            let mut resp = match body {
                Some(body) => problem_body(status, body),
                None => problem(status, "injected fault", Vec::new()),
            };
            if let Some(s) = retry_after_s
                && let Ok(v) = HeaderValue::from_str(&s.to_string())
            {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        Denied::Unauthorized { missing } => {
            let detail = if missing {
                "missing bearer token"
            } else {
                "invalid bearer token"
            };
            let mut resp = problem(StatusCode::UNAUTHORIZED, detail, Vec::new());
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp
        }
        // `TooManyRequestsError` of the v2 spec: "the response identifies the window that was
        // exceeded and how long to wait", `Retry-After` integer seconds "per the exceeded
        // window", example detail "rate limit exceeded for the minute window".
        Denied::RateLimited {
            retry_after_s,
            window,
            windows,
        } => {
            let mut resp = problem(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate limit exceeded for the {window} window"),
                Vec::new(),
            );
            let headers = resp.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                headers.insert(header::RETRY_AFTER, v);
            }
            rate_headers(headers, &windows);
            resp
        }
        // RunPod documents no per-endpoint intervals; never configured for it.
        Denied::TooFrequent { .. } => problem(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests",
            Vec::new(),
        ),
    }
}

fn invalid(err: Invalid) -> Response {
    match err {
        Invalid::Json(detail) => problem(StatusCode::BAD_REQUEST, detail, Vec::new()),
        Invalid::Schema(errors) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Request validation failed.",
            errors,
        ),
        Invalid::Rule(detail) => problem(StatusCode::BAD_REQUEST, detail, Vec::new()),
    }
}

fn pod_not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "pod not found", Vec::new())
}

async fn not_found_route() -> Response {
    problem(StatusCode::NOT_FOUND, "resource not found", Vec::new())
}

// ---- rendering ----------------------------------------------------------------------------

fn ceil_percent(part: f64, whole: f64) -> u64 {
    if whole <= 0.0 || part <= 0.0 {
        return 0;
    }
    ((part * 100.0 / whole).ceil() as u64).min(100)
}

/// `runtime.ports` of a running pod: each `N/tcp` port published at a public port of the
/// emulator's host, where a real listener answers (see [`crate::serve`]); `http` ports go
/// through RunPod's proxy and have no direct mapping, so they are listed without one.
fn published_ports(engine: &Engine, w: &Workload, ports: &[String]) -> Vec<Value> {
    let parse = |p: &String, kind: &str| {
        let (n, k) = p.split_once('/')?;
        (k == kind).then(|| n.parse::<u16>().ok()).flatten()
    };
    let tcp: Vec<u16> = ports.iter().filter_map(|p| parse(p, "tcp")).collect();
    let host = crate::serve::workload_address(w.seq);
    let ip = engine.served.listed_address(&host);
    let mut out: Vec<Value> = engine
        .served
        .open(&w.id, &host, &tcp)
        .into_iter()
        .map(|(private, public)| json!({"private": private, "public": public, "type": "tcp", "ip": ip}))
        .collect();
    out.extend(
        ports
            .iter()
            .filter_map(|p| parse(p, "http"))
            .map(|private| json!({"private": private, "public": null, "type": "http", "ip": null})),
    );
    out
}

/// The v2 `Pod` object.
fn render_pod(engine: &Engine, w: &mut Workload, now: Instant) -> Value {
    let phase = engine.observe(w, now);
    let usage = engine.usage(w, phase, now);
    let extra = match &w.extra {
        Extra::RunPod(e) => (**e).clone(),
        _ => PodExtra::defaults(w.gpu_count),
    };
    let actions: Vec<&str> = allowed_actions(phase).iter().map(|a| a.as_str()).collect();
    let cost = if phase.is_active() {
        ((w.price_per_gpu_hour * f64::from(w.gpu_count)) * 10_000.0).round() / 10_000.0
    } else {
        0.0
    };
    let runtime = if phase == Phase::Running {
        let uptime = w
            .running_since
            .map(|t| jiff::Timestamp::now().duration_since(t).as_secs().max(0))
            .unwrap_or(0);
        json!({
            "uptime": uptime,
            "gpus": (0..w.gpu_count).map(|_| json!({"util": 0, "memoryUtil": 0})).collect::<Vec<_>>(),
            "cpu": {"util": ceil_percent(usage.cpu_millis as f64, extra.vcpu_count as f64 * 1000.0)},
            "memory": {"util": ceil_percent(usage.memory_bytes as f64, extra.memory_gb as f64 * 1024.0 * 1024.0 * 1024.0)},
            "ports": published_ports(engine, w, &extra.ports),
        })
    } else {
        engine.served.close(&w.id);
        Value::Null
    };
    // `startedAt` stays at the pod's start while RunPod restarts its container in place;
    // `runtime.uptime` ("seconds since the container started") falls back to zero.
    let started_at = if phase == Phase::Running {
        w.pod_started.or(w.running_since).map(crate::util::rfc3339)
    } else {
        None
    };
    let (gpu, cpu) = match &extra.cpu_flavor {
        Some(flavor) => (
            Value::Null,
            json!({"id": flavor, "vcpuCount": extra.vcpu_count, "memory": extra.memory_gb}),
        ),
        None => (
            // v2 `GpuConfig` is `{id, count}`: the vCPUs and RAM a GPU pod got are not
            // reported ("omitted from GPU pods", `Pod.cpu`), only their utilisation.
            json!({"id": w.gpu_type, "count": w.gpu_count}),
            Value::Null,
        ),
    };
    let mut pod = json!({
        "id": w.id,
        "name": w.name,
        "status": status_name(phase),
        "actions": actions,
        "image": w.image,
        "args": extra.args,
        "disk": extra.disk,
        "mounts": extra.mounts,
        "ports": extra.ports,
        "env": w.env,
        "registry": extra.registry,
        "cloud": extra.cloud,
        "dataCenterId": extra.data_center_id,
        "cudaVersion": CUDA_VERSION,
        "ssh": {
            "proxy": {
                "host": "ssh.emulator.invalid",
                "port": 22,
                "username": format!("{}-emulator", w.id),
                "command": format!("ssh {}-emulator@ssh.emulator.invalid", w.id),
            },
            "direct": Value::Null,
        },
        "template": Value::Null,
        "cost": cost,
        "locked": false,
        "globalNetworking": {"enabled": extra.global_networking},
        "runtime": runtime,
        "createdAt": crate::util::rfc3339(w.created_at),
        "startedAt": started_at,
    });
    // `gpu` is "present for GPU pods; omitted from CPU pods", `cpu` the other way round.
    if let Some(obj) = pod.as_object_mut() {
        if !gpu.is_null() {
            obj.insert("gpu".into(), gpu);
        }
        if !cpu.is_null() {
            obj.insert("cpu".into(), cpu);
        }
    }
    pod
}

fn pod_json(engine: &Engine, seq: u64) -> Option<Value> {
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let w = inner.workloads.get_mut(&seq)?;
    Some(render_pod(engine, w, now))
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

// ---- handlers -----------------------------------------------------------------------------

async fn create_pod(AxState(s): AxState<State>, headers: HeaderMap, body: Bytes) -> Response {
    let admission = match s.engine.gate(RouteKind::Create, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    admitted(create_inner(&s.engine, &body), &admission)
}

fn create_inner(engine: &Engine, body: &[u8]) -> Response {
    let req = match validate::parse_create(body) {
        Ok(r) => r,
        Err(e) => return invalid(e),
    };
    if req.template_id.is_some() {
        return problem(StatusCode::NOT_FOUND, "template not found", Vec::new());
    }
    // The create table of v2 `POST /v2/pods`: 402 insufficient balance ("stop; no candidate
    // will succeed"), 403 "your account cannot access the requested pool".
    {
        let inner = engine.lock();
        if inner.runpod.balance_exhausted {
            return problem(
                StatusCode::PAYMENT_REQUIRED,
                "insufficient balance",
                Vec::new(),
            );
        }
        if let Some(g) = &req.gpu
            && inner.runpod.restricted_gpu_types.contains(&g.id)
        {
            return problem(StatusCode::FORBIDDEN, "access denied", Vec::new());
        }
    }
    let command = command_line(req.image.as_deref().unwrap_or_default(), &req.args);
    let mut extra = PodExtra {
        args: req.args.clone(),
        disk: req.disk.unwrap_or(20),
        ports: req.ports,
        registry: req.registry,
        cloud: req.cloud,
        data_center_id: req
            .data_center_ids
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_DATA_CENTER.into()),
        vcpu_count: 0,
        memory_gb: 0,
        mounts: req.mounts.unwrap_or_else(|| json!({})),
        global_networking: req.global_networking,
        cpu_flavor: None,
    };
    let (gpu_type, gpu_count) = match req.gpu {
        Some(gpu) => {
            if let Err(resp) = check_gpu(engine, &gpu) {
                return resp;
            }
            let count = u64::from(gpu.count);
            // A GPU pod's vCPUs and RAM come with its GPUs (v2 has no field to ask for them):
            // the emulated machines give a fixed share per GPU.
            extra.vcpu_count = VCPUS_PER_GPU * count;
            extra.memory_gb = RAM_GB_PER_GPU * count;
            (gpu.id, gpu.count)
        }
        None => {
            let (flavor, vcpus, gb_per_vcpu) = match cpu_request(req.cpu.as_ref()) {
                Ok(c) => c,
                Err(resp) => return resp,
            };
            extra.vcpu_count = vcpus;
            extra.memory_gb = vcpus * gb_per_vcpu;
            extra.cpu_flavor = Some(flavor);
            (String::new(), 0)
        }
    };
    let new = NewWorkload {
        name: req.name,
        image: req.image.unwrap_or_default(),
        env: req.env,
        gpu_type,
        gpu_count,
        command,
        extra: Extra::RunPod(Box::new(extra)),
        ..NewWorkload::default()
    };
    let now = Instant::now();
    let seq = {
        let mut inner = engine.lock();
        match engine.create_locked(&mut inner, new, now) {
            Ok(seq) => {
                inner.gate.note_created();
                seq
            }
            Err(AllocError::NoCapacity { .. } | AllocError::UnknownType(_)) => {
                return problem(StatusCode::BAD_REQUEST, CAPACITY_DETAIL, Vec::new());
            }
        }
    };
    match pod_json(engine, seq) {
        Some(pod) => json_response(StatusCode::CREATED, pod),
        None => pod_not_found(),
    }
}

/// A GPU request the inventory can place: a known type, an acceptable CUDA version.
fn check_gpu(engine: &Engine, gpu: &GpuRequest) -> Result<(), Response> {
    if engine.lock().inventory.get(&gpu.id).is_none() {
        let msg = format!("unknown GPU type '{}'", gpu.id);
        return Err(problem(
            StatusCode::BAD_REQUEST,
            msg.clone(),
            vec![format!("$.gpu.id: {msg}")],
        ));
    }
    let cuda_ok = (gpu.allowed_cuda_versions.is_empty()
        || gpu.allowed_cuda_versions.iter().any(|v| v == CUDA_VERSION))
        && gpu
            .min_cuda_version
            .as_deref()
            .is_none_or(|floor| validate::cuda_at_least(CUDA_VERSION, floor));
    if !cuda_ok {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            CAPACITY_DETAIL,
            Vec::new(),
        ));
    }
    Ok(())
}

/// The CPU pod a schema-valid `cpu` block asks for: flavor, vCPUs and GB per vCPU. The
/// handler rules of `BaseCpuConfig`: a known flavor and a power-of-two `vcpuCount` (400).
fn cpu_request(cpu: Option<&Value>) -> Result<(String, u64, u64), Response> {
    let cpu = cpu.ok_or_else(|| {
        problem(
            StatusCode::BAD_REQUEST,
            "exactly one of gpu or cpu must be set",
            Vec::new(),
        )
    })?;
    let id = cpu.get("id").and_then(Value::as_str).unwrap_or_default();
    let vcpus = cpu.get("vcpuCount").and_then(Value::as_u64).unwrap_or(0);
    let Some((_, gb)) = CPU_FLAVORS.iter().find(|(f, _)| *f == id) else {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            format!("unknown CPU flavor '{id}'"),
            Vec::new(),
        ));
    };
    if vcpus < 2 || !vcpus.is_power_of_two() || vcpus > 64 {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            format!(
                "vcpuCount {vcpus} is not valid for CPU flavor {id}: a power of two from 2 to 64"
            ),
            Vec::new(),
        ));
    }
    Ok((id.to_owned(), vcpus, *gb))
}

async fn list_pods(AxState(s): AxState<State>, headers: HeaderMap) -> Response {
    let admission = match s.engine.gate(RouteKind::List, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let engine = &s.engine;
    let now = Instant::now();
    let pods: Vec<Value> = {
        let mut inner = engine.lock();
        engine.settle(&mut inner, now);
        // Listeners of workloads that are gone close with them.
        engine
            .served
            .retain(&inner.workloads.values().map(|w| w.id.as_str()).collect());
        let mask = inner.gate.list_mask();
        inner
            .workloads
            .values_mut()
            .filter(|w| !mask.hides(&w.id))
            .map(|w| render_pod(engine, w, now))
            .collect()
    };
    admitted(
        json_response(StatusCode::OK, json!({ "pods": pods })),
        &admission,
    )
}

async fn get_pod(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Get, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let seq = s.engine.lock().seq_of(&id);
    let resp = match seq.and_then(|seq| pod_json(&s.engine, seq)) {
        Some(pod) => json_response(StatusCode::OK, pod),
        None => pod_not_found(),
    };
    admitted(resp, &admission)
}

async fn delete_pod(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Delete, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let removed = {
        let mut inner = s.engine.lock();
        inner
            .seq_of(&id)
            .and_then(|seq| s.engine.remove_locked(&mut inner, seq))
    };
    let resp = match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => pod_not_found(),
    };
    admitted(resp, &admission)
}

async fn pod_action(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Action, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    admitted(action_inner(&s.engine, &id, &body), &admission)
}

fn action_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    let action = match validate::parse_action(body) {
        Ok(a) => a,
        Err(e) => return invalid(e),
    };
    let now = Instant::now();
    let seq = {
        let mut inner = engine.lock();
        engine.settle(&mut inner, now);
        let Some(seq) = inner.seq_of(id) else {
            return pod_not_found();
        };
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return pod_not_found();
        };
        let phase = engine.observe(w, now);
        if !allowed_actions(phase).contains(&action) {
            return problem(
                StatusCode::CONFLICT,
                format!(
                    "action '{}' is not valid for a pod in status {}",
                    action.as_str(),
                    status_name(phase)
                ),
                Vec::new(),
            );
        }
        match action {
            PodAction::Terminate => {
                engine.remove_locked(&mut inner, seq);
                return StatusCode::NO_CONTENT.into_response();
            }
            PodAction::Stop => engine.stop_locked(&mut inner, seq, StopReason::User),
            PodAction::Restart => engine.restart_locked(&mut inner, seq, now),
            PodAction::Start => {
                if engine.start_locked(&mut inner, seq, now).is_err() {
                    return problem(StatusCode::BAD_REQUEST, CAPACITY_DETAIL, Vec::new());
                }
            }
        }
        seq
    };
    match pod_json(engine, seq) {
        Some(pod) => json_response(StatusCode::OK, pod),
        None => pod_not_found(),
    }
}

// ---- account (admin) ----------------------------------------------------------------------

async fn get_account(AxState(s): AxState<State>) -> Response {
    let account = s.engine.lock().runpod.clone();
    json_response(StatusCode::OK, json!(account))
}

/// Sets the account; an exhausted balance ends every active pod as RunPod does at $0: stopped
/// (EXITED) when it has a network volume, terminated (removed) otherwise.
async fn put_account(AxState(s): AxState<State>, body: Bytes) -> Response {
    let account: Account = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return problem(StatusCode::BAD_REQUEST, e.to_string(), Vec::new()),
    };
    let now = Instant::now();
    let mut inner = s.engine.lock();
    s.engine.settle(&mut inner, now);
    if account.balance_exhausted {
        let active: Vec<u64> = inner
            .workloads
            .values()
            .filter(|w| s.engine.phase(w, now).is_active())
            .map(|w| w.seq)
            .collect();
        for seq in active {
            let Some(w) = inner.workloads.get_mut(&seq) else {
                continue;
            };
            let network_volume = match &w.extra {
                Extra::RunPod(x) => x.mounts["network"]
                    .as_array()
                    .is_some_and(|m| !m.is_empty()),
                _ => false,
            };
            if network_volume {
                w.logs.push(
                    jiff::Timestamp::now(),
                    LogSource::System,
                    "account balance reached $0: stopping the pod (its network volume is kept)",
                );
                s.engine.stop_locked(&mut inner, seq, StopReason::User);
            } else {
                s.engine.remove_locked(&mut inner, seq);
            }
        }
    }
    inner.runpod = account.clone();
    json_response(StatusCode::OK, json!(account))
}

// ---- logs ---------------------------------------------------------------------------------

struct LogQuery {
    source: Option<LogSource>,
    tail: usize,
    since: Option<jiff::Timestamp>,
    after_seq: u64,
}

fn parse_log_query(
    q: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<LogQuery, Vec<String>> {
    let mut errors = Vec::new();
    let source = match q.get("source").map(String::as_str) {
        None => None,
        Some("container") => Some(LogSource::Container),
        Some("system") => Some(LogSource::System),
        Some(_) => {
            errors.push("source: value must be one of 'container', 'system'".to_owned());
            None
        }
    };
    let tail = match q.get("tail") {
        None => 100,
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n <= 5000 => n,
            Ok(_) => {
                errors.push("tail: must be <= 5000".to_owned());
                0
            }
            Err(_) => {
                errors.push("tail: expected integer".to_owned());
                0
            }
        },
    };
    let since = match q.get("since") {
        None => None,
        Some(s) => match s.parse::<jiff::Timestamp>() {
            Ok(ts) => Some(ts),
            Err(_) => {
                errors.push("since: expected an RFC 3339 date-time".to_owned());
                None
            }
        },
    };
    // Our event ids are `<ts>/<seq>`; resume after that sequence number.
    let after_seq = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit_once('/'))
        .and_then(|(_, seq)| seq.parse::<u64>().ok())
        .unwrap_or(0);
    if errors.is_empty() {
        Ok(LogQuery {
            source,
            tail,
            since,
            after_seq,
        })
    } else {
        Err(errors)
    }
}

fn log_event(line: &LogLine) -> Event {
    let ts = crate::util::rfc3339(line.ts);
    let data = json!({"ts": ts, "source": line.source, "line": line.line});
    Event::default()
        .id(format!("{ts}/{:012}", line.seq))
        .data(data.to_string())
}

async fn pod_logs(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Logs, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let query = match parse_log_query(&q, &headers) {
        Ok(q) => q,
        Err(errors) => {
            return admitted(
                problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Request validation failed.",
                    errors,
                ),
                &admission,
            );
        }
    };
    // Backfill: after Last-Event-ID, else after `since`, else the last `tail` lines.
    let Some((lines, _)) = s.engine.logs(&id, query.after_seq, query.source, None) else {
        return admitted(pod_not_found(), &admission);
    };
    let backfill: Vec<LogLine> = if query.after_seq > 0 {
        lines
    } else if let Some(since) = query.since {
        lines.into_iter().filter(|l| l.ts > since).collect()
    } else {
        let skip = lines.len().saturating_sub(query.tail);
        lines.into_iter().skip(skip).collect()
    };
    let last = backfill
        .last()
        .map(|l| l.seq)
        .unwrap_or_else(|| last_seq(&s.engine, &id));
    let stream = follow(s.engine.clone(), id, backfill, last, query.source);
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    admitted(resp, &admission)
}

fn last_seq(engine: &Engine, id: &str) -> u64 {
    let inner = engine.lock();
    inner
        .seq_of(id)
        .and_then(|seq| inner.workloads.get(&seq))
        .map(|w| w.logs.last_seq())
        .unwrap_or(0)
}

/// Backfill, then new lines while the pod is active; the stream ends when the pod stops or
/// disappears.
fn follow(
    engine: Arc<Engine>,
    id: String,
    backfill: Vec<LogLine>,
    after: u64,
    source: Option<LogSource>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct St {
        engine: Arc<Engine>,
        id: String,
        pending: std::collections::VecDeque<LogLine>,
        after: u64,
        source: Option<LogSource>,
        done: bool,
    }
    let st = St {
        engine,
        id,
        pending: backfill.into(),
        after,
        source,
        done: false,
    };
    stream::unfold(st, |mut st| async move {
        loop {
            if let Some(line) = st.pending.pop_front() {
                return Some((Ok(log_event(&line)), st));
            }
            if st.done {
                return None;
            }
            match st.engine.logs(&st.id, st.after, st.source, None) {
                None => return None,
                Some((lines, phase)) => {
                    if let Some(last) = lines.last() {
                        st.after = last.seq;
                    }
                    st.pending.extend(lines);
                    if !phase.is_active() {
                        st.done = true;
                    } else if st.pending.is_empty() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
    })
}
