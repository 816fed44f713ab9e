//! Carrying out a failed image pull as the kubelet reports one: the provider's workload is
//! ended (it would bill while the provider retries the pull), the container waits
//! `ErrImagePull` and then `ImagePullBackOff` with the provider's message, and the Events are
//! the kubelet's (`Failed` "Failed to pull image ...", "Error: ErrImagePull", `BackOff`
//! "Back-off pulling image ...", "Error: ImagePullBackOff"), each under its own action so that
//! none folds into another's series. The decisions are `decide::pull`'s.

use k8s_openapi::api::core::v1::Pod;

use super::decide::{Step, assigned, current_container, pull};
use super::events::EventType;
use super::reconcile::Action;
use super::spec::ANN_PULL_FAILURES;
use super::translate::{Situation, reason};
use super::{Error, PodController};
use crate::provider::Observed;

impl PodController {
    /// Carries out [`Step::PullFailed`] and [`Step::PullBackOff`] (`found`: the pod's
    /// workload).
    pub(super) async fn carry_out_pull(
        &self,
        step: Step,
        pod: &Pod,
        found: Option<&Observed>,
    ) -> Result<Action, Error> {
        match step {
            Step::PullFailed {
                provider,
                record,
                message,
            } => {
                let Some(obs) = found else {
                    return Ok(Action::await_change());
                };
                self.pull_failed(pod, provider, &obs.provider_id, &record, &message)
                    .await?;
                Ok(Action::requeue(self.cfg.timings.poll_interval()))
            }
            Step::PullBackOff { wait, message } => {
                self.pull_backoff(pod, &message).await?;
                Ok(Action::requeue(wait))
            }
            _ => Ok(Action::await_change()),
        }
    }

    /// The workload of provider `i` could not pull its image: delete it, then record the
    /// failure (`record`) and say why. The failure is recorded once the workload is gone, as
    /// a start retry is: a delete that fails is tried again with the count unchanged.
    async fn pull_failed(
        &self,
        pod: &Pod,
        i: usize,
        provider_id: &str,
        record: &str,
        message: &str,
    ) -> Result<(), Error> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.delete_one(i, &uid, provider_id, Some(pod)).await?;
        // The pod's next workload is created as for a pod that never had one: the create
        // decision is spent (no status write may have followed it yet, when the provider
        // reported the failure at its first list).
        self.recent.forget_decision(&uid);
        let image = pull::image(pod);
        tracing::warn!(
            namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod = pod.metadata.name.as_deref().unwrap_or_default(),
            provider = %self.provider_name(i),
            image,
            "image pull failed at the provider: workload deleted, the pod waits in ImagePullBackOff"
        );
        self.event(
            pod,
            EventType::Warning,
            "Failed",
            "PullImage",
            &format!("Failed to pull image {image:?}: {message}"),
        );
        self.event(
            pod,
            EventType::Warning,
            "Failed",
            "StartContainer",
            "Error: ErrImagePull",
        );
        self.annotate(pod, ANN_PULL_FAILURES, record).await?;
        let s = Situation::Waiting {
            reason: reason::ERR_IMAGE_PULL,
            message: message.to_owned(),
        };
        let name = self.provider_name(i).to_owned();
        self.write_status(pod, &s, &name).await
    }

    /// The image back-off runs: the pod waits `ImagePullBackOff` (the Events once per
    /// back-off, when the pod enters it).
    async fn pull_backoff(&self, pod: &Pod, message: &str) -> Result<(), Error> {
        let waiting =
            current_container(pod).and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
        if waiting.as_deref() != Some(reason::IMAGE_PULL_BACKOFF) {
            let image = pull::image(pod);
            self.event(
                pod,
                EventType::Normal,
                "BackOff",
                "PullImage",
                &format!("Back-off pulling image {image:?}"),
            );
            self.event(
                pod,
                EventType::Warning,
                "Failed",
                "StartContainerBackOff",
                "Error: ImagePullBackOff",
            );
        }
        let s = Situation::Waiting {
            reason: reason::IMAGE_PULL_BACKOFF,
            message: message.to_owned(),
        };
        let name = assigned(pod).unwrap_or_default().to_owned();
        self.write_status(pod, &s, &name).await
    }
}
