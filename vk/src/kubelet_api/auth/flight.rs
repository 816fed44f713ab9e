//! Single flight: concurrent callers asking for the same key share one computation, as the API
//! server's cached token authenticator shares one webhook call among concurrent requests with
//! the same token (`k8s.io/apiserver/pkg/authentication/token/cache`, a `singleflight.Group`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

/// The computations in flight, by key. An entry lives only while someone waits for it: the
/// result is shared with the callers that joined the flight, never kept (caching is the
/// caller's business).
pub(super) struct Flights<K, V> {
    map: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
}

impl<K: Eq + Hash + Clone, V: Clone> Flights<K, V> {
    pub(super) fn new() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The result of `f` for `key`, computed once for all callers that arrive while it runs.
    /// If the caller running `f` goes away (its request was dropped), a waiting caller runs
    /// its own `f` instead.
    pub(super) async fn run<F, Fut>(&self, key: K, f: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let cell = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key.clone()).or_default().clone()
        };
        let member = Member {
            flights: self,
            key,
            cell,
        };
        member.cell.get_or_init(f).await.clone()
    }

    /// Flights in progress (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One caller of a flight; leaving removes the flight once it landed or nobody else waits.
struct Member<'a, K: Eq + Hash, V> {
    flights: &'a Flights<K, V>,
    key: K,
    cell: Arc<OnceCell<V>>,
}

impl<K: Eq + Hash, V> Drop for Member<'_, K, V> {
    fn drop(&mut self) {
        let mut map = self.flights.map.lock().unwrap_or_else(|e| e.into_inner());
        // Joining happens under this lock, so the count cannot grow while we look: 2 is the
        // map's reference and ours.
        let ours = map.get(&self.key).is_some_and(|c| {
            Arc::ptr_eq(c, &self.cell)
                && (self.cell.initialized() || Arc::strong_count(&self.cell) <= 2)
        });
        if ours {
            map.remove(&self.key);
        }
    }
}
