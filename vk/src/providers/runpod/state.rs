//! State translation: a listed RunPod pod as an [`Observed`] workload, with its state in the
//! framework's closed set and its usage.

use jiff::Timestamp;
use tracing::warn;

use super::wire::{Pod, PodCompute, RuntimePort};
use super::{ERROR_EXIT_CODE, GB, RunPodConfig, UnknownExit};
use crate::naming::WorkloadId;
use crate::provider::{FailureReason, Observed, Price, Usage, WorkloadState};

/// Exit code assumed for an exit reported as failed (RunPod exposes none).
const ASSUMED_FAILURE_EXIT_CODE: i32 = 1;
/// Exit code reported for a pod stopped outside the VK (its container was killed).
const STOPPED_EXIT_CODE: i32 = 137;

/// Translates one listed pod; `None` when it is not one of ours (any VK's) or is terminated.
/// `exited`: its container exited and RunPod restarted it in place (see `super::exits`).
/// `cfg` says how an exit ends the pod and what a GPU pod gets per GPU.
pub(super) fn observe(
    provider: &str,
    pod: Pod,
    exited: bool,
    cfg: &RunPodConfig,
) -> Option<Observed> {
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
        "RUNNING" if exited => {
            let state = match cfg.unknown_exit_as {
                UnknownExit::Succeeded => WorkloadState::Succeeded,
                UnknownExit::Failed => WorkloadState::Failed {
                    exit_code: ASSUMED_FAILURE_EXIT_CODE,
                    reason: FailureReason::Error,
                },
            };
            (state, Some(EXIT_MESSAGE.to_owned()))
        }
        "RUNNING" => (WorkloadState::Running, None),
        // EXITED follows a stop (the VK never stops, it terminates): a user, host
        // maintenance or a balance at $0 (PodStatus: "container exited (stopped)"; the
        // `stop` action moves a pod to EXITED). Not a completion.
        "EXITED" => (
            WorkloadState::Failed {
                exit_code: STOPPED_EXIT_CODE,
                reason: FailureReason::Evicted,
            },
            Some(STOPPED_MESSAGE.to_owned()),
        ),
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
    let ip = public_ip(&pod);
    let usage = if raw == "RUNNING" {
        usage(&pod, cfg)
    } else {
        None
    };
    let ports = if raw == "RUNNING" {
        direct_ports(&pod)
    } else {
        Default::default()
    };
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
        ports,
        usage,
        price: pod.cost.and_then(Price::from_dollars),
        container_exits: Default::default(),
        pull_failure: None,
    })
}

const EXIT_MESSAGE: &str = "the container exited and RunPod restarted it in place; RunPod \
     reports no exit code, so the code shown is assumed (provider setting unknownExitAs)";
const STOPPED_MESSAGE: &str = "RunPod stopped the pod (EXITED) without the virtual kubelet \
     asking: a stop by a user, host maintenance or an account balance at $0";

/// The pod's public IP: the `ip` of its directly published (`tcp`) ports, the machine's public
/// address (v2 `PodRuntimePort.ip`, "45.23.12.1"). Not `globalNetworking.ip`: that private
/// address is reachable only from other RunPod pods of the account. A pod with no tcp port has
/// no address the cluster can reach (the provider's `podIpFallback` applies).
fn public_ip(pod: &Pod) -> Option<String> {
    tcp_ports(pod).find_map(|p| p.ip.clone().filter(|s| !s.trim().is_empty()))
}

/// The pod's directly published ports (`runtime.ports[]` of type `tcp`).
fn tcp_ports(pod: &Pod) -> impl Iterator<Item = &RuntimePort> {
    pod.runtime
        .as_ref()
        .and_then(|r| r.ports.as_ref())
        .into_iter()
        .flatten()
        .filter(|p| {
            p.kind
                .as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case("tcp"))
        })
}

/// The container ports RunPod publishes directly (`runtime.ports[]` of type `tcp` with an `ip`
/// and a `public` port): the VK reaches them there. `http` ports go through RunPod's HTTPS
/// proxy and are not listed (probes of them are reported as not evaluable).
fn direct_ports(pod: &Pod) -> std::collections::BTreeMap<u16, crate::provider::Endpoint> {
    tcp_ports(pod)
        .filter_map(|p| {
            let host = p.ip.clone().filter(|s| !s.is_empty())?;
            Some((
                p.private?,
                crate::provider::Endpoint {
                    host,
                    port: p.public?,
                },
            ))
        })
        .collect()
}

/// Usage from the `runtime` block; `None` (unknown, not 0) when RunPod reports no utilisation
/// or the pod's vCPUs and RAM are not known (see [`allocated`]).
fn usage(pod: &Pod, cfg: &RunPodConfig) -> Option<Usage> {
    let rt = pod.runtime.as_ref()?;
    let cpu_util = rt.cpu.as_ref().and_then(|u| u.util);
    let mem_util = rt.memory.as_ref().and_then(|u| u.util);
    if cpu_util.is_none() && mem_util.is_none() {
        return None;
    }
    let (vcpus, mem_gb) = allocated(pod, cfg)?;
    let pct = |u: Option<f64>| u.unwrap_or(0.0).clamp(0.0, 100.0) / 100.0;
    // A figure no counter can hold is no figure: the usage is unknown.
    let figure = crate::providers::rest::usage_figure;
    let cpu_millis = figure(pct(cpu_util) * vcpus * 1000.0)?;
    let memory_bytes = figure(pct(mem_util) * mem_gb * GB)?;
    let uptime = rt.uptime.unwrap_or(0.0).max(0.0);
    Some(Usage {
        cpu_usage_nanos: figure(cpu_millis as f64 * uptime * 1_000_000.0)?,
        cpu_millis,
        memory_bytes,
        timestamp: Timestamp::now(),
    })
}

/// The pod's vCPUs and system RAM (GB), which the utilisation percentages are of. A CPU pod's
/// `cpu` block gives them; a GPU pod's `gpu` block is `{id, count}` only, so they come from the
/// operator's per-GPU figures (`gpuPodResources`) times the count, or are unknown.
fn allocated(pod: &Pod, cfg: &RunPodConfig) -> Option<(f64, f64)> {
    let given = |c: &PodCompute| Some((c.vcpu_count?.max(0.0), c.memory?.max(0.0)));
    if let Some(cpu) = pod.cpu.as_ref() {
        return given(cpu);
    }
    let gpu = pod.gpu.as_ref()?;
    let per = cfg.per_gpu(gpu.id.as_deref()?)?;
    let n = gpu.count.unwrap_or(1.0).max(1.0);
    Some((f64::from(per.vcpus) * n, f64::from(per.memory_gb) * n))
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
            (
                "EXITED",
                Some(WorkloadState::Failed {
                    exit_code: 137,
                    reason: FailureReason::Evicted,
                }),
            ),
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
                false,
                &RunPodConfig::default(),
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
            false,
            &RunPodConfig::default(),
        )
        .unwrap();
        assert_eq!(o.state, WorkloadState::Running);
        assert_eq!(o.usage, None);
        assert_eq!(o.created_at, None);
    }

    #[test]
    fn a_running_pod_whose_container_exited_ends_as_configured() {
        let running = || pod(json!({"id": "p1", "name": NAME, "status": "RUNNING"}));
        let failed = RunPodConfig {
            unknown_exit_as: UnknownExit::Failed,
            ..RunPodConfig::default()
        };
        let o = observe("rp", running(), true, &RunPodConfig::default()).unwrap();
        assert_eq!(o.state, WorkloadState::Succeeded);
        assert!(o.message.unwrap().contains("no exit code"));
        let o = observe("rp", running(), true, &failed).unwrap();
        assert_eq!(
            o.state,
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Error
            }
        );
        let stopped = pod(json!({"id": "p1", "name": NAME, "status": "EXITED"}));
        let o = observe("rp", stopped, false, &RunPodConfig::default()).unwrap();
        assert!(o.message.unwrap().contains("without the virtual kubelet"));
    }

    #[test]
    fn direct_tcp_mappings_become_endpoints() {
        let p = json!({"id": "p1", "name": NAME, "status": "RUNNING", "runtime": {"ports": [
            {"private": 8080, "public": 43210, "type": "tcp", "ip": "203.0.113.7"},
            {"private": 8888, "public": null, "type": "http", "ip": null},
            {"private": 9000, "public": null, "type": "tcp", "ip": "203.0.113.7"},
        ]}});
        let o = observe("rp", pod(p.clone()), false, &RunPodConfig::default()).unwrap();
        assert_eq!(o.ports.len(), 1);
        assert_eq!(o.ports[&8080].to_string(), "203.0.113.7:43210");
        assert_eq!(
            o.ip.as_deref(),
            Some("203.0.113.7"),
            "the public IP is the pod's"
        );
        let mut stopped = p;
        stopped["status"] = json!("EXITED");
        let o = observe("rp", pod(stopped), false, &RunPodConfig::default()).unwrap();
        assert!(o.ports.is_empty());
    }

    #[test]
    fn a_pod_with_only_a_global_networking_address_has_none_the_cluster_reaches() {
        let p = json!({"id": "p1", "name": NAME, "status": "RUNNING",
            "globalNetworking": {"enabled": true, "ip": "10.65.1.42"},
            "runtime": {"ports": [{"private": 8888, "public": null, "type": "http", "ip": null}]}});
        let o = observe("rp", pod(p), false, &RunPodConfig::default()).unwrap();
        assert_eq!(o.ip, None);
    }

    #[test]
    fn usage_of_a_cpu_pod_from_its_cpu_block() {
        let p = pod(json!({"id": "p1", "name": NAME, "status": "RUNNING",
            "cpu": {"id": "cpu3c", "vcpuCount": 8, "memory": 32},
            "runtime": {"uptime": 10, "cpu": {"util": 50}, "memory": {"util": 25}}}));
        let u = usage(&p, &RunPodConfig::default()).unwrap();
        assert_eq!(u.cpu_millis, 4000);
        assert_eq!(u.memory_bytes, 8_000_000_000);
        assert_eq!(u.cpu_usage_nanos, 40_000_000_000);
        assert!(usage(&pod(json!({"runtime": {}})), &RunPodConfig::default()).is_none());
    }

    /// v2's `Pod.gpu` is `{id, count}`: a GPU pod's usage is unknown (never 0) unless the
    /// operator gave its type's per-GPU vCPUs and RAM, under the RunPod id or the neutral name.
    #[test]
    fn usage_of_a_gpu_pod_is_unknown_unless_its_type_is_configured() {
        let v = json!({"id": "p1", "name": NAME, "status": "RUNNING",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 2},
            "runtime": {"uptime": 10, "cpu": {"util": 50}, "memory": {"util": 25}}});
        let p = pod(v.clone());
        assert_eq!(usage(&p, &RunPodConfig::default()), None);
        let o = observe("rp", pod(v), false, &RunPodConfig::default()).unwrap();
        assert_eq!(o.usage, None, "unknown, not 0");
        for key in ["NVIDIA GeForce RTX 4090", "RTX4090"] {
            let cfg: RunPodConfig = serde_json::from_value(json!({
                "gpuIds": {"RTX4090": "NVIDIA GeForce RTX 4090"},
                "gpuPodResources": {key: {"vcpus": 6, "memoryGb": 40}}
            }))
            .unwrap();
            let u = usage(&p, &cfg).unwrap();
            assert_eq!(u.cpu_millis, 6000, "{key}: 50% of 2 x 6 vCPUs");
            assert_eq!(u.memory_bytes, 20_000_000_000, "{key}: 25% of 2 x 40 GB");
        }
        let other: RunPodConfig = serde_json::from_value(json!({
            "gpuPodResources": {"NVIDIA A100 80GB PCIe": {"vcpus": 8, "memoryGb": 117}}
        }))
        .unwrap();
        assert_eq!(
            usage(&p, &other),
            None,
            "another type's figures do not apply"
        );
    }
}
