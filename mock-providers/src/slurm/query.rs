//! The job routes besides submit: list, get and cancel (with a signal), answered as
//! slurmrestd answers them for each dialect.

use super::*;

pub(super) async fn list(
    AxState(s): AxState<State>,
    Path(version): Path<String>,
    headers: HeaderMap,
) -> Reply {
    let emu = &s.emulator;
    let dialect = admit(emu, &version, RouteKind::List, &headers).await?;
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
    Ok(json_response(StatusCode::OK, jobs_answer(dialect, jobs)))
}

pub(super) fn jobs_answer(dialect: Dialect, jobs: Vec<Value>) -> Value {
    match dialect {
        Dialect::V0038 => json!({"meta": meta(dialect), "errors": [], "jobs": jobs}),
        Dialect::V0041 => {
            let now = jiff::Timestamp::now().as_second();
            json!({"jobs": jobs, "last_backfill": no_val(now), "last_update": no_val(now),
                   "meta": meta(dialect), "errors": [], "warnings": []})
        }
    }
}

pub(super) async fn get_job(
    AxState(s): AxState<State>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Reply {
    let emu = &s.emulator;
    let dialect = admit(emu, &version, RouteKind::Get, &headers).await?;
    let mut inner = emu.lock();
    emu.settle(&mut inner);
    Ok(
        match id.parse::<u32>().ok().and_then(|n| inner.jobs.jobs.get(&n)) {
            Some(j) => json_response(
                StatusCode::OK,
                jobs_answer(dialect, vec![render(dialect, j)]),
            ),
            None => match dialect {
                Dialect::V0038 => json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    unknown_job_body(dialect, &id),
                ),
                // 24.11.5 (measured): HTTP 404, an empty list with its timestamps, error 2017.
                Dialect::V0041 => {
                    let err = SlurmErr::invalid_job(&id, "Unable to query ");
                    let mut body = jobs_answer(dialect, Vec::new());
                    body["last_backfill"] = no_val(0);
                    body["last_update"] = no_val(0);
                    body["errors"] = json!([{"description": err.description,
                    "error_number": err.number, "error": err.message, "source": "_handle_job_get"}]);
                    json_response(StatusCode::NOT_FOUND, body)
                }
            },
        },
    )
}

/// 22.05 answers an unknown job id with the error *and* an empty `jobs` list.
pub(super) fn unknown_job_body(dialect: Dialect, id: &str) -> Value {
    let err = SlurmErr::invalid_job(id, "Unable to find ");
    json!({"meta": meta(dialect), "errors": [{"description": err.description,
        "error_number": err.number, "error": err.message, "source": "slurm_load_job"}], "jobs": []})
}

#[derive(Deserialize)]
pub(super) struct CancelQuery {
    #[serde(default)]
    signal: Option<String>,
}

pub(super) async fn cancel(
    AxState(s): AxState<State>,
    Path((version, id)): Path<(String, String)>,
    Query(q): Query<CancelQuery>,
    headers: HeaderMap,
) -> Reply {
    let emu = &s.emulator;
    let dialect = admit(emu, &version, RouteKind::Delete, &headers).await?;
    let signal = q.signal.unwrap_or_else(|| "KILL".into());
    let sig_name = signal.trim().trim_start_matches("SIG").to_ascii_uppercase();
    let Some(job_id) = id.parse::<u32>().ok() else {
        let err = SlurmErr::new(
            2140,
            "Invalid job id: non-numeric",
            format!("Unable to parse job id {id}"),
        );
        return Err(slurm_error(dialect, &err, "slurm_kill_job", false));
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
    // 24.11.5's v0.0.41 (measured) answers the cancel of a job it no longer knows, or of one
    // that has ended, as a success with no error.
    let gone = |e: &SlurmErr| matches!(e.number, 2017 | 2021);
    Ok(match result {
        Err(e) if dialect == Dialect::V0041 && gone(&e) => json_response(
            StatusCode::OK,
            json!({"meta": meta(dialect), "errors": [], "warnings": []}),
        ),
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
    })
}
