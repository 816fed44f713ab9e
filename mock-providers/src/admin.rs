//! The admin and fault-injection API under `/_admin`, identical for every emulator. It is not
//! part of any real provider API; tests use it to inspect workloads, inject failures,
//! preemption and lost workloads, change inventory, and count calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::json;

use crate::config::GpuStock;
use crate::engine::gate::{GateState, same_secret};
use crate::engine::logs::LogSource;
use crate::engine::{AdminError, Engine, Extra, NewWorkload, Usage};
use crate::inventory::AllocError;

pub(crate) mod shared;

use shared::{body, err};

/// Header carrying the admin key when one is configured.
pub const ADMIN_KEY_HEADER: &str = "x-admin-key";

/// Requires `X-Admin-Key: <key>` on every `/_admin` request of `router` (the provider routes keep
/// their own API-key check). The admin API injects workloads, kills them and resets the
/// emulator: anyone who can reach it can do that, so beyond loopback it must be keyed.
pub fn require_key(router: Router, key: String) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        Arc::new(key),
        admin_key_check,
    ))
}

async fn admin_key_check(
    State(key): State<Arc<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.uri().path().starts_with("/_admin") {
        let presented = req
            .headers()
            .get(ADMIN_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !same_secret(presented, &key) {
            return err(
                StatusCode::UNAUTHORIZED,
                format!("the admin API needs the {ADMIN_KEY_HEADER} header"),
            );
        }
    }
    next.run(req).await
}

/// Refuses to serve the admin API beyond loopback without a key: `Err` names the address.
pub fn check_exposure(addrs: &[std::net::SocketAddr], key: Option<&str>) -> Result<(), String> {
    if key.is_some_and(|k| !k.is_empty()) {
        return Ok(());
    }
    match addrs.iter().find(|a| !a.ip().is_loopback()) {
        Some(a) => Err(format!(
            "refusing to serve the admin API on {a} without a key: it injects, kills and resets \
             workloads; pass --admin-key (or MOCK_ADMIN_KEY) or bind a loopback address"
        )),
        None => Ok(()),
    }
}

impl shared::Gated for Engine {
    fn with_gate<R>(&self, f: impl FnOnce(&mut GateState) -> R) -> R {
        f(&mut self.lock().gate)
    }
}

/// `POST /_admin/images` `{"repository", "username"?, "password"?, "size_gb"?}`: the
/// repository pulls only with that login, needs that much container disk and takes the
/// profile's pull time per GB, from now on (`engine::pull`).
async fn private_image(State(e): State<Arc<Engine>>, bytes: Bytes) -> Response {
    let repo: crate::engine::pull::ImageSpec = match body(&bytes) {
        Ok(r) => r,
        Err(r) => return r,
    };
    e.lock().images.add(repo);
    StatusCode::CREATED.into_response()
}

/// Admin routes for `engine`.
pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/_admin/workloads", get(list).post(inject))
        .route("/_admin/workloads/{id}", delete(vanish))
        .route("/_admin/workloads/{id}/preempt", post(preempt))
        .route("/_admin/workloads/{id}/exit", post(exit))
        .route("/_admin/workloads/{id}/fail", post(fail))
        .route("/_admin/workloads/{id}/usage", post(usage))
        .route("/_admin/workloads/{id}/logs", post(add_logs))
        .route("/_admin/inventory", get(get_inventory).put(put_inventory))
        .route("/_admin/serve", post(serve))
        .route("/_admin/addresses", post(addresses))
        .route("/_admin/reset", post(reset))
        .route("/_admin/config", get(config))
        .route("/_admin/images", post(private_image))
        .merge(shared::gate_routes())
        .with_state(engine)
}

fn admin_error(e: AdminError) -> Response {
    let status = match e {
        AdminError::NotFound(_) => StatusCode::NOT_FOUND,
        AdminError::Conflict(_) => StatusCode::CONFLICT,
        AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
    };
    err(status, e.to_string())
}

fn done(r: Result<(), AdminError>) -> Response {
    match r {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => admin_error(e),
    }
}

async fn list(State(e): State<Arc<Engine>>) -> Response {
    axum::Json(e.admin_list()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_api_beyond_loopback_needs_a_key() {
        let lo: std::net::SocketAddr = "127.0.0.1:9001".parse().unwrap_or_else(|e| panic!("{e}"));
        let any: std::net::SocketAddr = "0.0.0.0:9001".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_exposure(&[lo], None), Ok(()));
        let e = check_exposure(&[lo, any], None).err().unwrap_or_default();
        assert!(
            e.contains("0.0.0.0:9001") && e.contains("--admin-key"),
            "{e}"
        );
        assert!(check_exposure(&[any], Some("")).is_err());
        assert_eq!(check_exposure(&[any], Some("k")), Ok(()));
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectBody {
    name: String,
    #[serde(default)]
    image: String,
    gpu_type: String,
    #[serde(default = "one")]
    gpu_count: u32,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    interruptible: bool,
    #[serde(default)]
    command: Option<String>,
}

fn one() -> u32 {
    1
}

async fn inject(State(e): State<Arc<Engine>>, bytes: Bytes) -> Response {
    let b: InjectBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let new = NewWorkload {
        name: b.name,
        image: b.image,
        env: b.env,
        gpu_type: b.gpu_type,
        gpu_count: b.gpu_count,
        command: b.command,
        interruptible: b.interruptible,
        extra: Extra::None,
        ..NewWorkload::default()
    };
    match e.inject(new) {
        Ok(id) => (StatusCode::CREATED, axum::Json(json!({"id": id}))).into_response(),
        Err(AllocError::UnknownType(t)) => {
            err(StatusCode::BAD_REQUEST, format!("unknown GPU type {t:?}"))
        }
        Err(e @ AllocError::NoCapacity { .. }) => err(StatusCode::CONFLICT, e.to_string()),
    }
}

async fn vanish(State(e): State<Arc<Engine>>, Path(id): Path<String>) -> Response {
    done(e.vanish(&id))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PreemptBody {
    #[serde(default)]
    price: Option<f64>,
}

async fn preempt(State(e): State<Arc<Engine>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let b: PreemptBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    done(e.preempt(&id, b.price))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExitBody {
    exit_code: i32,
}

async fn exit(State(e): State<Arc<Engine>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let b: ExitBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    done(e.admin_exit(&id, b.exit_code))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FailBody {
    #[serde(default)]
    message: Option<String>,
}

async fn fail(State(e): State<Arc<Engine>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let b: FailBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    done(
        e.admin_fail(
            &id,
            b.message
                .unwrap_or_else(|| "container failed (injected)".into()),
        ),
    )
}

async fn usage(State(e): State<Arc<Engine>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let u: Usage = match body(&bytes) {
        Ok(u) => u,
        Err(r) => return r,
    };
    done(e.set_usage(&id, u))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsBody {
    lines: Vec<String>,
    #[serde(default)]
    source: Option<String>,
}

async fn add_logs(State(e): State<Arc<Engine>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let b: LogsBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let source = match b.source.as_deref() {
        None | Some("container") => LogSource::Container,
        Some("system") => LogSource::System,
        Some(other) => {
            return err(
                StatusCode::BAD_REQUEST,
                format!("unknown source {other:?}: expected container|system"),
            );
        }
    };
    done(e.add_logs(&id, source, b.lines))
}

async fn get_inventory(State(e): State<Arc<Engine>>) -> Response {
    axum::Json(json!({"gpus": e.inventory_lines()})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InventoryBody {
    gpus: Vec<GpuStock>,
}

async fn put_inventory(State(e): State<Arc<Engine>>, bytes: Bytes) -> Response {
    let b: InventoryBody = match body(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Some(bad) = b
        .gpus
        .iter()
        .find(|g| g.gpu_type.is_empty() || !g.price_per_hour.is_finite() || g.price_per_hour < 0.0)
    {
        return err(
            StatusCode::BAD_REQUEST,
            format!("invalid GPU stock line for {:?}", bad.gpu_type),
        );
    }
    e.set_inventory(&b.gpus);
    axum::Json(json!({"gpus": e.inventory_lines()})).into_response()
}

/// `POST /_admin/hide {"lists": N, "ids": [...]}`: leave workloads out of the next N list
/// answers (every workload when `ids` is absent); they keep running.
/// How the stand-in servers on published ports answer (see [`crate::serve`]): body
/// `{"httpStatus": 503, "accept": true}`, optionally with `"workload": "<id>"`.
async fn serve(State(e): State<Arc<Engine>>, bytes: Bytes) -> Response {
    let set: crate::serve::SetAnswer = match body(&bytes) {
        Ok(s) => s,
        Err(r) => return r,
    };
    e.served.set(set);
    StatusCode::NO_CONTENT.into_response()
}

async fn reset(State(e): State<Arc<Engine>>) -> Response {
    e.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn config(State(e): State<Arc<Engine>>) -> Response {
    let flavor = match e.flavor() {
        crate::engine::Flavor::RunPod => "runpod",
        crate::engine::Flavor::Vast => "vast",
    };
    let mode = shared::mode_json(e.mode());
    axum::Json(json!({"provider": flavor, "mode": mode})).into_response()
}

/// The body of `POST /_admin/addresses`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listed {
    /// What the provider API lists as every workload's address (any text: a malformed or
    /// loopback address as a misbehaving provider would list it); `null`: each its own.
    pub listed: Option<String>,
}

/// `POST /_admin/addresses`: what the provider lists as its workloads' addresses.
async fn addresses(State(e): State<Arc<Engine>>, axum::Json(b): axum::Json<Listed>) -> Response {
    e.served.set_listed(b.listed);
    StatusCode::NO_CONTENT.into_response()
}
