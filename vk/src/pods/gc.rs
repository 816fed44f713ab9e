//! Garbage collection: workloads owned by this node (cluster id + node name) whose pod no
//! longer exists are deleted, only once the pod store is synced and after the workload stayed
//! orphaned for the grace window and through `timings.lossLists` lists of its provider, so a
//! pod created a moment ago is never collected, nor a workload on one list's word. Extra
//! workloads of one pod (see `duplicates`) are collected here too.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::{info, warn};

use super::PodController;
use super::events::EventType;
use crate::provider::ProviderError;

impl PodController {
    /// Runs the collector every poll interval once the pipeline is ready.
    pub(super) async fn collect_garbage(self: Arc<Self>) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
        let grace = self.cfg.timings.gc_grace();
        let min_lists = u64::from(self.cfg.timings.loss_lists);
        loop {
            let mut victims = Vec::new();
            let mut still = HashSet::new();
            for (i, slot) in self.slots.iter().enumerate() {
                let name = slot.name();
                let lists = slot.lists();
                for (uid, obs) in slot.unclaimed(|uid| self.pods.claims(uid, name)) {
                    let key = (i, obs.id.clone());
                    let (first, first_lists) = self.recent.orphaned_since(i, &obs.id, lists);
                    still.insert(key);
                    let repeated = lists.saturating_sub(first_lists) >= min_lists;
                    if first.elapsed() >= grace && repeated && !obs.provider_id.is_empty() {
                        victims.push((i, uid, obs.provider_id.clone(), obs.id.clone()));
                    }
                }
            }
            self.recent.keep_orphans(&still);
            for (i, uid, provider_id, id) in victims {
                // Re-check: a pod may have appeared since the snapshot.
                if self.pods.claims(&uid, self.provider_name(i)) {
                    continue;
                }
                info!(provider = self.provider_name(i), workload = %id, provider_id, "collecting orphaned workload");
                if self.delete_one(i, &uid, &provider_id, None).await.is_ok() {
                    self.metrics.gc_deletes.inc();
                }
            }
            self.collect_duplicates(min_lists).await;
            tokio::time::sleep(self.cfg.timings.poll_interval()).await;
        }
    }

    /// Deletes the second (third...) workload of a pod once `min_lists` lists showed it (see
    /// [`super::duplicates`]); the one the pod follows is never touched.
    async fn collect_duplicates(&self, min_lists: u64) {
        for (i, slot) in self.slots.iter().enumerate() {
            for o in slot.due_extras(min_lists) {
                let uid = o.id.pod_uid().to_owned();
                match slot.provider().delete(&o.provider_id).await {
                    Ok(()) | Err(ProviderError::NotFound) => {
                        slot.extra_collected(&o.provider_id);
                        self.metrics.gc_deletes.inc();
                        info!(provider = self.provider_name(i), uid, provider_id = %o.provider_id, "deleted a duplicate workload");
                        let pod = self.pods.get(&uid).and_then(|p| p.pod());
                        if let Some(pod) = pod {
                            self.event(
                                &pod,
                                EventType::Warning,
                                "DuplicateWorkload",
                                "CollectGarbage",
                                &format!(
                                    "provider {} held a second workload ({}) for this pod; deleted it",
                                    self.provider_name(i),
                                    o.provider_id
                                ),
                            );
                        }
                    }
                    Err(e) => {
                        warn!(provider = self.provider_name(i), uid, provider_id = %o.provider_id, error = %e, "failed to delete a duplicate workload");
                    }
                }
            }
        }
    }
}
