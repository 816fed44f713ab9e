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
