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
