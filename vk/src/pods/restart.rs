//! Container restarts: the back-off between them (read from the pod's own status, so it
//! survives a VK restart), the restart step itself (record how the container ended, delete
//! the workload, create it again once the back-off expired), and the kill of a container
//! whose liveness probe failed.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

use super::decide::{current_container, restart_count};
use super::events::EventType;
use super::translate::{Situation, reason};
use super::{Error, PodController};
use crate::config::Timings;
use crate::provider::{FailureReason, Observed, WorkloadState};

/// Exit code recorded for a container killed after a failed liveness probe: the workload is
/// stopped at its provider, as a SIGKILL ends a process (128 + 9).
pub const LIVENESS_KILL_EXIT_CODE: i32 = 137;

/// Back-off before restart number `restarts_before + 1`: doubling from the configured first
/// delay up to the configured maximum.
pub fn delay(t: &Timings, restarts_before: i32) -> Duration {
    let ms = t
        .restart_backoff_ms
        .saturating_mul(1u64 << restarts_before.clamp(0, 20))
        .min(t.restart_backoff_max_ms);
    Duration::from_millis(ms)
}

/// Remaining restart back-off of a pod whose container waits in CrashLoopBackOff: due at the
/// last termination plus the back-off for its restart count.
pub fn backoff_remaining(pod: &Pod, t: &Timings, now: Timestamp) -> Option<Duration> {
    let cs = current_container(pod)?;
    let waiting = cs.state.as_ref()?.waiting.as_ref()?;
    if waiting.reason.as_deref() != Some(reason::CRASH_LOOP) {
        return None;
    }
    let finished = cs
        .last_state
        .as_ref()?
        .terminated
        .as_ref()?
        .finished_at
        .as_ref()?
        .0;
    let wait = delay(t, cs.restart_count - 1);
    let due = finished
        .checked_add(jiff::SignedDuration::try_from(wait).ok()?)
        .ok()?;
    let left = due.duration_since(now);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
}

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
        let wait = delay(t, restarts - 1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{PodBuilder, ts};

    fn timings() -> Timings {
        Timings {
            restart_backoff_ms: 10_000,
            restart_backoff_max_ms: 300_000,
            ..Timings::default()
        }
    }

    #[test]
    fn delay_doubles_up_to_the_maximum() {
        let t = timings();
        let secs: Vec<u64> = (0..7).map(|n| delay(&t, n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(&t, -3).as_secs(), 10);
        assert_eq!(delay(&t, i32::MAX).as_secs(), 300);
    }

    #[test]
    fn backoff_is_read_from_the_pods_status() {
        let t = timings();
        // Second restart: 20 s after the termination at 10:00:00.
        let pod = PodBuilder::new()
            .crash_looping("runpod", 2, "2026-11-29T10:00:00Z")
            .build();
        let left = backoff_remaining(&pod, &t, ts("2026-11-29T10:00:05Z"));
        assert_eq!(left, Some(Duration::from_secs(15)));
        assert_eq!(
            backoff_remaining(&pod, &t, ts("2026-11-29T10:00:20Z")),
            None
        );
        // Not in CrashLoopBackOff: no back-off at all.
        let running = PodBuilder::new().running("runpod").build();
        assert_eq!(
            backoff_remaining(&running, &t, ts("2026-11-29T10:00:05Z")),
            None
        );
    }
}
