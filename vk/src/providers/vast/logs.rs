//! Logs: a log upload requested from Vast, then downloaded from the URL it answers with.

use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, StatusCode, Url};

use super::Vast;
use super::wire::LogRequestAnswer;
use crate::provider::{LogOptions, ProviderError};

impl Vast {
    /// Requests a log upload and downloads it.
    pub(super) async fn fetch_logs(
        &self,
        id: u64,
        opts: &LogOptions,
    ) -> Result<Bytes, ProviderError> {
        let url = self.api.url(
            &["api", "v0", "instances", "request_logs", &id.to_string()],
            true,
        );
        let body = match opts.tail_lines {
            Some(n) => serde_json::json!({ "tail": n.to_string() }),
            None => serde_json::json!({}),
        };
        let resp = self
            .call(super::pace::Endpoint::Logs, Method::PUT, url, Some(&body))
            .await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let answer: LogRequestAnswer = resp.json("log request")?;
        if answer.success == Some(false) {
            return Err(self.error_from(&resp));
        }
        let raw_url = answer.result_url.ok_or_else(|| {
            ProviderError::transient("Vast log request answered without result_url")
        })?;
        let base = self.api.url(&[], false);
        let result_url = base
            .join(&raw_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"));
        let result_url = result_url.ok_or_else(|| {
            ProviderError::transient("Vast log request answered with an unusable result_url")
        })?;
        acceptable_result_url(&base, &result_url)
            .map_err(|message| ProviderError::Invalid { message })?;
        self.download(result_url).await
    }
    /// Downloads an uploaded log file, waiting while it is not there yet.
    async fn download(&self, url: Url) -> Result<Bytes, ProviderError> {
        let attempts = self.cfg.log_fetch_attempts.max(1);
        let pause = Duration::from_millis(self.cfg.log_fetch_interval_ms);
        let mut last = String::new();
        for attempt in 1..=attempts {
            let resp = self.api.fetch_unauthenticated(url.clone()).await?;
            if resp.is_success() {
                return Ok(resp.body);
            }
            // S3 answers 403/404 until the upload has landed.
            if !matches!(resp.status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN) {
                return Err(ProviderError::Transient {
                    message: format!("Vast log download failed: HTTP {}", resp.status.as_u16()),
                    retry_after: resp.retry_after,
                });
            }
            last = format!("HTTP {}", resp.status.as_u16());
            if attempt < attempts {
                tokio::time::sleep(pause).await;
            }
        }
        Err(ProviderError::transient(format!(
            "Vast logs were not uploaded after {attempts} attempts ({last})"
        )))
    }
}

/// Whether the VK fetches a `result_url` Vast hands it, against the API's `base`: the VK
/// fetches it from its own network position, so not over plain HTTP when the API is HTTPS, and
/// not at a loopback, link-local or unspecified address unless the API itself is there (an
/// emulator on this host).
fn acceptable_result_url(base: &Url, url: &Url) -> Result<(), String> {
    if base.scheme() == "https" && url.scheme() != "https" {
        return Err(format!(
            "Vast answered a log result_url over {} while its API is HTTPS; not fetched",
            url.scheme()
        ));
    }
    let local = |u: &Url| crate::config::pod_ip::is_local_host(u.host_str().unwrap_or_default());
    if local(url) && !local(base) {
        return Err(format!(
            "Vast answered a log result_url at {}, a loopback or link-local address; not fetched",
            url.host_str().unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod result_url_tests {
    use super::*;

    #[test]
    fn result_urls_are_fetched_only_where_the_api_could_send_us() {
        let u = |s: &str| Url::parse(s).unwrap();
        let vast = u("https://console.vast.ai/");
        let s3 = u("https://s3.amazonaws.com/vast/logs/1.log");
        assert_eq!(acceptable_result_url(&vast, &s3), Ok(()));
        for bad in [
            "http://s3.amazonaws.com/vast/logs/1.log",
            "https://169.254.169.254/latest/meta-data/",
            "https://127.0.0.1:10250/pods",
            "https://localhost/x",
            "https://[fe80::1]/x",
        ] {
            assert!(acceptable_result_url(&vast, &u(bad)).is_err(), "{bad}");
        }
        // An emulator on this host answers with its own address.
        let emulator = u("http://127.0.0.1:9002/");
        assert_eq!(
            acceptable_result_url(&emulator, &u("http://127.0.0.1:9002/_s3/x.log")),
            Ok(())
        );
    }
}
