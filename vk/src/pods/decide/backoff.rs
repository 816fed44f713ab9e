//! The restart back-off: how long a container that ended waits before its workload is created
//! again (doubling from the configured first delay up to the maximum), read from the pod's own
//! status so that it survives a VK restart.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::current_container;
use crate::config::Timings;
use crate::pods::translate::reason;

/// Back-off before restart number `restarts_before + 1`: doubling from the configured first
/// delay up to the configured maximum.
pub fn delay(t: &Timings, restarts_before: i32) -> Duration {
    let ms = t
        .restart_backoff_ms
        .saturating_mul(1u64 << restarts_before.clamp(0, 20))
        .min(t.restart_backoff_max_ms);
    Duration::from_millis(ms)
}

/// Remaining restart back-off of a pod whose container waits in CrashLoopBackOff: due at the
/// last termination plus the back-off for its restart count.
pub fn backoff_remaining(pod: &Pod, t: &Timings, now: Timestamp) -> Option<Duration> {
    let cs = current_container(pod)?;
    let waiting = cs.state.as_ref()?.waiting.as_ref()?;
    if waiting.reason.as_deref() != Some(reason::CRASH_LOOP) {
        return None;
    }
    let finished = cs
        .last_state
        .as_ref()?
        .terminated
        .as_ref()?
        .finished_at
        .as_ref()?
        .0;
    let wait = delay(t, cs.restart_count - 1);
    let due = finished
        .checked_add(jiff::SignedDuration::try_from(wait).ok()?)
        .ok()?;
    let left = due.duration_since(now);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{PodBuilder, ts};

    fn timings() -> Timings {
        Timings {
            restart_backoff_ms: 10_000,
            restart_backoff_max_ms: 300_000,
            ..Timings::default()
        }
    }

    #[test]
    fn delay_doubles_up_to_the_maximum() {
        let t = timings();
        let secs: Vec<u64> = (0..7).map(|n| delay(&t, n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(&t, -3).as_secs(), 10);
        assert_eq!(delay(&t, i32::MAX).as_secs(), 300);
    }

    #[test]
    fn backoff_is_read_from_the_pods_status() {
        let t = timings();
        // Second restart: 20 s after the termination at 10:00:00.
        let pod = PodBuilder::new()
            .crash_looping("runpod", 2, "2026-11-29T10:00:00Z")
            .build();
        let left = backoff_remaining(&pod, &t, ts("2026-11-29T10:00:05Z"));
        assert_eq!(left, Some(Duration::from_secs(15)));
        assert_eq!(
            backoff_remaining(&pod, &t, ts("2026-11-29T10:00:20Z")),
            None
        );
        // Not in CrashLoopBackOff: no back-off at all.
        let running = PodBuilder::new().running("runpod").build();
        assert_eq!(
            backoff_remaining(&running, &t, ts("2026-11-29T10:00:05Z")),
            None
        );
    }
}
