//! `/_admin` of the Slurm emulator: the routes every emulator shares (workloads, preempt,
//! exit, fail, logs, faults, counters, reset, config, inventory) with the same shapes, plus
//! Slurm's own events: `node_fail`, `timeout`, `requeue`, `cancel` (an `scancel` by someone
//! else), `oom`, `suspend`, `resume`. A `{id}` is a Slurm job id or a job name (the newest job
//! of that name). Faults and counters use the shared gate, so `POST /_admin/faults` takes the
//! same body (`route`: `create` = submit, `list` = jobs, `get` = one job, `delete` = cancel).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Emulator;
use super::jobs::{Job, JobState, NewJob};
use crate::admin::shared::{Gated, body, err, gate_routes, mode_json};
use crate::engine::gate::GateState;

impl Gated for Emulator {
    fn with_gate<R>(&self, f: impl FnOnce(&mut GateState) -> R) -> R {
        f(&mut self.lock().gate)
    }
}

pub(crate) fn router(emu: Arc<Emulator>) -> Router {
    Router::new()
        .route("/_admin/workloads", get(list).post(inject))
        .route("/_admin/workloads/{id}", delete(vanish))
        .route("/_admin/workloads/{id}/{action}", post(act))
        .route("/_admin/inventory", get(get_inventory).put(put_inventory))
        .route("/_admin/addresses", post(addresses))
        .route("/_admin/reset", post(reset))
        .route("/_admin/config", get(config))
        .merge(gate_routes())
        .with_state(emu)
}

/// The admin view of a job.
pub(crate) fn render(j: &Job) -> Value {
    let raw = j.exit_raw;
    let exit_code = if raw & 0x7f != 0 {
        128 + (raw & 0x7f)
    } else {
        (raw >> 8) & 0xff
    };
    json!({
        "id": j.id.to_string(),
        "name": j.spec.name,
        "state": j.state.name(),
        "reason": j.reason,
        "gpu_count": j.spec.gpus,
        "exit_code": exit_code,
        "exit_raw": raw,
        "restart_cnt": j.restart_cnt,
        "partition": j.partition,
        "node": j.node,
        "pid": j.pid,
        "comment": j.spec.comment,
        "time_limit": j.spec.time_limit_minutes,
        "env": j.spec.environment,
        "command": j.spec.script,
        "output": super::jobs::output_path(j),
        "created_at": crate::util::rfc3339(j.submit_time),
    })
}

async fn list(State(e): State<Arc<Emulator>>) -> Response {
    axum::Json(e.snapshot()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectBody {
    name: String,
    #[serde(default)]
    gpu_count: u32,
    /// Batch script (process mode runs it); default `sleep infinity`.
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    partition: Option<String>,
}

async fn inject(State(e): State<Arc<Emulator>>, bytes: Bytes) -> Response {
    let b: InjectBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let script = b
        .command
        .map(|c| format!("#!/bin/bash\n{c}\n"))
        .unwrap_or_else(|| "#!/bin/bash\nsleep infinity\n".into());
    let spec = NewJob {
        name: b.name,
        script,
        environment: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
        cwd: std::env::temp_dir().to_string_lossy().into_owned(),
        partition: b.partition,
        gpus: b.gpu_count,
        cpus: 1,
        requeue: true,
        already_running: true,
        ..NewJob::default()
    };
    let mut inner = e.lock();
    let user = e.cfg.user.clone();
    let result = inner.jobs.submit(&user, spec, Instant::now());
    e.settle(&mut inner);
    match result {
        Ok(id) => (
            StatusCode::CREATED,
            axum::Json(json!({"id": id.to_string()})),
        )
            .into_response(),
        Err(x) => err(StatusCode::CONFLICT, x.to_string()),
    }
}

async fn vanish(State(e): State<Arc<Emulator>>, Path(id): Path<String>) -> Response {
    let mut inner = e.lock();
    let Some(job) = inner.jobs.resolve(&id) else {
        return err(StatusCode::NOT_FOUND, format!("workload {id} not found"));
    };
    inner.jobs.vanish(job, Instant::now());
    e.settle(&mut inner);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize, Default)]
struct ActionBody {
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    lines: Option<Vec<String>>,
    /// Ignored (Vast's outbid price): accepted for the shared `preempt` body.
    #[serde(default)]
    #[allow(dead_code)]
    price: Option<f64>,
    #[serde(default)]
    #[allow(dead_code)]
    source: Option<String>,
}

async fn act(
    State(e): State<Arc<Emulator>>,
    Path((id, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let b: ActionBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let now = Instant::now();
    let mut inner = e.lock();
    e.settle(&mut inner);
    let Some(job_id) = inner.jobs.resolve(&id) else {
        return err(StatusCode::NOT_FOUND, format!("workload {id} not found"));
    };
    let Some(state) = inner.jobs.jobs.get(&job_id).map(|j| j.state) else {
        return err(StatusCode::NOT_FOUND, format!("workload {id} not found"));
    };
    let active = !state.is_terminal();
    let running = state.holds_node();
    let conflict = |what: &str| {
        err(
            StatusCode::CONFLICT,
            format!("job {job_id} is {}: cannot {what}", state.name()),
        )
    };
    let jobs = &mut inner.jobs;
    match action.as_str() {
        "preempt" if active => jobs.finish(job_id, JobState::Preempted, "None", 0, now),
        "exit" if active => {
            let Some(code) = b.exit_code else {
                return err(StatusCode::BAD_REQUEST, "exit_code is required");
            };
            let raw = i64::from(code & 0xff) << 8;
            if code == 0 {
                jobs.finish(job_id, JobState::Completed, "None", 0, now);
            } else {
                jobs.finish(job_id, JobState::Failed, "NonZeroExitCode", raw, now);
            }
        }
        "fail" if active => {
            let reason = b.message.unwrap_or_else(|| "JobLaunchFailure".into());
            jobs.finish(job_id, JobState::Failed, &reason, 1 << 8, now);
        }
        "node_fail" if active => jobs.finish(job_id, JobState::NodeFail, "NodeDown", 9, now),
        "timeout" if running => jobs.finish(job_id, JobState::Timeout, "TimeLimit", 15, now),
        "oom" if running => jobs.finish(job_id, JobState::OutOfMemory, "OutOfMemory", 9, now),
        "cancel" if active => {
            if let Err(x) = jobs.cancel(job_id, now) {
                return err(StatusCode::CONFLICT, x.to_string());
            }
        }
        "requeue" => {
            if let Err(x) = jobs.requeue(job_id, now) {
                return err(StatusCode::CONFLICT, x);
            }
        }
        "suspend" | "resume" => {
            if let Err(x) = jobs.suspend(job_id, action == "suspend") {
                return err(StatusCode::CONFLICT, x);
            }
        }
        "logs" => {
            let Some(lines) = b.lines else {
                return err(StatusCode::BAD_REQUEST, "lines is required");
            };
            let Some(job) = jobs.jobs.get(&job_id) else {
                return err(StatusCode::NOT_FOUND, format!("workload {id} not found"));
            };
            let path = super::jobs::output_path(job);
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| lines.iter().try_for_each(|l| writeln!(f, "{l}")));
            if let Err(x) = written {
                return err(
                    StatusCode::CONFLICT,
                    format!("cannot write the job's output file {path}: {x}"),
                );
            }
        }
        "preempt" | "exit" | "fail" | "node_fail" | "cancel" => return conflict(&action),
        "timeout" | "oom" => return conflict(&action),
        other => {
            return err(
                StatusCode::NOT_FOUND,
                format!(
                    "unknown action {other:?}: expected preempt|exit|fail|node_fail|timeout|oom|\
                     cancel|requeue|suspend|resume|logs"
                ),
            );
        }
    }
    e.settle(&mut inner);
    StatusCode::NO_CONTENT.into_response()
}

async fn get_inventory(State(e): State<Arc<Emulator>>) -> Response {
    let mut inner = e.lock();
    e.settle(&mut inner);
    let c = &inner.jobs.cluster;
    axum::Json(json!({
        "nodes": c.nodes,
        "gpus_per_node": c.gpus_per_node,
        "partitions": c.partitions,
        "free_gpus": inner.jobs.free_gpus(),
    }))
    .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InventoryBody {
    nodes: u32,
    gpus_per_node: u32,
}

async fn put_inventory(State(e): State<Arc<Emulator>>, bytes: Bytes) -> Response {
    let b: InventoryBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    {
        let mut inner = e.lock();
        inner.jobs.set_cluster(b.nodes, b.gpus_per_node);
        e.settle(&mut inner);
    }
    get_inventory(State(e)).await
}

/// `POST /_admin/addresses` (`{"listed": <text or null>}`): what the node records list as
/// every node's address.
async fn addresses(
    State(e): State<Arc<Emulator>>,
    axum::Json(b): axum::Json<crate::admin::Listed>,
) -> Response {
    e.lock().listed = b.listed;
    StatusCode::NO_CONTENT.into_response()
}

async fn reset(State(e): State<Arc<Emulator>>) -> Response {
    let mut inner = e.lock();
    inner.jobs.reset();
    inner.gate.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn config(State(e): State<Arc<Emulator>>) -> Response {
    let cfg = e.config();
    let mode = mode_json(&cfg.mode);
    let dialects: Vec<&str> = cfg.dialects.iter().map(|d| d.version()).collect();
    axum::Json(json!({"provider": "slurm", "mode": mode, "dialects": dialects, "user": cfg.user}))
        .into_response()
}
