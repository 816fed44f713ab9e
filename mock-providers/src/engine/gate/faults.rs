//! What `POST /_admin/faults` takes: the fault to inject on a kind of call, and why a spec is
//! refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Body of `POST /_admin/faults`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// `create|list|get|delete|action|logs|search|any`.
    pub route: String,
    /// Fail this many upcoming matching requests.
    #[serde(default)]
    pub fail_next: Option<u32>,
    /// HTTP status of the injected failure (default 503).
    #[serde(default)]
    pub status: Option<u16>,
    /// Response body of the injected failure (default: the provider's own error shape).
    #[serde(default)]
    pub body: Option<Value>,
    /// Adds `Retry-After: <n>` to the injected failure.
    #[serde(default)]
    pub retry_after_s: Option<u64>,
    /// Delay every matching request by this much (whether or not it fails).
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Probability in 0..=1 that a matching request fails (after `fail_next` is used up).
    #[serde(default)]
    pub error_rate: Option<f64>,
}

/// Why a fault spec was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FaultSpecError {
    /// Unknown route name.
    #[error("unknown route {0:?}: expected create|list|get|delete|action|logs|search|any")]
    Route(String),
    /// Status outside 100..=599.
    #[error("status {0} is not an HTTP status code")]
    Status(u16),
    /// Error rate outside 0..=1.
    #[error("error_rate must be between 0 and 1")]
    ErrorRate,
}
