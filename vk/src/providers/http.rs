//! The one HTTP client of the provider adapters (RunPod, Vast.ai, slurmrestd), with pluggable
//! authentication ([`auth`]): base URL checks, requests and fully read answers, the
//! classification of HTTP outcomes into [`ProviderError`], `Retry-After` parsing, and bounded,
//! redacted messages.
//!
//! Bounds: redirects are never followed (a 3xx is an answer, so credentials never travel to
//! another host), an answer larger than [`MAX_BODY_BYTES`] is refused while it is read, and a
//! plain `http://` base URL must point to loopback unless the operator allows it.
//!
//! Secrets: credentials only ever go into (sensitive) headers of requests to the configured
//! base URL. They are never formatted into a message: every message built from a request or its
//! answer is passed through the [`Secret`] that request carried ([`RawResponse::redact`]), in
//! case a backend ever echoes it back. Response bodies are never logged (listings carry the
//! workloads' environment, which may hold secrets).

pub mod auth;
pub mod pace;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{ACCEPT, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use crate::provider::ProviderError;
pub(crate) use auth::{Auth, Bearer, Credentials, Secret};

/// Longest provider message copied into an error.
const MAX_MESSAGE_CHARS: usize = 400;
/// A `Retry-After` longer than this is clamped: a provider asking for hours is treated as
/// "back off for a while" and the framework's own backoff takes over.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read from a provider (a list of thousands of workloads is a few MiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Why an adapter could not be constructed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("provider {provider}: the API key is empty")]
    MissingApiKey { provider: String },
    #[error("provider {provider}: invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        provider: String,
        url: String,
        reason: String,
    },
    #[error("provider {provider}: invalid setting: {reason}")]
    InvalidSetting { provider: String, reason: String },
    #[error(
        "provider {provider}: no rustls crypto provider is installed in this process \
         (install the ring provider before constructing adapters)"
    )]
    NoCryptoProvider { provider: String },
    #[error("provider {provider}: failed to build the HTTP client")]
    BuildClient {
        provider: String,
        #[source]
        source: reqwest::Error,
    },
}

/// A provider's HTTP answer, fully read, with the secret its request carried.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub status: StatusCode,
    pub retry_after: Option<Duration>,
    pub body: Bytes,
    secret: Secret,
}

impl RawResponse {
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// Decodes a success body; a body that is not the expected JSON is a transient fault (a
    /// proxy answering HTML, a truncated reply), never a panic.
    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, ProviderError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            ProviderError::transient(self.redact(&format!(
                "malformed {what} response (HTTP {}): {e}",
                self.status.as_u16()
            )))
        })
    }

    /// The body as text for messages, when it is not JSON (for example an HTML error page).
    pub fn text_snippet(&self) -> String {
        truncate(String::from_utf8_lossy(&self.body).trim())
    }

    /// `detail`, or the status's reason phrase when the provider said nothing.
    pub fn detail_or_reason(&self, detail: String) -> String {
        if detail.is_empty() {
            self.status
                .canonical_reason()
                .unwrap_or("no detail")
                .to_owned()
        } else {
            detail
        }
    }

    /// `<service> HTTP <status>: <detail>`, bounded and redacted: the message of an error.
    pub fn message(&self, service: &str, detail: &str) -> String {
        self.redact(&truncate(&format!(
            "{service} HTTP {}: {detail}",
            self.status.as_u16()
        )))
    }

    /// Removes the request's secret from a message.
    pub fn redact(&self, message: &str) -> String {
        self.secret.redact(message)
    }

    /// The secret the request carried (to explain an authentication failure, never to show).
    pub fn secret(&self) -> &Secret {
        &self.secret
    }
}

/// A client of one provider's API: its base URL, a connection pool and the authentication.
pub(crate) struct Client<A> {
    http: reqwest::Client,
    /// The same without a total timeout, for answers that stream (Server-Sent Events).
    streaming: reqwest::Client,
    base: Url,
    auth: A,
    /// Put before the request in transport error messages (`slurmrestd GET ... timed out`).
    peer: Option<&'static str>,
    /// Largest answer read.
    max_body: usize,
    /// When the next request may go, as the provider's `RateLimit` answers ask.
    pacer: pace::Pacer,
}

impl<A: fmt::Debug> fmt::Debug for Client<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("auth", &self.auth)
            .finish()
    }
}

impl<A: Auth> Client<A> {
    /// Checks `base_url` (plain http(s), no query or credentials; `http://` only to loopback
    /// unless `allow_insecure_http`) and builds the client. The process must have installed a
    /// rustls crypto provider.
    pub fn new(
        provider: &str,
        base_url: &str,
        auth: A,
        timeout: Duration,
        allow_insecure_http: bool,
    ) -> Result<Self, InitError> {
        let invalid = |reason: String| InitError::InvalidBaseUrl {
            provider: provider.to_owned(),
            url: base_url.to_owned(),
            reason,
        };
        let mut base = Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid("scheme must be http or https".into()));
        }
        if base.cannot_be_a_base() || base.query().is_some() || !base.username().is_empty() {
            return Err(invalid(
                "must be a plain http(s) URL without query or credentials".into(),
            ));
        }
        if base.scheme() == "http" && !allow_insecure_http && !is_loopback(&base) {
            return Err(invalid(
                "plain http:// is only allowed to loopback: the credentials would cross the \
                 network in clear (use https, or set allowInsecureHttp: true)"
                    .into(),
            ));
        }
        // Normalise: no trailing slash, so segments are appended predictably.
        let trimmed = base.path().trim_end_matches('/').to_owned();
        base.set_path(&trimmed);
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(InitError::NoCryptoProvider {
                provider: provider.to_owned(),
            });
        }
        let build = |total: Option<Duration>| {
            let b = reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .user_agent(concat!("gpu-vk/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none());
            match total {
                Some(t) => b.timeout(t),
                None => b,
            }
            .build()
            .map_err(|source| InitError::BuildClient {
                provider: provider.to_owned(),
                source,
            })
        };
        let http = build(Some(timeout))?;
        let streaming = build(None)?;
        Ok(Self {
            http,
            streaming,
            base,
            auth,
            peer: None,
            max_body: MAX_BODY_BYTES,
            pacer: pace::Pacer::default(),
        })
    }

    /// Reads answers up to `bytes` (tests use a small bound).
    #[cfg(test)]
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The authentication, for adapter-specific explanations of its failures.
    pub fn auth(&self) -> &A {
        &self.auth
    }

    /// Names the peer in transport error messages (`slurmrestd`).
    pub fn with_peer(mut self, peer: &'static str) -> Self {
        self.peer = Some(peer);
        self
    }

    /// `base` + the percent-encoded `segments`, with an optional trailing slash.
    pub fn url(&self, segments: &[&str], trailing_slash: bool) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
            if trailing_slash {
                path.push("");
            }
        }
        url
    }

    /// Sends one authenticated request and reads the whole answer. Credentials that cannot be
    /// had are [`ProviderError::Auth`]; connection failures, timeouts and unreadable bodies are
    /// [`ProviderError::Transient`].
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse, ProviderError> {
        let Credentials { headers, secret } = self.auth.credentials()?;
        let what = self.describe(&method, &url);
        let mut req = self
            .http
            .request(method, url)
            .headers(headers)
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            req = req.json(body);
        }
        self.pacer.wait().await;
        read(req, &what, secret, self.max_body, Some(&self.pacer)).await
    }

    /// Opens an authenticated `GET` whose answer streams (`text/event-stream`), with `headers`
    /// added: a success is returned unread, to be read chunk by chunk for as long as the
    /// caller wants (no total timeout; answering must begin within the client's timeout); any
    /// other answer is read whole, for the adapter to classify.
    pub async fn open_stream(
        &self,
        url: Url,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Opened, ProviderError> {
        let Credentials {
            headers: auth,
            secret,
        } = self.auth.credentials()?;
        let what = self.describe(&Method::GET, &url);
        let req = self
            .streaming
            .get(url)
            .headers(auth)
            .headers(headers)
            .header(ACCEPT, "text/event-stream");
        let resp = tokio::time::timeout(timeout, req.send())
            .await
            .map_err(|_| ProviderError::transient(format!("{what} timed out")))?
            .map_err(|e| transport_error(&what, &e, &secret))?;
        if resp.status().is_success() {
            return Ok(Opened::Stream(resp));
        }
        let status = resp.status();
        let retry_after = parse_retry_after(resp.headers());
        let body = tokio::time::timeout(timeout, resp.bytes())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| b.slice(..b.len().min(64 * 1024)))
            .unwrap_or_default();
        Ok(Opened::Refused(RawResponse {
            status,
            retry_after,
            body,
            secret,
        }))
    }

    /// Fetches a URL the provider handed out (for example a pre-signed log download), without
    /// the credentials: it may point to another host. Messages are still redacted.
    pub async fn fetch_unauthenticated(&self, url: Url) -> Result<RawResponse, ProviderError> {
        let secret = self
            .auth
            .credentials()
            .map(|c| c.secret)
            .unwrap_or_default();
        let what = self.describe(&Method::GET, &url);
        read(self.http.get(url), &what, secret, self.max_body, None).await
    }

    fn describe(&self, method: &Method, url: &Url) -> String {
        match self.peer {
            Some(peer) => format!("{peer} {method} {}", url.path()),
            None => format!("{method} {}", url.path()),
        }
    }
}

/// What [`Client::open_stream`] got.
#[derive(Debug)]
pub(crate) enum Opened {
    /// A success, unread.
    Stream(reqwest::Response),
    /// Any other answer, read.
    Refused(RawResponse),
}

/// True when the URL's host is a loopback address or `localhost`.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Sends a built request and reads the whole answer, refusing one larger than `max_body`.
async fn read(
    req: reqwest::RequestBuilder,
    what: &str,
    secret: Secret,
    max_body: usize,
    pacer: Option<&pace::Pacer>,
) -> Result<RawResponse, ProviderError> {
    let mut resp = req
        .send()
        .await
        .map_err(|e| transport_error(what, &e, &secret))?;
    if let Some(p) = pacer {
        p.observe(resp.headers());
    }
    let status = resp.status();
    let retry_after = parse_retry_after(resp.headers());
    let too_large = || {
        ProviderError::transient(format!(
            "{what}: the answer is larger than {max_body} bytes; not read"
        ))
    };
    if resp.content_length().is_some_and(|n| n > max_body as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| transport_error(what, &e, &secret))?
    {
        if body.len() + chunk.len() > max_body {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(RawResponse {
        status,
        retry_after,
        body: Bytes::from(body),
        secret,
    })
}

/// A request that got no (complete) answer: transient, with the causes, redacted.
fn transport_error(what: &str, err: &reqwest::Error, secret: &Secret) -> ProviderError {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "connection failed"
    } else {
        "failed"
    };
    let mut detail = String::new();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(err);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    ProviderError::transient(secret.redact(&truncate(&format!("{what} {kind}{detail}"))))
}

/// Parses `Retry-After`: delay-seconds or an HTTP date (RFC 9110 section 10.2.3).
pub(crate) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(
                secs.min(MAX_RETRY_AFTER.as_secs_f64()),
            ));
        }
        return None;
    }
    static PARSER: jiff::fmt::rfc2822::DateTimeParser = jiff::fmt::rfc2822::DateTimeParser::new();
    let at = PARSER.parse_timestamp(value).ok()?;
    let wait = at.duration_since(jiff::Timestamp::now());
    let secs = wait.as_secs_f64();
    Some(if secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(secs).min(MAX_RETRY_AFTER)
    })
}

/// The generic mapping of an unsuccessful HTTP status; adapters refine it with what the body
/// says (capacity wording, provider error codes) before falling back to this.
pub(crate) fn classify_status(
    status: StatusCode,
    retry_after: Option<Duration>,
    message: String,
) -> ProviderError {
    match status.as_u16() {
        401 | 403 => ProviderError::Auth { message },
        // Payment required: this account cannot pay here now; another provider may serve.
        402 => ProviderError::Capacity { message },
        404 | 410 => ProviderError::NotFound,
        408 | 425 | 429 => ProviderError::Transient {
            message,
            retry_after,
        },
        400..=499 => ProviderError::Invalid { message },
        _ => ProviderError::Transient {
            message,
            retry_after,
        },
    }
}

/// Cuts a provider message to a bounded length (on a character boundary).
pub(crate) fn truncate(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests;
