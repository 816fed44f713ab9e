//! Deleting workloads: for a pod being deleted (workload first, then the pod with grace 0 and
//! a UID precondition), for a pod already gone, for a restart, and for the garbage collector.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, ResourceExt};
use tracing::{debug, info};

use super::events::EventType;
use super::translate::reason;
use super::{Error, PodController};
use crate::provider::ProviderError;

impl PodController {
    /// The pod is being deleted: remove its workloads, then the pod (grace 0, UID precondition,
    /// so a new pod with the same name is never touched).
    pub(super) async fn finish_deletion(&self, pod: &Pod, uid: &str) -> Result<(), Error> {
        self.delete_workloads(uid, Some(pod)).await?;
        if self.recent.pod_deleted(uid) {
            return Ok(());
        }
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {
                self.metrics.pod_deletes.inc();
                self.recent.note_pod_deleted(uid);
                debug!(pod = pod.name_any(), uid, "pod deleted after its workload");
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(Error::DeletePod(e)),
        }
    }

    /// Deletes the pod's workload at every provider that lists one.
    pub(super) async fn delete_workloads(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        for i in 0..self.slots.len() {
            let found = self.slots[i].cached(uid).map(|o| o.provider_id);
            if let Some(provider_id) = found {
                self.delete_one(i, uid, &provider_id, pod).await?;
            }
        }
        Ok(())
    }

    /// Deletes one workload; NotFound counts as done.
    pub(super) async fn delete_one(
        &self,
        i: usize,
        uid: &str,
        provider_id: &str,
        pod: Option<&Pod>,
    ) -> Result<(), Error> {
        let slot = &self.slots[i];
        let name = slot.name().to_owned();
        let provider_id = if provider_id.is_empty() {
            // Created moments ago and not listed yet: learn its provider id first.
            match self.lookup_provider_id(i, uid).await? {
                Some(id) => id,
                None => return Err(Error::NotListed(name)),
            }
        } else {
            provider_id.to_owned()
        };
        match slot.provider().delete(&provider_id).await {
            Ok(()) | Err(ProviderError::NotFound) => {
                slot.uncache(uid);
                self.recent.note_delete(i, uid);
                info!(uid, provider = %name, provider_id, "deleted workload");
                Ok(())
            }
            Err(e) => {
                if let Some(pod) = pod {
                    self.event(
                        pod,
                        EventType::Warning,
                        reason::PROVIDER_ERROR,
                        "DeleteWorkload",
                        &format!("provider {name}: {e}"),
                    );
                }
                Err(Error::Provider {
                    provider: name,
                    source: e,
                })
            }
        }
    }

    /// The provider id of a workload created moments ago, from a fresh list (which is folded
    /// into the cache like any other).
    async fn lookup_provider_id(&self, i: usize, uid: &str) -> Result<Option<String>, Error> {
        let slot = &self.slots[i];
        let started = Instant::now();
        let list = slot
            .provider()
            .list()
            .await
            .map_err(|source| Error::Provider {
                provider: slot.name().to_owned(),
                source,
            })?;
        let found = list
            .iter()
            .find(|o| o.id.pod_uid() == uid && self.owner.owns(&o.id))
            .map(|o| o.provider_id.clone());
        self.apply_list(i, started, list);
        Ok(found)
    }
}
