//! Logs through `request_logs` and the presigned `result_url` behind it.

use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::State;
use super::reply::*;
use crate::engine::logs::LogSource;

// ---- logs ---------------------------------------------------------------------------------

pub(super) async fn request_logs(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m = match parse_body(&body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let tail = match m.get("tail") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => match t.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return invalid_args("Invalid args: 'tail' must be a number"),
        },
        Some(Value::Number(n)) => n.as_u64().map(|n| n as usize),
        Some(_) => return invalid_args("Invalid args: 'tail' must be a number"),
    };
    let filter = match m.get("filter") {
        None | Some(Value::Null) => None,
        Some(Value::String(f)) if !f.is_empty() => Some(f.clone()),
        Some(Value::String(_)) => None,
        Some(_) => return invalid_args("Invalid args: 'filter' must be a string"),
    };
    let daemon = matches!(m.get("daemon_logs"), Some(Value::String(d)) if d == "true")
        || matches!(m.get("daemon_logs"), Some(Value::Bool(true)));
    let source = if daemon {
        LogSource::System
    } else {
        LogSource::Container
    };
    let Some((lines, _)) = s.engine.logs(&id, 0, Some(source), None) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "invalid_id", "msg": "Invalid instance id."})),
        )
            .into_response();
    };
    let mut text: Vec<String> = lines
        .into_iter()
        .map(|l| l.line)
        .filter(|l| filter.as_ref().is_none_or(|f| l.contains(f.as_str())))
        .collect();
    if let Some(t) = tail {
        let skip = text.len().saturating_sub(t);
        text.drain(..skip);
    }
    let mut body_text = text.join("\n");
    if !body_text.is_empty() {
        body_text.push('\n');
    }
    let token = s.engine.lock().vast.store_snapshot(body_text);
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    ok(json!({
        "success": true,
        "result_url": format!("http://{host}/_s3/instance_logs/{token}.log"),
        "msg": "Logs will be uploaded to the result_url shortly.",
    }))
}

/// The presigned "S3" object behind a `result_url` (no authentication, like a presigned URL).
pub(super) async fn fetch_log_snapshot(
    AxState(s): AxState<State>,
    Path(file): Path<String>,
) -> Response {
    let token = file.trim_end_matches(".log");
    let text = s.engine.lock().vast.snapshots.get(token).cloned();
    match text {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/xml")],
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>",
        )
            .into_response(),
    }
}
