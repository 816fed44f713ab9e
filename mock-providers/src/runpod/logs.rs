//! `GET /v2/pods/{id}/logs`: Server-Sent Events of the container and system logs, with
//! `tail`, `since` and `source`, following while the pod lives.

use super::*;

pub(super) struct LogQuery {
    source: Option<LogSource>,
    tail: usize,
    since: Option<jiff::Timestamp>,
    after_seq: u64,
}

pub(super) fn parse_log_query(
    q: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<LogQuery, Vec<String>> {
    let mut errors = Vec::new();
    let source = match q.get("source").map(String::as_str) {
        None => None,
        Some("container") => Some(LogSource::Container),
        Some("system") => Some(LogSource::System),
        Some(_) => {
            errors.push("source: value must be one of 'container', 'system'".to_owned());
            None
        }
    };
    let tail = match q.get("tail") {
        None => 100,
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n <= 5000 => n,
            Ok(_) => {
                errors.push("tail: must be <= 5000".to_owned());
                0
            }
            Err(_) => {
                errors.push("tail: expected integer".to_owned());
                0
            }
        },
    };
    let since = match q.get("since") {
        None => None,
        Some(s) => match s.parse::<jiff::Timestamp>() {
            Ok(ts) => Some(ts),
            Err(_) => {
                errors.push("since: expected an RFC 3339 date-time".to_owned());
                None
            }
        },
    };
    // Our event ids are `<ts>/<seq>`; resume after that sequence number.
    let after_seq = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit_once('/'))
        .and_then(|(_, seq)| seq.parse::<u64>().ok())
        .unwrap_or(0);
    if errors.is_empty() {
        Ok(LogQuery {
            source,
            tail,
            since,
            after_seq,
        })
    } else {
        Err(errors)
    }
}

pub(super) fn log_event(line: &LogLine) -> Event {
    let ts = crate::util::rfc3339(line.ts);
    let data = json!({"ts": ts, "source": line.source, "line": line.line});
    Event::default()
        .id(format!("{ts}/{:012}", line.seq))
        .data(data.to_string())
}

pub(super) async fn pod_logs(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Logs, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let query = match parse_log_query(&q, &headers) {
        Ok(q) => q,
        Err(errors) => {
            return admitted(
                problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Request validation failed.",
                    errors,
                ),
                &admission,
            );
        }
    };
    // Backfill: after Last-Event-ID, else after `since`, else the last `tail` lines.
    let Some((lines, _)) = s.engine.logs(&id, query.after_seq, query.source, None) else {
        return admitted(pod_not_found(), &admission);
    };
    let backfill: Vec<LogLine> = if query.after_seq > 0 {
        lines
    } else if let Some(since) = query.since {
        lines.into_iter().filter(|l| l.ts > since).collect()
    } else {
        let skip = lines.len().saturating_sub(query.tail);
        lines.into_iter().skip(skip).collect()
    };
    let last = backfill
        .last()
        .map(|l| l.seq)
        .unwrap_or_else(|| last_seq(&s.engine, &id));
    let stream = follow(s.engine.clone(), id, backfill, last, query.source);
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    admitted(resp, &admission)
}

pub(super) fn last_seq(engine: &Engine, id: &str) -> u64 {
    let inner = engine.lock();
    inner
        .seq_of(id)
        .and_then(|seq| inner.workloads.get(&seq))
        .map(|w| w.logs.last_seq())
        .unwrap_or(0)
}

/// Backfill, then new lines while the pod is active; the stream ends when the pod stops or
/// disappears.
pub(super) fn follow(
    engine: Arc<Engine>,
    id: String,
    backfill: Vec<LogLine>,
    after: u64,
    source: Option<LogSource>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct St {
        engine: Arc<Engine>,
        id: String,
        pending: std::collections::VecDeque<LogLine>,
        after: u64,
        source: Option<LogSource>,
        done: bool,
    }
    let st = St {
        engine,
        id,
        pending: backfill.into(),
        after,
        source,
        done: false,
    };
    stream::unfold(st, |mut st| async move {
        loop {
            if let Some(line) = st.pending.pop_front() {
                return Some((Ok(log_event(&line)), st));
            }
            if st.done {
                return None;
            }
            match st.engine.logs(&st.id, st.after, st.source, None) {
                None => return None,
                Some((lines, phase)) => {
                    if let Some(last) = lines.last() {
                        st.after = last.seq;
                    }
                    st.pending.extend(lines);
                    if !phase.is_active() {
                        st.done = true;
                    } else if st.pending.is_empty() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
    })
}
