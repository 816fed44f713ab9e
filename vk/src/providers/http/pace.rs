//! Pacing from the IETF `RateLimit` header a provider sends on its answers (RunPod v2:
//! `RateLimitHeader` in its OpenAPI, `"minute";r=0;t=12, "hour";r=2800;t=1812`, "on responses
//! to authenticated requests, not only on 429s"): the next request waits for the window to
//! reset when a window has no request left, and the last few requests of a window are spread
//! over what is left of it, so a burst of creates slows before the first 429.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::time::Instant;

/// The longest pause one answer may impose (a window of a day must not stop the node).
pub const MAX_PAUSE: Duration = Duration::from_secs(60);
/// Requests left in a window at or below which the rest are spread over its remaining time.
const SPREAD_BELOW: u64 = 5;

/// The earliest instant the next request may go (owned by one provider's client).
#[derive(Debug, Default)]
pub struct Pacer {
    not_before: Mutex<Option<Instant>>,
}

impl Pacer {
    /// Waits until the pause the last answers asked for is over.
    pub async fn wait(&self) {
        let until = *self.not_before.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = until {
            tokio::time::sleep_until(t).await;
        }
    }

    /// Reads an answer's `RateLimit` header, if any, and moves the next request's earliest
    /// instant out as it asks (never earlier than it already is).
    pub fn observe(&self, headers: &HeaderMap) {
        let Some(pause) = headers
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .and_then(pause)
        else {
            return;
        };
        let at = Instant::now() + pause.min(MAX_PAUSE);
        let mut nb = self.not_before.lock().unwrap_or_else(|e| e.into_inner());
        if nb.is_none_or(|t| t < at) {
            *nb = Some(at);
        }
    }
}

/// The pause a `RateLimit` value asks for (pure): the reset time of a window with no request
/// left, or its remaining time shared among its last few requests; `None` when no window is
/// near its end or the value does not parse.
pub fn pause(value: &str) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    for member in value.split(',') {
        let mut remaining = None;
        let mut reset = None;
        for param in member.split(';').skip(1) {
            match param.trim().split_once('=') {
                Some(("r", v)) => remaining = v.trim().parse::<u64>().ok(),
                Some(("t", v)) => reset = v.trim().parse::<u64>().ok(),
                _ => {}
            }
        }
        let (Some(r), Some(t)) = (remaining, reset) else {
            continue;
        };
        let wait = match r {
            0 => Duration::from_secs(t),
            r if r <= SPREAD_BELOW => Duration::from_secs_f64(t as f64 / (r + 1) as f64),
            _ => continue,
        };
        longest = Some(longest.map_or(wait, |l| l.max(wait)));
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_window_waits_for_its_reset_and_its_last_requests_are_spread() {
        // RunPod's example: the minute window spent, 12 s to its reset.
        let v = r#""minute";r=0;t=12, "hour";r=2800;t=1812, "day";r=49500;t=45012"#;
        assert_eq!(pause(v), Some(Duration::from_secs(12)));
        // Plenty left everywhere: no pause.
        assert_eq!(pause(r#""minute";r=40;t=30, "hour";r=2800;t=1812"#), None);
        // Three left for 20 s: one every 5 s.
        assert_eq!(pause(r#""minute";r=3;t=20"#), Some(Duration::from_secs(5)));
        // The longest of several.
        assert_eq!(
            pause(r#""minute";r=0;t=3, "hour";r=1;t=100"#),
            Some(Duration::from_secs(50))
        );
        for junk in ["", "nonsense", r#""minute";r=x;t=3"#, r#""minute";t=3"#] {
            assert_eq!(pause(junk), None, "{junk}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_request_waits_as_the_last_answer_asked_and_never_past_the_cap() {
        let p = Pacer::default();
        let start = Instant::now();
        p.wait().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing asked yet");
        let mut h = HeaderMap::new();
        h.insert("ratelimit", r#""minute";r=0;t=12"#.parse().unwrap());
        p.observe(&h);
        p.wait().await;
        assert_eq!(start.elapsed(), Duration::from_secs(12));
        h.insert("ratelimit", r#""day";r=0;t=45012"#.parse().unwrap());
        let start = Instant::now();
        p.observe(&h);
        p.wait().await;
        assert_eq!(start.elapsed(), MAX_PAUSE);
    }
}
