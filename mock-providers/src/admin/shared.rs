//! What every emulator's `/_admin` has in common, written once: the error shape, the body
//! parser, the description of the execution mode, and the gate's routes (faults, hidden
//! workloads, counters), served for any emulator that hands out its gate ([`Gated`]).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::ExecutionMode;
use crate::engine::gate::{FaultSpec, GateState, HideSpec};

/// An emulator whose gate the shared admin routes drive.
pub(crate) trait Gated: Send + Sync + 'static {
    /// Runs `f` on the gate, under the emulator's lock.
    fn with_gate<R>(&self, f: impl FnOnce(&mut GateState) -> R) -> R;
}

/// `{"error": msg}` with `status`.
pub(crate) fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": msg.into()}))).into_response()
}

/// Parses a JSON body; an empty body means `{}`.
pub(crate) fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Response> {
    let text = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| err(StatusCode::BAD_REQUEST, e.to_string()))
}

/// The execution mode as `GET /_admin/config` shows it.
pub(crate) fn mode_json(mode: &ExecutionMode) -> Value {
    match mode {
        ExecutionMode::Simulated {
            provision_ms,
            start_ms,
            run_ms,
        } => {
            json!({"kind": "simulated", "provision_ms": provision_ms, "start_ms": start_ms, "run_ms": run_ms})
        }
        ExecutionMode::Process {
            provision_ms,
            start_ms,
        } => json!({"kind": "process", "provision_ms": provision_ms, "start_ms": start_ms}),
    }
}

/// The gate's routes: `/_admin/faults` (list, add, clear), `/_admin/hide`, `/_admin/counters`.
pub(crate) fn gate_routes<E: Gated>() -> Router<Arc<E>> {
    Router::new()
        .route(
            "/_admin/faults",
            get(list_faults::<E>)
                .post(add_fault::<E>)
                .delete(clear_faults::<E>),
        )
        .route("/_admin/hide", post(hide::<E>))
        .route("/_admin/counters", get(counters::<E>))
}

async fn list_faults<E: Gated>(State(e): State<Arc<E>>) -> Response {
    axum::Json(json!({"active": e.with_gate(|g| g.fault_count())})).into_response()
}

async fn add_fault<E: Gated>(State(e): State<Arc<E>>, bytes: Bytes) -> Response {
    let spec: FaultSpec = match body(&bytes) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match e.with_gate(|g| g.add_fault(spec)) {
        Ok(()) => StatusCode::CREATED.into_response(),
        Err(x) => err(StatusCode::BAD_REQUEST, x.to_string()),
    }
}

async fn clear_faults<E: Gated>(State(e): State<Arc<E>>) -> Response {
    e.with_gate(|g| g.clear_faults());
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /_admin/hide {"lists": N, "ids": [...]}`: leave workloads out of the next N list
/// answers (every workload when `ids` is absent); they keep running.
async fn hide<E: Gated>(State(e): State<Arc<E>>, bytes: Bytes) -> Response {
    let spec: HideSpec = match body(&bytes) {
        Ok(s) => s,
        Err(r) => return r,
    };
    e.with_gate(|g| g.hide(spec));
    StatusCode::NO_CONTENT.into_response()
}

async fn counters<E: Gated>(State(e): State<Arc<E>>) -> Response {
    axum::Json(e.with_gate(|g| g.counters())).into_response()
}
