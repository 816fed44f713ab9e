//! The providers as the pipeline holds them, one slot each: the provider behind the call
//! layer, our workloads there as its last list showed them, the evidence of absences, the extra
//! workloads to collect, its breaker, inventory and capacity refusals. A slot owns these fields;
//! the rest of the pipeline goes through the methods here. What the lists made (workloads,
//! evidence, extras, the last list's start) is behind one lock, so folding a list takes one; no
//! method holds two of a slot's locks.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tracing::warn;

use super::dispatch::Standing;
use super::evidence::{Evidence, LossRule};
use super::{duplicates, read, write};
use crate::provider::health::{Breaker, BreakerRules, Health};
use crate::provider::{DynProvider, Inventory, Observed, layer};
use crate::telemetry::Metrics;

/// What a provider's lists (and our own creates and deletes since) made of its workloads.
#[derive(Default)]
struct Listed {
    /// Our workloads at this provider by pod UID, from the last list plus local changes.
    cache: HashMap<String, Observed>,
    /// Start time of the last successful list.
    at: Option<Instant>,
    /// Absences of our workloads from its lists (see [`super::evidence`]).
    evidence: Evidence,
    /// Workloads beyond the first for one pod, by provider id, with the list count when first
    /// seen (see [`duplicates`]); the garbage collector deletes them.
    extras: HashMap<String, (Observed, u64)>,
    /// Extras already deleted, by provider id, while the provider still lists them (slurmctld
    /// lists a cancelled job until `MinJobAge`): never deleted a second time.
    collected: HashSet<String>,
}

/// What the pipeline knows about one provider.
pub(super) struct ProviderSlot {
    provider: Arc<dyn DynProvider>,
    listed: RwLock<Listed>,
    /// Successful lists applied so far.
    lists: AtomicU64,
    /// Fed by every call through the layer; dispatch skips the provider while it is open.
    breaker: Arc<Breaker>,
    /// The last inventory (prices, free capacity), refreshed by [`super::inventory`].
    inventory: RwLock<Option<Arc<Inventory>>>,
    /// GPU types (lower case; `None`: CPU-only or any) this provider refused for capacity,
    /// until when (see `dispatch.capacityMemoryMs`).
    refused: RwLock<HashMap<Option<String>, Instant>>,
}

/// How one list is judged against what the pipeline did while it was in flight.
pub(super) struct ListContext<'a> {
    /// Start of the list.
    pub started: Instant,
    pub rule: LossRule,
    /// A delete of this pod's workload was issued after the list began: the list is stale.
    pub deleted_since: &'a dyn Fn(&str) -> bool,
    /// This pod's workload was created after the list began: its absence says nothing.
    pub created_since: &'a dyn Fn(&str) -> bool,
}

impl ProviderSlot {
    fn new(provider: Arc<dyn DynProvider>, breaker: Arc<Breaker>) -> Self {
        Self {
            provider,
            listed: RwLock::default(),
            lists: AtomicU64::default(),
            breaker,
            inventory: RwLock::default(),
            refused: RwLock::default(),
        }
    }

    pub fn provider(&self) -> &Arc<dyn DynProvider> {
        &self.provider
    }

    pub fn name(&self) -> &str {
        self.provider.name()
    }

    pub fn health(&self, now: Instant) -> Health {
        self.breaker.health(now)
    }

    /// Successful lists applied so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
    }

    /// Start of the last successful list; `None` before the first.
    pub fn listed_at(&self) -> Option<Instant> {
        read(&self.listed).at
    }

    /// The pod's workload here, as last listed or changed by us.
    pub fn cached(&self, uid: &str) -> Option<Observed> {
        read(&self.listed).cache.get(uid).cloned()
    }

    /// Records a workload we just created (before any list shows it).
    pub fn cache(&self, uid: String, obs: Observed) {
        write(&self.listed).cache.insert(uid, obs);
    }

    /// Forgets a workload we just deleted.
    pub fn uncache(&self, uid: &str) {
        write(&self.listed).cache.remove(uid);
    }

    /// The pod UIDs of our workloads here.
    pub fn cached_uids(&self) -> Vec<String> {
        read(&self.listed).cache.keys().cloned().collect()
    }

    /// Our workloads here whose pod `live` does not claim, with their pod UIDs. `live` is
    /// called without this slot's lock held, so it may take other locks.
    pub fn unclaimed(&self, live: impl Fn(&str) -> bool) -> Vec<(String, Observed)> {
        self.cached_uids()
            .into_iter()
            .filter(|uid| !live(uid))
            .filter_map(|uid| self.cached(&uid).map(|o| (uid, o)))
            .collect()
    }

    /// Folds one successful list of our workloads into the cache, the extras and the evidence
    /// of absences; returns the pod UIDs whose workload changed or is now judged gone. Holds the
    /// slot's one list lock throughout, so our creates and deletes (`cache`, `uncache`) fall
    /// before or after the whole fold; `cx` asks `pods::memory::Recent`, whose lock is a leaf
    /// taken inside it (docs/architecture.md, "Who holds the pipeline's state").
    pub fn fold(&self, list: Vec<Observed>, cx: &ListContext<'_>) -> Vec<String> {
        let lists = self.lists();
        let mut changed = Vec::new();
        {
            let mut guard = write(&self.listed);
            let l = &mut *guard;
            let (list, extras) =
                duplicates::split(list, |uid| l.cache.get(uid).map(|o| o.provider_id.as_str()));
            note_extras(self.name(), &mut l.extras, &mut l.collected, extras, lists);
            let mut seen = HashSet::new();
            for obs in list {
                let uid = obs.id.pod_uid().to_owned();
                if (cx.deleted_since)(&uid) {
                    continue;
                }
                seen.insert(uid.clone());
                match l.cache.get(&uid) {
                    Some(old) if same_state(old, &obs) => {
                        l.cache.insert(uid, obs);
                    }
                    _ => {
                        l.cache.insert(uid.clone(), obs);
                        changed.push(uid);
                    }
                }
            }
            let missing: Vec<String> = l
                .cache
                .keys()
                .filter(|uid| !seen.contains(*uid) && !(cx.created_since)(uid))
                .cloned()
                .collect();
            // Missing from one list is not gone: only repeated evidence removes a workload.
            let verdict = l.evidence.fold(&cx.rule, cx.started, seen.len(), &missing);
            if verdict.suspect {
                warn!(
                    provider = self.name(),
                    listed = seen.len(),
                    missing = missing.len(),
                    "provider list lacks most known workloads at once; not trusted alone"
                );
            }
            for uid in verdict.gone {
                warn!(
                    provider = self.name(),
                    uid, "workload absent from consecutive lists: lost"
                );
                l.cache.remove(&uid);
                changed.push(uid);
            }
            l.at = Some(cx.started);
        }
        self.lists.fetch_add(1, Ordering::Relaxed);
        changed
    }

    /// Extra workloads seen in at least `min_lists` lists: due for deletion.
    pub fn due_extras(&self, min_lists: u64) -> Vec<Observed> {
        let lists = self.lists();
        read(&self.listed)
            .extras
            .values()
            .filter(|(_, first)| lists.saturating_sub(*first) >= min_lists)
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// An extra workload was deleted: never deleted again while it is still listed.
    pub fn extra_collected(&self, provider_id: &str) {
        let mut l = write(&self.listed);
        l.extras.remove(provider_id);
        l.collected.insert(provider_id.to_owned());
    }

    pub fn set_inventory(&self, inventory: Option<Inventory>) {
        *write(&self.inventory) = inventory.map(Arc::new);
    }

    /// GPUs the last inventory shows free (`None`: no inventory, or it gives no count).
    pub fn available_gpus(&self) -> Option<u64> {
        read(&self.inventory)
            .as_ref()
            .and_then(|i| i.available_gpus())
    }

    /// The provider had no capacity for `gpu_type` (lower case) just now; remembered until
    /// `until`.
    pub fn refuse(&self, gpu_type: Option<String>, until: Instant) {
        write(&self.refused).insert(gpu_type, until);
    }

    /// Health, inventory and live refusals now (the inventory is attached by the caller, see
    /// [`super::inventory::attach`]).
    pub fn standing(&self, now: Instant) -> (Option<Arc<Inventory>>, Standing<'static>) {
        let refused = {
            let mut refused = write(&self.refused);
            refused.retain(|_, until| *until > now);
            refused
                .iter()
                .map(|(t, until)| (t.clone(), *until - now))
                .collect()
        };
        let standing = Standing {
            health: self.health(now),
            inventory: None,
            refused,
        };
        (read(&self.inventory).clone(), standing)
    }
}

/// Keeps the extra workloads of one list (seen at list count `lists`) in `known`, forgetting
/// those it no longer shows.
fn note_extras(
    provider: &str,
    known: &mut HashMap<String, (Observed, u64)>,
    collected: &mut HashSet<String>,
    extras: Vec<Observed>,
    lists: u64,
) {
    let now: HashSet<&str> = extras.iter().map(|o| o.provider_id.as_str()).collect();
    known.retain(|id, _| now.contains(id.as_str()));
    collected.retain(|id| now.contains(id.as_str()));
    for o in extras {
        // Deleted already and still listed as it ends: not a new duplicate.
        if collected.contains(&o.provider_id) {
            continue;
        }
        if !known.contains_key(&o.provider_id) {
            warn!(provider, uid = o.id.pod_uid(), provider_id = %o.provider_id, "provider holds a second workload for one pod; it will be deleted");
        }
        known.entry(o.provider_id.clone()).or_insert((o, lists));
    }
}

/// Every provider's slot, in configuration order (a provider's index is its place here).
pub(super) struct Slots(Vec<ProviderSlot>);

impl Slots {
    /// A slot per provider, each provider behind the call [`layer`] with a breaker of its own.
    pub fn new(
        providers: Vec<Arc<dyn DynProvider>>,
        metrics: &Metrics,
        rules: BreakerRules,
    ) -> Self {
        Self(
            providers
                .into_iter()
                .map(|p| {
                    let breaker = Arc::new(Breaker::new(rules));
                    let provider =
                        layer::layer(p, metrics.clone(), layer::DEFAULT_TIMEOUT, breaker.clone());
                    ProviderSlot::new(provider, breaker)
                })
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ProviderSlot> {
        self.0.iter()
    }

    /// The index of the provider named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|s| s.name() == name)
    }

    /// The slot of the provider named `name`.
    pub fn named(&self, name: &str) -> Option<&ProviderSlot> {
        self.0.iter().find(|s| s.name() == name)
    }

    /// The provider index and observed workload of a pod, if any provider holds one.
    pub fn find(&self, uid: &str) -> Option<(usize, Observed)> {
        self.0
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.cached(uid).map(|o| (i, o)))
    }

    /// Every provider was listed successfully at least once.
    pub fn all_listed(&self) -> bool {
        self.0.iter().all(|s| s.listed_at().is_some())
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = ProviderSlot;

    fn index(&self, i: usize) -> &ProviderSlot {
        &self.0[i]
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
        && a.pull_failure == b.pull_failure
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
        // A pull the provider reports failed while the state stays "starting" is a change.
        let mut e = a.clone();
        e.pull_failure = Some("pull access denied".into());
        assert!(!same_state(&a, &e));
        assert!(!same_state(&a, &observed(WorkloadState::Succeeded)));
    }
}
