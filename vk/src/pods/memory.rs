//! The pipeline's short memory of its own recent actions, used to judge provider lists that
//! raced with them. Process-local on purpose: after a restart nothing here is needed, because
//! no action of the new process is in flight (see `startup`).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::naming::WorkloadId;

/// Recent actions, by (provider index, pod UID) where a provider is involved.
#[derive(Default)]
pub struct Recent {
    /// When our last create call for a pod's workload ended (set when it starts too); kept
    /// until a list that began later has been applied.
    pub created: HashMap<(usize, String), Instant>,
    /// When we deleted a pod's workload.
    pub deleted: HashMap<(usize, String), Instant>,
    /// Workload -> first time it was seen without a live pod, and how many lists of its
    /// provider had been applied then.
    pub orphans: HashMap<(usize, WorkloadId), (Instant, u64)>,
    /// Pod UID -> when a list showed its workload in a new state, until the pod's next sync.
    pub changed: HashMap<String, Instant>,
    /// Pods (by UID) this VK removed from the API, until the watch reports them gone: their
    /// last update events must not cause a second DELETE.
    pub pods_deleted: HashSet<String>,
    /// Pod UID -> the provider and dispatch decision of its new workload, until the pod's
    /// first status write records them (the write after a create waits for the provider's
    /// first report).
    pub decisions: HashMap<String, (usize, String)>,
}

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// The watch reported the pod deleted; its workloads may still need deleting.
    pub gone: bool,
    /// How far the list of the provider recorded on the pod can be trusted; `None` when the
    /// pod records no (known) provider.
    pub listed: Option<Listed>,
    /// Provider where this process created the pod's workload, while the pod does not record
    /// it yet (no status written since the create).
    pub created_on: Option<usize>,
}

impl Memory {
    /// Memory of a pod this process has done nothing for yet, whose provider was listed.
    pub fn fresh() -> Self {
        Self {
            gone: false,
            listed: Some(Listed::SinceCreate),
            created_on: None,
        }
    }
}

impl Recent {
    /// How far the list of provider `i` (last begun at `listed_at`) can be trusted for `uid`.
    pub fn listed(&self, i: usize, uid: &str, listed_at: Option<Instant>) -> Listed {
        let created = self.created.get(&(i, uid.to_owned())).copied();
        match (listed_at, created) {
            (None, _) => Listed::Never,
            (Some(l), Some(c)) if l <= c => Listed::NotSinceCreate,
            (Some(_), _) => Listed::SinceCreate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_list_is_trusted_only_when_it_began_after_our_create() {
        let mut r = Recent::default();
        let t0 = Instant::now();
        assert_eq!(r.listed(0, "u", None), Listed::Never);
        assert_eq!(r.listed(0, "u", Some(t0)), Listed::SinceCreate);
        r.created
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
