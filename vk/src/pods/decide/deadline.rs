//! The start deadline: when a workload that never ran is given up on.

use super::*;

/// How long until the start deadline of a workload still queued or starting is due: the
/// pipeline looks at the pod again then, since a workload stuck starting changes nothing a
/// list would report.
pub fn start_deadline_due_in(
    rules: &Rules<'_>,
    pod: &Pod,
    f: Found<'_>,
    now: Timestamp,
) -> Option<Duration> {
    if !matches!(
        f.observed.state,
        WorkloadState::Queued { .. } | WorkloadState::Starting
    ) {
        return None;
    }
    let deadline = start_deadline(rules, pod, f).ok()??;
    let created = f.observed.created_at?;
    // Checked: a deadline near the largest duration, with a creation time the provider puts
    // in the future (clock skew), would overflow; such a deadline is never due.
    let left = deadline.checked_sub(now.duration_since(created))?;
    Some(
        Duration::try_from(left)
            .unwrap_or_default()
            .max(Duration::from_millis(100)),
    )
}

/// The start deadline of the pod's workload at its provider: the pod's own
/// (`gpu-vk.io/start-deadline-seconds`, up to the provider's ceiling) or the provider's.
pub(super) fn start_deadline(
    rules: &Rules<'_>,
    pod: &Pod,
    f: Found<'_>,
) -> Result<Option<jiff::SignedDuration>, String> {
    let d = rules
        .start_deadlines
        .get(f.provider)
        .copied()
        .unwrap_or_default();
    let asked = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(spec::ANN_START_DEADLINE))
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    let chosen = match (asked, d.max) {
        (Some(a), Some(max)) if a > max => {
            return Err(format!(
                "annotation {} asks for {}s, more than the {}s this provider allows",
                spec::ANN_START_DEADLINE,
                a.as_secs(),
                max.as_secs()
            ));
        }
        (Some(a), _) => Some(a),
        (None, _) => d.default,
    };
    Ok(chosen.and_then(|c| jiff::SignedDuration::try_from(c).ok()))
}

/// The workload is still queued or starting `deadline` after it was created: delete it and
/// create the pod's workload again while the provider's `startAttempts` allow (the pod never
/// ran, and a start that never completes is most often its host's), else fail the pod.
pub(super) fn past_deadline(
    rules: &Rules<'_>,
    pod: &Pod,
    f: Found<'_>,
    deadline: jiff::SignedDuration,
) -> Step {
    let obs = f.observed;
    let provider = rules
        .offers
        .get(f.provider)
        .map(|o| o.name.as_str())
        .unwrap_or_default();
    let state = match &obs.state {
        WorkloadState::Queued { .. } => "queued",
        _ => "starting",
    };
    let detail = obs
        .message
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    let stuck = format!(
        "the workload was still {state} at provider {provider}{detail} {}s after it was created \
         (start deadline; an image that never pulls looks like this)",
        deadline.as_secs()
    );
    let allowed = rules
        .start_deadlines
        .get(f.provider)
        .map_or(1, |d| d.attempts.max(1));
    let attempt = start_attempts(pod) + 1;
    if attempt < allowed {
        return Step::RetryStart {
            provider: f.provider,
            attempt,
            message: format!(
                "{stuck}; it is deleted and the pod's workload created again (attempt {} of {allowed})",
                attempt + 1
            ),
        };
    }
    let tried = if allowed > 1 {
        format!(", the last of {allowed} attempts")
    } else {
        String::new()
    };
    fail(
        reason::START_DEADLINE_EXCEEDED,
        format!("{stuck}{tried}; it is deleted"),
    )
}

/// How many of the pod's workloads were given up at the start deadline so far.
pub fn start_attempts(pod: &Pod) -> u32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(spec::ANN_START_ATTEMPTS))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether the workload was seen still starting after its deadline: the provider's last list
/// answered after `created_at + deadline` (`list_age` ago; `None`: no list to go by, the
/// observation is taken as it is).
pub(super) fn seen_past(
    obs: &Observed,
    deadline: jiff::SignedDuration,
    list_age: Option<Duration>,
    now: Timestamp,
) -> bool {
    let (Some(created), Some(age)) = (obs.created_at, list_age) else {
        return true;
    };
    let Ok(age) = jiff::SignedDuration::try_from(age) else {
        return false;
    };
    now.duration_since(created) - age >= deadline
}
