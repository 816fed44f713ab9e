//! `kubectl logs` of RunPod pods: the v2 API's log stream, `GET /v2/pods/{id}/logs`
//! (runpod/docs `api-reference-v2/openapi.json`, "Stream pod logs").
//!
//! What the service does, and what follows from it here:
//! - The answer is Server-Sent Events whose `data` is `{"source", "line", "ts"}`; `source` is
//!   `container` (the workload's stdout and stderr) or `system` (the host's narration: image
//!   pulls, container starts). Only `source=container` is asked for: `kubectl logs` shows what
//!   the container printed, as the kubelet does.
//! - The stream first replays `tail` historical lines (100 when omitted, at most 5000, more is
//!   a 422) or those after `since` (RFC 3339), then stays open forever with live lines; it has
//!   no end-of-backfill marker (runpod/runpodctl `internal/api` log client: "never close on
//!   their own"). A non-follow request therefore ends when no line came for [`QUIET`] after the
//!   last one (replayed history arrives in one burst), [`FIRST_LINE`] after the stream opened
//!   without any line, or after [`SNAPSHOT_MAX`] at most. Without `--tail` the last 5000 lines
//!   are asked for, the most the API replays.
//! - Event ids are cursors: `Last-Event-ID` resumes after that event (exclusive). A follow that
//!   loses its connection (a transport error, a 5xx or 429) reconnects with the last id and a
//!   back-off from 0.5 s doubling to 15 s, so nothing is printed twice and nothing is lost; a
//!   refusal (400, 401, 403, 404, 422) ends it with the error; so does the server closing the
//!   stream cleanly, which it does when the pod is gone.
//! - A payload that is not the documented object is passed through as a line, so a change of
//!   the wire format is visible rather than dropped.
//!
//! `previous` (the log of a container before its restart) has no counterpart: RunPod restarts
//! a container in place and keeps one log.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

use super::RunPod;
use crate::provider::{LogOptions, LogStream, ProviderError};
use crate::providers::http::{Bearer, Client, Opened};

/// The most lines the API replays (`tail` maximum).
pub const MAX_TAIL: u64 = 5000;
/// A snapshot ends this long after its last line (the backfill has drained).
pub const QUIET: Duration = Duration::from_millis(750);
/// A snapshot of a pod that printed nothing ends this long after the stream opened.
pub const FIRST_LINE: Duration = Duration::from_millis(1500);
/// A snapshot never reads longer than this (a container printing faster than [`QUIET`]).
pub const SNAPSHOT_MAX: Duration = Duration::from_secs(10);
const RECONNECT_MIN: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(15);

/// One Server-Sent Event: its `id` (if any) and its `data` lines joined by `\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: String,
}

/// An incremental parser of an event stream (WHATWG HTML, "Server-sent events": events end
/// at a blank line; `data:` and `id:` fields are read, `event:`, `retry:` and `:` comments
/// ignored; one optional space after the colon is not part of the value; `\n`, `\r\n` and
/// `\r` all end lines).
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` that follows belongs to it.
    after_cr: bool,
    data: Vec<String>,
    id: Option<String>,
}

/// Largest line kept (a longer one is cut): a provider cannot make the VK buffer without end.
const MAX_LINE_BYTES: usize = 1024 * 1024;

impl SseParser {
    /// Feeds `chunk`; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(e) = self.field(&String::from_utf8_lossy(&line)) {
                        out.push(e);
                    }
                }
                _ if self.line.len() < MAX_LINE_BYTES => self.line.push(b),
                _ => {}
            }
        }
        out
    }

    /// One line of the stream; a blank one dispatches the event.
    fn field(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() {
                // An id without data moves no cursor we use; it is dropped with the event.
                self.id = None;
                return None;
            }
            return Some(SseEvent {
                id: self.id.take(),
                data: std::mem::take(&mut self.data).join("\n"),
            });
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "data" => self.data.push(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

/// The documented payload of a log event.
#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    line: Option<String>,
    #[serde(default)]
    ts: Option<String>,
}

/// The text `kubectl logs` shows for one event (with its timestamp first when asked, as the
/// kubelet prefixes RFC 3339 times); `None` for a line of another source than the container.
pub fn render(data: &str, timestamps: bool) -> Option<String> {
    let (line, ts) = match serde_json::from_str::<Entry>(data) {
        Ok(Entry {
            source,
            line: Some(line),
            ts,
        }) => {
            if source.as_deref().is_some_and(|s| s != "container") {
                return None;
            }
            (line, ts)
        }
        // Not the documented object: shown as it came.
        _ => (data.to_owned(), None),
    };
    let mut out = match (timestamps, ts) {
        (true, Some(ts)) => format!("{ts} {line}"),
        _ => line,
    };
    out.push('\n');
    Some(out)
}

/// The query of the first request: the container's lines, `since` or the last `tail`.
pub fn query(opts: &LogOptions) -> Vec<(&'static str, String)> {
    let mut q = vec![("source", "container".to_owned())];
    match opts.since {
        Some(since) => q.push(("since", since.to_string())),
        None => q.push((
            "tail",
            opts.tail_lines
                .unwrap_or(MAX_TAIL)
                .min(MAX_TAIL)
                .to_string(),
        )),
    }
    q
}

impl RunPod {
    /// Opens the pod's log stream as `opts` asks (see the module documentation).
    pub(super) async fn open_logs(
        &self,
        pod_id: &str,
        opts: &LogOptions,
    ) -> Result<LogStream, ProviderError> {
        if opts.previous {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "logs of a previous container (RunPod restarts a container in place and \
                       keeps one log)"
                    .into(),
            });
        }
        let mut url = self.api.url(&["pods", pod_id, "logs"], false);
        url.query_pairs_mut().extend_pairs(query(opts));
        let timeout = Duration::from_secs(self.cfg.request_timeout_secs.max(1));
        let resp = connect(&self.api, &url, None, timeout).await?;
        let reader = Reader {
            api: self.api.clone(),
            url,
            timeout,
            resp: Some(resp),
            parser: SseParser::default(),
            pending: VecDeque::new(),
            cursor: None,
            follow: opts.follow,
            timestamps: opts.timestamps,
            bytes_left: opts.limit_bytes,
            opened: Instant::now(),
            last_line: None,
            backoff: RECONNECT_MIN,
            done: false,
        };
        Ok(Box::pin(futures::stream::unfold(reader, Reader::next)))
    }
}

/// Opens one connection (resuming after `cursor`); a refusal is the provider's error.
pub(super) async fn connect(
    api: &Client<Bearer>,
    url: &reqwest::Url,
    cursor: Option<&str>,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    let mut headers = HeaderMap::new();
    if let Some(id) = cursor.and_then(|c| HeaderValue::from_str(c).ok()) {
        headers.insert("last-event-id", id);
    }
    match api.open_stream(url.clone(), headers, timeout).await? {
        Opened::Stream(resp) => Ok(resp),
        Opened::Refused(raw) => Err(super::error_of(&raw)),
    }
}

/// The state of one `kubectl logs` read.
struct Reader {
    api: Arc<Client<Bearer>>,
    url: reqwest::Url,
    timeout: Duration,
    resp: Option<reqwest::Response>,
    parser: SseParser,
    pending: VecDeque<Bytes>,
    /// The id of the last event read: where a reconnect resumes.
    cursor: Option<String>,
    follow: bool,
    timestamps: bool,
    bytes_left: Option<u64>,
    opened: Instant,
    last_line: Option<Instant>,
    backoff: Duration,
    done: bool,
}

impl Reader {
    async fn next(mut self) -> Option<(Result<Bytes, ProviderError>, Self)> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some((Ok(self.bounded(b)?), self));
            }
            if self.done {
                return None;
            }
            let Some(resp) = self.resp.as_mut() else {
                // A follow whose connection dropped: resume after the last event.
                tokio::time::sleep(self.backoff).await;
                self.backoff = (self.backoff * 2).min(RECONNECT_MAX);
                match connect(&self.api, &self.url, self.cursor.as_deref(), self.timeout).await {
                    Ok(r) => self.resp = Some(r),
                    Err(ProviderError::Transient { .. }) => {}
                    Err(e) => {
                        self.done = true;
                        return Some((Err(e), self));
                    }
                }
                continue;
            };
            let chunk = if self.follow {
                resp.chunk().await
            } else {
                let now = Instant::now();
                let until = match self.last_line {
                    Some(at) => at + QUIET,
                    None => self.opened + FIRST_LINE,
                }
                .min(self.opened + SNAPSHOT_MAX);
                match tokio::time::timeout(until.saturating_duration_since(now), resp.chunk()).await
                {
                    Ok(c) => c,
                    // The backfill has drained (or the snapshot took its longest).
                    Err(_) => return None,
                }
            };
            match chunk {
                Ok(Some(bytes)) => {
                    for e in self.parser.push(&bytes) {
                        if e.id.is_some() {
                            self.cursor = e.id.clone();
                        }
                        if let Some(text) = render(&e.data, self.timestamps) {
                            self.pending.push_back(Bytes::from(text));
                            self.last_line = Some(Instant::now());
                            self.backoff = RECONNECT_MIN;
                        }
                    }
                }
                // The server ended the stream: the pod is gone (the live stream never ends
                // otherwise).
                Ok(None) => self.done = true,
                Err(_) if self.follow => self.resp = None,
                Err(e) => {
                    self.done = true;
                    return Some((
                        Err(ProviderError::transient(format!(
                            "RunPod log stream broke: {e}"
                        ))),
                        self,
                    ));
                }
            }
        }
    }

    /// `b`, cut to what `limitBytes` still allows; `None` once it allows nothing.
    fn bounded(&mut self, b: Bytes) -> Option<Bytes> {
        let Some(left) = self.bytes_left.as_mut() else {
            return Some(b);
        };
        if *left == 0 {
            return None;
        }
        let take = b.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
        *left -= take as u64;
        Some(b.slice(..take))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_and_in_any_line_ending_come_out_whole() {
        let stream = b": keepalive\n\nid: a/1\ndata: {\"line\":\"one\"}\n\nid:a/2\r\ndata: two\r\ndata:  three\r\n\r\nretry: 10\nevent: x\ndata: four\r\rid\n";
        let whole = SseParser::default().push(stream);
        let expect = vec![
            SseEvent {
                id: Some("a/1".into()),
                data: "{\"line\":\"one\"}".into(),
            },
            SseEvent {
                id: Some("a/2".into()),
                data: "two\n three".into(),
            },
            SseEvent {
                id: None,
                data: "four".into(),
            },
        ];
        assert_eq!(whole, expect);
        for split in 0..stream.len() {
            let mut p = SseParser::default();
            let mut got = p.push(&stream[..split]);
            got.extend(p.push(&stream[split..]));
            assert_eq!(got, expect, "split at {split}");
        }
    }

    #[test]
    fn container_lines_are_shown_with_timestamps_when_asked_and_system_lines_not() {
        let d = r#"{"source":"container","line":"hello","ts":"2026-12-01T10:00:00.5Z"}"#;
        assert_eq!(render(d, false).as_deref(), Some("hello\n"));
        assert_eq!(
            render(d, true).as_deref(),
            Some("2026-12-01T10:00:00.5Z hello\n")
        );
        let sys = r#"{"source":"system","line":"pulling image","ts":"2026-12-01T10:00:00Z"}"#;
        assert_eq!(render(sys, false), None);
        // Not the documented object: passed through, never dropped.
        assert_eq!(render("plain text", true).as_deref(), Some("plain text\n"));
    }

    #[test]
    fn the_query_asks_for_the_container_and_at_most_what_the_api_replays() {
        let q = query(&LogOptions::default());
        assert_eq!(q, [("source", "container".into()), ("tail", "5000".into())]);
        let q = query(&LogOptions {
            tail_lines: Some(20_000),
            ..Default::default()
        });
        assert_eq!(q[1], ("tail", "5000".into()));
        let since: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let q = query(&LogOptions {
            tail_lines: Some(3),
            since: Some(since),
            ..Default::default()
        });
        assert_eq!(q[1], ("since", "2026-12-01T10:00:00Z".into()));
    }
}
