//! Provider observation: one list per provider per interval (never one call per pod), folded
//! into the per-provider cache; pods whose workload changed are enqueued.

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use super::evidence::LossRule;
use super::slots::ListContext;
use super::{PodController, queue};
use crate::provider::{Observed, ProviderError};

/// How long a failed list waits before the next: the queue's back-off, from the poll interval
/// up to ten of them. A list is one call per provider, so an outage costs little at that
/// pace, while a back-off grown to a minute would leave the VK blind that long after the
/// provider recovered (seen: a start judged past its deadline on what a list showed a
/// minute before).
fn list_retry(failures: u32, interval: std::time::Duration) -> std::time::Duration {
    queue::backoff(failures).min(interval * 10).max(interval)
}

impl PodController {
    fn loss_rule(&self) -> LossRule {
        LossRule {
            lists: self.cfg.timings.loss_lists,
            window: self.cfg.timings.loss_window(),
        }
    }

    /// Lists provider `i` every poll interval, backing off while it fails.
    pub(super) async fn observe(self: Arc<Self>, i: usize) {
        let interval = self.cfg.timings.poll_interval();
        let mut failures = 0u32;
        loop {
            let started = Instant::now();
            let slot = &self.slots[i];
            match slot.provider().list().await {
                Ok(list) => {
                    failures = 0;
                    self.apply_list(i, started, list);
                    tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
                }
                Err(e) => {
                    let wait = match &e {
                        ProviderError::Transient {
                            retry_after: Some(d),
                            ..
                        } => *d,
                        _ => list_retry(failures, interval),
                    };
                    failures = failures.saturating_add(1);
                    warn!(provider = slot.name(), error = %e, retry_in_ms = wait.as_millis() as u64, "provider list failed");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Folds one list result (of a list begun at `started`) into the cache and enqueues the
    /// pods whose workload changed or disappeared.
    pub(super) fn apply_list(&self, i: usize, started: Instant, list: Vec<Observed>) {
        // Spend and live workloads as the provider itself lists them (extras included: they
        // cost money too until collected).
        let tally = super::guard::Tally::of(list.iter().filter(|o| self.owner.owns(&o.id)));
        if self.guard.listed(i, tally, started) {
            self.wake_held();
        }
        let ours: Vec<Observed> = list
            .into_iter()
            .filter(|o| self.owner.owns(&o.id))
            .collect();
        let changed = self.slots[i].fold(
            ours,
            &ListContext {
                started,
                rule: self.loss_rule(),
                // A delete we issued after this list began wins over the list.
                deleted_since: &|uid| self.recent.deleted_since(i, uid, started),
                // A workload created after this list began is not missing, just not listed yet.
                created_since: &|uid| self.recent.created_since(i, uid, started),
            },
        );
        self.recent.list_applied(i, started, &changed);
        for uid in changed {
            self.queue.add(&uid);
        }
    }
}

impl PodController {
    /// Room may have appeared under the guardrails: the earliest held pod looks again (it
    /// wakes the next one once it got room, so they go in arrival order).
    pub(super) fn wake_held(&self) {
        if let Some(uid) = self.guard.head() {
            self.queue.add(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_failing_list_backs_off_from_one_poll_to_ten() {
        let poll = Duration::from_secs(2);
        assert_eq!(super::list_retry(0, poll), poll);
        // The queue's back-off would be a minute after 9 failures; the list waits 20 s.
        assert_eq!(super::list_retry(9, poll), poll * 10);
        assert_eq!(super::list_retry(30, poll), poll * 10);
        let mid = super::list_retry(5, poll);
        assert!(mid > poll && mid < poll * 10, "{mid:?}");
    }
}
