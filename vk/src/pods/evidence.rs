//! Evidence that a workload is gone from its provider. One list that lacks a workload proves
//! nothing: real APIs answer with partial or empty lists during incidents, and acting on one
//! would delete healthy workloads and create duplicates. A workload counts as gone only after
//! it was absent from `lists` consecutive successful lists spanning at least `window`; a list
//! that lacks most of what we know at once (a mass disappearance) is suspect, and while an
//! absence includes a suspect list it must last [`SUSPECT_FACTOR`] times as long.
//!
//! Pure bookkeeping per provider: the observer feeds it every successful list.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How much longer an absence must last when a suspect list is part of it.
pub const SUSPECT_FACTOR: u32 = 5;

/// The operator's rule for declaring a workload lost (`timings.lossLists`,
/// `timings.lossWindowMs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossRule {
    pub lists: u32,
    pub window: Duration,
}

/// One workload's absence so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Absence {
    /// Start of the first list that lacked it.
    since: Instant,
    /// Consecutive successful lists that lacked it.
    lists: u32,
    /// One of those lists was suspect.
    suspect: bool,
}

/// What one list tells about the workloads it lacks.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The list lacked most of what we know at once: not trusted alone.
    pub suspect: bool,
    /// Workloads (pod UIDs) whose absence is now established.
    pub gone: Vec<String>,
}

/// Absences at one provider, by pod UID.
#[derive(Debug, Default)]
pub struct Evidence {
    absent: HashMap<String, Absence>,
}

impl Evidence {
    /// Folds one successful list begun at `started` that showed `listed` of our workloads and
    /// lacked `missing` (pod UIDs we hold for this provider, excluding ones created after the
    /// list began).
    pub fn fold(
        &mut self,
        rule: &LossRule,
        started: Instant,
        listed: usize,
        missing: &[String],
    ) -> Verdict {
        let known = listed + missing.len();
        let suspect = missing.len() >= 2 && missing.len() * 2 > known;
        // Workloads listed again (or no longer ours to watch) start from zero. A set: in a mass
        // disappearance both sides hold every workload.
        let missing_set: HashSet<&str> = missing.iter().map(String::as_str).collect();
        self.absent
            .retain(|uid, _| missing_set.contains(uid.as_str()));
        let mut gone = Vec::new();
        for uid in missing {
            let a = self.absent.entry(uid.clone()).or_insert(Absence {
                since: started,
                lists: 0,
                suspect: false,
            });
            a.lists = a.lists.saturating_add(1);
            a.suspect |= suspect;
            let window = if a.suspect {
                rule.window.saturating_mul(SUSPECT_FACTOR)
            } else {
                rule.window
            };
            if a.lists >= rule.lists && started.saturating_duration_since(a.since) >= window {
                gone.push(uid.clone());
            }
        }
        for uid in &gone {
            self.absent.remove(uid);
        }
        Verdict { suspect, gone }
    }

    /// Consecutive lists that lacked `uid` so far (0 when it was listed last time).
    pub fn absent_lists(&self, uid: &str) -> u32 {
        self.absent.get(uid).map_or(0, |a| a.lists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: LossRule = LossRule {
        lists: 3,
        window: Duration::from_secs(10),
    };

    fn uids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("u{i}")).collect()
    }

    /// Folds a list at `t0 + at` seconds showing `listed` workloads and lacking `missing`.
    fn fold(e: &mut Evidence, t0: Instant, at: u64, listed: usize, missing: &[String]) -> Verdict {
        e.fold(&RULE, t0 + Duration::from_secs(at), listed, missing)
    }

    #[test]
    fn one_list_without_a_workload_proves_nothing() {
        let mut e = Evidence::default();
        let t0 = Instant::now();
        let v = fold(&mut e, t0, 0, 9, &uids(1));
        assert_eq!(v, Verdict::default());
        assert_eq!(e.absent_lists("u0"), 1);
        // Listed again: the streak starts over.
        assert_eq!(fold(&mut e, t0, 2, 10, &[]), Verdict::default());
        assert_eq!(e.absent_lists("u0"), 0);
        for at in [4, 6] {
            assert!(fold(&mut e, t0, at, 9, &uids(1)).gone.is_empty());
        }
        assert_eq!(e.absent_lists("u0"), 2);
    }

    #[test]
    fn absence_from_enough_lists_over_the_window_establishes_loss_once() {
        let mut e = Evidence::default();
        let t0 = Instant::now();
        let missing = uids(1);
        assert!(fold(&mut e, t0, 0, 4, &missing).gone.is_empty());
        assert!(fold(&mut e, t0, 2, 4, &missing).gone.is_empty());
        // Three lists, but only 4 s: not yet.
        assert!(fold(&mut e, t0, 4, 4, &missing).gone.is_empty());
        assert_eq!(fold(&mut e, t0, 10, 4, &missing).gone, missing);
        // Reported once; a later list starts a new streak rather than repeating it.
        assert!(fold(&mut e, t0, 12, 4, &missing).gone.is_empty());
    }

    #[test]
    fn many_lists_in_a_short_time_are_not_enough() {
        let mut e = Evidence::default();
        let t0 = Instant::now();
        for _ in 0..50 {
            assert!(fold(&mut e, t0, 1, 4, &uids(1)).gone.is_empty());
        }
    }

    #[test]
    fn an_empty_list_after_many_workloads_is_suspect_and_needs_a_longer_absence() {
        let mut e = Evidence::default();
        let t0 = Instant::now();
        let all = uids(8);
        let v = fold(&mut e, t0, 0, 0, &all);
        assert!(v.suspect);
        assert!(v.gone.is_empty());
        // The normal rule (3 lists over 10 s) is not enough for a suspect absence...
        assert!(fold(&mut e, t0, 5, 0, &all).gone.is_empty());
        assert!(fold(&mut e, t0, 10, 0, &all).gone.is_empty());
        assert!(fold(&mut e, t0, 49, 0, &all).gone.is_empty());
        // ...but a provider that really lost everything is believed after 5 x the window.
        let v = fold(&mut e, t0, 50, 0, &all);
        assert_eq!(v.gone.len(), 8);
    }

    #[test]
    fn a_list_lacking_one_of_many_is_not_suspect() {
        let mut e = Evidence::default();
        let t0 = Instant::now();
        assert!(!fold(&mut e, t0, 0, 7, &uids(1)).suspect);
        assert!(!fold(&mut e, t0, 0, 4, &uids(2)).suspect);
        assert!(fold(&mut e, t0, 0, 2, &uids(3)).suspect);
        // A single workload that vanished is the normal case, not an incident.
        assert!(!fold(&mut e, t0, 0, 0, &uids(1)).suspect);
    }
}
