//! The counting, fault-injecting proxy in front of the remote API server that each scenario's
//! VK talks through: it counts creates, deletes and lists of pods, and answers hidden,
//! partial and failing lists in the API server's place.

use super::*;

/// Calls seen by a scenario's proxy and the faults it is to inject.
#[derive(Default)]
pub(super) struct ProxyState {
    pub(super) counters: BTreeMap<&'static str, u64>,
    /// Remote namespace -> lists still to answer with `hidden` (all pods when empty) left out.
    pub(super) hide: HashMap<String, u32>,
    pub(super) hidden: HashSet<String>,
    /// Remote namespace -> lists still to fail with 503.
    pub(super) fail: HashMap<String, u32>,
}

pub(super) struct Proxy {
    pub(super) upstream: String,
    pub(super) http: reqwest::Client,
    pub(super) state: Mutex<ProxyState>,
}

/// What a request to the remote API server is, for counting and faults.
enum Call<'a> {
    List(&'a str),
    Create,
    Delete,
    Other,
}

fn classify<'a>(method: &Method, path: &'a str, query: &str) -> Call<'a> {
    let Some(rest) = path.strip_prefix("/api/v1/namespaces/") else {
        return Call::Other;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, [ns, "pods"]) if !query.contains("watch=") => Call::List(ns),
        (&Method::POST, [_, "pods"]) => Call::Create,
        (&Method::DELETE, [_, "pods", _]) => Call::Delete,
        _ => Call::Other,
    }
}

fn status_response(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Request headers not passed on (reqwest sets its own; no compression to undo).
fn hop_header(name: &HeaderName, upgrade: bool) -> bool {
    let hop = [
        header::HOST,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::ACCEPT_ENCODING,
        header::AUTHORIZATION,
    ];
    hop.contains(name) || (!upgrade && (name == header::CONNECTION || name == header::UPGRADE))
}

pub(super) async fn forward(
    State(p): State<Arc<Proxy>>,
    mut req: axum::extract::Request,
) -> Response {
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let call = classify(&parts.method, &path, &query);
    let mut hide = None;
    {
        let mut s = p.state.lock().unwrap();
        match &call {
            Call::Create => *s.counters.entry("create").or_default() += 1,
            Call::Delete => *s.counters.entry("delete").or_default() += 1,
            Call::List(ns) => {
                *s.counters.entry("list").or_default() += 1;
                if let Some(n) = s.fail.get_mut(*ns).filter(|n| **n > 0) {
                    *n -= 1;
                    return status_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                        "injected by the conformance suite: the API server is unavailable",
                    );
                }
                if let Some(n) = s.hide.get_mut(*ns).filter(|n| **n > 0) {
                    *n -= 1;
                    hide = Some(s.hidden.clone());
                }
            }
            Call::Other => {}
        }
    }
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let url = if query.is_empty() {
        format!("{}{path}", p.upstream)
    } else {
        format!("{}{path}?{query}", p.upstream)
    };
    let mut out = p.http.request(parts.method.clone(), url);
    for (k, v) in &parts.headers {
        if !hop_header(k, upgrade) {
            out = out.header(k, v);
        }
    }
    if !body.is_empty() {
        out = out.body(body);
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(e) => {
            return status_response(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailable",
                &format!("the conformance proxy cannot reach the remote API server: {e}"),
            );
        }
    };
    let status = resp.status();
    if matches!(call, Call::Create) && status.is_success() {
        *p.state
            .lock()
            .unwrap()
            .counters
            .entry("created")
            .or_default() += 1;
    }
    let mut headers = HeaderMap::new();
    for (k, v) in resp.headers() {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            headers.append(k, v.clone());
        }
    }
    if status == StatusCode::SWITCHING_PROTOCOLS
        && let Some(on_upgrade) = on_upgrade
    {
        tokio::spawn(async move {
            let (Ok(client_side), Ok(mut remote_side)) = (on_upgrade.await, resp.upgrade().await)
            else {
                return;
            };
            let mut client_side = hyper_util::rt::TokioIo::new(client_side);
            let _ = tokio::io::copy_bidirectional(&mut client_side, &mut remote_side).await;
        });
        let mut r = Response::new(Body::empty());
        *r.status_mut() = status;
        *r.headers_mut() = headers;
        return r;
    }
    if let Some(hidden) = hide.filter(|_| status.is_success()) {
        let mut list: Value = resp.json().await.unwrap_or(Value::Null);
        if let Some(items) = list["items"].as_array_mut() {
            items.retain(|i| {
                !hidden.is_empty()
                    && !i["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| hidden.contains(n))
            });
        }
        headers.remove(header::CONTENT_ENCODING);
        let mut r = Response::new(Body::from(list.to_string()));
        *r.status_mut() = status;
        *r.headers_mut() = headers;
        return r;
    }
    // Streamed as it comes (followed logs).
    let stream = futures::stream::unfold(resp, |mut r| async move {
        match r.chunk().await {
            Ok(Some(c)) => Some((Ok::<_, std::io::Error>(c), r)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), r)),
        }
    });
    let mut r = Response::new(Body::from_stream(stream));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}
