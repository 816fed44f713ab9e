//! Work queue keyed by pod UID: one reconcile per pod at a time, duplicates collapsed, delayed
//! retries with exponential back-off and jitter, and a first lane for pods that just arrived
//! (their provider create is what a user waits for; status refreshes can wait behind it).
//! Delayed keys wait in one ordered map served by one timer task (as kube-runtime's
//! `DelayQueue`), not a task per delay, with one entry per key: the earliest due time wins (as
//! kube-runtime's scheduler); on tokio's clock, so tests can pause it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Default)]
struct State {
    /// Served before `ready`: keys added with [`Queue::add_first`].
    first: VecDeque<String>,
    ready: VecDeque<String>,
    queued: HashSet<String>,
    processing: HashSet<String>,
    /// Enqueued while processing: goes back in when processing ends.
    dirty: HashSet<String>,
    /// The dirty keys that go back to the first lane.
    dirty_first: HashSet<String>,
    failures: HashMap<String, u32>,
    /// Keys due later ([`Queue::add_after`]) by due time, in order of arrival among equals.
    delayed: BTreeMap<(Instant, u64), String>,
    /// Each delayed key's one entry in `delayed`.
    delayed_at: HashMap<String, (Instant, u64)>,
    delayed_seq: u64,
    /// Whether the timer task that moves due keys into the queue runs.
    timer_running: bool,
    shutdown: bool,
}

/// A cloneable handle to the queue.
#[derive(Clone, Default)]
pub struct Queue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    /// Wakes workers dedicated to the first lane ([`Queue::next_first`]).
    notify_first: Arc<Notify>,
    /// Wakes the timer task: an earlier due time, or the shutdown.
    timer: Arc<Notify>,
}

/// Back-off for a key that failed `failures` times in a row: 200 ms doubling to 60 s, ±20 %.
pub fn backoff(failures: u32) -> Duration {
    let base = 200u64.saturating_mul(1u64 << failures.min(12)).min(60_000);
    let jitter = rand::rng().random_range(0.8..1.2);
    Duration::from_millis((base as f64 * jitter) as u64)
}

impl Queue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another worker panicked mid-update; the sets stay usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules `key` now. Collapses with a pending entry; if the key is being processed it is
    /// re-run once that ends.
    pub fn add(&self, key: &str) {
        let mut s = self.lock();
        if s.shutdown {
            return;
        }
        if s.processing.contains(key) {
            s.dirty.insert(key.to_owned());
        } else if s.queued.insert(key.to_owned()) {
            s.ready.push_back(key.to_owned());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Schedules `key` now, ahead of keys added with [`Queue::add`]. A key already waiting in
    /// the ordinary lane moves to the first lane.
    pub fn add_first(&self, key: &str) {
        let mut s = self.lock();
        if s.shutdown {
            return;
        }
        if s.processing.contains(key) {
            s.dirty.insert(key.to_owned());
            s.dirty_first.insert(key.to_owned());
            return;
        }
        if !s.queued.insert(key.to_owned()) {
            if s.first.iter().any(|k| k == key) {
                return;
            }
            s.ready.retain(|k| k != key);
        }
        s.first.push_back(key.to_owned());
        drop(s);
        self.notify_first.notify_one();
        self.notify.notify_one();
    }

    /// Schedules `key` after `delay`. A key holds one delayed entry: the earliest due time wins
    /// (a later one is dropped, an earlier one replaces it); when it falls due it collapses
    /// with a key already waiting, as [`Queue::add`] does.
    pub fn add_after(&self, key: &str, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let due = Instant::now() + delay;
        let (earliest, start) = {
            let mut s = self.lock();
            if s.shutdown {
                return;
            }
            if let Some(&(at, seq)) = s.delayed_at.get(key) {
                if at <= due {
                    return;
                }
                s.delayed.remove(&(at, seq));
            }
            s.delayed_seq += 1;
            let seq = s.delayed_seq;
            let earliest = s.delayed.keys().next().is_none_or(|(d, _)| due < *d);
            s.delayed.insert((due, seq), key.to_owned());
            s.delayed_at.insert(key.to_owned(), (due, seq));
            (earliest, !std::mem::replace(&mut s.timer_running, true))
        };
        if start {
            let q = self.clone();
            tokio::spawn(async move { q.run_timer().await });
        } else if earliest {
            self.timer.notify_one();
        }
    }

    /// The timer task: adds each delayed key when it falls due, sleeping until the earliest;
    /// ends at shutdown.
    async fn run_timer(&self) {
        loop {
            let woken = self.timer.notified();
            let (due, next) = {
                let mut s = self.lock();
                if s.shutdown {
                    s.timer_running = false;
                    return;
                }
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some(e) = s.delayed.first_entry() {
                    if e.key().0 > now {
                        break;
                    }
                    due.push(e.remove());
                }
                for key in &due {
                    s.delayed_at.remove(key);
                }
                (due, s.delayed.keys().next().map(|(at, _)| *at))
            };
            for key in due {
                self.add(&key);
            }
            match next {
                Some(at) => tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = woken => {}
                },
                None => woken.await,
            }
        }
    }

    /// Keys waiting for their delay (for tests and metrics).
    pub fn delayed(&self) -> usize {
        self.lock().delayed.len()
    }

    /// Records a failed reconcile and schedules a retry with back-off.
    pub fn retry(&self, key: &str) -> Duration {
        let n = {
            let mut s = self.lock();
            let n = s.failures.entry(key.to_owned()).or_default();
            *n = n.saturating_add(1);
            *n
        };
        let d = backoff(n - 1);
        self.add_after(key, d);
        d
    }

    /// Forgets the failure count of a key after a successful reconcile.
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key; `None` once shut down. Call [`Queue::done`] after processing.
    pub async fn next(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if s.shutdown {
                    return None;
                }
                if let Some(k) = s.first.pop_front().or_else(|| s.ready.pop_front()) {
                    s.queued.remove(&k);
                    s.processing.insert(k.clone());
                    if !s.ready.is_empty() || !s.first.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Like [`Queue::next`], for workers kept for the first lane only: a burst of status
    /// refreshes occupying every ordinary worker cannot delay a new pod's create.
    pub async fn next_first(&self) -> Option<String> {
        loop {
            let notified = self.notify_first.notified();
            {
                let mut s = self.lock();
                if s.shutdown {
                    return None;
                }
                if let Some(k) = s.first.pop_front() {
                    s.queued.remove(&k);
                    s.processing.insert(k.clone());
                    if !s.first.is_empty() {
                        self.notify_first.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; re-queues it if it was added meanwhile.
    pub fn done(&self, key: &str) {
        let requeue = {
            let mut s = self.lock();
            s.processing.remove(key);
            let first = s.dirty_first.remove(key);
            s.dirty.remove(key).then_some(first)
        };
        match requeue {
            Some(true) => self.add_first(key),
            Some(false) => self.add(key),
            None => {}
        }
    }

    pub fn len(&self) -> usize {
        let s = self.lock();
        s.first.len() + s.ready.len() + s.dirty.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when no key is waiting, being processed, or due to run again after processing
    /// (delayed retries from [`Queue::add_after`] are not counted).
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        s.first.is_empty() && s.ready.is_empty() && s.dirty.is_empty() && s.processing.is_empty()
    }

    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
        self.notify_first.notify_waiters();
        self.timer.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// On a paused clock: each delayed key arrives at its time, earliest first, and not before.
    #[tokio::test(start_paused = true)]
    async fn delayed_keys_arrive_at_their_time_in_order() {
        let q = Queue::new();
        q.add_after("b", Duration::from_secs(2));
        q.add_after("a", Duration::from_secs(1));
        q.add_after("now", Duration::ZERO);
        assert_eq!(q.next().await.as_deref(), Some("now"));
        q.done("now");
        tokio::time::sleep(Duration::from_millis(999)).await;
        assert!(q.is_empty(), "a key came before its time");
        assert_eq!(q.delayed(), 2);
        let t0 = Instant::now();
        assert_eq!(q.next().await.as_deref(), Some("a"));
        assert!(t0.elapsed() <= Duration::from_millis(1));
        q.done("a");
        assert_eq!(q.next().await.as_deref(), Some("b"));
        assert_eq!(q.delayed(), 0);
    }

    /// A shorter delay added after a longer one still comes first (the timer is woken), and a
    /// thousand delays cost one task, not a thousand.
    #[tokio::test(start_paused = true)]
    async fn one_timer_serves_every_delay() {
        let q = Queue::new();
        let before = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        for i in 0..1000 {
            q.add_after(&format!("k{i}"), Duration::from_secs(60));
        }
        q.add_after("soon", Duration::from_secs(1));
        tokio::task::yield_now().await;
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(alive, before + 1, "one timer task for all delays");
        assert_eq!(q.next().await.as_deref(), Some("soon"));
        q.done("soon");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(q.len(), 1000);
        q.shutdown();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            before,
            "the timer ends at shutdown"
        );
    }

    /// One entry per key, the earliest wins: a later due time is dropped, an earlier one
    /// replaces the entry, and the key arrives once, at the earliest time.
    #[tokio::test(start_paused = true)]
    async fn a_key_holds_one_delayed_entry_the_earliest() {
        let q = Queue::new();
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(2));
        q.add_after("a", Duration::from_secs(9));
        q.add_after("b", Duration::from_secs(3));
        assert_eq!(q.delayed(), 2, "one entry per key");
        tokio::time::sleep(Duration::from_millis(1999)).await;
        assert!(q.is_empty(), "a key came before its earliest time");
        let t0 = Instant::now();
        assert_eq!(q.next().await.as_deref(), Some("a"));
        assert!(t0.elapsed() <= Duration::from_millis(1));
        q.done("a");
        assert_eq!(q.next().await.as_deref(), Some("b"));
        q.done("b");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(q.is_empty(), "a dropped later entry still fired");
        assert_eq!(q.delayed(), 0);
        // Once due, the key may be delayed again.
        q.add_after("a", Duration::from_secs(1));
        assert_eq!(q.delayed(), 1);
        assert_eq!(q.next().await.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn duplicates_collapse() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await.as_deref(), Some("a"));
        assert_eq!(q.next().await.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn first_lane_is_served_before_the_ordinary_one_and_collapses_with_it() {
        let q = Queue::new();
        q.add("status-1");
        q.add("status-2");
        q.add("status-3");
        q.add_first("new-1");
        q.add_first("status-3"); // promoted, not duplicated
        q.add_first("new-1");
        assert_eq!(q.len(), 4);
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(q.next().await.unwrap());
        }
        assert_eq!(order, ["new-1", "status-3", "status-1", "status-2"]);
        assert!(
            tokio::time::timeout(Duration::from_millis(30), q.next())
                .await
                .is_err(),
            "a key was handed out twice"
        );
    }

    #[tokio::test]
    async fn first_lane_workers_take_only_first_lane_keys() {
        let q = Queue::new();
        q.add("status");
        let none = tokio::time::timeout(Duration::from_millis(30), q.next_first()).await;
        assert!(none.is_err(), "a first-lane worker took an ordinary key");
        q.add_first("new");
        let got = tokio::time::timeout(Duration::from_millis(100), q.next_first())
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some("new"));
        // The ordinary key is still there for ordinary workers, and "new" is not handed twice.
        assert_eq!(q.next().await.as_deref(), Some("status"));
        q.add_first("new");
        let again = tokio::time::timeout(Duration::from_millis(30), q.next()).await;
        assert!(again.is_err(), "a key in processing was handed out again");
        q.done("new");
        assert_eq!(q.next_first().await.as_deref(), Some("new"));
    }

    #[tokio::test]
    async fn a_key_added_while_processing_runs_again_after_done_not_concurrently() {
        let q = Queue::new();
        q.add("a");
        let k = q.next().await.unwrap();
        q.add("a");
        // Not handed out while still processing.
        let second = tokio::time::timeout(Duration::from_millis(50), q.next()).await;
        assert!(second.is_err(), "key handed out twice concurrently");
        q.done(&k);
        let again = tokio::time::timeout(Duration::from_millis(50), q.next())
            .await
            .unwrap();
        assert_eq!(again.as_deref(), Some("a"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workers_never_overlap_on_one_key() {
        let q = Queue::new();
        let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
        let overlaps = Arc::new(AtomicUsize::new(0));
        let processed = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (q, in_flight, overlaps, processed) = (
                q.clone(),
                in_flight.clone(),
                overlaps.clone(),
                processed.clone(),
            );
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.next().await {
                    if !in_flight.lock().unwrap().insert(k.clone()) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    in_flight.lock().unwrap().remove(&k);
                    processed.fetch_add(1, Ordering::SeqCst);
                    q.done(&k);
                }
            }));
        }
        for i in 0..400 {
            q.add(&format!("k{}", i % 5));
            if i % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        q.shutdown();
        for w in workers {
            w.await.unwrap();
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        assert!(processed.load(Ordering::SeqCst) >= 5);
    }

    #[tokio::test]
    async fn idle_only_when_nothing_waits_or_runs() {
        let q = Queue::new();
        assert!(q.is_idle());
        q.add("a");
        assert!(!q.is_idle());
        let k = q.next().await.unwrap();
        assert!(!q.is_idle(), "a key being processed is not idle");
        q.done(&k);
        assert!(q.is_idle());
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert!(backoff(0) < Duration::from_millis(300));
        assert!(backoff(3) >= Duration::from_millis(1200));
        assert!(backoff(40) <= Duration::from_millis(72_000));
    }
}
