//! What happens on (re)start: nothing is acted on until the pod store is synced and every
//! provider was listed once; then every known pod and workload is reconciled once (adopt,
//! create, fail lost, collect), and the workers keep going from there. No state is carried
//! over from the previous process: the pods and the provider lists are the state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info};

use super::PodController;
use super::worker::{self, Lane};
use crate::telemetry::ResultLabels;

impl PodController {
    /// Waits for the pod store and the first list of every provider, then starts the workers.
    pub(super) async fn start_when_ready(self: Arc<Self>) {
        let t0 = Instant::now();
        loop {
            if self.slots.all_listed() && self.pods.is_synced() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        info!(
            elapsed_ms = t0.elapsed().as_millis() as u64,
            pods = self.pods.len(),
            "pod store synced and every provider listed: reconciling"
        );
        for uid in self.pods.uids() {
            self.queue.add(&uid);
        }
        for s in self.slots.iter() {
            for uid in s.cached_uids() {
                self.queue.add(&uid);
            }
        }
        self.ready.send_replace(true);
        let mut workers = tokio::task::JoinSet::new();
        // A share of the workers serves only pods that just arrived (or are being deleted).
        let lanes = std::iter::repeat_n(Lane::First, (self.cfg.workers / 4).max(1))
            .chain(std::iter::repeat_n(Lane::All, self.cfg.workers));
        for lane in lanes {
            let pc = self.clone();
            workers.spawn(async move {
                let panicked = |uid: &str, msg: &str| {
                    error!(
                        uid,
                        panic = msg,
                        "reconcile panicked (a bug): retrying with back-off"
                    );
                    pc.metrics
                        .reconciles
                        .get_or_create(&ResultLabels {
                            result: "panic".into(),
                        })
                        .inc();
                };
                worker::serve(&pc.queue, lane, |uid| pc.reconcile_owned(uid), panicked).await;
            });
        }
        // Marks the end of the start-up reconcile (everything known at start handled once):
        // how long a restart takes to re-derive its state, for operators and `make bench`.
        let pc = self.clone();
        workers.spawn(async move {
            while !pc.queue.is_idle() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let elapsed = t0.elapsed();
            pc.metrics
                .startup_reconcile_seconds
                .set(elapsed.as_secs_f64().max(1e-6));
            info!(
                elapsed_ms = elapsed.as_millis() as u64,
                pods = pc.pods.len(),
                "start-up reconcile finished"
            );
        });
        while workers.join_next().await.is_some() {}
    }
}
