//! Changing an instance: start/stop and label, destroy, change bid.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::State;
use super::reply::*;
use crate::engine::{Engine, Phase, Run, StopReason};

pub(super) async fn manage_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    manage_inner(&s.engine, &id, &body)
}

pub(super) fn manage_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    if parse_id(id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance id",
        );
    }
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let state = match m.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "running" || s == "stopped" => Some(s.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "state must be 'running' or 'stopped'",
            );
        }
    };
    let label = match m.get("label") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= 1024 => Some(s.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "label must be a string of at most 1024 characters",
            );
        }
    };
    if state.is_none() && label.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "Provide state and/or label",
        );
    }
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let Some(seq) = inner.seq_of(id) else {
        return error(
            StatusCode::NOT_FOUND,
            "no_such_instance",
            "Instance with that ID does not exist.",
        );
    };
    if let Some(label) = label
        && let Some(w) = inner.workloads.get_mut(&seq)
    {
        w.name = label;
    }
    let phase = match inner.workloads.get_mut(&seq) {
        Some(w) => engine.observe(w, now),
        None => return ok(json!({"success": true})),
    };
    match state.as_deref() {
        Some("stopped") => {
            if phase.is_active() || phase == Phase::Preempted {
                engine.stop_locked(&mut inner, seq, StopReason::User);
            } else if let Some(w) = inner.workloads.get_mut(&seq)
                && let Run::Stopped { reason, .. } = &mut w.run
            {
                *reason = StopReason::User;
            }
        }
        Some("running") => match phase {
            // Still outbid: the instance stays stopped until its bid wins again.
            Phase::Preempted => {}
            p if p.is_active() => {}
            _ => {
                if engine.start_locked(&mut inner, seq, now).is_err() {
                    engine.stop_locked(&mut inner, seq, StopReason::WaitingForGpus);
                }
            }
        },
        _ => {}
    }
    ok(json!({"success": true}))
}

pub(super) async fn destroy_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
) -> Response {
    if parse_id(&id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance_id",
        );
    }
    let removed = {
        let mut inner = s.engine.lock();
        inner
            .seq_of(&id)
            .and_then(|seq| s.engine.remove_locked(&mut inner, seq))
    };
    match removed {
        Some(_) => ok(json!({"success": true, "msg": "Instance destroyed successfully"})),
        None => error(StatusCode::NOT_FOUND, "not_found", "Instance not found"),
    }
}

pub(super) async fn change_bid(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let m = match parse_body(&body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let price = match m.get("price").and_then(Value::as_f64) {
        Some(p) if (0.001..=32.0).contains(&p) => p,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "Please set a bid price >= 0.001.",
            );
        }
    };
    let engine = &s.engine;
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let Some(seq) = inner.seq_of(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "no_such_instance",
            "Instance with that ID does not exist.",
        );
    };
    let resume = match inner.workloads.get_mut(&seq) {
        Some(w) => {
            w.bid_price = Some(price);
            w.interruptible = true;
            matches!(
                &w.run,
                Run::Stopped { reason: StopReason::Preempted { outbid_price }, .. }
                    if outbid_price.is_none_or(|p| price > p)
            )
        }
        None => false,
    };
    if resume && engine.start_locked(&mut inner, seq, now).is_err() {
        engine.stop_locked(&mut inner, seq, StopReason::WaitingForGpus);
    }
    ok(json!({"success": true}))
}
