//! A job as slurmrestd renders it in each dialect (`job_state`, times, exit codes, the
//! `NO_VAL` and unset numbers).

use super::*;

pub(super) fn no_val(n: i64) -> Value {
    json!({"set": true, "infinite": false, "number": n})
}

pub(super) fn unset() -> Value {
    json!({"set": false, "infinite": false, "number": 0})
}

/// One job as the dialect lists it.
pub fn render(dialect: Dialect, j: &Job) -> Value {
    let nodes = if j.state.holds_node() || (j.state.is_terminal() && j.start_time.is_some()) {
        format!("node{:02}", j.node.unwrap_or(0) + 1)
    } else {
        String::new()
    };
    let gres = (j.spec.gpus > 0).then_some(j.spec.gpus);
    // What every dialect renders alike.
    let mut job = json!({
        "account": j.spec.account.clone().unwrap_or_default(),
        "batch_flag": true,
        "batch_host": nodes,
        "comment": j.spec.comment,
        "current_working_directory": j.spec.cwd,
        "job_id": j.id,
        "name": j.spec.name,
        "nodes": nodes,
        "partition": j.partition,
        "qos": j.spec.qos.clone().unwrap_or_default(),
        "requeue": j.spec.requeue,
        "restart_cnt": j.restart_cnt,
        "standard_error": "",
        "standard_input": "/dev/null",
        "standard_output": j.spec.standard_output.clone().unwrap_or_default(),
        "state_description": "",
        "state_reason": j.reason,
        "user_name": j.user,
    });
    let own = match dialect {
        Dialect::V0038 => {
            let secs = |t: Option<jiff::Timestamp>| t.map_or(0, |t| t.as_second());
            json!({
                "cpus": j.spec.cpus,
                "derived_exit_code": 0,
                "eligible_time": secs(Some(j.submit_time)),
                "end_time": secs(j.end_time),
                "exit_code": j.exit_raw,
                "job_state": j.state.name(),
                "node_count": 1,
                "start_time": secs(j.start_time),
                "submit_time": secs(Some(j.submit_time)),
                "time_limit": j.spec.time_limit_minutes,
                "tres_per_node": gres.map_or(String::new(), |g| format!("gres:gpu:{g}")),
            })
        }
        Dialect::V0041 => {
            let time = |t: Option<jiff::Timestamp>| t.map_or_else(unset, |t| no_val(t.as_second()));
            let mut state = vec![j.state.name()];
            if j.state == JobState::Pending && j.restart_cnt > 0 && j.reason == "BeginTime" {
                state.push("REQUEUED");
            }
            json!({
                "cpus": no_val(i64::from(j.spec.cpus)),
                "derived_exit_code": {"status": ["SUCCESS"], "return_code": no_val(0)},
                "end_time": time(j.end_time),
                "exit_code": exit_v0041(j),
                "job_state": state,
                "node_count": no_val(1),
                "start_time": time(j.start_time),
                "submit_time": no_val(j.submit_time.as_second()),
                "time_limit": j.spec.time_limit_minutes.map_or_else(unset, |t| no_val(i64::from(t))),
                "tres_per_node": gres.map_or(String::new(), |g| format!("gres/gpu:{g}")),
            })
        }
    };
    if let (Some(job), Value::Object(own)) = (job.as_object_mut(), own) {
        job.extend(own);
    }
    job
}

/// A job's exit code as v0.0.41 renders it: a status list, the return code, the signal.
fn exit_v0041(j: &Job) -> Value {
    let raw = j.exit_raw;
    let signal = raw & 0x7f;
    if signal != 0 {
        return json!({"status": ["SIGNALED"], "return_code": no_val(0),
                      "signal": {"id": no_val(signal), "name": signal_name(signal)}});
    }
    let code = (raw >> 8) & 0xff;
    let status = if j.state.is_terminal() {
        if code == 0 { "SUCCESS" } else { "ERROR" }
    } else {
        "PENDING"
    };
    json!({"status": [status], "return_code": no_val(code),
           "signal": {"id": unset(), "name": ""}})
}

pub(super) fn signal_name(sig: i64) -> &'static str {
    match sig {
        2 => "INT",
        9 => "KILL",
        15 => "TERM",
        _ => "",
    }
}
