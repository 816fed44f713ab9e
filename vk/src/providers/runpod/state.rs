//! State translation: a listed RunPod pod as an [`Observed`] workload, with its state in the
//! framework's closed set and its usage.

use jiff::Timestamp;
use tracing::warn;

use super::wire::Pod;
use super::{ERROR_EXIT_CODE, GB};
use crate::naming::WorkloadId;
use crate::provider::{FailureReason, Observed, Usage, WorkloadState};

/// Translates one listed pod; `None` when it is not one of ours (any VK's) or is terminated.
pub(super) fn observe(provider: &str, pod: Pod) -> Option<Observed> {
    let id = WorkloadId::parse(pod.name.as_deref()?)?;
    let Some(provider_id) = pod.id.clone().filter(|s| !s.is_empty()) else {
        warn!(provider, workload = %id, "listed pod has no id; ignoring it");
        return None;
    };
    let raw = match &pod.status {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let (state, message) = match raw.as_str() {
        "PROVISIONING" => (WorkloadState::Queued { reason: None }, None),
        "STARTING" => (WorkloadState::Starting, None),
        "RUNNING" => (WorkloadState::Running, None),
        "EXITED" => (WorkloadState::Succeeded, None),
        "ERROR" => (
            WorkloadState::Failed {
                exit_code: ERROR_EXIT_CODE,
                reason: FailureReason::ProviderError,
            },
            Some("RunPod reports the container in an unrecoverable error state".to_owned()),
        ),
        "TERMINATED" => return None,
        _ => {
            warn!(provider, workload = %id, status = %raw, "unknown RunPod pod status");
            (
                WorkloadState::Unknown { raw: raw.clone() },
                Some(format!("RunPod status {raw:?}")),
            )
        }
    };
    let parse_ts = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<Timestamp>().ok());
    let ip = pod
        .global_networking
        .as_ref()
        .filter(|g| g.enabled == Some(true))
        .and_then(|g| g.ip.clone())
        .or_else(|| {
            pod.runtime
                .as_ref()?
                .ports
                .as_ref()?
                .iter()
                .find_map(|p| p.ip.clone().filter(|s| !s.is_empty()))
        });
    let usage = if raw == "RUNNING" { usage(&pod) } else { None };
    Some(Observed {
        id,
        provider_id,
        state,
        message,
        created_at: parse_ts(&pod.created_at),
        started_at: parse_ts(&pod.started_at),
        finished_at: None,
        ip,
        provider_restarts: 0,
        usage,
    })
}

/// Usage from the `runtime` block; `None` when RunPod reports no utilisation.
fn usage(pod: &Pod) -> Option<Usage> {
    let rt = pod.runtime.as_ref()?;
    let compute = pod.gpu.as_ref().or(pod.cpu.as_ref());
    let cpu_util = rt.cpu.as_ref().and_then(|u| u.util);
    let mem_util = rt.memory.as_ref().and_then(|u| u.util);
    if cpu_util.is_none() && mem_util.is_none() {
        return None;
    }
    let vcpus = compute.and_then(|c| c.vcpu_count).unwrap_or(0.0).max(0.0);
    let mem_gb = compute.and_then(|c| c.memory).unwrap_or(0.0).max(0.0);
    let pct = |u: Option<f64>| u.unwrap_or(0.0).clamp(0.0, 100.0) / 100.0;
    let cpu_millis = (pct(cpu_util) * vcpus * 1000.0).round() as u64;
    let memory_bytes = (pct(mem_util) * mem_gb * GB).round() as u64;
    let uptime = rt.uptime.unwrap_or(0.0).max(0.0);
    Some(Usage {
        cpu_usage_nanos: (cpu_millis as f64 * uptime * 1_000_000.0).round() as u64,
        cpu_millis,
        memory_bytes,
        timestamp: Timestamp::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME: &str = "vk-0123abcd-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn states_map_to_the_closed_set() {
        let cases = [
            ("PROVISIONING", Some(WorkloadState::Queued { reason: None })),
            ("STARTING", Some(WorkloadState::Starting)),
            ("RUNNING", Some(WorkloadState::Running)),
            ("EXITED", Some(WorkloadState::Succeeded)),
            (
                "ERROR",
                Some(WorkloadState::Failed {
                    exit_code: 1,
                    reason: FailureReason::ProviderError,
                }),
            ),
            ("TERMINATED", None),
            (
                "HIBERNATING",
                Some(WorkloadState::Unknown {
                    raw: "HIBERNATING".into(),
                }),
            ),
        ];
        for (status, want) in cases {
            let got = observe(
                "rp",
                pod(json!({"id": "p1", "name": NAME, "status": status})),
            );
            assert_eq!(got.map(|o| o.state), want, "{status}");
        }
    }

    #[test]
    fn odd_fields_do_not_break_an_item() {
        let o = observe(
            "rp",
            pod(
                json!({"id": "p1", "name": NAME, "status": "RUNNING", "runtime": "weird",
                       "createdAt": 5, "gpu": {"vcpuCount": "many"}}),
            ),
        )
        .unwrap();
        assert_eq!(o.state, WorkloadState::Running);
        assert_eq!(o.usage, None);
        assert_eq!(o.created_at, None);
    }

    #[test]
    fn usage_from_runtime() {
        let p = pod(json!({"id": "p1", "name": NAME, "status": "RUNNING",
            "gpu": {"id": "x", "count": 1, "vcpuCount": 8, "memory": 32},
            "runtime": {"uptime": 10, "cpu": {"util": 50}, "memory": {"util": 25}}}));
        let u = usage(&p).unwrap();
        assert_eq!(u.cpu_millis, 4000);
        assert_eq!(u.memory_bytes, 8_000_000_000);
        assert_eq!(u.cpu_usage_nanos, 40_000_000_000);
        assert!(usage(&pod(json!({"runtime": {}}))).is_none());
    }
}
