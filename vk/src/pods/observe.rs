//! Provider observation: one list per provider per interval (never one call per pod), folded
//! into the per-provider cache; pods whose workload changed are enqueued.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use super::duplicates;
use super::evidence::LossRule;
use super::{PodController, queue, read, write};
use crate::provider::{Observed, ProviderError};

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
            match slot.provider.list().await {
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
                        _ => queue::backoff(failures).max(interval),
                    };
                    failures = failures.saturating_add(1);
                    warn!(provider = slot.provider.name(), error = %e, retry_in_ms = wait.as_millis() as u64, "provider list failed");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Folds one list result (of a list begun at `started`) into the cache and enqueues the
    /// pods whose workload changed or disappeared.
    pub(super) fn apply_list(&self, i: usize, started: Instant, list: Vec<Observed>) {
        let slot = &self.slots[i];
        let mut changed = Vec::new();
        let lists = slot.lists.load(std::sync::atomic::Ordering::Relaxed);
        // Spend and live workloads as the provider itself lists them (extras included: they
        // cost money too until collected).
        let tally = super::guard::Tally::of(list.iter().filter(|o| self.owner.owns(&o.id)));
        if self.guard.listed(i, tally, started) {
            self.wake_held();
        }
        {
            let recent = read(&self.recent);
            let mut cache = write(&slot.cache);
            let list: Vec<Observed> = list
                .into_iter()
                .filter(|o| self.owner.owns(&o.id))
                .collect();
            let (list, extras) =
                duplicates::split(list, |uid| cache.get(uid).map(|o| o.provider_id.as_str()));
            {
                let mut known = write(&slot.extras);
                let now: HashSet<&str> = extras.iter().map(|o| o.provider_id.as_str()).collect();
                known.retain(|id, _| now.contains(id.as_str()));
                let mut collected = write(&slot.collected);
                collected.retain(|id| now.contains(id.as_str()));
                for o in extras {
                    // Deleted already and still listed as it ends: not a new duplicate.
                    if collected.contains(&o.provider_id) {
                        continue;
                    }
                    if !known.contains_key(&o.provider_id) {
                        warn!(provider = slot.provider.name(), uid = o.id.pod_uid(), provider_id = %o.provider_id, "provider holds a second workload for one pod; it will be deleted");
                    }
                    known.entry(o.provider_id.clone()).or_insert((o, lists));
                }
            }
            let mut seen = HashSet::new();
            for obs in list {
                let uid = obs.id.pod_uid().to_owned();
                // A delete we issued after this list began wins over the list.
                if recent
                    .deleted
                    .get(&(i, uid.clone()))
                    .is_some_and(|t| *t > started)
                {
                    continue;
                }
                seen.insert(uid.clone());
                match cache.get(&uid) {
                    Some(old) if same_state(old, &obs) => {
                        cache.insert(uid, obs);
                    }
                    _ => {
                        cache.insert(uid.clone(), obs);
                        changed.push(uid);
                    }
                }
            }
            let missing: Vec<String> = cache
                .keys()
                .filter(|uid| !seen.contains(*uid))
                // A workload created after this list began is not missing, just not listed yet.
                .filter(|uid| {
                    recent
                        .created
                        .get(&(i, (*uid).clone()))
                        .is_none_or(|t| *t <= started)
                })
                .cloned()
                .collect();
            // Missing from one list is not gone: only repeated evidence removes a workload.
            let verdict =
                write(&slot.evidence).fold(&self.loss_rule(), started, seen.len(), &missing);
            if verdict.suspect {
                warn!(
                    provider = slot.provider.name(),
                    listed = seen.len(),
                    missing = missing.len(),
                    "provider list lacks most known workloads at once; not trusted alone"
                );
            }
            for uid in verdict.gone {
                warn!(
                    provider = slot.provider.name(),
                    uid, "workload absent from consecutive lists: lost"
                );
                cache.remove(&uid);
                changed.push(uid);
            }
        }
        slot.lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut recent = write(&self.recent);
            recent.deleted.retain(|(p, _), t| *p != i || *t > started);
            recent.created.retain(|(p, _), t| *p != i || *t > started);
        }
        *write(&slot.listed_at) = Some(started);
        if !changed.is_empty() {
            let now = Instant::now();
            let mut recent = write(&self.recent);
            for uid in &changed {
                recent.changed.entry(uid.clone()).or_insert(now);
            }
        }
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

/// Observed states equal apart from usage figures (which change every poll and only feed
/// metrics).
fn same_state(a: &Observed, b: &Observed) -> bool {
    a.state == b.state
        && a.message == b.message
        && a.ip == b.ip
        && a.started_at == b.started_at
        && a.finished_at == b.finished_at
        && a.provider_restarts == b.provider_restarts
        && a.provider_id == b.provider_id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::WorkloadState;
    use crate::test_support::observed;

    #[test]
    fn usage_alone_is_no_change_but_state_restarts_and_ids_are() {
        let a = observed(WorkloadState::Running);
        let mut b = a.clone();
        b.usage = Some(crate::provider::Usage {
            cpu_usage_nanos: 5,
            cpu_millis: 1,
            memory_bytes: 7,
            timestamp: crate::test_support::ts("2026-11-29T10:00:09Z"),
        });
        assert!(same_state(&a, &b));
        let mut c = a.clone();
        c.provider_restarts = 1;
        assert!(!same_state(&a, &c));
        let mut d = a.clone();
        d.provider_id = "other".into();
        assert!(!same_state(&a, &d));
        assert!(!same_state(&a, &observed(WorkloadState::Succeeded)));
    }
}
