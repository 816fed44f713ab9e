//! The slurmrestd client of the adapter: the shared provider HTTP client with Slurm's
//! authentication ([`SlurmAuth`]), the URLs of the configured or detected dialect, the
//! classification of answers by Slurm error number, and the job calls (submit, list, get,
//! cancel).

use std::sync::Mutex;
use std::time::Duration;

use reqwest::{Method, Url};
use tracing::{info, warn};

use super::token::SlurmAuth;
use super::wire::{self, Dialect, JobList, JobRecord, SlurmError};
use crate::provider::ProviderError;
use crate::providers::http::{self, InitError, RawResponse};

/// An authenticated slurmrestd client for one dialect: the configured one, or with
/// [`Dialect::Auto`] the newest one slurmrestd serves, detected on first use and again after
/// an answer saying the URL is not served (slurmrestd upgraded or restarted with other
/// plugins).
#[derive(Debug)]
pub(super) struct Client {
    provider: String,
    http: http::Client<SlurmAuth>,
    configured: Dialect,
    detected: Mutex<Option<Dialect>>,
}

/// Slurm error numbers (slurm/slurm_errno.h) and what they mean for the framework.
mod errno {
    /// `SLURM_ERROR`: 22.05 reports a rejected JWT this way.
    pub const UNSPECIFIED: i64 = -1;
    pub const INVALID_JOB_ID: i64 = 2017;
    pub const ALREADY_DONE: i64 = 2021;

    pub fn is_not_found(n: i64) -> bool {
        // ESLURM_INVALID_JOB_ID and the job id parse errors (2136-2140).
        n == INVALID_JOB_ID || (2136..=2140).contains(&n)
    }

    pub fn is_auth(n: i64) -> bool {
        // protocol authentication error, access denied, auth plugin errors, REST auth failure
        matches!(n, UNSPECIFIED | 1007 | 2002 | 9008) || (6000..=6011).contains(&n)
    }

    pub fn is_capacity(n: i64) -> bool {
        // max job count, nodes busy, licenses, accounting policy, QOS threshold, partition
        // down, submissions disabled
        matches!(n, 2007 | 2016 | 2040 | 2050 | 2074 | 2101 | 2105)
    }

    pub fn is_invalid(n: i64) -> bool {
        matches!(
            n,
            2000..=2006
                | 2008..=2012
                | 2014
                | 2015
                | 2018
                | 2023
                | 2025
                | 2029
                | 2044
                | 2045
                | 2048
                | 2051
                | 2053
                | 2054
                | 2057
                | 2063
                | 2066
                | 2069
                | 2072
                | 2081
                | 2102
                | 2111
                | 2114
                | 2115
                | 2119
                | 2122..=2124
                | 2127
                | 2133
                | 2134
                | 2167
                | 2168
                | 8000
                | 9000..=9005
                | 9009
                | 9200..=9399
        )
    }
}

impl Client {
    pub fn new(
        provider: &str,
        base_url: &str,
        dialect: Dialect,
        auth: SlurmAuth,
        timeout: Duration,
        allow_insecure_http: bool,
    ) -> Result<Self, InitError> {
        let http = http::Client::new(provider, base_url, auth, timeout, allow_insecure_http)?
            .with_peer("slurmrestd");
        Ok(Self {
            provider: provider.to_owned(),
            http,
            configured: dialect,
            detected: Mutex::new(None),
        })
    }

    fn detected(&self) -> Option<Dialect> {
        *self.detected.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The dialect of the next request: the configured one, else the detected one, else
    /// detected now from `GET /openapi/v3` (slurmrestd asks for the token there too).
    pub async fn dialect(&self) -> Result<Dialect, ProviderError> {
        if self.configured != Dialect::Auto {
            return Ok(self.configured);
        }
        if let Some(d) = self.detected() {
            return Ok(d);
        }
        let url = self.http.url(&["openapi", "v3"], false);
        let resp = self.http.send(Method::GET, url, None).await?;
        if !resp.is_success() {
            return Err(match self.error_from(&resp) {
                ProviderError::Transient { .. } if resp.status.as_u16() == 404 => {
                    ProviderError::transient(
                        "slurmrestd has no /openapi/v3 to choose a dialect from; set \
                         settings.dialect",
                    )
                }
                e => e,
            });
        }
        let doc: serde_json::Value = resp.json("OpenAPI document")?;
        // Not Invalid: that would fail the pod being created, and the operator can load a
        // plugin (or change settings.dialect) without any pod changing.
        let dialect = wire::detect(&doc).map_err(|served| {
            ProviderError::transient(format!(
                "slurmrestd serves none of the dialects this adapter speaks ({}); it serves [{}]",
                Dialect::NEWEST_FIRST.map(Dialect::version).join(", "),
                served.join(", ")
            ))
        })?;
        info!(provider = %self.provider, %dialect, "detected the slurmrestd dialect");
        *self.detected.lock().unwrap_or_else(|e| e.into_inner()) = Some(dialect);
        Ok(dialect)
    }

    /// `base/slurm/<version>/<segments...>` in the dialect of the next request.
    async fn url(&self, segments: &[&str], trailing_slash: bool) -> Result<Url, ProviderError> {
        let dialect = self.dialect().await?;
        let mut path = vec!["slurm", dialect.version()];
        path.extend_from_slice(segments);
        Ok(self.http.url(&path, trailing_slash))
    }

    /// Submits a job (`body` in [`Client::dialect`]'s dialect); the answer is the caller's to
    /// read, as a refusal may have left a job record behind.
    pub async fn submit(&self, body: &serde_json::Value) -> Result<RawResponse, ProviderError> {
        let url = self.url(&["job", "submit"], false).await?;
        self.http.send(Method::POST, url, Some(body)).await
    }

    /// Classifies an unsuccessful answer (or a 2xx one that carries errors).
    pub fn error_from(&self, resp: &RawResponse) -> ProviderError {
        let errors = wire::errors_of(&resp.body);
        let number = errors.iter().filter_map(|e| e.number).find(|n| *n != 0);
        let mut text: Vec<String> = errors
            .iter()
            .map(SlurmError::text)
            .filter(|t| !t.is_empty())
            .collect();
        if text.is_empty() {
            text.push(resp.detail_or_reason(resp.text_snippet()));
        }
        let code = number.map_or(String::new(), |n| format!(" (Slurm error {n})"));
        let message = resp.message("slurmrestd", &format!("{}{code}", text.join("; ")));
        let status = resp.status.as_u16();
        if status == 401 || status == 403 || number.is_some_and(errno::is_auth) {
            return ProviderError::Auth {
                message: self.http.auth().hint(message, resp.secret()),
            };
        }
        if let Some(n) = number {
            if errno::is_not_found(n) {
                return ProviderError::NotFound;
            }
            if errno::is_capacity(n) {
                return ProviderError::Capacity { message };
            }
            if errno::is_invalid(n) {
                return ProviderError::Invalid { message };
            }
        }
        match status {
            400 | 413 | 415 | 422 => ProviderError::Invalid { message },
            404 => {
                // With a detected dialect, the next request detects again.
                let detected = self
                    .detected
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                let dialect = detected.unwrap_or(self.configured);
                ProviderError::transient(format!(
                    "{message}; is the {dialect} OpenAPI plugin loaded in slurmrestd (-s)?"
                ))
            }
            _ if resp.status.is_success() => ProviderError::transient(message),
            _ => http::classify_status(resp.status, resp.retry_after, message),
        }
    }

    /// Every job slurmctld knows, in one call.
    pub async fn jobs(&self) -> Result<Vec<JobRecord>, ProviderError> {
        let url = self.url(&["jobs"], true).await?;
        let resp = self.http.send(Method::GET, url, None).await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let list: JobList = resp.json("job list")?;
        Ok(list
            .jobs
            .into_iter()
            .filter_map(|v| match serde_json::from_value::<JobRecord>(v) {
                Ok(j) => Some(j),
                Err(e) => {
                    warn!(provider = %self.provider, error = %e, "skipping a job entry that is not an object");
                    None
                }
            })
            .collect())
    }

    /// Every node slurmctld knows, in one call.
    pub async fn nodes(&self) -> Result<super::nodes::NodeList, ProviderError> {
        let url = self.url(&["nodes"], true).await?;
        let resp = self.http.send(Method::GET, url, None).await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        resp.json("node list")
    }

    /// One job; `None` when Slurm no longer knows it.
    pub async fn job(&self, job_id: u64) -> Result<Option<JobRecord>, ProviderError> {
        let url = self.url(&["job", &job_id.to_string()], false).await?;
        let resp = self.http.send(Method::GET, url, None).await?;
        if !resp.is_success() {
            return match self.error_from(&resp) {
                ProviderError::NotFound => Ok(None),
                e => Err(e),
            };
        }
        let list: JobList = resp.json("job")?;
        Ok(list
            .jobs
            .into_iter()
            .filter_map(|v| serde_json::from_value::<JobRecord>(v).ok())
            .find(|j| j.job_id == Some(job_id)))
    }

    /// Cancels a job; a job Slurm does not know is NotFound, a finished one is success.
    pub async fn cancel(&self, job_id: u64) -> Result<(), ProviderError> {
        let url = self.url(&["job", &job_id.to_string()], false).await?;
        let resp = self.http.send(Method::DELETE, url, None).await?;
        let errors = wire::errors_of(&resp.body);
        if errors.iter().any(|e| e.number == Some(errno::ALREADY_DONE)) {
            return Ok(());
        }
        if resp.is_success() && errors.iter().all(|e| e.number.is_none_or(|n| n == 0)) {
            return Ok(());
        }
        Err(self.error_from(&resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_number_classes() {
        assert!(errno::is_not_found(2017));
        assert!(errno::is_invalid(2014));
        assert!(errno::is_invalid(9001));
        assert!(errno::is_invalid(2127));
        assert!(errno::is_auth(-1));
        assert!(errno::is_capacity(2016));
        for n in [2017, 2021, 1800, 2090] {
            assert!(!errno::is_invalid(n), "{n}");
        }
    }
}
