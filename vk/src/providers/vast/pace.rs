//! Per-endpoint pacing of Vast API calls, and retries of 429 answers with back-off.
//!
//! Vast rate-limits "per endpoint and per identity ... as a minimum interval between requests"
//! and sets no `Retry-After` on these 429s (vast-ai/docs `api-reference/rate-limits-and-errors.mdx`).
//! The intervals are the `x-rate-limit` of each endpoint in `api-reference/openapi/yaml/`:
//! `show_instances.yaml` (`GET /api/v1/instances/`) threshold 1.0 s; `search_offers.yaml`
//! (`POST /api/v0/bundles/`) 10 requests a minute; `create_instance.yaml` (`PUT
//! /api/v0/asks/{id}/`) threshold 4.5 s; `destroy_instance.yaml` (`DELETE
//! /api/v0/instances/{id}/`) threshold 3.0 s. `request_logs` documents none: 1 s is used.
//! Each call reserves the next free slot of its endpoint (so concurrent creates queue instead
//! of bursting into 429s), and a 429 that still happens (another client on the same key, or
//! a limit lower than configured) is retried after the interval times 1.5^n (vast-cli's own
//! 429 back-off factor), up to [`MAX_429_RETRIES`] times; then it is a transient error. A
//! 429 that carries `Retry-After` ("the daily search row quota ... its value points at the
//! quota reset, which can be hours away", same page) is not retried here: it becomes a
//! transient error with that `retry_after`, which the framework honours.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use reqwest::Method;
use reqwest::Url;
use serde::Deserialize;
use tokio::time::Instant;

use super::Vast;
use crate::provider::ProviderError;
use crate::providers::http::RawResponse;

/// 429 answers retried before the call fails as transient.
pub const MAX_429_RETRIES: u32 = 4;

/// The rate-limited endpoints the adapter calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Endpoint {
    List,
    Search,
    Rent,
    Destroy,
    Logs,
}

/// Minimum seconds between two calls of each endpoint (`rateLimits` in the settings).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct MinIntervals {
    pub list: f64,
    pub search: f64,
    pub rent: f64,
    pub destroy: f64,
    pub logs: f64,
}

impl Default for MinIntervals {
    fn default() -> Self {
        Self {
            list: 1.0,
            search: 6.0,
            rent: 4.5,
            destroy: 3.0,
            logs: 1.0,
        }
    }
}

impl MinIntervals {
    fn of(&self, ep: Endpoint) -> Duration {
        let s = match ep {
            Endpoint::List => self.list,
            Endpoint::Search => self.search,
            Endpoint::Rent => self.rent,
            Endpoint::Destroy => self.destroy,
            Endpoint::Logs => self.logs,
        };
        Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
    }

    /// True when every interval is a finite, non-negative number.
    pub(super) fn valid(&self) -> bool {
        [self.list, self.search, self.rent, self.destroy, self.logs]
            .iter()
            .all(|s| s.is_finite() && *s >= 0.0)
    }
}

/// The next free slot of each endpoint.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    next: Mutex<HashMap<Endpoint, Instant>>,
}

impl Pacer {
    /// Reserves the endpoint's next slot and returns when it starts.
    fn reserve(&self, ep: Endpoint, interval: Duration) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let at = next.get(&ep).copied().unwrap_or(now).max(now);
        next.insert(ep, at + interval);
        at
    }

    /// Pushes the endpoint's next slot to at least `until` (after a 429).
    fn hold(&self, ep: Endpoint, until: Instant) {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = next.entry(ep).or_insert(until);
        *slot = (*slot).max(until);
    }
}

impl Vast {
    /// Sends one API call in its endpoint's pace, retrying 429 answers with back-off.
    pub(super) async fn call(
        &self,
        ep: Endpoint,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse, ProviderError> {
        let interval = self.cfg.rate_limits.of(ep);
        let mut backoff = interval.max(Duration::from_millis(100));
        let mut attempt = 0;
        loop {
            tokio::time::sleep_until(self.pacer.reserve(ep, interval)).await;
            let resp = self.api.send(method.clone(), url.clone(), body).await?;
            // A 429 with `Retry-After` (the daily search quota, possibly hours away) goes to
            // the framework, which honours it; the interval 429s carry none.
            if resp.status.as_u16() != 429
                || resp.retry_after.is_some()
                || attempt >= MAX_429_RETRIES
            {
                return Ok(resp);
            }
            attempt += 1;
            self.pacer.hold(ep, Instant::now() + backoff);
            backoff = backoff.mul_f64(1.5);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_calls_queue_one_interval_apart_per_endpoint() {
        let pacer = Pacer::default();
        let i = Duration::from_millis(4500);
        let first = pacer.reserve(Endpoint::Rent, i);
        let second = pacer.reserve(Endpoint::Rent, i);
        let third = pacer.reserve(Endpoint::Rent, i);
        assert_eq!(second - first, i);
        assert_eq!(third - second, i);
        // Another endpoint has its own slots.
        assert!(pacer.reserve(Endpoint::List, Duration::from_secs(1)) < second);
        // A 429 holds the endpoint.
        let later = third + Duration::from_secs(10);
        pacer.hold(Endpoint::Rent, later);
        assert_eq!(pacer.reserve(Endpoint::Rent, i), later);
        let d = MinIntervals::default();
        assert_eq!((d.list, d.search, d.rent, d.destroy), (1.0, 6.0, 4.5, 3.0));
    }
}
