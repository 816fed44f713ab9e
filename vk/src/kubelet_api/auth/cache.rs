//! The TTL caches of token reviews and access decisions.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries per cache; beyond it expired entries are dropped, then everything.
const CACHE_CAPACITY: usize = 10_000;

/// A small map whose entries expire.
pub(super) struct TtlCache<K, V> {
    map: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(super) fn new() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, k: &K) -> Option<V> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(k)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(v, _)| v.clone())
    }

    pub(super) fn put(&self, k: K, v: V, ttl: Duration) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CACHE_CAPACITY {
            let now = Instant::now();
            map.retain(|_, (_, until)| *until > now);
            if map.len() >= CACHE_CAPACITY {
                map.clear();
            }
        }
        map.insert(k, (v, Instant::now() + ttl));
    }
}
