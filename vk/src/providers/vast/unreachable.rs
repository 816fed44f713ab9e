//! Instances whose host Vast reports `offline` or `unknown`, and for how long: past the
//! provider's `unreachableDeadlineSeconds` such an instance is reported failed, so that the
//! framework destroys it and, by the pod's restart policy, rents another.
//!
//! Vast's docs say an instance whose status becomes `exited`, `unknown` or `offline` "will
//! never reach running ... Destroy the instance and retry with a different offer"
//! (vast-ai/docs `api-reference/hello-world.mdx`, and the spec's `info.description`), while an
//! outage of a running host may end ("Instance back online: your instance recovered after an
//! outage", `guides/reference/notifications.mdx`). Hence a deadline, not an immediate failure.
//! The clock is this process's: after a VK restart an outage is timed again from its first
//! sighting.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// When each unreachable instance (by id) was first seen so, without a sighting in between.
#[derive(Debug, Default)]
pub(super) struct Unreachable(HashMap<String, Instant>);

impl Unreachable {
    /// Records one sighting of instance `id` at `now`: how long it has been unreachable (zero
    /// at the first sighting), or `None` when it is reachable.
    pub(super) fn note(&mut self, id: &str, unreachable: bool, now: Instant) -> Option<Duration> {
        if !unreachable {
            self.0.remove(id);
            return None;
        }
        let since = *self.0.entry(id.to_owned()).or_insert(now);
        Some(now.saturating_duration_since(since))
    }

    /// Forgets instances no longer listed.
    pub(super) fn retain<'a>(&mut self, listed: impl IntoIterator<Item = &'a str>) {
        let listed: std::collections::HashSet<&str> = listed.into_iter().collect();
        self.0.retain(|id, _| listed.contains(id.as_str()));
    }
}

/// Whether `actual_status` says the host cannot be reached.
pub(super) fn is_unreachable(actual_status: Option<&serde_json::Value>) -> bool {
    matches!(
        actual_status
            .and_then(serde_json::Value::as_str)
            .map(str::trim),
        Some("offline" | "unknown")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_outage_is_timed_from_its_first_sighting_and_ends_with_any_other_status() {
        let t0 = Instant::now();
        let mut u = Unreachable::default();
        assert_eq!(u.note("1", true, t0), Some(Duration::ZERO));
        assert_eq!(
            u.note("1", true, t0 + Duration::from_secs(90)),
            Some(Duration::from_secs(90))
        );
        // Back online: the next outage starts from zero.
        assert_eq!(u.note("1", false, t0 + Duration::from_secs(100)), None);
        assert_eq!(
            u.note("1", true, t0 + Duration::from_secs(200)),
            Some(Duration::ZERO)
        );
        u.retain(["2"]);
        assert_eq!(
            u.note("1", true, t0 + Duration::from_secs(300)),
            Some(Duration::ZERO),
            "an instance no longer listed is forgotten"
        );
    }

    #[test]
    fn only_offline_and_unknown_are_unreachable() {
        for (s, want) in [
            (json!("offline"), true),
            (json!(" unknown "), true),
            (json!("running"), false),
            (json!("exited"), false),
            (json!(null), false),
            (json!(7), false),
        ] {
            assert_eq!(is_unreachable(Some(&s)), want, "{s}");
        }
        assert!(!is_unreachable(None));
    }
}
