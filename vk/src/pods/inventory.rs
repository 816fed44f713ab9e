//! What dispatch knows of the providers beyond their capabilities: each provider's inventory
//! (prices, free capacity), refreshed by one call per provider per `dispatch.inventoryIntervalMs`
//! (never per pod), the capacity refusals remembered per GPU type, and the snapshot of both
//! with the breakers' health that [`super::decide`] reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::dispatch::Standing;
use super::{PodController, queue};
use crate::provider::{Inventory, ProviderError};

/// An inventory older than this many intervals is dropped: stale prices mislead more than
/// none.
const STALE_AFTER_INTERVALS: u32 = 5;

impl PodController {
    /// Refreshes provider `i`'s inventory every interval; stops for a provider without one.
    pub(super) async fn refresh_inventory(self: Arc<Self>, i: usize) {
        let interval = self.cfg.dispatch.inventory_interval();
        let slot = &self.slots[i];
        let mut failures = 0u32;
        let mut last_ok = Instant::now();
        loop {
            match slot.provider().inventory().await {
                Ok(inv) => {
                    debug!(
                        provider = slot.name(),
                        quotes = inv.quotes.len(),
                        "inventory refreshed"
                    );
                    slot.set_inventory(Some(inv));
                    failures = 0;
                    last_ok = Instant::now();
                    tokio::time::sleep(interval).await;
                }
                Err(ProviderError::Unsupported { .. }) => {
                    debug!(provider = slot.name(), "provider has no inventory");
                    return std::future::pending().await;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if last_ok.elapsed() > interval * STALE_AFTER_INTERVALS {
                        slot.set_inventory(None);
                    }
                    let wait = match &e {
                        ProviderError::Transient {
                            retry_after: Some(d),
                            ..
                        } => *d,
                        _ => queue::backoff(failures).min(interval),
                    };
                    warn!(provider = slot.name(), error = %e, retry_in_ms = wait.as_millis() as u64, "provider inventory failed");
                    tokio::time::sleep(wait.max(Duration::from_millis(100))).await;
                }
            }
        }
    }

    /// Remembers that provider `i` had no capacity for `gpu_type` just now.
    pub(super) fn remember_refusal(&self, i: usize, gpu_type: Option<&str>) {
        let ttl = self.cfg.dispatch.capacity_memory();
        if ttl.is_zero() {
            return;
        }
        self.slots[i].refuse(gpu_type.map(str::to_ascii_lowercase), Instant::now() + ttl);
    }

    /// Health, inventories and refusals of every provider now: O(providers), not per pod.
    pub(super) fn standings(&self) -> (Vec<Option<Arc<Inventory>>>, Vec<Standing<'static>>) {
        let now = Instant::now();
        self.slots.iter().map(|s| s.standing(now)).unzip()
    }
}

/// Points each standing at its inventory (kept alive by `inventories`).
pub(super) fn attach<'a>(
    inventories: &'a [Option<Arc<Inventory>>],
    standings: Vec<Standing<'static>>,
) -> Vec<Standing<'a>> {
    standings
        .into_iter()
        .zip(inventories)
        .map(|(s, inv)| Standing {
            inventory: inv.as_deref(),
            ..s
        })
        .collect()
}
