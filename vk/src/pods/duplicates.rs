//! Two workloads for one pod: a create that timed out but had succeeded and was retried on a
//! provider that does not dedupe by name, or two VK replicas acting at once. A provider's list
//! then shows both; the pipeline follows one and deletes the others (by provider id, once they
//! were seen in `timings.lossLists` lists), instead of silently collapsing them and leaking one
//! that bills by the hour.

use std::collections::{HashMap, HashSet};

use crate::provider::Observed;

/// Splits a list into one workload per pod and the extra ones. The one kept is the one the
/// pipeline already follows (`followed(pod UID)` is its provider id), else a live one over one
/// that ended (slurmctld keeps a finished job's record, and lists it, for `MinJobAge` seconds,
/// 300 by default per slurm.conf(5), after a restart created the next job of the workload),
/// else the oldest, else the smallest provider id, so every list makes the same choice.
pub fn split<'a>(
    list: Vec<Observed>,
    followed: impl Fn(&str) -> Option<&'a str>,
) -> (Vec<Observed>, Vec<Observed>) {
    // The common case, no pod with two workloads, costs one set of borrowed keys.
    let mut uids = HashSet::with_capacity(list.len());
    if list.iter().all(|o| uids.insert(o.id.pod_uid())) {
        return (list, Vec::new());
    }
    drop(uids);
    let mut by_uid: HashMap<String, Vec<Observed>> = HashMap::new();
    for o in list {
        by_uid.entry(o.id.pod_uid().to_owned()).or_default().push(o);
    }
    let mut keep = Vec::with_capacity(by_uid.len());
    let mut extras = Vec::new();
    for (uid, mut group) in by_uid {
        if group.len() > 1 {
            let current = followed(&uid);
            group.sort_by(|a, b| {
                let not_followed = |o: &Observed| current != Some(o.provider_id.as_str());
                not_followed(a)
                    .cmp(&not_followed(b))
                    .then_with(|| a.state.is_terminal().cmp(&b.state.is_terminal()))
                    .then_with(|| a.created_at.is_none().cmp(&b.created_at.is_none()))
                    .then_with(|| a.created_at.cmp(&b.created_at))
                    .then_with(|| a.provider_id.cmp(&b.provider_id))
            });
            extras.extend(group.drain(1..));
        }
        keep.extend(group);
    }
    (keep, extras)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::WorkloadState;
    use crate::test_support::{observed, ts};

    fn at(provider_id: &str, created: &str) -> Observed {
        Observed {
            provider_id: provider_id.into(),
            created_at: Some(ts(created)),
            ..observed(WorkloadState::Running)
        }
    }

    fn ids(v: &[Observed]) -> Vec<&str> {
        v.iter().map(|o| o.provider_id.as_str()).collect()
    }

    #[test]
    fn a_single_workload_per_pod_passes_through() {
        let (keep, extras) = split(vec![at("a", "2026-11-29T10:00:00Z")], |_| None);
        assert_eq!(ids(&keep), ["a"]);
        assert!(extras.is_empty());
    }

    #[test]
    fn the_followed_workload_is_kept_whatever_the_order() {
        let list = vec![
            at("old", "2026-11-29T09:00:00Z"),
            at("followed", "2026-11-29T10:00:00Z"),
        ];
        let (keep, extras) = split(list.clone(), |_| Some("followed"));
        assert_eq!(ids(&keep), ["followed"]);
        assert_eq!(ids(&extras), ["old"]);
        let reversed: Vec<Observed> = list.into_iter().rev().collect();
        let (keep, _) = split(reversed, |_| Some("followed"));
        assert_eq!(ids(&keep), ["followed"]);
    }

    #[test]
    fn a_live_workload_is_kept_over_one_that_ended() {
        let finished = Observed {
            state: WorkloadState::Succeeded,
            ..at("old-job", "2026-11-29T09:00:00Z")
        };
        let next = at("new-job", "2026-11-29T10:00:00Z");
        let (keep, extras) = split(vec![finished, next], |_| Some(""));
        assert_eq!(ids(&keep), ["new-job"]);
        assert_eq!(ids(&extras), ["old-job"]);
    }

    #[test]
    fn otherwise_the_oldest_then_the_smallest_id_is_kept() {
        let list = vec![
            at("c", "2026-11-29T10:00:00Z"),
            at("b", "2026-11-29T09:00:00Z"),
            at("a", "2026-11-29T09:00:00Z"),
        ];
        let (keep, extras) = split(list, |_| None);
        assert_eq!(ids(&keep), ["a"]);
        let mut e = ids(&extras);
        e.sort();
        assert_eq!(e, ["b", "c"]);
    }
}
