//! Image pulls that fail, as the kubelet handles them: the provider's failed pull ends its
//! workload (`ErrImagePull`; it would otherwise bill while the provider retries for ever), and
//! the next one is created after the image back-off (`ImagePullBackOff`), 10 s doubling to
//! 300 s as the kubelet's (`imageBackOffPeriod`, `MaxImageBackOff` in `pkg/kubelet/kubelet.go`),
//! from the same settings as the restart back-off. A fixed Secret or tag is read at the next
//! attempt. The count and the time of the last failure live in the pod's
//! `gpu-vk.io/pull-failures` annotation, so a restarted VK keeps the back-off; as the
//! kubelet's back-off entry expires after twice the maximum without a failure, so does the
//! count.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::{Step, backoff, current_container};
use crate::config::Timings;
use crate::pods::spec::{ANN_PULL_FAILURES, main_container};
use crate::pods::translate::reason;

/// The pull failures recorded on the pod: how many in a row, and when the last was.
pub fn failures(pod: &Pod) -> Option<(u32, Timestamp)> {
    let v = pod.metadata.annotations.as_ref()?.get(ANN_PULL_FAILURES)?;
    let (n, at) = v.split_once(' ')?;
    Some((n.parse().ok().filter(|&n| n > 0)?, at.parse().ok()?))
}

/// The annotation's value after one more failure at `now`.
pub fn record(pod: &Pod, t: &Timings, now: Timestamp) -> String {
    let n = match failures(pod) {
        Some((n, at)) if !expired(t, at, now) => n.saturating_add(1),
        _ => 1,
    };
    format!("{n} {now}")
}

/// The kubelet forgets a back-off entry idle for twice the maximum.
fn expired(t: &Timings, at: Timestamp, now: Timestamp) -> bool {
    let idle = Duration::try_from(now.duration_since(at)).unwrap_or_default();
    idle > Duration::from_millis(t.restart_backoff_max_ms.saturating_mul(2))
}

/// The image the pod's main container pulls (the one the events name).
pub fn image(pod: &Pod) -> String {
    main_container(pod)
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The workload's pull failed (`message`, the provider's): end it and record the failure.
pub fn failed(pod: &Pod, provider: usize, message: &str, t: &Timings, now: Timestamp) -> Step {
    Step::PullFailed {
        provider,
        record: record(pod, t, now),
        message: message.to_owned(),
    }
}

/// While the image back-off runs, the pod waits `ImagePullBackOff`: how long, and the message
/// (the kubelet's, with the last pull's error since kubernetes#127918).
pub fn backoff_remaining(pod: &Pod, t: &Timings, now: Timestamp) -> Option<Step> {
    let (n, at) = failures(pod)?;
    let wait = backoff::delay(t, i32::try_from(n).unwrap_or(i32::MAX) - 1);
    let due = at
        .checked_add(jiff::SignedDuration::try_from(wait).ok()?)
        .ok()?;
    let left = due.duration_since(now);
    if !left.is_positive() {
        return None;
    }
    let last = current_container(pod)
        .and_then(|c| c.state.as_ref()?.waiting.as_ref())
        .and_then(|w| match w.reason.as_deref() {
            Some(reason::ERR_IMAGE_PULL) => w.message.clone(),
            Some(reason::IMAGE_PULL_BACKOFF) => w
                .message
                .as_deref()
                .and_then(|m| m.split_once(": ErrImagePull: "))
                .map(|(_, last)| last.to_owned()),
            _ => None,
        })
        .unwrap_or_else(|| "the last pull failed".into());
    Some(Step::PullBackOff {
        wait: Duration::try_from(left).unwrap_or_default(),
        message: format!(
            "Back-off pulling image {:?}: ErrImagePull: {last}",
            image(pod)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{PodBuilder, ts};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };

    fn timings() -> Timings {
        Timings {
            restart_backoff_ms: 10_000,
            restart_backoff_max_ms: 300_000,
            ..Timings::default()
        }
    }

    fn waiting(pod: PodBuilder, reason: &str, message: &str) -> Pod {
        let mut pod = pod.build();
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "trainer".into(),
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn failures_count_up_and_reset_after_twice_the_maximum_idle() {
        let t = timings();
        let fresh = PodBuilder::new().build();
        assert_eq!(
            record(&fresh, &t, ts("2026-12-07T10:00:00Z")),
            "1 2026-12-07T10:00:00Z"
        );
        let two = PodBuilder::new()
            .annotation(ANN_PULL_FAILURES, "2 2026-12-07T10:00:00Z")
            .build();
        assert_eq!(
            record(&two, &t, ts("2026-12-07T10:05:00Z")),
            "3 2026-12-07T10:05:00Z"
        );
        // 601 s idle: the kubelet would have forgotten the entry.
        assert_eq!(
            record(&two, &t, ts("2026-12-07T10:10:01Z")),
            "1 2026-12-07T10:10:01Z"
        );
        let junk = PodBuilder::new()
            .annotation(ANN_PULL_FAILURES, "x y")
            .build();
        assert_eq!(failures(&junk), None);
    }

    #[test]
    fn the_back_off_doubles_and_carries_the_last_error() {
        let t = timings();
        let pod = waiting(
            PodBuilder::new()
                .image("registry.example.com/acme/app:1")
                .annotation(ANN_PULL_FAILURES, "3 2026-12-07T10:00:00Z"),
            reason::ERR_IMAGE_PULL,
            "pull access denied",
        );
        // Third failure: 40 s.
        let Some(Step::PullBackOff { wait, message }) =
            backoff_remaining(&pod, &t, ts("2026-12-07T10:00:15Z"))
        else {
            panic!("no back-off")
        };
        assert_eq!(wait, Duration::from_secs(25));
        assert_eq!(
            message,
            "Back-off pulling image \"registry.example.com/acme/app:1\": ErrImagePull: pull access denied"
        );
        assert!(backoff_remaining(&pod, &t, ts("2026-12-07T10:00:40Z")).is_none());
        // In the back-off already: the message keeps the error, not a nested prefix.
        let again = waiting(
            PodBuilder::new()
                .image("registry.example.com/acme/app:1")
                .annotation(ANN_PULL_FAILURES, "3 2026-12-07T10:00:00Z"),
            reason::IMAGE_PULL_BACKOFF,
            &message,
        );
        let Some(Step::PullBackOff { message: kept, .. }) =
            backoff_remaining(&again, &t, ts("2026-12-07T10:00:20Z"))
        else {
            panic!("no back-off")
        };
        assert_eq!(kept, message);
    }
}
