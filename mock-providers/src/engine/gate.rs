//! What every real-API request passes through: call counters, injected faults, bearer
//! authentication, quota windows (minute, hour, day) and per-endpoint minimum intervals.

use std::collections::{BTreeMap, HashMap, VecDeque};
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
                denied = Some(Denied::Fault {
                    status: rule.status,
                    body: rule.body.clone(),
                    retry_after_s: rule.retry_after_s,
                });
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
        let minute = RateWindows {
            per_minute: Some(2),
            ..RateWindows::default()
        };
        let left = |r: Option<RateInfo>| r.unwrap().windows[0].remaining;
        assert_eq!(left(g.take_rate(&minute, now).unwrap()), 1);
        assert_eq!(left(g.take_rate(&minute, now).unwrap()), 0);
        assert!(matches!(
            g.take_rate(&minute, now),
            Err(Denied::RateLimited {
                retry_after_s: 60,
                window: "minute",
                ..
            })
        ));
        let later = now + Duration::from_secs(61);
        assert!(g.take_rate(&minute, later).is_ok());
        assert_eq!(g.take_rate(&RateWindows::default(), now), Ok(None));
        assert_eq!(g.counters()["rate_limited"], 1);
    }

    #[test]
    fn the_hour_and_day_windows_outlast_the_minute() {
        let mut g = GateState::default();
        let start = Instant::now();
        let w = RateWindows {
            per_minute: Some(3),
            per_hour: Some(5),
            per_day: Some(7),
        };
        // Minute one: 3 calls, the fourth is refused by the minute window.
        for _ in 0..3 {
            g.take_rate(&w, start).unwrap();
        }
        let Err(Denied::RateLimited {
            window, windows, ..
        }) = g.take_rate(&w, start)
        else {
            panic!("the minute window should be exceeded");
        };
        assert_eq!(window, "minute");
        let remaining: Vec<u32> = windows.iter().map(|s| s.remaining).collect();
        assert_eq!(remaining, [0, 2, 4], "nothing taken by the refused call");
        // Minute two: 2 more calls use the hour up; the refusal names the hour and waits
        // for its reset, not the minute's.
        let m2 = start + Duration::from_secs(61);
        let ok = g.take_rate(&w, m2).unwrap().unwrap();
        assert_eq!(ok.windows[0].remaining, 2);
        g.take_rate(&w, m2).unwrap();
        let Err(Denied::RateLimited {
            window,
            retry_after_s,
            ..
        }) = g.take_rate(&w, m2)
        else {
            panic!("the hour window should be exceeded");
        };
        assert_eq!(window, "hour");
        assert_eq!(retry_after_s, 3_600 - 61);
        // Hour two: 2 more calls use the day up.
        let h2 = start + Duration::from_secs(3_601);
        g.take_rate(&w, h2).unwrap();
        g.take_rate(&w, h2).unwrap();
        assert!(matches!(
            g.take_rate(&w, h2),
            Err(Denied::RateLimited {
                window: "day",
                retry_after_s: 82_799,
                ..
            })
        ));
        // The next day everything is back.
        let d2 = start + Duration::from_secs(86_401);
        let fresh = g.take_rate(&w, d2).unwrap().unwrap();
        let remaining: Vec<u32> = fresh.windows.iter().map(|s| s.remaining).collect();
        assert_eq!(remaining, [2, 4, 6]);
    }

    #[test]
    fn endpoint_intervals_and_bursts() {
        let mut g = GateState::default();
        let t0 = Instant::now();
        let rent = EndpointLimit::Interval(Duration::from_millis(4_500));
        assert!(g.take_endpoint("rent", rent, t0).is_ok());
        let too_soon = g.take_endpoint("rent", rent, t0 + Duration::from_secs(1));
        assert_eq!(
            too_soon,
            Err(Denied::TooFrequent {
                threshold_s: Some(4.5)
            })
        );
        // Measured from the last admitted call, not from the refused one.
        assert!(
            g.take_endpoint("rent", rent, t0 + Duration::from_millis(4_500))
                .is_ok()
        );
        // Endpoints are independent.
        assert!(
            g.take_endpoint("destroy", rent, t0 + Duration::from_millis(4_600))
                .is_ok()
        );
        let search = EndpointLimit::Burst {
            n: 2,
            per: Duration::from_secs(60),
        };
        assert!(g.take_endpoint("search", search, t0).is_ok());
        assert!(
            g.take_endpoint("search", search, t0 + Duration::from_secs(1))
                .is_ok()
        );
        assert_eq!(
            g.take_endpoint("search", search, t0 + Duration::from_secs(56)),
            Err(Denied::TooFrequent { threshold_s: None })
        );
        assert!(
            g.take_endpoint("search", search, t0 + Duration::from_secs(60))
                .is_ok()
        );
        let scaled = rent.scaled(0.1);
        assert_eq!(scaled, EndpointLimit::Interval(Duration::from_millis(450)));
        assert_eq!(g.counters()["rate_limited"], 2);
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
