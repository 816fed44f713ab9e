//! slurmrestd's answers: the `meta` block, errors as each dialect words them, and the
//! admission of a call (the JWT headers, the dialect of its path).

use super::*;

pub(super) fn meta(dialect: Dialect) -> Value {
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

pub(super) fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// An `errors[]` answer. 22.05 spells the number `error_code` in submission answers and
/// `error_number` elsewhere.
pub(super) fn slurm_error(
    dialect: Dialect,
    err: &SlurmErr,
    source: &str,
    submit: bool,
) -> Response {
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

pub(super) fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut resp = (status, text).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

pub(super) async fn unknown_url() -> Response {
    plain(StatusCode::NOT_FOUND, "Unable find requested URL")
}

/// Counters, faults and JWT headers; `Err` is the answer to send instead.
/// A route's answer: `Err` is a refusal (the gate's, or the request's own), answered as is.
pub(super) type Reply = Result<Response, Response>;

pub(super) async fn admit(
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
    if let Some(Denied::Fault(f)) = fault {
        return Err(f.answer(|status, body| {
            let body = body.unwrap_or_else(|| {
                json!({"meta": meta(dialect), "errors": [{"description": "injected fault",
                    "error_number": 1800, "error": "Unable to contact slurm controller (connect failure)",
                    "source": "emulator"}]})
            });
            json_response(status, body)
        }));
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
