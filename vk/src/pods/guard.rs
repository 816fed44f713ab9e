//! Guardrails: the most spend per hour and the most live workloads, per provider and over all
//! of them (`limits`, `providers[].limits`).
//!
//! Spend and counts come from what the providers list (price x live workloads, taken at every
//! list), plus the workloads this process created since a list began (`pending`), so they
//! survive restarts with no state of our own. A pod that would go past a limit on every
//! candidate is *held*: it waits Pending with a reason naming the limit, and held pods get room
//! in arrival order (pod creation time): a pod never overtakes an earlier held one. The
//! pipeline wakes the earliest held pod when a list shows room grew, when a held pod goes
//! away and when a reservation is given back; no held pod polls.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use jiff::Timestamp;

use crate::config::Limits;
use crate::provider::{Observed, Price};

/// Spend and live workloads at one provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub spend: Price,
    pub workloads: u32,
}

impl Tally {
    /// The live (non-terminal) workloads of one list.
    pub fn of<'a>(list: impl IntoIterator<Item = &'a Observed>) -> Self {
        let mut t = Self::default();
        for o in list.into_iter().filter(|o| !o.state.is_terminal()) {
            t.spend = t.spend + o.price.unwrap_or_default();
            t.workloads = t.workloads.saturating_add(1);
        }
        t
    }

    fn add(self, price: Option<Price>) -> Self {
        Self {
            spend: self.spend + price.unwrap_or_default(),
            workloads: self.workloads.saturating_add(1),
        }
    }

    fn plus(self, o: Self) -> Self {
        Self {
            spend: self.spend + o.spend,
            workloads: self.workloads.saturating_add(o.workloads),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    listed: Vec<Tally>,
    /// Created by this process, not yet covered by a list: uid -> (provider, price, when).
    pending: HashMap<String, (usize, Option<Price>, Instant)>,
    /// Pods waiting for room, by arrival...
    held: BTreeSet<(Timestamp, String)>,
    /// ...and by uid (every reconcile asks whether its pod is held: O(1), not O(held)).
    held_at: HashMap<String, Timestamp>,
}

impl State {
    fn unhold(&mut self, uid: &str) {
        if let Some(t) = self.held_at.remove(uid) {
            self.held.remove(&(t, uid.to_owned()));
        }
    }
}

/// The guardrails of one VK.
#[derive(Debug)]
pub struct Guard {
    total: Limits,
    per: Vec<(String, Limits)>,
    state: Mutex<State>,
}

impl Guard {
    /// `per`: each provider's name and limits, in configuration order.
    pub fn new(total: Limits, per: Vec<(String, Limits)>) -> Self {
        let state = State {
            listed: vec![Tally::default(); per.len()],
            ..State::default()
        };
        Self {
            total,
            per,
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when any limit is configured (otherwise nothing is ever held).
    pub fn active(&self) -> bool {
        let set = |l: &Limits| l.max_spend_per_hour.is_some() || l.max_workloads.is_some();
        set(&self.total) || self.per.iter().any(|(_, l)| set(l))
    }

    /// Records what a list of provider `i`, begun at `started`, showed; true when it shows
    /// more room than before (a held pod may fit now).
    pub fn listed(&self, i: usize, tally: Tally, started: Instant) -> bool {
        let mut s = self.lock();
        let before = tallies(&s);
        if let Some(slot) = s.listed.get_mut(i) {
            *slot = tally;
        }
        s.pending
            .retain(|_, (p, _, created)| *p != i || *created > started);
        let after = tallies(&s);
        let sum = |v: &[Tally]| v.iter().fold(Tally::default(), |a, t| a.plus(*t));
        let (b, a) = (sum(&before), sum(&after));
        a.spend < b.spend
            || a.workloads < b.workloads
            || after
                .get(i)
                .zip(before.get(i))
                .is_some_and(|(a, b)| a.spend < b.spend || a.workloads < b.workloads)
    }

    /// Spend and workloads per provider now (listed plus pending).
    pub fn tallies(&self) -> Vec<Tally> {
        tallies(&self.lock())
    }

    /// Earlier held pods a pod arriving at `arrived` must wait behind (0: none).
    pub fn behind(&self, uid: &str, arrived: Timestamp) -> usize {
        let s = self.lock();
        s.held
            .iter()
            .take_while(|(t, u)| (*t, u.as_str()) < (arrived, uid))
            .count()
    }

    /// Takes room for the pod `uid` at provider `i` at `price`, or says which limit is in
    /// the way.
    pub fn reserve(&self, uid: &str, i: usize, price: Option<Price>) -> Result<(), String> {
        let mut s = self.lock();
        let now = tallies(&s);
        let mine = now.get(i).copied().unwrap_or_default();
        if let Some((name, limits)) = self.per.get(i) {
            check(&format!("provider {name}"), limits, mine, price)?;
        }
        let total = now.iter().fold(Tally::default(), |a, t| a.plus(*t));
        check("all providers", &self.total, total, price)?;
        s.pending.insert(uid.to_owned(), (i, price, Instant::now()));
        s.unhold(uid);
        Ok(())
    }

    /// Adds the pod to the held pods (arrival order).
    pub fn hold(&self, uid: &str, arrived: Timestamp) {
        let mut s = self.lock();
        s.unhold(uid);
        s.held_at.insert(uid.to_owned(), arrived);
        s.held.insert((arrived, uid.to_owned()));
    }

    /// Gives back the room a create that failed had taken.
    pub fn release(&self, uid: &str) {
        self.lock().pending.remove(uid);
    }

    /// The pod is gone: it holds no room and waits no more.
    pub fn forget(&self, uid: &str) {
        let mut s = self.lock();
        s.pending.remove(uid);
        s.unhold(uid);
    }

    /// The earliest held pod.
    pub fn head(&self) -> Option<String> {
        self.lock().held.first().map(|(_, u)| u.clone())
    }

    /// Pods held now.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    pub fn is_held(&self, uid: &str) -> bool {
        self.lock().held_at.contains_key(uid)
    }
}

fn tallies(s: &State) -> Vec<Tally> {
    let mut out = s.listed.clone();
    for (p, price, _) in s.pending.values() {
        if let Some(t) = out.get_mut(*p) {
            *t = t.add(*price);
        }
    }
    out
}

fn check(scope: &str, limits: &Limits, now: Tally, price: Option<Price>) -> Result<(), String> {
    let next = now.add(price);
    if let Some(max) = limits.max_workloads
        && next.workloads > max
    {
        return Err(format!(
            "maxWorkloads of {scope} reached ({} of {max} running)",
            now.workloads
        ));
    }
    if let Some(max) = limits.max_spend_per_hour.and_then(Price::from_dollars)
        && next.spend > max
    {
        return Err(format!(
            "maxSpendPerHour of {scope} would be exceeded ({} now + {} > {max})",
            now.spend,
            price.unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::WorkloadState;

    fn limits(spend: Option<f64>, n: Option<u32>) -> Limits {
        Limits {
            max_spend_per_hour: spend,
            max_workloads: n,
        }
    }

    fn dollars(d: f64) -> Option<Price> {
        Price::from_dollars(d)
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn obs(price: f64, state: WorkloadState) -> Observed {
        Observed {
            price: dollars(price),
            ..crate::test_support::observed(state)
        }
    }

    #[test]
    fn spend_is_what_the_list_shows_for_live_workloads() {
        let list = [
            obs(0.5, WorkloadState::Running),
            obs(0.25, WorkloadState::Queued { reason: None }),
            obs(9.0, WorkloadState::Succeeded),
        ];
        assert_eq!(
            Tally::of(&list),
            Tally {
                spend: Price(750_000),
                workloads: 2
            }
        );
    }

    #[test]
    fn limits_per_provider_and_in_total_name_themselves() {
        let g = Guard::new(
            limits(Some(1.0), None),
            vec![
                ("runpod".into(), limits(None, Some(1))),
                ("vast".into(), Limits::default()),
            ],
        );
        assert!(g.active());
        g.reserve("a", 0, dollars(0.4)).unwrap();
        let e = g.reserve("b", 0, dollars(0.1)).unwrap_err();
        assert!(e.contains("maxWorkloads of provider runpod"), "{e}");
        g.reserve("b", 1, dollars(0.5)).unwrap();
        let e = g.reserve("c", 1, dollars(0.2)).unwrap_err();
        assert!(e.contains("maxSpendPerHour of all providers"), "{e}");
        // A failed create gives its room back.
        g.release("b");
        g.reserve("c", 1, dollars(0.2)).unwrap();
    }

    #[test]
    fn a_list_replaces_what_was_pending_before_it_began_and_says_when_room_grew() {
        let g = Guard::new(
            limits(None, Some(2)),
            vec![("rp".into(), Limits::default())],
        );
        g.reserve("a", 0, dollars(1.0)).unwrap();
        g.reserve("b", 0, dollars(1.0)).unwrap();
        assert!(g.reserve("c", 0, None).is_err());
        let started = Instant::now();
        // The list shows both: nothing changes, no room.
        let two = Tally {
            spend: Price(2_000_000),
            workloads: 2,
        };
        assert!(!g.listed(0, two, started));
        assert_eq!(g.tallies(), vec![two]);
        // One ended: room grew.
        assert!(g.listed(
            0,
            Tally {
                spend: Price(1_000_000),
                workloads: 1
            },
            Instant::now()
        ));
        g.reserve("c", 0, None).unwrap();
    }

    #[test]
    fn held_pods_get_room_in_arrival_order() {
        let g = Guard::new(
            limits(None, Some(1)),
            vec![("rp".into(), Limits::default())],
        );
        g.hold("late", ts(20));
        g.hold("early", ts(10));
        assert_eq!(g.head().as_deref(), Some("early"));
        assert_eq!(g.behind("late", ts(20)), 1);
        assert_eq!(g.behind("early", ts(10)), 0);
        assert_eq!(g.behind("new", ts(30)), 2, "a newcomer waits behind both");
        g.reserve("early", 0, None).unwrap();
        assert_eq!(g.head().as_deref(), Some("late"));
        assert!(!g.is_held("early"));
        g.forget("late");
        assert_eq!(g.head(), None);
    }
}
