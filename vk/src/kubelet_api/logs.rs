//! `/containerLogs/{namespace}/{pod}/{container}`: container logs streamed from the pod's
//! provider.
//!
//! Query parameters are those of the kubelet (`v1.PodLogOptions`): `follow`, `tailLines` (and the
//! legacy `tail`, where `all` means no limit), `sinceSeconds`, `sinceTime` (RFC 3339),
//! `timestamps`, `limitBytes`, `previous`; unknown ones are ignored as the kubelet ignores them.
//! A malformed or invalid value answers 400 naming the parameter (the kubelet answers 422 for
//! values that parse but are out of range; one status is simpler for clients and tests).
//!
//! The body is the provider's stream, pulled only as fast as the client reads (hyper polls the
//! body when the connection can take more), cut at `limitBytes`; when the client goes away the
//! body and with it the provider stream are dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use jiff::{SignedDuration, Timestamp};
use tracing::debug;

use super::{ApiError, AppState, find_container, workload};
use crate::provider::{LogOptions, LogStream};

/// Parses the kubelet's log query into [`LogOptions`]; `now` anchors `sinceSeconds`.
pub fn parse_query(pairs: &[(String, String)], now: Timestamp) -> Result<LogOptions, ApiError> {
    // The first value of a repeated parameter wins, as in the kubelet's query decoding.
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut opts = LogOptions {
        follow: get("follow")
            .map(|v| boolean("follow", v))
            .transpose()?
            .unwrap_or(false),
        timestamps: get("timestamps")
            .map(|v| boolean("timestamps", v))
            .transpose()?
            .unwrap_or(false),
        previous: get("previous")
            .map(|v| boolean("previous", v))
            .transpose()?
            .unwrap_or(false),
        ..LogOptions::default()
    };

    let tail = match get("tail") {
        // Legacy spelling; "all" is the same as no limit.
        Some("all") => None,
        Some(v) => Some(("tail", v)),
        None => get("tailLines").map(|v| ("tailLines", v)),
    };
    if let Some((name, v)) = tail {
        let n = integer(name, v)?;
        if n < 0 {
            return Err(invalid(name, v, "must be zero or more"));
        }
        opts.tail_lines = Some(n as u64);
    }
    if let Some(v) = get("limitBytes") {
        let n = integer("limitBytes", v)?;
        if n < 1 {
            return Err(invalid("limitBytes", v, "must be at least 1"));
        }
        opts.limit_bytes = Some(n as u64);
    }
    let since_seconds = get("sinceSeconds");
    let since_time = get("sinceTime");
    if since_seconds.is_some() && since_time.is_some() {
        return Err(ApiError::bad_request(
            "invalid query: at most one of sinceSeconds and sinceTime may be set",
        ));
    }
    if let Some(v) = since_seconds {
        let n = integer("sinceSeconds", v)?;
        if n < 1 {
            return Err(invalid("sinceSeconds", v, "must be at least 1"));
        }
        let since = now
            .checked_sub(SignedDuration::from_secs(n))
            .map_err(|_| invalid("sinceSeconds", v, "is too large"))?;
        opts.since = Some(since);
    }
    if let Some(v) = since_time {
        let t = v
            .parse::<Timestamp>()
            .map_err(|_| invalid("sinceTime", v, "must be an RFC 3339 time"))?;
        opts.since = Some(t);
    }
    if let Some(v) = get("stream")
        && v != "All"
    {
        return Err(invalid(
            "stream",
            v,
            "is not supported: providers serve stdout and stderr as one stream (use All)",
        ));
    }
    Ok(opts)
}

/// Go's `strconv.ParseBool`, which the kubelet's query decoding uses.
fn boolean(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(name, v, "must be true or false")),
    }
}

fn integer(name: &str, v: &str) -> Result<i64, ApiError> {
    v.parse::<i64>()
        .map_err(|_| invalid(name, v, "must be an integer"))
}

fn invalid(name: &str, v: &str, why: &str) -> ApiError {
    let mut shown = v.to_owned();
    shown.truncate(64);
    ApiError::bad_request(format!("invalid query parameter {name}={shown:?}: {why}"))
}

/// The container whose own log to read: set where the provider keeps a log per container (it
/// runs each container of a pod of several); `None` for the workload's one log.
pub(crate) fn own_log(
    provider: &dyn crate::provider::DynProvider,
    pod: &k8s_openapi::api::core::v1::Pod,
    container: &str,
) -> Option<String> {
    (provider.capabilities().containers && crate::pods::spec::running_containers(pod).len() > 1)
        .then(|| container.to_owned())
}

/// The handler.
pub(crate) async fn container_logs(
    State(s): State<AppState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    match serve(&s, &namespace, &pod, &container, query).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(
    s: &AppState,
    namespace: &str,
    pod: &str,
    container: &str,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) =
        query.map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    let mut opts = parse_query(&pairs, Timestamp::now())?;
    let p = find_container(s.host.as_ref(), namespace, pod, container)?;
    let (provider, observed) = workload(s.host.as_ref(), &p, container)?;
    opts.container = own_log(provider.as_ref(), &p, container);
    let name = provider.name().to_owned();
    // The provider call layer bounds opening the stream by its timeout.
    let stream = match provider.logs(&observed.provider_id, &opts).await {
        Ok(stream) => stream,
        Err(e) => return Err(ApiError::from_provider(&name, &e)),
    };
    debug!(namespace, pod, container, provider = %name, follow = opts.follow, "streaming logs");
    let body = Body::from_stream(Limited::new(stream, opts.limit_bytes, name));
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response())
}

/// A provider's log stream cut after `limit` bytes; a provider error ends the body with an
/// error, which aborts the response (the client sees a truncated stream, as with the kubelet).
pub struct Limited {
    inner: LogStream,
    left: Option<u64>,
    provider: String,
}

impl Limited {
    pub fn new(inner: LogStream, limit: Option<u64>, provider: String) -> Self {
        Self {
            inner,
            left: limit,
            provider,
        }
    }
}

impl Stream for Limited {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.left == Some(0) {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(mut chunk))) => {
                if let Some(left) = self.left {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(chunk.len());
                    chunk.truncate(take);
                    self.left = Some(left - take as u64);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                debug!(provider = %self.provider, error = %e, "log stream failed");
                self.left = Some(0);
                Poll::Ready(Some(Err(std::io::Error::other(format!(
                    "provider {}: {e}",
                    self.provider
                )))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderError;
    use futures::StreamExt;

    fn q(s: &str) -> Vec<(String, String)> {
        s.split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    fn now() -> Timestamp {
        "2026-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn parses_every_kubelet_parameter() {
        let o = parse_query(
            &q("follow=true&tailLines=10&limitBytes=500&timestamps=1&previous=False&sinceSeconds=60"),
            now(),
        )
        .unwrap();
        assert_eq!(
            o,
            LogOptions {
                tail_lines: Some(10),
                since: Some("2026-05-01T11:59:00Z".parse().unwrap()),
                limit_bytes: Some(500),
                timestamps: true,
                follow: true,
                previous: false,
                container: None,
            }
        );
        let o = parse_query(&q("sinceTime=2026-04-30T10:00:00+02:00"), now()).unwrap();
        assert_eq!(o.since, Some("2026-04-30T08:00:00Z".parse().unwrap()));
        assert_eq!(parse_query(&[], now()).unwrap(), LogOptions::default());
    }

    #[test]
    fn legacy_tail_and_unknown_parameters() {
        assert_eq!(
            parse_query(&q("tail=5"), now()).unwrap().tail_lines,
            Some(5)
        );
        assert_eq!(
            parse_query(&q("tail=all&tailLines=3"), now())
                .unwrap()
                .tail_lines,
            None
        );
        assert_eq!(
            parse_query(&q("insecureSkipTLSVerifyBackend=true&stream=All"), now()).unwrap(),
            LogOptions::default()
        );
        // First value wins.
        assert_eq!(
            parse_query(&q("tailLines=1&tailLines=x"), now())
                .unwrap()
                .tail_lines,
            Some(1)
        );
    }

    #[test]
    fn malformed_or_invalid_values_are_400_naming_the_parameter() {
        for (query, name) in [
            ("follow=yes", "follow"),
            ("tailLines=abc", "tailLines"),
            ("tailLines=-1", "tailLines"),
            ("limitBytes=0", "limitBytes"),
            ("sinceSeconds=0", "sinceSeconds"),
            ("sinceSeconds=99999999999999999", "sinceSeconds"),
            ("sinceTime=yesterday", "sinceTime"),
            ("sinceSeconds=5&sinceTime=2026-04-30T10:00:00Z", "sinceTime"),
            ("timestamps=", "timestamps"),
            ("stream=Stderr", "stream"),
        ] {
            let e = parse_query(&q(query), now()).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{query}");
            assert!(e.message.contains(name), "{query}: {}", e.message);
        }
    }

    fn stream_of(chunks: &[&'static str], fail_at_end: bool) -> LogStream {
        let mut items: Vec<Result<Bytes, ProviderError>> = chunks
            .iter()
            .map(|c| Ok(Bytes::from_static(c.as_bytes())))
            .collect();
        if fail_at_end {
            items.push(Err(ProviderError::transient("connection reset")));
        }
        Box::pin(futures::stream::iter(items))
    }

    #[tokio::test]
    async fn limit_bytes_cuts_the_stream_and_stops_polling() {
        let l = Limited::new(
            stream_of(&["hello\n", "world\n", "more\n"], true),
            Some(8),
            "p".into(),
        );
        let got: Vec<_> = l.collect().await;
        let text: Vec<u8> = got.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
        assert_eq!(text, b"hello\nwo");
    }

    #[tokio::test]
    async fn provider_errors_end_the_body_with_an_error() {
        let l = Limited::new(stream_of(&["a\n"], true), None, "rp".into());
        let got: Vec<_> = l.collect().await;
        assert_eq!(got.len(), 2);
        assert!(
            got[1]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("provider rp")
        );
    }
}
