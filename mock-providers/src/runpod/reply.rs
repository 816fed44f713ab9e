//! RunPod's answers: RFC 9457 problems, the IETF `RateLimit` headers of admitted calls and
//! the gate's denials as RunPod words them.

use super::*;

pub(super) fn title(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Error")
}

/// An RFC 9457 problem response.
pub(super) fn problem(
    status: StatusCode,
    detail: impl Into<String>,
    errors: Vec<String>,
) -> Response {
    let mut body = json!({
        "title": title(status),
        "status": status.as_u16(),
        "detail": detail.into(),
    });
    if !errors.is_empty() {
        body["errors"] = json!(errors);
    }
    problem_body(status, body)
}

pub(super) fn problem_body(status: StatusCode, body: Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

/// `RateLimit` and `RateLimit-Policy`, one member per window: runpod/docs
/// `api-reference-v2/openapi.json`, `components.schemas.RateLimitHeader` ("one member per
/// window (`minute`, `hour`, `day`), each carrying the remaining request count `r` and
/// seconds until the window resets `t`", e.g. `"minute";r=0;t=12, "hour";r=2800;t=1812,
/// "day";r=49500;t=45012`) and `RateLimitPolicyHeader` (quota `q`, window length `w`, e.g.
/// `"minute";q=60;w=60, "hour";q=3000;w=3600, "day";q=50000;w=86400`), sent "on responses to
/// authenticated requests, not only on 429s".
pub(super) fn rate_headers(headers: &mut HeaderMap, windows: &[WindowState]) {
    let state: Vec<String> = windows
        .iter()
        .map(|w| format!("\"{}\";r={};t={}", w.name, w.remaining, w.reset_s))
        .collect();
    let policy: Vec<String> = windows
        .iter()
        .map(|w| format!("\"{}\";q={};w={}", w.name, w.limit, w.width_s))
        .collect();
    if let Ok(v) = HeaderValue::from_str(&state.join(", ")) {
        headers.insert("ratelimit", v);
    }
    if let Ok(v) = HeaderValue::from_str(&policy.join(", ")) {
        headers.insert("ratelimit-policy", v);
    }
}

pub(super) fn admitted(mut resp: Response, admission: &Admission) -> Response {
    if let Some(rate) = &admission.rate {
        rate_headers(resp.headers_mut(), &rate.windows);
    }
    resp
}

pub(super) fn denied(d: Denied) -> Response {
    match d {
        Denied::Fault(f) => f.answer(|status, body| match body {
            Some(body) => problem_body(status, body),
            None => problem(status, "injected fault", Vec::new()),
        }),
        Denied::Unauthorized { missing } => {
            let detail = if missing {
                "missing bearer token"
            } else {
                "invalid bearer token"
            };
            let mut resp = problem(StatusCode::UNAUTHORIZED, detail, Vec::new());
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp
        }
        // `TooManyRequestsError` of the v2 spec: "the response identifies the window that was
        // exceeded and how long to wait", `Retry-After` integer seconds "per the exceeded
        // window", example detail "rate limit exceeded for the minute window".
        Denied::RateLimited {
            retry_after_s,
            window,
            windows,
        } => {
            let mut resp = problem(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate limit exceeded for the {window} window"),
                Vec::new(),
            );
            let headers = resp.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                headers.insert(header::RETRY_AFTER, v);
            }
            rate_headers(headers, &windows);
            resp
        }
        // RunPod documents no per-endpoint intervals; never configured for it.
        Denied::TooFrequent { .. } => problem(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests",
            Vec::new(),
        ),
    }
}

pub(super) fn invalid(err: Invalid) -> Response {
    match err {
        Invalid::Json(detail) => problem(StatusCode::BAD_REQUEST, detail, Vec::new()),
        Invalid::Schema(errors) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Request validation failed.",
            errors,
        ),
        Invalid::Rule(detail) => problem(StatusCode::BAD_REQUEST, detail, Vec::new()),
    }
}

pub(super) fn pod_not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "pod not found", Vec::new())
}

pub(super) async fn not_found_route() -> Response {
    problem(StatusCode::NOT_FOUND, "resource not found", Vec::new())
}

pub(super) fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}
