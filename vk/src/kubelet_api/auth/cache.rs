//! The caches of token reviews and access decisions: `moka`'s, each answer living as long as
//! its kind says (allowed and denied answers differ, as in the kubelet's webhook caches).
//! Concurrent misses of one key share one computation (`try_get_with`), as the API server's
//! cached token authenticator shares one webhook call among concurrent requests with the same
//! token (`k8s.io/apiserver/pkg/authentication/token/cache`, a `singleflight.Group`); an error
//! is shared with the callers already waiting, never cached, and a computation whose callers
//! all went away is dropped, so the next caller starts anew.

use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries per cache; beyond it the least useful ones are dropped.
const CACHE_CAPACITY: u64 = 10_000;

/// A cached answer and how long it lives.
#[derive(Clone, Debug)]
pub(super) struct Timed<V> {
    pub value: V,
    pub ttl: Duration,
}

/// Each entry expires after its own [`Timed::ttl`].
struct OwnTtl;

impl<K, V> moka::Expiry<K, Timed<V>> for OwnTtl {
    fn expire_after_create(&self, _: &K, v: &Timed<V>, _: Instant) -> Option<Duration> {
        Some(v.ttl)
    }
}

/// A cache of answers that expire.
pub(super) type TtlCache<K, V> = moka::future::Cache<K, Timed<V>>;

/// An empty [`TtlCache`].
pub(super) fn ttl_cache<K, V>() -> TtlCache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    moka::future::Cache::builder()
        .max_capacity(CACHE_CAPACITY)
        .expire_after(OwnTtl)
        .build()
}
