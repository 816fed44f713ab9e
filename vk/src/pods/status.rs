//! Where a pod's status gets written: the translated status (from the pure
//! [`super::translate`]) goes through the status subresource, only when it changed; failures
//! also become Events on the pod.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::{debug, warn};

use super::address;
use super::decide::{assigned, restart_count};
use super::events::EventType;
use super::spec::{ANN_ASSIGNED, ANN_DISPATCH, ANN_PUBLISHED};
use super::translate::{self, Situation, reason};
use super::{Error, PodController, StoredPod};
use crate::provider::{Observed, WorkloadState};

impl PodController {
    /// Reports the workload's state on the pod, with an Event when it ended badly.
    pub(super) async fn report(&self, pod: &Pod, i: usize, obs: &Observed) -> Result<(), Error> {
        let name = self.provider_name(i).to_owned();
        match &obs.state {
            WorkloadState::Preempted => {
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PREEMPTED,
                    "Observe",
                    &format!("workload preempted at provider {name}"),
                );
            }
            WorkloadState::Lost => {
                self.event(
                    pod,
                    EventType::Warning,
                    reason::PROVIDER_LOST,
                    "Observe",
                    &format!("provider {name} lost the workload"),
                );
            }
            WorkloadState::Failed {
                exit_code,
                reason: r,
            } => {
                self.event(
                    pod,
                    EventType::Warning,
                    r.as_str(),
                    "Observe",
                    &format!("workload failed with exit code {exit_code} at provider {name}"),
                );
            }
            _ => {}
        }
        // A workload adopted after a restart between its create and the first status write
        // gets its provider recorded by this status write.
        self.write_status(pod, &Situation::Observed(obs), &name)
            .await
    }

    /// Fails the pod for good with `reason` (an Event the first time).
    pub(super) async fn fail(&self, pod: &Pod, reason: &str, message: &str) -> Result<(), Error> {
        let already = pod.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some(reason)
        });
        if !already {
            warn!(
                namespace = pod.namespace().unwrap_or_default(),
                pod = pod.name_any(),
                reason,
                message,
                "pod cannot run"
            );
            self.event(pod, EventType::Warning, reason, "Admit", message);
        }
        let provider = assigned(pod).unwrap_or_default().to_owned();
        self.write_status(
            pod,
            &Situation::Failed {
                reason,
                message: message.to_owned(),
            },
            &provider,
        )
        .await
    }

    /// Sets the VK's annotation `key` on the pod (through the status subresource, as the other
    /// annotations the VK writes) and keeps the store current.
    pub(super) async fn annotate(&self, pod: &Pod, key: &str, value: &str) -> Result<(), Error> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let patch = serde_json::json!({"metadata": {"uid": uid, "annotations": {key: value}}});
        let status = pod.status.clone().unwrap_or_default();
        self.patch_status(pod, &patch, &uid, false, &status).await
    }

    pub(super) async fn write_status(
        &self,
        pod: &Pod,
        s: &Situation<'_>,
        provider: &str,
    ) -> Result<(), Error> {
        self.write_status_with_restarts(pod, s, provider, restart_count(pod))
            .await
    }

    /// Writes the translated status through the status subresource, only when it changed.
    /// The first write after a create also records the dispatch decision waiting in
    /// [`super::memory::Recent::decisions`] as the pod's `gpu-vk.io/dispatch` annotation.
    pub(super) async fn write_status_with_restarts(
        &self,
        pod: &Pod,
        s: &Situation<'_>,
        provider: &str,
        restarts: i32,
    ) -> Result<(), Error> {
        let cx = self.translate_context(pod, s, provider, restarts);
        let mut status = translate::pod_status(pod, s, &cx);
        // The published ports ride on the status write too, only when they change.
        let publish = match s {
            Situation::Observed(o) => {
                let want = self.apply_address(pod, o, provider, &mut status);
                let have = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_PUBLISHED));
                (want.as_ref() != have).then_some(want)
            }
            // No workload to have an address: neither has the condition about it.
            _ => {
                address::forget(&mut status);
                None
            }
        };
        // The chosen provider rides on the status write (the pods/status subresource accepts
        // annotations), so creating a workload costs no extra API request before or after.
        let annotate = !provider.is_empty() && assigned(pod) != Some(provider);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pending = self.recent.decision(&uid).map(|(_, d)| d);
        let decide = pending.filter(|d| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_DISPATCH))
                != Some(d)
        });
        if !annotate
            && decide.is_none()
            && publish.is_none()
            && !translate::status_changed(pod.status.as_ref(), &status)
        {
            return Ok(());
        }
        let mut metadata = serde_json::json!({ "uid": pod.metadata.uid });
        if annotate {
            metadata["annotations"] = serde_json::json!({ ANN_ASSIGNED: provider });
        }
        if let Some(d) = &decide {
            metadata["annotations"][ANN_DISPATCH] = serde_json::json!(d);
        }
        if let Some(p) = &publish {
            metadata["annotations"][ANN_PUBLISHED] = serde_json::json!(p);
        }
        let patch =
            serde_json::json!({ "metadata": metadata, "status": merge_status(pod, &status) });
        self.patch_status(pod, &patch, &uid, decide.is_some(), &status)
            .await
    }

    /// What the translation of `s` needs to know beyond the pod: restarts counted here and
    /// at the provider, the readiness probe's verdict, whether the provider runs every
    /// container.
    fn translate_context<'a>(
        &'a self,
        pod: &Pod,
        s: &Situation<'_>,
        provider: &'a str,
        restarts: i32,
    ) -> translate::Context<'a> {
        let provider_restarts = match s {
            Situation::Observed(o) => o.provider_restarts as i32,
            _ => 0,
        };
        translate::Context {
            provider,
            host_ip: &self.cfg.internal_ip,
            restart_count: restarts.max(provider_restarts),
            now: Timestamp::now(),
            readiness: match s {
                Situation::Observed(o) if o.state == WorkloadState::Running => self
                    .prober
                    .readiness(pod.metadata.uid.as_deref().unwrap_or_default()),
                _ => translate::Readiness::Unprobed,
            },
            all_containers: self
                .slots
                .named(provider)
                .is_some_and(|slot| slot.provider().capabilities().containers),
        }
    }

    /// Sends the merge `patch` to the pod's status subresource and keeps the pod store
    /// current; `decided` says the patch carries the pending dispatch decision of `uid`,
    /// which is then forgotten. A pod already gone is no error.
    async fn patch_status(
        &self,
        pod: &Pod,
        patch: &serde_json::Value,
        uid: &str,
        decided: bool,
        status: &PodStatus,
    ) -> Result<(), Error> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        match api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(updated) => {
                self.metrics.status_writes.inc();
                if decided {
                    self.recent.forget_decision(uid);
                }
                debug!(
                    namespace = pod.namespace().unwrap_or_default(),
                    pod = pod.name_any(),
                    uid = pod.metadata.uid.as_deref().unwrap_or_default(),
                    phase = status.phase.as_deref().unwrap_or_default(),
                    "wrote pod status"
                );
                // Keep our store current so the next reconcile compares against what we wrote.
                if let Some(uid) = updated.metadata.uid.clone() {
                    self.pods.refresh(uid, StoredPod::new(updated));
                }
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.recent.forget_decision(uid);
                Ok(())
            }
            Err(e) => Err(Error::WriteStatus(e)),
        }
    }

    /// Sets the pod IP the provider lists for the workload (or the provider's fallback) and
    /// the [`address::CONDITION`]; an address that cannot be a pod IP is an Event the first
    /// time it is seen.
    /// Returns the `gpu-vk.io/published-ports` annotation the pod should carry.
    fn apply_address(
        &self,
        pod: &Pod,
        o: &Observed,
        provider: &str,
        status: &mut PodStatus,
    ) -> Option<String> {
        let choice = self.address_choice(o, provider);
        let message = choice.message(provider);
        let seen = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == address::CONDITION && c.message.as_ref() == Some(&message))
            });
        if choice.refused.is_some() && !seen {
            self.event(
                pod,
                EventType::Warning,
                address::REFUSED,
                "Observe",
                &message,
            );
        }
        choice.apply(status, provider, &Time(Timestamp::now()));
        address::published_text(&choice.published)
    }

    /// The pod IP (or published ports) of a workload `provider` lists as `o`: from what the
    /// VK observed, never from anything written on the pod.
    pub(super) fn address_choice(&self, o: &Observed, provider: &str) -> address::Choice {
        let cfg = self.cfg.providers.iter().find(|p| p.name == provider);
        let fallback = cfg.and_then(|p| p.pod_ip_fallback);
        let cluster = match cfg.is_some_and(|p| p.trust_cluster_addresses) {
            true => std::sync::Arc::from([]),
            false => self.networks().snapshot(),
        };
        address::choose(
            o.ip.as_deref(),
            &o.ports,
            fallback,
            self.cfg.internal_ip.parse().ok(),
            &cluster,
        )
    }

    /// Publishes an Event on the pod (in the background; see [`super::events`]).
    pub fn event(&self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: &str) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        };
        self.events.publish(&reference, type_, reason, action, note);
    }
}

/// `status` as the body of a merge patch over the pod's current status: a merge patch
/// replaces lists but keeps fields it does not name, so each field we dropped is nulled.
fn merge_status(pod: &Pod, status: &PodStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let (Some(obj), Ok(serde_json::Value::Object(old))) = (
        value.as_object_mut(),
        serde_json::to_value(pod.status.clone().unwrap_or_default()),
    ) {
        for k in old.keys() {
            obj.entry(k.clone()).or_insert(serde_json::Value::Null);
        }
    }
    value
}
