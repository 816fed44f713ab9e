//! A cumulative CPU counter for providers that report only a rate: RunPod (`runtime.cpu.util`
//! and `runtime.uptime`), Vast (`cpu_util` and `uptime_mins`), and the remote cluster's metrics
//! API (a rate over a window, beside the container's `startedAt`).
//!
//! Rate times uptime is a counter only while the rate stays put: when a pod's CPU use falls,
//! that product falls too, and metrics-server drops every sample lower than the one before it
//! ("unexpected decrease in cumulative CPU usage value", its `pkg/storage/pod.go`), so the
//! pod has no metrics until the product climbs past its old high, which can take many times
//! its uptime. Here the counter is the integral instead: each answer adds the current rate
//! times the uptime that passed since the previous answer. A workload seen for the first time
//! (or after its container restarted in place: the uptime fell) starts at rate times uptime.
//! In memory only: after a VK restart counters start again from rate times uptime, which a
//! consumer takes as a counter reset.

use std::collections::HashMap;

/// Per provider id of a workload: the counter (ns of CPU time) and the uptime it was computed at.
#[derive(Debug, Default)]
pub(crate) struct CpuCounters {
    seen: HashMap<String, (u64, f64)>,
}

impl CpuCounters {
    /// The counter of `id` at `uptime` seconds, using `cpu_millis` as the rate since the
    /// previous answer.
    pub(crate) fn advance(&mut self, id: &str, cpu_millis: u64, uptime: f64) -> u64 {
        let uptime = if uptime.is_finite() {
            uptime.max(0.0)
        } else {
            0.0
        };
        let rate = cpu_millis as f64 * 1_000_000.0; // ns of CPU per second
        let nanos = match self.seen.get(id) {
            Some(&(last, at)) if uptime >= at => {
                last.saturating_add(((uptime - at) * rate).round() as u64)
            }
            _ => (uptime * rate).round() as u64,
        };
        self.seen.insert(id.to_owned(), (nanos, uptime));
        nanos
    }

    /// Forgets the workloads not in `ids` (gone from the list).
    pub(crate) fn retain<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        let keep: std::collections::HashSet<&str> = ids.into_iter().collect();
        self.seen.retain(|id, _| keep.contains(id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000; // ns of CPU time per millicore-second

    #[test]
    fn a_falling_rate_keeps_the_counter_rising_at_the_new_rate() {
        let mut c = CpuCounters::default();
        assert_eq!(c.advance("p", 900, 100.0), 90_000 * MS);
        assert_eq!(c.advance("p", 900, 115.0), 103_500 * MS);
        // The rate drops to 50m: rate times uptime would fall to 6_500; the counter goes on.
        let after = c.advance("p", 50, 130.0);
        assert_eq!(after, 103_500 * MS + 750 * MS);
        let next = c.advance("p", 50, 145.0);
        assert_eq!((next - after) / 15, 50 * MS, "the rate a consumer derives");
    }

    #[test]
    fn a_restart_in_place_or_a_new_pod_starts_from_rate_times_uptime() {
        let mut c = CpuCounters::default();
        c.advance("p", 500, 60.0);
        assert_eq!(
            c.advance("p", 500, 3.0),
            1_500 * MS,
            "uptime fell: restarted"
        );
        c.retain([]);
        assert_eq!(c.advance("p", 100, 70.0), 7_000 * MS, "forgotten, then new");
    }
}
