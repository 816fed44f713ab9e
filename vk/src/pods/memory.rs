//! The pipeline's short memory of its own recent actions, used to judge provider lists that
//! raced with them. Process-local on purpose: after a restart nothing here is needed, because
//! no action of the new process is in flight (see `startup`).

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::time::Instant;

use super::{read, write};
use crate::naming::WorkloadId;

/// Recent actions, by (provider index, pod UID) where a provider is involved.
#[derive(Default)]
struct Actions {
    /// When our last create call for a pod's workload ended (set when it starts too); kept
    /// until a list that began later has been applied.
    created: HashMap<(usize, String), Instant>,
    /// When we deleted a pod's workload.
    deleted: HashMap<(usize, String), Instant>,
    /// Workload -> first time it was seen without a live pod, and how many lists of its
    /// provider had been applied then.
    orphans: HashMap<(usize, WorkloadId), (Instant, u64)>,
    /// Pod UID -> when a list showed its workload in a new state, until the pod's next sync.
    changed: HashMap<String, Instant>,
    /// Pods (by UID) this VK removed from the API, until the watch reports them gone: their
    /// last update events must not cause a second DELETE.
    pods_deleted: HashSet<String>,
    /// Pod UID -> the provider and dispatch decision of its new workload, until the pod's
    /// first status write records them (the write after a create waits for the provider's
    /// first report).
    decisions: HashMap<String, (usize, String)>,
}

/// The memory of recent actions. It owns its lock: each method is one short critical section.
#[derive(Default)]
pub struct Recent(RwLock<Actions>);

/// Whether the provider's list can be trusted to show a workload we created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// A list that began after our last create (or with no create of ours in memory) was
    /// applied: absence from it means the workload is not there.
    SinceCreate,
    /// Our create is newer than the last applied list: the workload may just not be listed yet.
    NotSinceCreate,
    /// The provider was never listed successfully by this process.
    Never,
}

/// What [`super::decide`] needs to know of the pipeline's memory for one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The watch reported the pod deleted; its workloads may still need deleting.
    pub gone: bool,
    /// How far the list of the provider recorded on the pod can be trusted; `None` when the
    /// pod records no (known) provider.
    pub listed: Option<Listed>,
    /// Provider where this process created the pod's workload, while the pod does not record
    /// it yet (no status written since the create).
    pub created_on: Option<usize>,
    /// The liveness probe of the workload the provider lists for the pod failed, with this
    /// detail (the prober's last result for that very workload).
    pub liveness_failed: Option<String>,
    /// How long ago the provider of the workload found for the pod answered a list (`None`:
    /// not yet): what is known of the workload is at least that old.
    pub last_list_age: Option<std::time::Duration>,
}

impl Memory {
    /// Memory of a pod this process has done nothing for yet, whose provider was listed.
    pub fn fresh() -> Self {
        Self {
            gone: false,
            listed: Some(Listed::SinceCreate),
            ..Self::default()
        }
    }
}

impl Recent {
    /// How far the list of provider `i` (last begun at `listed_at`) can be trusted for `uid`.
    pub fn listed(&self, i: usize, uid: &str, listed_at: Option<Instant>) -> Listed {
        let created = read(&self.0).created.get(&(i, uid.to_owned())).copied();
        match (listed_at, created) {
            (None, _) => Listed::Never,
            (Some(l), Some(c)) if l <= c => Listed::NotSinceCreate,
            (Some(_), _) => Listed::SinceCreate,
        }
    }

    /// A create of ours at provider `i` for `uid` is not yet covered by a list.
    pub fn creating(&self, i: usize, uid: &str) -> bool {
        read(&self.0).created.contains_key(&(i, uid.to_owned()))
    }

    /// A create call at provider `i` for `uid` starts or ends now.
    pub fn note_create(&self, i: usize, uid: &str) {
        write(&self.0)
            .created
            .insert((i, uid.to_owned()), Instant::now());
    }

    /// The workload of `uid` at provider `i` was deleted now.
    pub fn note_delete(&self, i: usize, uid: &str) {
        write(&self.0)
            .deleted
            .insert((i, uid.to_owned()), Instant::now());
    }

    /// We created `uid`'s workload at provider `i` after `started`.
    pub fn created_since(&self, i: usize, uid: &str, started: Instant) -> bool {
        read(&self.0)
            .created
            .get(&(i, uid.to_owned()))
            .is_some_and(|t| *t > started)
    }

    /// We deleted `uid`'s workload at provider `i` after `started`.
    pub fn deleted_since(&self, i: usize, uid: &str, started: Instant) -> bool {
        read(&self.0)
            .deleted
            .get(&(i, uid.to_owned()))
            .is_some_and(|t| *t > started)
    }

    /// A list of provider `i` begun at `started` was applied and showed `changed` in a new
    /// state: creates and deletes it covers are forgotten, the changes remembered.
    pub fn list_applied(&self, i: usize, started: Instant, changed: &[String]) {
        let now = Instant::now();
        let mut a = write(&self.0);
        a.deleted.retain(|(p, _), t| *p != i || *t > started);
        a.created.retain(|(p, _), t| *p != i || *t > started);
        for uid in changed {
            a.changed.entry(uid.clone()).or_insert(now);
        }
    }

    /// When a list first showed `uid`'s workload in its new state, forgotten as it is read.
    pub fn take_changed(&self, uid: &str) -> Option<Instant> {
        write(&self.0).changed.remove(uid)
    }

    /// This VK deleted the pod `uid` from the API.
    pub fn note_pod_deleted(&self, uid: &str) {
        write(&self.0).pods_deleted.insert(uid.to_owned());
    }

    pub fn pod_deleted(&self, uid: &str) -> bool {
        read(&self.0).pods_deleted.contains(uid)
    }

    /// The dispatch decision of `uid`'s new workload at provider `i`, until a status write
    /// records it.
    pub fn note_decision(&self, uid: String, i: usize, decision: String) {
        write(&self.0).decisions.insert(uid, (i, decision));
    }

    pub fn decision(&self, uid: &str) -> Option<(usize, String)> {
        read(&self.0).decisions.get(uid).cloned()
    }

    pub fn forget_decision(&self, uid: &str) {
        write(&self.0).decisions.remove(uid);
    }

    /// The watch reported the pod gone: nothing is kept for it.
    pub fn pod_gone(&self, uid: &str) {
        let mut a = write(&self.0);
        a.pods_deleted.remove(uid);
        a.decisions.remove(uid);
    }

    /// Keeps what is known of the pods `live` names only.
    pub fn keep_pods(&self, live: impl Fn(&str) -> bool) {
        let mut a = write(&self.0);
        a.pods_deleted.retain(|u| live(u));
        a.decisions.retain(|u, _| live(u));
    }

    /// When workload `id` of provider `i` was first seen without a live pod, and the list
    /// count then (`lists` now, if this is the first time).
    pub fn orphaned_since(&self, i: usize, id: &WorkloadId, lists: u64) -> (Instant, u64) {
        *write(&self.0)
            .orphans
            .entry((i, id.clone()))
            .or_insert_with(|| (Instant::now(), lists))
    }

    /// Forgets the orphans not in `still` (their pod came back, or they are gone).
    pub fn keep_orphans(&self, still: &HashSet<(usize, WorkloadId)>) {
        write(&self.0).orphans.retain(|k, _| still.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_list_is_trusted_only_when_it_began_after_our_create() {
        let r = Recent::default();
        let t0 = Instant::now();
        assert_eq!(r.listed(0, "u", None), Listed::Never);
        assert_eq!(r.listed(0, "u", Some(t0)), Listed::SinceCreate);
        write(&r.0)
            .created
            .insert((0, "u".into()), t0 + Duration::from_millis(5));
        assert_eq!(r.listed(0, "u", Some(t0)), Listed::NotSinceCreate);
        assert_eq!(
            r.listed(0, "u", Some(t0 + Duration::from_millis(5))),
            Listed::NotSinceCreate
        );
        assert_eq!(
            r.listed(0, "u", Some(t0 + Duration::from_millis(6))),
            Listed::SinceCreate
        );
        // Another provider's create says nothing about this one.
        assert_eq!(r.listed(1, "u", Some(t0)), Listed::SinceCreate);
    }
}
