//! The pod store's feed: one watch of the pods bound to this node (field selector on
//! `spec.nodeName`), never a poll per pod. Each change worth a reconcile enqueues the pod.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::warn;

use super::{PodController, StoredPod, write};

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
                    if let Some(uid) = p.metadata.uid.clone() {
                        write(&self.pods).remove(&uid);
                        {
                            let mut recent = write(&self.recent);
                            recent.pods_deleted.remove(&uid);
                            recent.decisions.remove(&uid);
                        }
                        write(&self.gone).insert(uid.clone());
                        self.queue.add(&uid);
                    }
                }
            }
        }
    }

    /// A full (re-)list: pods missing from it were deleted while the watch was down.
    fn replace_all(&self, new: HashMap<String, Arc<StoredPod>>) {
        let old = std::mem::replace(&mut *write(&self.pods), new.clone());
        {
            let mut recent = write(&self.recent);
            recent.pods_deleted.retain(|u| new.contains_key(u));
            recent.decisions.retain(|u, _| new.contains_key(u));
        }
        write(&self.gone).extend(old.keys().filter(|u| !new.contains_key(*u)).cloned());
        for uid in old.keys().chain(new.keys()) {
            self.queue.add(uid);
        }
        self.pods_synced.store(true, Ordering::SeqCst);
    }

    /// One added or changed pod.
    fn apply(&self, p: Pod) {
        let Some(uid) = p.metadata.uid.clone() else {
            return;
        };
        let p = StoredPod::new(p);
        let changed = {
            let mut pods = write(&self.pods);
            let old = pods.get(&uid);
            if old.is_some_and(|old| old.resource_version > p.resource_version) {
                // The answer to one of our own writes is already stored and is newer than this
                // event, which was in flight: keeping it avoids a reconcile (and a status
                // write) against a stale status.
                None
            } else {
                let changed = old.is_none_or(|old| !old.same_generation(&p));
                // A pod new to this node (or being deleted) goes ahead of status refreshes:
                // its create (or its deletion) is what users wait on.
                let first = old.is_none() || (p.deleting && old.is_some_and(|o| !o.deleting));
                let p = p.seen_since(old.map(|o| &**o));
                pods.insert(uid.clone(), Arc::new(p));
                changed.then_some(first)
            }
        };
        match changed {
            Some(true) => self.queue.add_first(&uid),
            Some(false) => self.queue.add(&uid),
            None => {}
        }
    }
}
