//! Shared plumbing of the REST adapters (RunPod, Vast.ai): an HTTP client that adds the bearer
//! key, the classification of HTTP outcomes into [`ProviderError`], `Retry-After` parsing,
//! lenient JSON field decoding, and the small translations both adapters need.
//!
//! Secrets: the API key only ever goes into the `Authorization` header of requests to the
//! configured base URL. It is never formatted into a message, and every message built from a
//! provider's answer is passed through [`Api::redact`] before it leaves this module, in case a
//! backend ever echoes the key back. Response bodies are never logged (pod listings carry the
//! workloads' environment, which may hold secrets).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{ACCEPT, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::provider::ProviderError;

/// Longest provider message copied into an error.
const MAX_MESSAGE_CHARS: usize = 400;
/// A `Retry-After` longer than this is clamped: a provider asking for hours is treated as
/// "back off for a while" and the framework's own backoff takes over.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// A provider's HTTP answer, fully read.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub status: StatusCode,
    pub retry_after: Option<Duration>,
    pub body: Bytes,
}

impl RawResponse {
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// Decodes a success body; a body that is not the expected JSON is a transient fault (a
    /// proxy answering HTML, a truncated reply), never a panic.
    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, ProviderError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            ProviderError::transient(format!(
                "malformed {what} response (HTTP {}): {e}",
                self.status.as_u16()
            ))
        })
    }

    /// The body as text for messages, when it is not JSON (for example an HTML error page).
    pub fn text_snippet(&self) -> String {
        truncate(String::from_utf8_lossy(&self.body).trim())
    }
}

/// An authenticated client for one provider's REST API.
#[derive(Clone)]
pub(crate) struct Api {
    client: reqwest::Client,
    base: Url,
    api_key: String,
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base.as_str())
            .field("api_key", &"<redacted>")
            .finish()
    }
}

impl Api {
    pub fn new(
        provider: &str,
        base_url: &str,
        api_key: &str,
        timeout: Duration,
    ) -> Result<Self, InitError> {
        if api_key.trim().is_empty() {
            return Err(InitError::MissingApiKey {
                provider: provider.to_owned(),
            });
        }
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
        // Normalise: no trailing slash, so segments are appended predictably.
        let trimmed = base.path().trim_end_matches('/').to_owned();
        base.set_path(&trimmed);
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(InitError::NoCryptoProvider {
                provider: provider.to_owned(),
            });
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(timeout)
            .user_agent(concat!("gpu-vk/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| InitError::BuildClient {
                provider: provider.to_owned(),
                source,
            })?;
        Ok(Self {
            client,
            base,
            api_key: api_key.to_owned(),
        })
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

    /// Sends one authenticated request and reads the whole answer. Connection failures,
    /// timeouts and unreadable bodies are [`ProviderError::Transient`].
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse, ProviderError> {
        let what = format!("{method} {}", url.path());
        let mut req = self
            .client
            .request(method, url)
            .bearer_auth(&self.api_key)
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(&what, &e))?;
        let status = resp.status();
        let retry_after = parse_retry_after(resp.headers());
        let body = resp
            .bytes()
            .await
            .map_err(|e| self.transport_error(&what, &e))?;
        Ok(RawResponse {
            status,
            retry_after,
            body,
        })
    }

    /// Fetches a URL the provider handed out (for example a pre-signed log download), without
    /// the API key: it may point to another host.
    pub async fn fetch_unauthenticated(&self, url: Url) -> Result<RawResponse, ProviderError> {
        let what = format!("GET {}", url.path());
        let resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| self.transport_error(&what, &e))?;
        let status = resp.status();
        let retry_after = parse_retry_after(resp.headers());
        let body = resp
            .bytes()
            .await
            .map_err(|e| self.transport_error(&what, &e))?;
        Ok(RawResponse {
            status,
            retry_after,
            body,
        })
    }

    fn transport_error(&self, what: &str, err: &reqwest::Error) -> ProviderError {
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
        ProviderError::transient(self.redact(&truncate(&format!("{what} {kind}{detail}"))))
    }

    /// Removes the API key from a message, should a provider ever echo it.
    pub fn redact(&self, message: &str) -> String {
        let key = self.api_key.trim();
        if key.len() >= 4 {
            message.replace(key, "<redacted>")
        } else {
            message.to_owned()
        }
    }
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

/// For `#[serde(default, deserialize_with = "lenient")]`: a field of an unexpected type
/// decodes as `None` instead of failing the whole object, so one odd item never breaks a list.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// An id that providers send as a number or a string.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub(crate) enum NumOrString {
    Num(u64),
    Str(String),
}

impl fmt::Display for NumOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Num(n) => write!(f, "{n}"),
            Self::Str(s) => f.write_str(s),
        }
    }
}

/// Joins argv into one string a POSIX shell splits back into the same words; used where an
/// API only takes the container's arguments as one string.
pub(crate) fn shell_join<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for w in words {
        if !out.is_empty() {
            out.push(' ');
        }
        let safe = !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
        if safe {
            out.push_str(w);
        } else {
            out.push('\'');
            out.push_str(&w.replace('\'', r"'\''"));
            out.push('\'');
        }
    }
    out
}

/// Environment as the APIs take it: a map, later duplicates winning as in Kubernetes.
pub(crate) fn env_map(env: &[crate::provider::EnvVar]) -> BTreeMap<String, String> {
    env.iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

/// Reads a boolean pod option (`true/false`, `yes/no`, `1/0`).
pub(crate) fn bool_option(
    options: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<bool>, ProviderError> {
    let Some(raw) = options.get(key) else {
        return Ok(None);
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(Some(true)),
        "false" | "no" | "0" => Ok(Some(false)),
        _ => Err(ProviderError::Invalid {
            message: format!("option {key}={raw:?} is not a boolean"),
        }),
    }
}

/// Reads a positive number pod option.
pub(crate) fn positive_option(
    options: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<f64>, ProviderError> {
    let Some(raw) = options.get(key) else {
        return Ok(None);
    };
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        _ => Err(ProviderError::Invalid {
            message: format!("option {key}={raw:?} is not a positive number"),
        }),
    }
}

/// Reads a comma-separated list option from the first of `keys` present.
pub(crate) fn list_option(
    options: &BTreeMap<String, String>,
    keys: &[&str],
) -> Option<Vec<String>> {
    let raw = keys.iter().find_map(|k| options.get(*k))?;
    Some(
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// A timestamp from epoch seconds (fractional allowed).
pub(crate) fn timestamp_from_epoch(secs: f64) -> Option<jiff::Timestamp> {
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    // Rounded to whole seconds: providers report sub-second jitter that is not worth a status
    // update.
    jiff::Timestamp::from_second(secs.round() as i64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(
            parse_retry_after(&headers("12")),
            Some(Duration::from_secs(12))
        );
        assert_eq!(parse_retry_after(&headers(" 0 ")), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(&headers("999999")), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse_retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&later)
            .unwrap();
        let got = parse_retry_after(&headers(&date)).unwrap();
        assert!(
            got > Duration::from_secs(100) && got <= Duration::from_secs(120),
            "{got:?}"
        );
        assert_eq!(parse_retry_after(&headers("soon")), None);
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn status_classes() {
        let c = |s: u16| classify_status(StatusCode::from_u16(s).unwrap(), None, "m".into());
        assert!(matches!(c(401), ProviderError::Auth { .. }));
        assert!(matches!(c(403), ProviderError::Auth { .. }));
        assert!(matches!(c(402), ProviderError::Capacity { .. }));
        assert_eq!(c(404), ProviderError::NotFound);
        assert!(matches!(c(409), ProviderError::Invalid { .. }));
        assert!(matches!(c(422), ProviderError::Invalid { .. }));
        assert!(matches!(c(429), ProviderError::Transient { .. }));
        assert!(matches!(c(503), ProviderError::Transient { .. }));
    }

    #[test]
    fn shell_join_round_trips_through_a_shell_parser() {
        assert_eq!(
            shell_join(["python", "-c", "print('hi there')"]),
            r#"python -c 'print('\''hi there'\'')'"#
        );
        assert_eq!(shell_join(["a", "", "b c", "$HOME"]), "a '' 'b c' '$HOME'");
    }

    #[test]
    fn truncate_is_char_safe() {
        let long = "é".repeat(MAX_MESSAGE_CHARS + 5);
        let t = truncate(&long);
        assert!(t.ends_with("..."));
        assert_eq!(t.chars().count(), MAX_MESSAGE_CHARS + 3);
    }
}
