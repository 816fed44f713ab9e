//! How many Event writes the VK may spend: a budget per pod, as client-go's spam filter
//! gives each object (a burst of 25, then one every 5 minutes; over it, events are dropped),
//! and one for the whole VK, as the kubelet's `--event-qps 50` / `--event-burst 100` (over
//! it, sends wait, and the lanes drop what no longer fits). Pure: time comes in as `now`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Per pod: burst and refill (client-go `defaultSpamBurst`, `defaultSpamQPS` = 1/300).
pub const POD_BURST: f64 = 25.0;
pub const POD_PER_SECOND: f64 = 1.0 / 300.0;
/// The whole VK: the kubelet's event QPS and burst defaults.
pub const VK_BURST: f64 = 100.0;
pub const VK_PER_SECOND: f64 = 50.0;
/// Pods whose budget is remembered; full buckets are forgotten first beyond this.
pub const PODS: usize = 8192;

/// A token bucket.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, per_second: f64, burst: f64, now: Instant) {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * per_second;
        self.tokens = (self.tokens + gained).min(burst);
        self.at = now.max(self.at);
    }

    /// Takes a token if there is one.
    pub fn take(&mut self, per_second: f64, burst: f64, now: Instant) -> bool {
        self.refill(per_second, burst, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes a token now, or says how long until one is there (taking nothing).
    pub fn wait(&mut self, per_second: f64, burst: f64, now: Instant) -> Option<Duration> {
        if self.take(per_second, burst, now) {
            return None;
        }
        Some(Duration::from_secs_f64((1.0 - self.tokens) / per_second))
    }

    fn is_full(&self, per_second: f64, burst: f64, now: Instant) -> bool {
        let mut b = *self;
        b.refill(per_second, burst, now);
        b.tokens >= burst
    }
}

/// The per-pod budgets, bounded.
#[derive(Default)]
pub struct PodBudgets {
    pods: HashMap<String, Bucket>,
}

impl PodBudgets {
    /// Whether pod `uid` may have one more event write now.
    pub fn allow(&mut self, uid: &str, now: Instant) -> bool {
        if !self.pods.contains_key(uid) && self.pods.len() >= PODS {
            // A full bucket holds nothing worth remembering.
            self.pods
                .retain(|_, b| !b.is_full(POD_PER_SECOND, POD_BURST, now));
            if self.pods.len() >= PODS {
                self.pods.clear();
            }
        }
        self.pods
            .entry(uid.to_owned())
            .or_insert_with(|| Bucket::full(POD_BURST, now))
            .take(POD_PER_SECOND, POD_BURST, now)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_gets_its_burst_then_one_event_per_five_minutes() {
        let mut b = PodBudgets::default();
        let t0 = Instant::now();
        for i in 0..25 {
            assert!(b.allow("a", t0), "event {i} of the burst");
        }
        assert!(!b.allow("a", t0));
        assert!(!b.allow("a", t0 + Duration::from_secs(299)));
        assert!(b.allow("a", t0 + Duration::from_secs(300)));
        assert!(!b.allow("a", t0 + Duration::from_secs(301)));
        // Another pod has its own budget.
        assert!(b.allow("b", t0 + Duration::from_secs(301)));
    }

    #[test]
    fn the_vk_sends_its_burst_then_waits_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::full(VK_BURST, t0);
        for _ in 0..100 {
            assert_eq!(b.wait(VK_PER_SECOND, VK_BURST, t0), None);
        }
        let w = b.wait(VK_PER_SECOND, VK_BURST, t0).expect("over the burst");
        assert_eq!(w, Duration::from_millis(20));
        assert_eq!(b.wait(VK_PER_SECOND, VK_BURST, t0 + w), None);
        // A second later: 50 more, not 100.
        let t1 = t0 + w + Duration::from_secs(1);
        let sent = (0..100)
            .filter(|_| b.wait(VK_PER_SECOND, VK_BURST, t1).is_none())
            .count();
        assert_eq!(sent, 50);
    }

    #[test]
    fn memory_stays_bounded() {
        let mut b = PodBudgets::default();
        let t0 = Instant::now();
        for _ in 0..25 {
            b.allow("spender", t0);
        }
        for i in 0..PODS + 100 {
            b.allow(&format!("p{i}"), t0 + Duration::from_secs(600));
        }
        assert!(b.len() <= PODS, "{}", b.len());
    }
}
