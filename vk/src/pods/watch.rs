//! The pod store's feed: one watch of the pods bound to this node (field selector on
//! `spec.nodeName`), never a poll per pod. Each change worth a reconcile enqueues the pod.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::warn;

use super::{PodController, StoredPod};

impl PodController {
    /// Keeps the pod store in step with the API server until the stream ends.
    pub(super) async fn watch_pods(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let wc =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.cfg.node_name));
        let mut buffer: Option<HashMap<String, Arc<StoredPod>>> = None;
        let mut stream = watcher(api, wc).default_backoff().boxed();
        loop {
            let ev = match stream.try_next().await {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    warn!(error = %e, "pod watch failed; retrying");
                    continue;
                }
            };
            match ev {
                watcher::Event::Init => buffer = Some(HashMap::new()),
                watcher::Event::InitApply(p) => {
                    if let (Some(b), Some(uid)) = (buffer.as_mut(), p.metadata.uid.clone()) {
                        b.insert(uid, Arc::new(StoredPod::new(p)));
                    }
                }
                watcher::Event::InitDone => self.replace_all(buffer.take().unwrap_or_default()),
                watcher::Event::Apply(p) => self.apply(p),
                watcher::Event::Delete(p) => {
                    if let Some(uid) = p.metadata.uid.as_deref() {
                        self.pods.remove(uid);
                        self.recent.pod_gone(uid);
                        self.queue.add(uid);
                    }
                }
            }
        }
    }

    /// A full (re-)list: pods missing from it were deleted while the watch was down.
    fn replace_all(&self, new: HashMap<String, Arc<StoredPod>>) {
        let uids = self.pods.replace_all(new);
        self.recent.keep_pods(|u| self.pods.get(u).is_some());
        for uid in uids {
            self.queue.add(&uid);
        }
    }

    /// One added or changed pod.
    fn apply(&self, p: Pod) {
        let Some(uid) = p.metadata.uid.clone() else {
            return;
        };
        match self.pods.upsert(uid.clone(), StoredPod::new(p)) {
            Some(true) => self.queue.add_first(&uid),
            Some(false) => self.queue.add(&uid),
            None => {}
        }
    }
}
