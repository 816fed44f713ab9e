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

// ---- responses ----------------------------------------------------------------------------

fn meta(dialect: Dialect) -> Value {
    match dialect {
        Dialect::V0038 => json!({
            "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
            "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}
        }),
        Dialect::V0041 => json!({
            "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                       "data_parser": "data_parser/v0.0.41", "accounting_storage": ""},
            "client": {"source": "[localhost]", "user": "", "group": ""},
            "command": [],
            "slurm": {"version": {"major": "24", "micro": "0", "minor": "05"},
                      "release": "24.05.0", "cluster": "emulator"}
        }),
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// An `errors[]` answer. 22.05 spells the number `error_code` in submission answers and
/// `error_number` elsewhere.
fn slurm_error(dialect: Dialect, err: &SlurmErr, source: &str, submit: bool) -> Response {
    let entry = if dialect == Dialect::V0038 && submit {
        json!({"error_code": err.number, "error": err.message})
    } else {
        json!({"description": err.description, "error_number": err.number,
               "error": err.message, "source": source})
    };
    let mut body = json!({"meta": meta(dialect), "errors": [entry]});
    if dialect == Dialect::V0041 {
        body["warnings"] = json!([]);
    }
    json_response(StatusCode::INTERNAL_SERVER_ERROR, body)
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut resp = (status, text).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

async fn unknown_url() -> Response {
    plain(StatusCode::NOT_FOUND, "Unable find requested URL")
}

/// Counters, faults and JWT headers; `Err` is the answer to send instead.
async fn admit(
    emu: &Emulator,
    version: &str,
    kind: RouteKind,
    headers: &HeaderMap,
) -> Result<Dialect, Response> {
    let dialect = Dialect::parse(version)
        .filter(|d| emu.cfg.dialects.contains(d))
        .ok_or_else(|| plain(StatusCode::NOT_FOUND, "Unable find requested URL"))?;
    let (latency, fault) = emu.lock().gate.observe(kind);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(Denied::Fault {
        status,
        body,
        retry_after_s,
    }) = fault
    {
        let body = body.unwrap_or_else(|| {
            json!({"meta": meta(dialect), "errors": [{"description": "injected fault",
                "error_number": 1800, "error": "Unable to contact slurm controller (connect failure)",
                "source": "emulator"}]})
        });
        let mut resp = json_response(status, body);
        if let Some(s) = retry_after_s
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return Err(resp);
    }
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(user), Some(token)) = (value("x-slurm-user-name"), value("x-slurm-user-token"))
    else {
        return Err(plain(StatusCode::UNAUTHORIZED, "Authentication failure"));
    };
    if user != emu.cfg.user || !same_secret(token, &emu.cfg.token) {
        // slurmctld drops the RPC; slurmrestd reports what it got back.
        let (number, error) = match dialect {
            Dialect::V0038 => (-1, "Unspecified error"),
            Dialect::V0041 => (1007, "Protocol authentication error"),
        };
        let err = SlurmErr::new(number, error, "Failed while processing the request");
        return Err(slurm_error(dialect, &err, "slurmctld", false));
    }
    Ok(dialect)
}

// ---- handlers -------------------------------------------------------------------------------

/// `GET /openapi/v3`: the paths of the dialects served (what an adapter detects its dialect
/// from; a real slurmrestd lists every route with its schemas). Needs the JWT headers, as a
/// real 24.11 does.
async fn openapi(AxState(s): AxState<State>, headers: HeaderMap) -> Response {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let emu = &s.emulator;
    match (value("x-slurm-user-name"), value("x-slurm-user-token")) {
        (Some(user), Some(token)) if user == emu.cfg.user && same_secret(token, &emu.cfg.token) => {
        }
        _ => return plain(StatusCode::UNAUTHORIZED, "Authentication failure"),
    }
    let mut paths = serde_json::Map::new();
    for d in &emu.cfg.dialects {
        for p in ["job/submit", "jobs/", "job/{job_id}"] {
            paths.insert(format!("/slurm/{}/{p}", d.version()), json!({}));
        }
    }
    json_response(
        StatusCode::OK,
        json!({"openapi": "3.0.2", "info": {"title": "Slurm Rest API (gpu-vk emulator)"},
               "paths": paths}),
    )
}

async fn submit(
    AxState(s): AxState<State>,
    Path(version): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let emu = &s.emulator;
    let dialect = match admit(emu, &version, RouteKind::Create, &headers).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return plain(StatusCode::BAD_REQUEST, "Unable to parse query.");
    };
    let spec = match parse_submission(dialect, &value) {
        Ok(spec) => spec,
        Err(e) => return slurm_error(dialect, &e, "slurm_submit_batch_job()", true),
    };
    let mut inner = emu.lock();
    let now = Instant::now();
    let result = inner.jobs.submit(&emu.cfg.user, spec, now);
    if result.is_ok() {
        inner.gate.note_created();
    }
    emu.settle(&mut inner);
    match result {
        Ok(id) => match dialect {
            Dialect::V0038 => json_response(
                StatusCode::OK,
                json!({"meta": meta(dialect), "errors": [], "job_id": id, "step_id": "BATCH",
                       "job_submit_user_msg": ""}),
            ),
            Dialect::V0041 => json_response(
                StatusCode::OK,
                json!({"job_id": id, "step_id": "batch",
                       "result": {"job_id": id, "step_id": "batch", "error_code": 0,
                                  "error": "No error", "job_submit_user_msg": ""},
                       "job_submit_user_msg": "", "meta": meta(dialect), "errors": [],
                       "warnings": []}),
            ),
        },
        Err(e) => slurm_error(dialect, &e, "slurm_submit_batch_job()", true),
    }
}

/// Reads a submission of either dialect into a job.
fn parse_submission(dialect: Dialect, v: &Value) -> Result<NewJob, SlurmErr> {
    let job = v.get("job").cloned().unwrap_or(Value::Null);
    let s = |k: &str| job.get(k).and_then(Value::as_str).map(str::to_owned);
    let script = match dialect {
        Dialect::V0038 => v.get("script").and_then(Value::as_str),
        Dialect::V0041 => job
            .get("script")
            .and_then(Value::as_str)
            .or_else(|| v.get("script").and_then(Value::as_str)),
    }
    .map(str::to_owned)
    .filter(|s| !s.is_empty())
    .ok_or_else(|| SlurmErr::new(2009, "Batch script is empty", "script is required"))?;
    // The job's environment, which the batch script runs in (process mode passes it, and only
    // it, to bash): v0.0.38 `job.environment` is an object, the data_parser's
    // `job_desc_msg.environment` (v0.0.40 on) an array of `NAME=value` ("Environment variables
    // to be set for the job", `src/plugins/data_parser/v0.0.41/parsers.c` in SchedMD/slurm),
    // split at the first `=` as slurmd's env handling does, so a value may hold `=`.
    let environment: BTreeMap<String, String> = match job.get("environment") {
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        _ => BTreeMap::new(),
    };
    if dialect == Dialect::V0038 && environment.is_empty() {
        return Err(SlurmErr::new(
            jobs::E_ENVIRONMENT_MISSING,
            "environment must be set",
            "",
        ));
    }
    let gres = match dialect {
        Dialect::V0038 => s("gpus_per_node"),
        Dialect::V0041 => s("tres_per_node"),
    };
    let gpus = match gres {
        None => 0,
        Some(g) => parse_gpus(dialect, &g).ok_or_else(|| {
            SlurmErr::new(
                jobs::E_INVALID_GRES,
                "Invalid generic resource (gres) specification",
                g.clone(),
            )
        })?,
    };
    let number = |k: &str| -> Option<u64> {
        match job.get(k) {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::Object(o)) if o.get("set").and_then(Value::as_bool) != Some(false) => {
                o.get("number").and_then(Value::as_u64)
            }
            _ => None,
        }
    };
    Ok(NewJob {
        name: s("name").unwrap_or_else(|| "sbatch".into()),
        comment: s("comment").unwrap_or_default(),
        script,
        environment,
        cwd: s("current_working_directory").unwrap_or_else(|| "/tmp".into()),
        standard_output: s("standard_output"),
        partition: s("partition"),
        account: s("account"),
        qos: s("qos"),
        gpus,
        cpus: number("cpus_per_task")
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(1),
        time_limit_minutes: number("time_limit").and_then(|t| u32::try_from(t).ok()),
        requeue: job.get("requeue").and_then(Value::as_bool).unwrap_or(true),
        already_running: false,
    })
}

/// `2`, `a100:2` (v0.0.38 `gpus_per_node`); `gres/gpu:2`, `gres/gpu:a100:2`, `gres:gpu:2`
/// (v0.0.41 `tres_per_node`).
fn parse_gpus(dialect: Dialect, spec: &str) -> Option<u32> {
    let rest = match dialect {
        Dialect::V0038 => spec.trim(),
        Dialect::V0041 => spec
            .trim()
            .strip_prefix("gres/gpu")
            .or_else(|| spec.trim().strip_prefix("gres:gpu"))?
            .strip_prefix(':')?,
    };
    rest.rsplit(':').next()?.parse().ok()
}

async fn list(
    AxState(s): AxState<State>,
    Path(version): Path<String>,
    headers: HeaderMap,
) -> Response {
    let emu = &s.emulator;
    let dialect = match admit(emu, &version, RouteKind::List, &headers).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let mut inner = emu.lock();
    emu.settle(&mut inner);
    let mask = inner.gate.list_mask();
    let jobs: Vec<Value> = inner
        .jobs
        .jobs
        .values()
        .filter(|j| !mask.hides(&j.id.to_string()))
        .map(|j| render(dialect, j))
        .collect();
    json_response(StatusCode::OK, jobs_answer(dialect, jobs))
}

fn jobs_answer(dialect: Dialect, jobs: Vec<Value>) -> Value {
    match dialect {
        Dialect::V0038 => json!({"meta": meta(dialect), "errors": [], "jobs": jobs}),
        Dialect::V0041 => {
            let now = jiff::Timestamp::now().as_second();
            json!({"jobs": jobs, "last_backfill": no_val(now), "last_update": no_val(now),
                   "meta": meta(dialect), "errors": [], "warnings": []})
        }
    }
}

async fn get_job(
    AxState(s): AxState<State>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let emu = &s.emulator;
    let dialect = match admit(emu, &version, RouteKind::Get, &headers).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let mut inner = emu.lock();
    emu.settle(&mut inner);
    match id.parse::<u32>().ok().and_then(|n| inner.jobs.jobs.get(&n)) {
        Some(j) => json_response(
            StatusCode::OK,
            jobs_answer(dialect, vec![render(dialect, j)]),
        ),
        None => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            unknown_job_body(dialect, &id),
        ),
    }
}

/// 22.05 answers an unknown job id with the error *and* an empty `jobs` list.
fn unknown_job_body(dialect: Dialect, id: &str) -> Value {
    let err = SlurmErr::invalid_job(id, "Unable to find ");
    json!({"meta": meta(dialect), "errors": [{"description": err.description,
        "error_number": err.number, "error": err.message, "source": "slurm_load_job"}], "jobs": []})
}

#[derive(Deserialize)]
struct CancelQuery {
    #[serde(default)]
    signal: Option<String>,
}

async fn cancel(
    AxState(s): AxState<State>,
    Path((version, id)): Path<(String, String)>,
    Query(q): Query<CancelQuery>,
    headers: HeaderMap,
) -> Response {
    let emu = &s.emulator;
    let dialect = match admit(emu, &version, RouteKind::Delete, &headers).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let signal = q.signal.unwrap_or_else(|| "KILL".into());
    let sig_name = signal.trim().trim_start_matches("SIG").to_ascii_uppercase();
    let Some(job_id) = id.parse::<u32>().ok() else {
        let err = SlurmErr::new(
            2140,
            "Invalid job id: non-numeric",
            format!("Unable to parse job id {id}"),
        );
        return slurm_error(dialect, &err, "slurm_kill_job", false);
    };
    let mut inner = emu.lock();
    emu.settle(&mut inner);
    let result = if matches!(
        sig_name.as_str(),
        "KILL" | "9" | "TERM" | "15" | "INT" | "2"
    ) {
        inner.jobs.cancel(job_id, Instant::now())
    } else if inner.jobs.jobs.contains_key(&job_id) {
        Ok(())
    } else {
        Err(SlurmErr::invalid_job(&id, "unable to signal "))
    };
    emu.settle(&mut inner);
    match result {
        Ok(()) => {
            let mut body = json!({"meta": meta(dialect), "errors": []});
            if dialect == Dialect::V0041 {
                body["warnings"] = json!([]);
            }
            json_response(StatusCode::OK, body)
        }
        Err(mut e) => {
            e.description = format!(
                "unable to kill JobId={id} with signal {}: {}",
                if sig_name == "KILL" { "9" } else { &sig_name },
                e.message
            );
            slurm_error(dialect, &e, "slurm_kill_job", false)
        }
    }
}

// ---- rendering ------------------------------------------------------------------------------

fn no_val(n: i64) -> Value {
    json!({"set": true, "infinite": false, "number": n})
}

fn unset() -> Value {
    json!({"set": false, "infinite": false, "number": 0})
}

/// One job as the dialect lists it.
pub fn render(dialect: Dialect, j: &Job) -> Value {
    let secs = |t: Option<jiff::Timestamp>| t.map_or(0, |t| t.as_second());
    let nodes = if j.state.holds_node() || (j.state.is_terminal() && j.start_time.is_some()) {
        format!("node{:02}", j.node.unwrap_or(0) + 1)
    } else {
        String::new()
    };
    let gres = (j.spec.gpus > 0).then_some(j.spec.gpus);
    match dialect {
        Dialect::V0038 => json!({
            "account": j.spec.account.clone().unwrap_or_default(),
            "batch_flag": true,
            "batch_host": nodes,
            "comment": j.spec.comment,
            "cpus": j.spec.cpus,
            "current_working_directory": j.spec.cwd,
            "derived_exit_code": 0,
            "eligible_time": secs(Some(j.submit_time)),
            "end_time": secs(j.end_time),
            "exit_code": j.exit_raw,
            "job_id": j.id,
            "job_state": j.state.name(),
            "name": j.spec.name,
            "node_count": 1,
            "nodes": nodes,
            "partition": j.partition,
            "qos": j.spec.qos.clone().unwrap_or_default(),
            "requeue": j.spec.requeue,
            "restart_cnt": j.restart_cnt,
            "standard_error": "",
            "standard_input": "/dev/null",
            "standard_output": j.spec.standard_output.clone().unwrap_or_default(),
            "start_time": secs(j.start_time),
            "state_description": "",
            "state_reason": j.reason,
            "submit_time": secs(Some(j.submit_time)),
            "time_limit": j.spec.time_limit_minutes,
            "tres_per_node": gres.map_or(String::new(), |g| format!("gres:gpu:{g}")),
            "user_name": j.user,
        }),
        Dialect::V0041 => {
            let raw = j.exit_raw;
            let signal = raw & 0x7f;
            let exit = if signal != 0 {
                json!({"status": ["SIGNALED"], "return_code": no_val(0),
                       "signal": {"id": no_val(signal), "name": signal_name(signal)}})
            } else {
                let code = (raw >> 8) & 0xff;
                let status = if j.state.is_terminal() {
                    if code == 0 { "SUCCESS" } else { "ERROR" }
                } else {
                    "PENDING"
                };
                json!({"status": [status], "return_code": no_val(code),
                       "signal": {"id": unset(), "name": ""}})
            };
            let time = |t: Option<jiff::Timestamp>| t.map_or_else(unset, |t| no_val(t.as_second()));
            let mut state = vec![j.state.name()];
            if j.state == JobState::Pending && j.restart_cnt > 0 && j.reason == "BeginTime" {
                state.push("REQUEUED");
            }
            json!({
                "account": j.spec.account.clone().unwrap_or_default(),
                "batch_flag": true,
                "batch_host": nodes,
                "comment": j.spec.comment,
                "cpus": no_val(i64::from(j.spec.cpus)),
                "current_working_directory": j.spec.cwd,
                "derived_exit_code": {"status": ["SUCCESS"], "return_code": no_val(0)},
                "end_time": time(j.end_time),
                "exit_code": exit,
                "job_id": j.id,
                "job_state": state,
                "name": j.spec.name,
                "node_count": no_val(1),
                "nodes": nodes,
                "partition": j.partition,
                "qos": j.spec.qos.clone().unwrap_or_default(),
                "requeue": j.spec.requeue,
                "restart_cnt": j.restart_cnt,
                "standard_error": "",
                "standard_input": "/dev/null",
                "standard_output": j.spec.standard_output.clone().unwrap_or_default(),
                "start_time": time(j.start_time),
                "state_description": "",
                "state_reason": j.reason,
                "submit_time": no_val(j.submit_time.as_second()),
                "time_limit": j.spec.time_limit_minutes.map_or_else(unset, |t| no_val(i64::from(t))),
                "tres_per_node": gres.map_or(String::new(), |g| format!("gres/gpu:{g}")),
                "user_name": j.user,
            })
        }
    }
}

fn signal_name(sig: i64) -> &'static str {
    match sig {
        2 => "INT",
        9 => "KILL",
        15 => "TERM",
        _ => "",
    }
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
