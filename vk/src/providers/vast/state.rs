//! State translation: a listed Vast instance as an [`Observed`] workload, its status in the
//! framework's closed set of states.

use tracing::warn;

use super::ERROR_EXIT_CODE;
use super::wire::Instance;
use crate::naming::WorkloadId;
use crate::provider::{FailureReason, Observed, WorkloadState};
use crate::providers::{http, rest};

/// Translates one listed instance; `None` when its label is not a workload id.
pub(super) fn observe(provider: &str, inst: Instance) -> Option<Observed> {
    let id = WorkloadId::parse(inst.label.as_deref()?)?;
    let Some(provider_id) = inst
        .id
        .as_ref()
        .map(ToString::to_string)
        .filter(|s| !s.is_empty())
    else {
        warn!(provider, workload = %id, "listed instance has no id; ignoring it");
        return None;
    };
    let state = state_of(&inst);
    if let WorkloadState::Unknown { raw } = &state {
        warn!(provider, workload = %id, actual_status = %raw, "unknown Vast instance status");
    }
    let message = inst
        .status_msg
        .clone()
        .map(|m| http::truncate(m.trim()))
        .filter(|m| !m.is_empty());
    Some(Observed {
        id,
        provider_id,
        state,
        message,
        created_at: inst.start_date.and_then(rest::timestamp_from_epoch),
        started_at: None,
        finished_at: None,
        ip: inst
            .public_ipaddr
            .clone()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        provider_restarts: 0,
        usage: None,
    })
}

/// The instance state in the framework's closed set (mapping in the module docs).
fn state_of(inst: &Instance) -> WorkloadState {
    let actual = match &inst.actual_status {
        None | Some(serde_json::Value::Null) => "",
        Some(serde_json::Value::String(s)) => s.trim(),
        Some(other) => {
            return WorkloadState::Unknown {
                raw: other.to_string(),
            };
        }
    };
    let intended_running = inst
        .intended_status
        .as_deref()
        .is_none_or(|s| s == "running");
    let msg = inst
        .status_msg
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    match actual {
        "" | "null" => WorkloadState::Queued {
            reason: inst.status_msg.clone().filter(|s| !s.is_empty()),
        },
        "loading" | "created" => WorkloadState::Starting,
        "running" => WorkloadState::Running,
        "rebooting" | "frozen" => WorkloadState::NotReady {
            reason: actual.to_owned(),
        },
        "stopped" if intended_running && inst.is_bid == Some(true) => WorkloadState::Preempted,
        "stopped" if intended_running => WorkloadState::NotReady {
            reason: "stopped by the host".into(),
        },
        // We never stop instances: someone else did.
        "stopped" | "exited" if !intended_running => WorkloadState::Failed {
            exit_code: ERROR_EXIT_CODE,
            reason: FailureReason::Evicted,
        },
        "exited" if msg.contains("error") || msg.contains("fail") => WorkloadState::Failed {
            exit_code: ERROR_EXIT_CODE,
            reason: FailureReason::Error,
        },
        "exited" => WorkloadState::Succeeded,
        "offline" => WorkloadState::Lost,
        other => WorkloadState::Unknown {
            raw: other.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inst(v: serde_json::Value) -> Instance {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn states_map_to_the_closed_set() {
        let s = |v| state_of(&inst(v));
        assert_eq!(
            s(json!({"actual_status": null})),
            WorkloadState::Queued { reason: None }
        );
        assert_eq!(
            s(json!({"actual_status": "loading"})),
            WorkloadState::Starting
        );
        assert_eq!(
            s(json!({"actual_status": "running"})),
            WorkloadState::Running
        );
        assert_eq!(
            s(json!({"actual_status": "stopped", "intended_status": "running", "is_bid": true})),
            WorkloadState::Preempted
        );
        assert!(matches!(
            s(json!({"actual_status": "stopped", "intended_status": "running", "is_bid": false})),
            WorkloadState::NotReady { .. }
        ));
        assert_eq!(
            s(json!({"actual_status": "stopped", "intended_status": "stopped"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Evicted
            }
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "status_msg": "done"})),
            WorkloadState::Succeeded
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "intended_status": "stopped"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Evicted
            }
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "status_msg": "Error response from daemon"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Error
            }
        );
        assert_eq!(s(json!({"actual_status": "offline"})), WorkloadState::Lost);
        assert_eq!(
            s(json!({"actual_status": "unknown"})),
            WorkloadState::Unknown {
                raw: "unknown".into()
            }
        );
        assert_eq!(
            s(json!({"actual_status": "melting"})),
            WorkloadState::Unknown {
                raw: "melting".into()
            }
        );
        assert_eq!(
            s(json!({"actual_status": 7})),
            WorkloadState::Unknown { raw: "7".into() }
        );
    }
}
