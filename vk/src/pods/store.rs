//! One entry of the pod store: a pod bound to this node kept as compact JSON, plus the few
//! fields read on hot paths (the garbage collector, the gauges, the watch filter).
//!
//! Why not the typed `Pod`: k8s-openapi keeps every optional field inline, so a typical pod
//! with its service-account volume and five conditions costs ~30 KB of heap as a `Pod` and
//! ~3 KB as JSON. At 10,000 pods that is the difference between ~300 MiB and ~30 MiB
//! (measured by `make bench`). Reconciles decode the pod when they need it (tens of µs).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use tracing::error;

use super::{read, write};
use crate::pods::spec::{ANN_ASSIGNED, ANN_PUBLISHED};

/// A stored pod. Cheap to keep, decoded on demand with [`StoredPod::pod`].
pub struct StoredPod {
    pub namespace: Box<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
    /// `metadata.resourceVersion` as a number (0 when absent or not numeric).
    pub resource_version: u64,
    /// The `gpu-vk.io/assigned-provider` annotation.
    pub assigned: Option<Box<str>>,
    /// `status.phase`.
    pub phase: Option<Box<str>>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The `gpu-vk.io/published-ports` annotation is set (its Services need EndpointSlices).
    pub published: bool,
    /// When this process first saw the pod (kept across updates by [`StoredPod::seen_since`]).
    pub seen: Instant,
    /// Digest of what makes a watch update worth a reconcile (see [`StoredPod::same_generation`]).
    digest: u64,
    json: Box<[u8]>,
}

impl StoredPod {
    /// Keeps `pod` without its `managedFields`, which nothing here reads and which grow with
    /// every writer of the pod.
    pub fn new(mut pod: Pod) -> Self {
        pod.metadata.managed_fields = None;
        let digest = {
            let mut h = DefaultHasher::new();
            let relevant = (
                &pod.metadata.deletion_timestamp,
                &pod.metadata.annotations,
                &pod.metadata.generation,
                &pod.status,
            );
            serde_json::to_vec(&relevant)
                .unwrap_or_default()
                .hash(&mut h);
            h.finish()
        };
        let json = serde_json::to_vec(&pod)
            .unwrap_or_default()
            .into_boxed_slice();
        let m = &pod.metadata;
        Self {
            namespace: m.namespace.clone().unwrap_or_default().into(),
            name: m.name.clone().unwrap_or_default().into(),
            uid: m.uid.clone().unwrap_or_default().into(),
            resource_version: m
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            assigned: m
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_ASSIGNED))
                .map(|s| s.as_str().into()),
            phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .map(Into::into),
            deleting: m.deletion_timestamp.is_some(),
            published: m
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANN_PUBLISHED)),
            seen: Instant::now(),
            digest,
            json,
        }
    }

    /// This update of a pod already stored as `earlier`: keeps the first-seen instant.
    pub fn seen_since(mut self, earlier: Option<&StoredPod>) -> Self {
        if let Some(e) = earlier {
            self.seen = e.seen;
        }
        self
    }

    /// The pod, decoded. `None` only if the stored bytes do not decode, which would be a bug
    /// (they were encoded from a `Pod` by this process); it is logged.
    pub fn pod(&self) -> Option<Pod> {
        match serde_json::from_slice(&self.json) {
            Ok(p) => Some(p),
            Err(e) => {
                error!(namespace = %self.namespace, pod = %self.name, error = %e, "stored pod does not decode");
                None
            }
        }
    }

    /// True when an update does not need a reconcile: deletion, annotations, generation and
    /// status are unchanged (for example our own status write echoed back by the watch).
    pub fn same_generation(&self, other: &StoredPod) -> bool {
        self.digest == other.digest
    }

    /// Bytes held for this pod (for tests and sizing).
    pub fn encoded_len(&self) -> usize {
        self.json.len()
    }

    /// True when the assigned-provider annotation is absent or names `provider`.
    pub fn assigned_to_or_unassigned(&self, provider: &str) -> bool {
        self.assigned.as_deref().is_none_or(|a| a == provider)
    }
}

/// The pods bound to this node, by UID, as the watch last reported them, and the UIDs of pods
/// seen deleted whose workloads may still need deleting. It owns its locks: each method is one
/// short critical section.
#[derive(Default)]
pub struct PodStore {
    pods: RwLock<HashMap<String, Arc<StoredPod>>>,
    /// The watch's first full list was stored.
    synced: AtomicBool,
    gone: RwLock<HashSet<String>>,
    /// Woken when a pod whose ports are published changes (its EndpointSlices may need a
    /// write: a pod that began deleting leaves its Service's ready endpoints at once).
    published_changed: tokio::sync::Notify,
}

impl PodStore {
    /// Waits until a published pod was added, changed or removed since the last wait.
    pub async fn published_changed(&self) {
        self.published_changed.notified().await
    }

    fn touched(&self, published: bool) {
        if published {
            self.published_changed.notify_one();
        }
    }

    pub fn get(&self, uid: &str) -> Option<Arc<StoredPod>> {
        read(&self.pods).get(uid).cloned()
    }

    /// The pod `namespace`/`name`, if stored.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<StoredPod>> {
        read(&self.pods)
            .values()
            .find(|p| &*p.namespace == namespace && &*p.name == name)
            .cloned()
    }

    /// The stored pods that pass `want` (a snapshot: the lock is not held after).
    pub fn select(&self, want: impl Fn(&StoredPod) -> bool) -> Vec<Arc<StoredPod>> {
        read(&self.pods)
            .values()
            .filter(|p| want(p))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        read(&self.pods).len()
    }

    pub fn is_empty(&self) -> bool {
        read(&self.pods).is_empty()
    }

    pub fn uids(&self) -> Vec<String> {
        read(&self.pods).keys().cloned().collect()
    }

    /// The pod `uid` is stored and claims provider `provider` (or none yet).
    pub fn claims(&self, uid: &str, provider: &str) -> bool {
        read(&self.pods)
            .get(uid)
            .is_some_and(|p| p.assigned_to_or_unassigned(provider))
    }

    /// Pods by assigned provider ("" when none) and phase ("Pending" when none).
    pub fn count_by_provider_and_phase(&self) -> HashMap<(String, String), i64> {
        let mut counts = HashMap::new();
        for p in read(&self.pods).values() {
            let provider = p.assigned.as_deref().unwrap_or_default().to_owned();
            let phase = p.phase.as_deref().unwrap_or("Pending").to_owned();
            *counts.entry((provider, phase)).or_default() += 1;
        }
        counts
    }

    /// True once the watch's first full list was stored.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// A full (re-)list. Pods stored before and missing from it were deleted while the watch
    /// was down: they are marked gone. Returns every UID before and after, to reconcile.
    pub fn replace_all(&self, new: HashMap<String, Arc<StoredPod>>) -> Vec<String> {
        let (published, gone, uids) = {
            let old = std::mem::replace(&mut *write(&self.pods), new);
            let pods = read(&self.pods);
            let published = old.values().chain(pods.values()).any(|p| p.published);
            let gone: Vec<String> = old
                .keys()
                .filter(|u| !pods.contains_key(*u))
                .cloned()
                .collect();
            let uids: Vec<String> = old.keys().chain(pods.keys()).cloned().collect();
            (published, gone, uids)
        };
        // One lock at a time: the pods' is released before the gone set's is taken.
        self.touched(published);
        write(&self.gone).extend(gone);
        self.synced.store(true, Ordering::SeqCst);
        uids
    }

    /// One added or changed pod. `None`: nothing to reconcile (no change worth it, or an
    /// event older than what is stored); `Some(first)`: reconcile, ahead of status refreshes
    /// when `first` (a pod new to this node, or that began deleting).
    pub fn upsert(&self, uid: String, p: StoredPod) -> Option<bool> {
        let mut pods = write(&self.pods);
        let old = pods.get(&uid);
        if old.is_some_and(|old| old.resource_version > p.resource_version) {
            // The answer to one of our own writes is already stored and is newer than this
            // event, which was in flight: keeping it avoids a reconcile (and a status write)
            // against a stale status.
            return None;
        }
        let changed = old.is_none_or(|old| !old.same_generation(&p));
        let first = old.is_none() || (p.deleting && old.is_some_and(|o| !o.deleting));
        let p = p.seen_since(old.map(|o| &**o));
        self.touched(changed && (p.published || old.is_some_and(|o| o.published)));
        pods.insert(uid, Arc::new(p));
        changed.then_some(first)
    }

    /// The answer to our own write of the pod: stored unless the pod is gone or a newer
    /// version is stored already.
    pub fn refresh(&self, uid: String, p: StoredPod) {
        let mut pods = write(&self.pods);
        if let Some(old) = pods
            .get(&uid)
            .filter(|old| old.resource_version <= p.resource_version)
        {
            let p = p.seen_since(Some(old));
            self.touched(p.published || old.published);
            pods.insert(uid, Arc::new(p));
        }
    }

    /// The watch reported the pod deleted: it is gone, its workloads may need deleting.
    pub fn remove(&self, uid: &str) {
        let removed = write(&self.pods).remove(uid);
        self.touched(removed.is_some_and(|p| p.published));
        write(&self.gone).insert(uid.to_owned());
    }

    /// The pod was seen deleted and its workloads may still need deleting.
    pub fn is_gone(&self, uid: &str) -> bool {
        read(&self.gone).contains(uid)
    }

    /// No workload of the gone pod `uid` is left.
    pub fn forget_gone(&self, uid: &str) {
        write(&self.gone).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::PodBuilder;
    use k8s_openapi::api::core::v1::{PodCondition, ProjectedVolumeSource, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn pod(phase: &str, annotation: Option<&str>) -> Pod {
        let mut b = PodBuilder::new()
            .resource_version("4711")
            .image("pytorch:2")
            .spec(|s| {
                s.volumes = Some(vec![Volume {
                    name: "kube-api-access-x".into(),
                    projected: Some(ProjectedVolumeSource::default()),
                    ..Default::default()
                }])
            })
            .phase(phase)
            .status(|s| {
                s.conditions = Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..Default::default()
                }])
            });
        if let Some(a) = annotation {
            b = b.assigned(a);
        }
        let mut pod = b.build();
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        pod
    }

    #[test]
    fn round_trips_everything_but_managed_fields() {
        let p = pod("Running", Some("runpod"));
        let s = StoredPod::new(p.clone());
        let back = s.pod().unwrap();
        assert_eq!(back.metadata.managed_fields, None);
        let mut expected = p;
        expected.metadata.managed_fields = None;
        assert_eq!(back, expected);
        assert_eq!(&*s.namespace, "research");
        assert_eq!(&*s.name, "train-0");
        assert_eq!(s.resource_version, 4711);
        assert_eq!(s.assigned.as_deref(), Some("runpod"));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert!(s.assigned_to_or_unassigned("runpod"));
        assert!(!s.assigned_to_or_unassigned("vast"));
        assert!(StoredPod::new(pod("Running", None)).assigned_to_or_unassigned("vast"));
    }

    #[test]
    fn same_generation_sees_status_annotation_and_deletion_but_not_noise() {
        let a = StoredPod::new(pod("Pending", None));
        let mut noise = pod("Pending", None);
        noise.metadata.resource_version = Some("4712".into());
        noise.metadata.managed_fields = None;
        noise.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into_iter().collect());
        assert!(a.same_generation(&StoredPod::new(noise)));
        assert!(!a.same_generation(&StoredPod::new(pod("Running", None))));
        assert!(!a.same_generation(&StoredPod::new(pod("Pending", Some("vast")))));
        let mut deleting = pod("Pending", None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        assert!(!a.same_generation(&StoredPod::new(deleting)));
    }

    #[test]
    fn a_stored_pod_is_a_fraction_of_the_typed_one() {
        let s = StoredPod::new(pod("Running", Some("runpod")));
        // The typed Pod is 2.4 KB before any heap allocation; the stored form of this pod is
        // well under that.
        assert!(s.encoded_len() < 1024, "{}", s.encoded_len());
        assert!(std::mem::size_of::<StoredPod>() < 160);
    }

    #[test]
    fn the_store_keeps_the_newer_of_two_versions_and_says_what_needs_a_reconcile() {
        let store = PodStore::default();
        let uid = "uid-1".to_owned();
        assert_eq!(
            store.upsert(uid.clone(), StoredPod::new(pod("Pending", None))),
            Some(true)
        );
        // The same generation again (an echo of our own write): nothing to do.
        assert_eq!(
            store.upsert(uid.clone(), StoredPod::new(pod("Pending", None))),
            None
        );
        let mut newer = pod("Running", None);
        newer.metadata.resource_version = Some("4800".into());
        assert_eq!(
            store.upsert(uid.clone(), StoredPod::new(newer)),
            Some(false)
        );
        // An event older than what is stored (in flight during our write) is dropped.
        assert_eq!(
            store.upsert(uid.clone(), StoredPod::new(pod("Failed", None))),
            None
        );
        assert_eq!(store.get(&uid).unwrap().phase.as_deref(), Some("Running"));
        assert!(store.claims(&uid, "vast"));
        assert!(!store.is_synced());
        let uids = store.replace_all(HashMap::new());
        assert_eq!(uids, vec![uid.clone()]);
        assert!(store.is_synced() && store.is_gone(&uid) && store.is_empty());
        store.forget_gone(&uid);
        assert!(!store.is_gone(&uid));
    }

    #[tokio::test(start_paused = true)]
    async fn a_published_pod_that_begins_deleting_wakes_the_endpoint_writer_and_others_do_not() {
        use std::time::Duration;
        let store = PodStore::default();
        let woken = |store: &PodStore| {
            let mut wait = std::pin::pin!(store.published_changed());
            futures::FutureExt::now_or_never(wait.as_mut()).is_some()
        };
        let plain = PodBuilder::new().uid("plain").resource_version("1").build();
        store.upsert("plain".into(), StoredPod::new(plain));
        assert!(
            !woken(&store),
            "a pod without published ports is not the writer's"
        );
        let published = |rv: &str| {
            PodBuilder::new()
                .uid("served")
                .resource_version(rv)
                .annotation(ANN_PUBLISHED, "8080")
        };
        store.upsert("served".into(), StoredPod::new(published("2").build()));
        assert!(woken(&store));
        assert!(!woken(&store), "one change, one wake");
        store.upsert(
            "served".into(),
            StoredPod::new(published("3").deleting().build()),
        );
        assert!(woken(&store), "a published pod that began deleting");
        store.remove("served");
        assert!(woken(&store));
        // Nothing since: the writer waits (for its tick).
        let waited = tokio::time::timeout(Duration::from_secs(5), store.published_changed()).await;
        assert!(waited.is_err());
    }
}
