//! `GET /openapi/v3` and `POST .../job/submit`: a batch script's submission read as each
//! dialect takes it, GPUs from its gres or tres spec.

use super::*;

/// `GET /openapi/v3`: the paths of the dialects served (what an adapter detects its dialect
/// from; a real slurmrestd lists every route with its schemas). Needs the JWT headers, as a
/// real 24.11 does.
pub(super) async fn openapi(AxState(s): AxState<State>, headers: HeaderMap) -> Response {
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

pub(super) async fn submit(
    AxState(s): AxState<State>,
    Path(version): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Reply {
    let emu = &s.emulator;
    let dialect = admit(emu, &version, RouteKind::Create, &headers).await?;
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return Err(plain(StatusCode::BAD_REQUEST, "Unable to parse query."));
    };
    let warnings = strict::check_submission(dialect, &value)?;
    let spec = parse_submission(dialect, &value)
        .map_err(|e| slurm_error(dialect, &e, "slurm_submit_batch_job()", true))?;
    let mut inner = emu.lock();
    let now = Instant::now();
    let result = inner.jobs.submit(&emu.cfg.user, spec, now);
    if result.is_ok() {
        inner.gate.note_created();
    }
    emu.settle(&mut inner);
    Ok(match result {
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
                       "warnings": warnings}),
            ),
        },
        Err(e) => slurm_error(dialect, &e, "slurm_submit_batch_job()", true),
    })
}

/// Reads a submission of either dialect into a job.
pub(super) fn parse_submission(dialect: Dialect, v: &Value) -> Result<NewJob, SlurmErr> {
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
pub(super) fn parse_gpus(dialect: Dialect, spec: &str) -> Option<u32> {
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
