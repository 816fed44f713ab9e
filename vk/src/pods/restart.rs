//! Container restarts and start retries: the restart step itself (record how the container
//! ended, delete the workload, create it again once the back-off expired), the retry of a start
//! past its deadline, and the kill of a container whose liveness probe failed. The back-off's arithmetic is decide's (`pods/decide/backoff.rs`).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

use super::decide::{backoff_delay, current_container, restart_count};
use super::events::EventType;
use super::spec::ANN_START_ATTEMPTS;
use super::translate::Situation;
use super::translate::reason::START_RETRIED;
use super::{Error, PodController};
use crate::config::Timings;
use crate::provider::{FailureReason, Observed, WorkloadState};

/// Exit code recorded for a container killed after a failed liveness probe: the workload is
/// stopped at its provider, as a SIGKILL ends a process (128 + 9).
pub const LIVENESS_KILL_EXIT_CODE: i32 = 137;

impl PodController {
    /// Records the ended container (restart count, last state, CrashLoopBackOff), then deletes
    /// its workload; the create follows once the back-off expired.
    pub(super) async fn restart(
        &self,
        pod: &Pod,
        i: usize,
        provider_id: &str,
        restarts: i32,
        delay: Duration,
        last: ContainerStateTerminated,
    ) -> Result<(), Error> {
        let name = self.provider_name(i).to_owned();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let msg = format!("back-off {}s restarting failed container", delay.as_secs());
        self.event(
            pod,
            EventType::Warning,
            "BackOff",
            "RestartWorkload",
            &format!("workload exited with code {}; {msg}", last.exit_code),
        );
        let s = Situation::BackOff { last, message: msg };
        self.write_status_with_restarts(pod, &s, &name, restarts)
            .await?;
        self.delete_one(i, &uid, provider_id, Some(pod)).await
    }

    /// The workload is still starting past its start deadline and the pod has attempts left:
    /// say so (`StartRetried`), record the attempt on the pod, keep it Pending, and delete the
    /// workload; the pod's workload is then created again, as for a pod that had none.
    pub(super) async fn retry_start(
        &self,
        pod: &Pod,
        i: usize,
        provider_id: &str,
        attempt: u32,
        message: &str,
    ) -> Result<(), Error> {
        let name = self.provider_name(i).to_owned();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // The attempt is recorded once the workload is gone: a delete that fails (a provider's
        // rate limit, an outage) is tried again with the count unchanged, where recording it
        // first would count the same stuck workload twice. A write that fails after the delete
        // costs one retry more at most.
        self.delete_one(i, &uid, provider_id, Some(pod)).await?;
        tracing::warn!(
            namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod = pod.metadata.name.as_deref().unwrap_or_default(),
            provider = %name,
            attempt,
            "start past its deadline: workload deleted, the pod's workload is created again"
        );
        self.event(
            pod,
            EventType::Warning,
            START_RETRIED,
            "RetryStart",
            message,
        );
        self.annotate(pod, ANN_START_ATTEMPTS, &attempt.to_string())
            .await?;
        let s = Situation::Waiting {
            reason: START_RETRIED,
            message: message.to_owned(),
        };
        self.write_status(pod, &s, &name).await
    }

    /// The main container's liveness probe failed: say so (`Unhealthy`, `Killing`, as the
    /// kubelet does), stop the workload, and restart it as the restart policy says (after the
    /// back-off) or, under `Never`, end the pod Failed with the kill's exit code. Returns when
    /// to look at the pod again.
    pub(super) async fn kill_unhealthy(
        &self,
        pod: &Pod,
        i: usize,
        obs: &Observed,
        why: &str,
        t: &Timings,
    ) -> Result<Option<Duration>, Error> {
        let container = current_container(pod)
            .map(|c| c.name.clone())
            .or_else(|| super::spec::main_container(pod).map(|c| c.name.clone()))
            .unwrap_or_default();
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always");
        self.event(
            pod,
            EventType::Warning,
            "Unhealthy",
            "Probe",
            &format!("Liveness probe failed: {why}"),
        );
        let then = if policy == "Never" {
            "restart policy Never: the pod fails"
        } else {
            "will be restarted"
        };
        self.event(
            pod,
            EventType::Normal,
            "Killing",
            "Probe",
            &format!("Container {container} failed liveness probe, {then}"),
        );
        let now = Timestamp::now();
        let message = format!("liveness probe failed: {why}");
        if policy == "Never" {
            let ended = Observed {
                state: WorkloadState::Failed {
                    exit_code: LIVENESS_KILL_EXIT_CODE,
                    reason: FailureReason::Error,
                },
                message: Some(message),
                finished_at: Some(now),
                usage: None,
                ..obs.clone()
            };
            let name = self.provider_name(i).to_owned();
            self.write_status(pod, &Situation::Observed(&ended), &name)
                .await?;
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.delete_one(i, &uid, &obs.provider_id, Some(pod))
                .await?;
            return Ok(None);
        }
        let restarts = restart_count(pod) + 1;
        let wait = backoff_delay(t, restarts - 1);
        let last = ContainerStateTerminated {
            exit_code: LIVENESS_KILL_EXIT_CODE,
            reason: Some(FailureReason::Error.as_str().to_owned()),
            started_at: obs
                .started_at
                .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
            finished_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
            container_id: Some(format!("{}://{}", self.provider_name(i), obs.id)),
            message: Some(message),
            signal: None,
        };
        self.restart(pod, i, &obs.provider_id, restarts, wait, last)
            .await?;
        Ok(Some(wait))
    }
}
