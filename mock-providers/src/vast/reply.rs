//! Vast's answers: success and error bodies, denials (401, 429 as the service words them), request bodies and ids.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::engine::gate::{Credential, Denied, RouteKind, bearer};

// ---- responses ----------------------------------------------------------------------------

pub(super) fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

pub(super) fn error(status: StatusCode, error: &str, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"success": false, "error": error, "msg": msg.into()})),
    )
        .into_response()
}

pub(super) fn denied(d: Denied) -> Response {
    match d {
        Denied::Fault(f) => f.answer(|status, body| match body {
            Some(body) => (status, axum::Json(body)).into_response(),
            None => error(status, "injected_fault", "injected fault"),
        }),
        Denied::Unauthorized { .. } => {
            error(StatusCode::UNAUTHORIZED, "auth_error", "Invalid user key")
        }
        // The generic quota window (not a documented Vast behaviour): answered like an
        // interval limit of one window / quota.
        Denied::RateLimited { windows, .. } => {
            let threshold = windows
                .first()
                .map(|w| w.width_s as f64 / f64::from(w.limit.max(1)));
            too_frequent(threshold)
        }
        Denied::TooFrequent { threshold_s } => too_frequent(threshold_s),
    }
}

/// Vast's 429: `{"detail": "API requests too frequent endpoint threshold=4.5"}` (the 429
/// examples of vast-ai/docs `api-reference/openapi.yaml`, e.g. `PUT /api/v0/asks/{id}/`), or
/// the bare "API requests too frequent" for a limit without a threshold
/// (`rate-limits-and-errors.mdx` lists both messages); never a `Retry-After`.
pub(super) fn too_frequent(threshold_s: Option<f64>) -> Response {
    let detail = match threshold_s {
        Some(t) => format!(
            "API requests too frequent endpoint threshold={}",
            python_float(t)
        ),
        None => "API requests too frequent".to_owned(),
    };
    (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({ "detail": detail })),
    )
        .into_response()
}

/// A float as Python's `repr` writes it (`1.0`, `4.5`, `0.45`), as the service's messages do.
pub(super) fn python_float(x: f64) -> String {
    let x = (x * 1e6).round() / 1e6;
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Vast takes the key as a bearer token, or (older clients) as `?api_key=`.
pub(super) fn presented_key<'a>(
    headers: &'a HeaderMap,
    q: &'a HashMap<String, String>,
) -> Credential<'a> {
    match bearer(headers) {
        Credential::Missing => q
            .get("api_key")
            .map_or(Credential::Missing, |k| Credential::Key(k.as_str())),
        other => other,
    }
}

pub(super) async fn not_found_route() -> Response {
    error(StatusCode::NOT_FOUND, "not_found", "No such endpoint")
}

pub(super) fn parse_body(body: &[u8]) -> Result<Map<String, Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "Invalid json body",
        )),
    }
}

pub(super) fn parse_id(id: &str) -> Option<u64> {
    id.parse::<u64>().ok()
}

/// The body checked against Vast's published schema (`schemas/vast.json`, operation named
/// without the trailing slash): a violation is a 400 with `error` (`invalid_args` for a create,
/// `invalid_request` for a search, as the spec's examples name them) and the fields at fault,
/// values never echoed. Top-level nulls count as absent, as the service takes them: vast-cli
/// sends `price`, `label` and `onstart` as null (`vast.py` create instance). A body that is
/// not JSON is left to the handler's own answer.
pub(super) fn schema_refusal(operation: &str, code: &str, body: &[u8]) -> Option<Response> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
    }
    let errors = crate::schema::vast().request_errors(operation, &v);
    (!errors.is_empty()).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            code,
            format!("Invalid args: {}", errors.join("; ")),
        )
    })
}

pub(super) fn invalid_args(msg: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_args", msg)
}

/// What the gate layer in front of one route needs: the engine, the kind of call and the
/// endpoint whose limit applies (`""` for none).
#[derive(Clone)]
pub(super) struct Gate {
    engine: Arc<Engine>,
    kind: RouteKind,
    endpoint: &'static str,
}

impl Gate {
    pub(super) fn new(engine: Arc<Engine>, kind: RouteKind, endpoint: &'static str) -> Self {
        Self {
            engine,
            kind,
            endpoint,
        }
    }
}

/// The gate as a route layer: a denied request is answered as Vast answers it and never
/// reaches the handler.
pub(super) async fn gate(AxState(g): AxState<Gate>, req: Request, next: Next) -> Response {
    let q = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map(|Query(q)| q)
        .unwrap_or_default();
    let verdict = g
        .engine
        .gate_at(g.kind, g.endpoint, presented_key(req.headers(), &q))
        .await;
    match verdict {
        Ok(_) => next.run(req).await,
        // The offer search answers a bad key with 404 (the spec's `searchOffers`: "404
        // Unauthorized - invalid or missing API key", msg "Invalid user key").
        Err(Denied::Unauthorized { .. }) if g.endpoint == "search_offers" => {
            error(StatusCode::NOT_FOUND, "auth_error", "Invalid user key")
        }
        Err(d) => denied(d),
    }
}
