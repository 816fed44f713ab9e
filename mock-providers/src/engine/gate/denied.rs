//! What the gate answers instead of the handler: an injected fault, a missing or wrong key,
//! a quota window or an endpoint's interval exceeded.

use axum::http::StatusCode;
use serde_json::Value;

use super::WindowState;

/// An injected fault, as the admin API set it.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// Status to answer.
    pub status: StatusCode,
    /// Body to answer, or `None` for the provider's default error body.
    pub body: Option<Value>,
    /// `Retry-After` seconds, if any.
    pub retry_after_s: Option<u64>,
}

impl Fault {
    /// The fault's answer: `shaped` makes the response from the status and the body set (or
    /// the provider's own error body where none is), and the `Retry-After` set is added.
    pub fn answer(
        self,
        shaped: impl FnOnce(StatusCode, Option<Value>) -> axum::response::Response,
    ) -> axum::response::Response {
        crate::util::with_retry_after(shaped(self.status, self.body), self.retry_after_s)
    }
}

/// A request that was refused before reaching its handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Denied {
    /// An injected fault.
    Fault(Fault),
    /// No or a wrong API key.
    Unauthorized {
        /// True when no credentials were presented at all.
        missing: bool,
    },
    /// Over a quota window.
    RateLimited {
        /// Seconds until every exceeded window resets.
        retry_after_s: u64,
        /// The exceeded window (the one that resets last, when several are).
        window: &'static str,
        /// Every window's state (nothing was taken from them).
        windows: Vec<WindowState>,
    },
    /// Sooner than an endpoint's minimum interval, or over its burst quota (Vast).
    TooFrequent {
        /// The endpoint's interval in seconds (`None` for a burst quota).
        threshold_s: Option<f64>,
    },
}
