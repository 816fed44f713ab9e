//! What every real-API request passes through: call counters, injected faults, bearer
//! authentication, quota windows (minute, hour, day) and per-endpoint minimum intervals.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod credential;
mod denied;
mod faults;

pub use credential::{Credential, bearer, same_secret};
pub use denied::{Denied, Fault};
pub use faults::{FaultSpec, FaultSpecError};

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
    /// Registry credentials (RunPod `/v2/registries`).
    Registry,
}

impl RouteKind {
    /// Every kind.
    pub const ALL: [RouteKind; 8] = [
        Self::Create,
        Self::List,
        Self::Get,
        Self::Delete,
        Self::Action,
        Self::Logs,
        Self::Search,
        Self::Registry,
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
            Self::Registry => "registry",
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

/// An admitted request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Quota left, when quota windows are configured.
    pub rate: Option<RateInfo>,
}

/// Quota state after an admitted request (for `RateLimit` headers): one entry per window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateInfo {
    /// Every configured window, shortest first.
    pub windows: Vec<WindowState>,
}

/// One quota window's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowState {
    /// `minute`, `hour` or `day`.
    pub name: &'static str,
    /// Requests allowed in the window.
    pub limit: u32,
    /// Window length, seconds.
    pub width_s: u64,
    /// Requests left in this window.
    pub remaining: u32,
    /// Seconds until the window resets.
    pub reset_s: u64,
}

/// Request quotas per key and window (RunPod v2 `RateLimit-Policy`); `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateWindows {
    pub per_minute: Option<u32>,
    pub per_hour: Option<u32>,
    pub per_day: Option<u32>,
}

impl RateWindows {
    /// `(name, limit, width)` of each configured window, shortest first.
    fn quotas(&self) -> impl Iterator<Item = (usize, &'static str, u32, Duration)> {
        [
            ("minute", self.per_minute, 60),
            ("hour", self.per_hour, 3_600),
            ("day", self.per_day, 86_400),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, (name, limit, secs))| {
            limit.map(|l| (i, name, l, Duration::from_secs(secs)))
        })
    }

    /// True when no window is configured.
    pub fn is_unlimited(&self) -> bool {
        self.quotas().next().is_none()
    }
}

/// A documented limit of one endpoint (Vast's `x-rate-limit`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EndpointLimit {
    /// At least this long between two admitted requests (`threshold`, seconds).
    Interval(Duration),
    /// At most `n` admitted requests in any rolling `per` (`requests: 10, per: minute`).
    Burst {
        /// Requests allowed.
        n: u32,
        /// The rolling period.
        per: Duration,
    },
}

impl EndpointLimit {
    /// The limit with its time scaled by `scale` (0.1: ten times shorter intervals).
    pub fn scaled(self, scale: f64) -> Self {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        match self {
            Self::Interval(d) => Self::Interval(d.mul_f64(scale)),
            Self::Burst { n, per } => Self::Burst {
                n,
                per: per.mul_f64(scale),
            },
        }
    }
}

/// Arrival jitter forgiven on an interval or a burst period (a twentieth of it): a client
/// that spaces its calls exactly one interval apart sees them arrive a few milliseconds closer
/// now and then (scheduling on a loaded machine). The real service's precision is not
/// documented.
const INTERVAL_SLACK_DIVISOR: u32 = 20;

/// Counters, faults, quota windows and endpoint clocks.
#[derive(Debug, Default)]
pub struct GateState {
    counters: BTreeMap<RouteKind, u64>,
    /// Create calls the provider accepted (a workload exists because of each): `create` counts
    /// calls, refused ones included (a Vast offer taken by someone else, no capacity).
    created: u64,
    faults: Vec<FaultRule>,
    /// Start and count of each quota window (minute, hour, day).
    windows: [Option<(Instant, u32)>; 3],
    /// Per endpoint: when the last request was admitted (interval limits)...
    endpoint_last: HashMap<&'static str, Instant>,
    /// ...and when the recent ones were (burst limits).
    endpoint_log: HashMap<&'static str, VecDeque<Instant>>,
    /// Requests refused by a quota window or an endpoint limit.
    rate_limited: u64,
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
    /// Forget counters, faults, hidden workloads and the rate windows.
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
                denied = Some(Denied::Fault(Fault {
                    status: rule.status,
                    body: rule.body.clone(),
                    retry_after_s: rule.retry_after_s,
                }));
            }
        }
        (latency, denied)
    }

    /// Take one request from every quota window; refused (and nothing taken) when one of
    /// them is used up.
    pub fn take_rate(
        &mut self,
        windows: &RateWindows,
        now: Instant,
    ) -> Result<Option<RateInfo>, Denied> {
        if windows.is_unlimited() {
            return Ok(None);
        }
        let mut states = Vec::new();
        let mut exceeded: Option<(&'static str, u64)> = None;
        for (i, name, limit, width) in windows.quotas() {
            let (start, count) = match self.windows[i] {
                Some((start, count)) if now.saturating_duration_since(start) < width => {
                    (start, count)
                }
                _ => (now, 0),
            };
            self.windows[i] = Some((start, count));
            let left = width.saturating_sub(now.saturating_duration_since(start));
            let reset_s = left.as_secs_f64().ceil().max(1.0) as u64;
            if count >= limit && exceeded.is_none_or(|(_, r)| reset_s > r) {
                exceeded = Some((name, reset_s));
            }
            states.push(WindowState {
                name,
                limit,
                width_s: width.as_secs(),
                remaining: limit.saturating_sub(count),
                reset_s,
            });
        }
        if let Some((window, retry_after_s)) = exceeded {
            self.rate_limited += 1;
            return Err(Denied::RateLimited {
                retry_after_s,
                window,
                windows: states,
            });
        }
        for (i, _, _, _) in windows.quotas() {
            if let Some((_, count)) = &mut self.windows[i] {
                *count += 1;
            }
        }
        for w in &mut states {
            w.remaining = w.remaining.saturating_sub(1);
        }
        Ok(Some(RateInfo { windows: states }))
    }

    /// Admit one request to `endpoint` under its limit, or refuse it (a refused request does
    /// not move the endpoint's clock: the next one is measured from the last admitted one).
    pub fn take_endpoint(
        &mut self,
        endpoint: &'static str,
        limit: EndpointLimit,
        now: Instant,
    ) -> Result<(), Denied> {
        match limit {
            EndpointLimit::Interval(interval) => {
                let slack = interval / INTERVAL_SLACK_DIVISOR;
                if let Some(last) = self.endpoint_last.get(endpoint)
                    && now.saturating_duration_since(*last) + slack < interval
                {
                    self.rate_limited += 1;
                    return Err(Denied::TooFrequent {
                        threshold_s: Some(interval.as_secs_f64()),
                    });
                }
                self.endpoint_last.insert(endpoint, now);
            }
            EndpointLimit::Burst { n, per } => {
                let slack = per / INTERVAL_SLACK_DIVISOR;
                let log = self.endpoint_log.entry(endpoint).or_default();
                while log
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) + slack >= per)
                {
                    log.pop_front();
                }
                if log.len() >= n as usize {
                    self.rate_limited += 1;
                    return Err(Denied::TooFrequent { threshold_s: None });
                }
                log.push_back(now);
            }
        }
        Ok(())
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

    /// Counters for every kind (zeros included), `total`, `created` (accepted creates) and
    /// `rate_limited` (requests refused by a quota window or an endpoint limit).
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        let mut out: BTreeMap<&'static str, u64> = RouteKind::ALL
            .into_iter()
            .map(|k| (k.as_str(), self.counters.get(&k).copied().unwrap_or(0)))
            .collect();
        out.insert("total", self.counters.values().sum());
        out.insert("created", self.created);
        out.insert("rate_limited", self.rate_limited);
        out
    }
}

#[cfg(test)]
mod tests;
