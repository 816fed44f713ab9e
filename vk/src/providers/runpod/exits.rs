//! Container exits RunPod does not report: it restarts a container whose command ends, in
//! place, and the pod stays RUNNING (runpod/runpodctl#149: "pods restart after the ENTRYPOINT
//! command has ended"; dstackai/dstack#1142: a failing start command restarts "endlessly").
//! The v2 `Pod` has no exit code and no restart counter; what changes is `runtime.uptime`
//! ("seconds since the container started"), which falls back to zero, and possibly
//! `startedAt`. This module remembers each pod's last uptime and notices the fall.

use std::collections::HashMap;
use std::time::Instant;

/// Slack, in seconds, before a lower uptime than expected counts as a restart: `uptime` is
/// whole seconds, and two answers can be delayed differently on their way.
const SLACK_SECS: f64 = 2.0;

#[derive(Clone, Debug)]
struct Sighting {
    /// Uptime in the last answer and when (our clock) it arrived.
    uptime: f64,
    at: Instant,
    started_at: Option<String>,
    /// An exit was seen; sticky until the pod leaves the list.
    exited: bool,
}

/// Exits seen per RunPod pod id, in memory: after a VK restart, an exit that happened before
/// the first sighting is only noticed at the container's next exit.
#[derive(Debug, Default)]
pub(super) struct Exits {
    seen: HashMap<String, Sighting>,
}

impl Exits {
    /// Notes a RUNNING pod's `runtime.uptime` and `startedAt` from a list asked for at `sent`
    /// and answered at `now`; true once its container has exited (and been restarted by RunPod)
    /// since we first saw it.
    ///
    /// The uptime was read somewhere between `sent` and `now`, so between two answers it grew
    /// by at least `sent - previous now`: that is what it is held to. Held to `now - previous
    /// now` instead, an answer slower than the one before (a list of thousands of pods, a busy
    /// API) looked like a fall and restarted healthy workloads (`make bench` at 10,000 pods).
    pub(super) fn note(
        &mut self,
        pod_id: &str,
        uptime: Option<f64>,
        started_at: Option<&str>,
        sent: Instant,
        now: Instant,
    ) -> bool {
        let Some(uptime) = uptime.filter(|u| u.is_finite() && *u >= 0.0) else {
            // No runtime block (yet): nothing to compare; keep what we know.
            return self.seen.get(pod_id).is_some_and(|s| s.exited);
        };
        let started_at = started_at.map(str::to_owned);
        let exited = match self.seen.get(pod_id) {
            None => false,
            Some(prev) => {
                let expected = prev.uptime + sent.saturating_duration_since(prev.at).as_secs_f64();
                let fell = uptime + SLACK_SECS < expected;
                let restarted = prev.started_at.is_some()
                    && started_at.is_some()
                    && prev.started_at != started_at;
                prev.exited || fell || restarted
            }
        };
        self.seen.insert(
            pod_id.to_owned(),
            Sighting {
                uptime,
                at: now,
                started_at,
                exited,
            },
        );
        exited
    }

    /// An exit already seen for this pod (whatever its state now).
    #[cfg(test)]
    pub(super) fn seen_exit(&self, pod_id: &str) -> bool {
        self.seen.get(pod_id).is_some_and(|s| s.exited)
    }

    /// Forgets pods no longer listed.
    pub(super) fn retain(&mut self, listed: &[&str]) {
        self.seen.retain(|id, _| listed.contains(&id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_falling_uptime_is_an_exit_and_stays_one() {
        let mut e = Exits::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(!e.note("p", Some(10.0), Some("T1"), at(0), at(0)));
        // Uptime grew as the clock did: the same container.
        assert!(!e.note("p", Some(20.0), Some("T1"), at(10), at(10)));
        // 10 s later it reads 4: the container started again 4 s ago.
        assert!(e.note("p", Some(4.0), Some("T1"), at(20), at(20)));
        // Sticky: the pod keeps counting as exited.
        assert!(e.note("p", Some(14.0), Some("T1"), at(30), at(30)));
        assert!(e.seen_exit("p"));
    }

    #[test]
    fn an_uptime_that_grew_less_than_the_clock_is_an_exit_even_if_higher() {
        let mut e = Exits::default();
        let t0 = Instant::now();
        assert!(!e.note("p", Some(2.0), None, t0, t0));
        // 30 s later only 20 s of uptime: it restarted 20 s ago.
        assert!(e.note(
            "p",
            Some(20.0),
            None,
            t0 + Duration::from_secs(30),
            t0 + Duration::from_secs(30)
        ));
    }

    #[test]
    fn a_new_start_time_is_an_exit_and_rounding_is_not() {
        let mut e = Exits::default();
        let t0 = Instant::now();
        assert!(!e.note("p", Some(100.0), Some("T1"), t0, t0));
        assert!(!e.note(
            "p",
            Some(101.0),
            Some("T1"),
            t0 + Duration::from_secs(3),
            t0 + Duration::from_secs(3)
        ));
        assert!(e.note(
            "p",
            Some(200.0),
            Some("T2"),
            t0 + Duration::from_secs(5),
            t0 + Duration::from_secs(5)
        ));
    }

    #[test]
    fn unknown_pods_and_missing_uptime_are_not_exits() {
        let mut e = Exits::default();
        let t0 = Instant::now();
        assert!(!e.note("p", None, None, t0, t0));
        assert!(!e.note("p", Some(f64::NAN), None, t0, t0));
        assert!(!e.note("q", Some(0.0), None, t0, t0));
        e.retain(&[]);
        assert!(!e.seen_exit("q"));
    }

    #[test]
    fn an_answer_slower_than_the_one_before_is_not_an_exit() {
        let mut e = Exits::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Asked and answered at once: uptime 100.
        assert!(!e.note("p", Some(100.0), None, at(0), at(0)));
        // Asked 2 s later, answered 6 s after that (a list of thousands of pods): the uptime
        // was read soon after the request, 102.5; 8 s passed between the answers.
        assert!(!e.note("p", Some(102.5), None, at(2000), at(8000)));
        // A real restart still shows: asked 10 s later, uptime 1.
        assert!(e.note("p", Some(1.0), None, at(18_000), at(18_100)));
    }
}
