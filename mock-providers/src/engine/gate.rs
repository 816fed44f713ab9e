//! What every real-API request passes through: call counters, injected faults, bearer
//! authentication and the per-minute rate limit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kinds of real-API call, as counted by `GET /_admin/counters` and matched by faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// Create a workload (RunPod `POST /v2/pods`, Vast `PUT /api/v0/asks/{id}/`).
    Create,
    /// List workloads.
    List,
    /// Get one workload.
    Get,
    /// Delete a workload (RunPod `DELETE /v2/pods/{id}`, Vast `DELETE /api/v0/instances/{id}/`).
    Delete,
    /// State change (RunPod `POST /v2/pods/{id}/action`, Vast `PUT /api/v0/instances/{id}/`,
    /// bid change).
    Action,
    /// Logs.
    Logs,
    /// Vast offer search.
    Search,
}

impl RouteKind {
    /// Every kind.
    pub const ALL: [RouteKind; 7] = [
        Self::Create,
        Self::List,
        Self::Get,
        Self::Delete,
        Self::Action,
        Self::Logs,
        Self::Search,
    ];

    /// Name used in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::List => "list",
            Self::Get => "get",
            Self::Delete => "delete",
            Self::Action => "action",
            Self::Logs => "logs",
            Self::Search => "search",
        }
    }

    /// Parse an admin route name; `any` is `None` inside `Some`.
    pub fn parse_route(name: &str) -> Option<Option<RouteKind>> {
        if name == "any" {
            return Some(None);
        }
        Self::ALL.into_iter().find(|k| k.as_str() == name).map(Some)
    }
}

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

#[derive(Clone, Debug)]
struct FaultRule {
    route: Option<RouteKind>,
    remaining: Option<u32>,
    always: bool,
    status: StatusCode,
    body: Option<Value>,
    retry_after_s: Option<u64>,
    latency: Duration,
    error_rate: Option<f64>,
}

impl FaultRule {
    fn from_spec(spec: FaultSpec) -> Result<Self, FaultSpecError> {
        let route =
            RouteKind::parse_route(&spec.route).ok_or(FaultSpecError::Route(spec.route.clone()))?;
        let code = spec.status.unwrap_or(503);
        let status = StatusCode::from_u16(code).map_err(|_| FaultSpecError::Status(code))?;
        if !(100..=599).contains(&code) {
            return Err(FaultSpecError::Status(code));
        }
        if let Some(rate) = spec.error_rate
            && !(0.0..=1.0).contains(&rate)
        {
            return Err(FaultSpecError::ErrorRate);
        }
        // A rule with a status but neither a count nor a rate fails every matching request.
        let always = spec.fail_next.is_none() && spec.error_rate.is_none() && spec.status.is_some();
        Ok(Self {
            route,
            remaining: spec.fail_next,
            always,
            status,
            body: spec.body,
            retry_after_s: spec.retry_after_s,
            latency: Duration::from_millis(spec.latency_ms.unwrap_or(0)),
            error_rate: spec.error_rate,
        })
    }

    fn matches(&self, kind: RouteKind) -> bool {
        self.route.is_none_or(|r| r == kind)
    }
}

/// A request that was refused before reaching its handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Denied {
    /// An injected fault.
    Fault {
        /// Status to answer.
        status: StatusCode,
        /// Body to answer, or `None` for the provider's default error body.
        body: Option<Value>,
        /// `Retry-After` seconds, if any.
        retry_after_s: Option<u64>,
    },
    /// No or a wrong API key.
    Unauthorized {
        /// True when no credentials were presented at all.
        missing: bool,
    },
    /// Over the per-minute limit.
    RateLimited {
        /// Seconds until the window resets.
        retry_after_s: u64,
        /// The configured requests per minute.
        limit: u32,
    },
}

/// An admitted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Quota left, when a rate limit is configured.
    pub rate: Option<RateInfo>,
}

/// Quota state after an admitted request (for `RateLimit` headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateInfo {
    /// Requests per minute.
    pub limit: u32,
    /// Requests left in this window.
    pub remaining: u32,
    /// Seconds until the window resets.
    pub reset_s: u64,
}

/// Counters, faults and the rate-limit window.
#[derive(Debug, Default)]
pub struct GateState {
    counters: BTreeMap<RouteKind, u64>,
    /// Create calls the provider accepted (a workload exists because of each): `create` counts
    /// calls, refused ones included (a Vast offer taken by someone else, no capacity).
    created: u64,
    faults: Vec<FaultRule>,
    window: Option<(Instant, u32)>,
    hidden: Vec<HideRule>,
}

/// Body of `POST /_admin/hide`: leave workloads out of the next `lists` list answers (all of
/// them when `ids` is absent), while they keep running. A fault for tests, like `/_admin/faults`,
/// not a documented behaviour of the services: no provider documents that its list is
/// complete, and a list served from a lagging replica or cache during an incident can be
/// partial or empty; a client must not take one such answer as proof that workloads are gone.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HideSpec {
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    pub lists: u32,
}

#[derive(Clone, Debug)]
struct HideRule {
    ids: Option<Vec<String>>,
    remaining: u32,
}

/// What one list answer leaves out (see [`GateState::list_mask`]).
#[derive(Clone, Debug, Default)]
pub struct ListMask {
    all: bool,
    ids: Vec<String>,
}

impl ListMask {
    /// True when the workload `id` is left out of this answer.
    pub fn hides(&self, id: &str) -> bool {
        self.all || self.ids.iter().any(|i| i == id)
    }
}

impl GateState {
    /// Forget counters, faults, hidden workloads and the rate window.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Hides workloads from upcoming list answers (`POST /_admin/hide`).
    pub fn hide(&mut self, spec: HideSpec) {
        if spec.lists > 0 {
            self.hidden.push(HideRule {
                ids: spec.ids,
                remaining: spec.lists,
            });
        }
    }

    /// What the list answer being built leaves out; called once per list request, so each
    /// hide rule covers exactly its number of answers.
    pub fn list_mask(&mut self) -> ListMask {
        let mut mask = ListMask::default();
        for rule in &mut self.hidden {
            match &rule.ids {
                None => mask.all = true,
                Some(ids) => mask.ids.extend(ids.iter().cloned()),
            }
            rule.remaining -= 1;
        }
        self.hidden.retain(|r| r.remaining > 0);
        mask
    }

    /// Count a call and decide on latency and an injected failure.
    pub fn observe(&mut self, kind: RouteKind) -> (Duration, Option<Denied>) {
        *self.counters.entry(kind).or_default() += 1;
        let mut latency = Duration::ZERO;
        let mut denied = None;
        for rule in self.faults.iter_mut().filter(|r| r.matches(kind)) {
            latency = latency.max(rule.latency);
            if denied.is_some() {
                continue;
            }
            let fire = match rule.remaining {
                Some(n) if n > 0 => {
                    rule.remaining = Some(n - 1);
                    true
                }
                _ => {
                    rule.always
                        || rule
                            .error_rate
                            .is_some_and(|p| rand::rng().random::<f64>() < p)
                }
            };
            if fire {
                denied = Some(Denied::Fault {
                    status: rule.status,
                    body: rule.body.clone(),
                    retry_after_s: rule.retry_after_s,
                });
            }
        }
        (latency, denied)
    }

    /// Take one request from the rate window.
    pub fn take_rate(
        &mut self,
        limit: Option<u32>,
        now: Instant,
    ) -> Result<Option<RateInfo>, Denied> {
        let Some(limit) = limit else {
            return Ok(None);
        };
        let minute = Duration::from_secs(60);
        let (start, count) = match self.window {
            Some((start, count)) if now.saturating_duration_since(start) < minute => (start, count),
            _ => (now, 0),
        };
        let left = minute.saturating_sub(now.saturating_duration_since(start));
        let reset_s = left.as_secs_f64().ceil().max(1.0) as u64;
        if count >= limit {
            self.window = Some((start, count));
            return Err(Denied::RateLimited {
                retry_after_s: reset_s,
                limit,
            });
        }
        self.window = Some((start, count + 1));
        Ok(Some(RateInfo {
            limit,
            remaining: limit - count - 1,
            reset_s,
        }))
    }

    /// Add a fault rule.
    pub fn add_fault(&mut self, spec: FaultSpec) -> Result<(), FaultSpecError> {
        self.faults.push(FaultRule::from_spec(spec)?);
        Ok(())
    }

    /// Remove all fault rules.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Number of active fault rules.
    pub fn fault_count(&self) -> usize {
        self.faults.len()
    }

    /// Notes a create call the provider accepted.
    pub fn note_created(&mut self) {
        self.created += 1;
    }

    /// Counters for every kind (zeros included), `total`, and `created` (accepted creates).
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        let mut out: BTreeMap<&'static str, u64> = RouteKind::ALL
            .into_iter()
            .map(|k| (k.as_str(), self.counters.get(&k).copied().unwrap_or(0)))
            .collect();
        out.insert("total", self.counters.values().sum());
        out.insert("created", self.created);
        out
    }
}

/// What a request presented as credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential<'a> {
    /// Nothing.
    Missing,
    /// Something that is not a bearer token.
    Malformed,
    /// A key.
    Key(&'a str),
}

/// The credential of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Credential<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Credential::Missing;
    };
    let Ok(value) = value.to_str() else {
        return Credential::Malformed;
    };
    match value.trim().split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Credential::Key(token.trim())
        }
        _ => Credential::Malformed,
    }
}

/// Compare secrets without an early exit on the first differing byte.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(route: &str) -> FaultSpec {
        FaultSpec {
            route: route.into(),
            fail_next: None,
            status: None,
            body: None,
            retry_after_s: None,
            latency_ms: None,
            error_rate: None,
        }
    }

    #[test]
    fn hidden_workloads_are_left_out_of_exactly_their_number_of_lists() {
        let mut g = GateState::default();
        g.hide(HideSpec {
            ids: Some(vec!["a".into()]),
            lists: 2,
        });
        g.hide(HideSpec {
            ids: None,
            lists: 1,
        });
        let first = g.list_mask();
        assert!(first.hides("a") && first.hides("b"));
        let second = g.list_mask();
        assert!(second.hides("a") && !second.hides("b"));
        let third = g.list_mask();
        assert!(!third.hides("a") && !third.hides("b"));
    }

    #[test]
    fn fail_next_counts_down() {
        let mut g = GateState::default();
        g.add_fault(FaultSpec {
            fail_next: Some(2),
            status: Some(500),
            ..spec("create")
        })
        .unwrap();
        assert!(g.observe(RouteKind::List).1.is_none());
        assert!(g.observe(RouteKind::Create).1.is_some());
        assert!(g.observe(RouteKind::Create).1.is_some());
        assert!(g.observe(RouteKind::Create).1.is_none());
        assert_eq!(g.counters()["create"], 3);
        assert_eq!(g.counters()["total"], 4);
    }

    #[test]
    fn status_only_fails_always_and_latency_alone_never_fails() {
        let mut g = GateState::default();
        g.add_fault(FaultSpec {
            latency_ms: Some(5),
            ..spec("any")
        })
        .unwrap();
        let (lat, d) = g.observe(RouteKind::Get);
        assert_eq!(lat, Duration::from_millis(5));
        assert!(d.is_none());
        g.add_fault(FaultSpec {
            status: Some(502),
            ..spec("get")
        })
        .unwrap();
        for _ in 0..3 {
            assert!(matches!(
                g.observe(RouteKind::Get).1,
                Some(Denied::Fault { status, .. }) if status == StatusCode::BAD_GATEWAY
            ));
        }
    }

    #[test]
    fn rejects_bad_specs() {
        let mut g = GateState::default();
        assert!(g.add_fault(spec("nope")).is_err());
        assert!(
            g.add_fault(FaultSpec {
                status: Some(42),
                ..spec("any")
            })
            .is_err()
        );
        assert!(
            g.add_fault(FaultSpec {
                error_rate: Some(1.5),
                ..spec("any")
            })
            .is_err()
        );
    }

    #[test]
    fn rate_window() {
        let mut g = GateState::default();
        let now = Instant::now();
        assert_eq!(g.take_rate(Some(2), now).unwrap().unwrap().remaining, 1);
        assert_eq!(g.take_rate(Some(2), now).unwrap().unwrap().remaining, 0);
        assert!(matches!(
            g.take_rate(Some(2), now),
            Err(Denied::RateLimited {
                retry_after_s: 60,
                ..
            })
        ));
        let later = now + Duration::from_secs(61);
        assert!(g.take_rate(Some(2), later).is_ok());
        assert_eq!(g.take_rate(None, now), Ok(None));
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), Credential::Missing);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Credential::Key("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), Credential::Malformed);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
