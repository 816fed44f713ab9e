//! State translation: a listed Vast instance as an [`Observed`] workload, its status in the
//! framework's closed set of states.

use tracing::warn;

use super::ERROR_EXIT_CODE;
use super::wire::Instance;
use crate::naming::WorkloadId;
use std::collections::BTreeMap;

use crate::provider::{Endpoint, FailureReason, Observed, Price, Usage, WorkloadState};
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
    let usage = (state == WorkloadState::Running)
        .then(|| usage(&inst))
        .flatten();
    if let WorkloadState::Unknown { raw } = &state {
        warn!(provider, workload = %id, actual_status = %raw, "unknown Vast instance status");
    }
    let status = inst
        .status_msg
        .clone()
        .map(|m| http::truncate(m.trim()))
        .filter(|m| !m.is_empty());
    let pull_failure = pull_failure(&state, status.as_deref());
    let now = jiff::Timestamp::now().as_second() as f64;
    let message = match (&state, contract_note(&inst, now)) {
        // A running instance says when its contract ends (its status_msg says nothing a
        // user needs then, and would cost a status write each time it changes).
        (WorkloadState::Running, note) => note.map(|(_, text)| text),
        (_, Some((true, text))) => Some(match status {
            Some(s) => format!("{s}; {text}"),
            None => text,
        }),
        _ => status,
    };
    Some(Observed {
        id,
        provider_id,
        state,
        message,
        created_at: inst.start_date.and_then(rest::timestamp_from_epoch),
        started_at: None,
        finished_at: None,
        ports: published(&inst),
        ip: inst
            .public_ipaddr
            .clone()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        provider_restarts: 0,
        usage,
        // `dph_total`: what the instance costs per hour, GPU and storage (show-instances).
        price: inst.dph_total.and_then(Price::from_dollars),
        container_exits: Default::default(),
        pull_failure,
    })
}

/// The docker daemon's refusal of the image while the instance has not started: Vast shows
/// it in `status_msg` (vast-ai/vast-cli's own tests: "Error response from daemon: manifest for
/// ... not found", "pull access denied for private/image, repository does not exist or may
/// require authorization", "unauthorized: authentication required",
/// `tests/cli/test_runtime_diagnostics.py`, `tests/cli/test_machines_commands.py`).
fn pull_failure(state: &WorkloadState, status: Option<&str>) -> Option<String> {
    if !matches!(
        state,
        WorkloadState::Queued { .. } | WorkloadState::Starting
    ) {
        return None;
    }
    let msg = status?;
    let lower = msg.to_ascii_lowercase();
    let refused = lower.contains("pull access denied")
        || (lower.contains("manifest")
            && (lower.contains("not found") || lower.contains("unknown")))
        || lower.contains("unauthorized: authentication required")
        || lower.contains("no basic auth credentials")
        || lower.contains("error pulling image")
        // The daemon's refusal of an image larger than the container disk (moby's
        // "failed to register layer: ... no space left on device").
        || lower.contains("no space left on device");
    refused.then(|| msg.to_owned())
}

/// The rental contract's end (`end_date`), as (ended, sentence). "When the rental end date is
/// reached, the rental contract expires and the instance is stopped" (vast-ai/docs
/// `guides/reference/faq/instances.mdx`; the host may extend it). `None` without a date.
fn contract_note(inst: &Instance, now: f64) -> Option<(bool, String)> {
    let end = inst.end_date?;
    let at = rest::timestamp_from_epoch(end)?;
    Some(if end <= now {
        (
            true,
            format!(
                "the Vast rental contract ended at {at} (end_date): Vast stops the instance then"
            ),
        )
    } else {
        (
            false,
            format!(
                "the Vast rental contract ends at {at} (end_date): Vast stops the instance then, unless the host extends it"
            ),
        )
    })
}

/// The internal TCP ports of a running instance and where each is published: the external
/// port of its `ports` map at `public_ipaddr` (not the map's `HostIp`, which is the bind
/// address on the machine, `0.0.0.0`). Entries that do not parse are left out.
fn published(inst: &Instance) -> BTreeMap<u16, Endpoint> {
    let Some(host) = inst
        .public_ipaddr
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
    else {
        return BTreeMap::new();
    };
    let port = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.trim().parse::<u16>().ok(),
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        _ => None,
    };
    inst.ports
        .iter()
        .flatten()
        .filter_map(|(key, bindings)| {
            let internal: u16 = key.strip_suffix("/tcp")?.parse().ok()?;
            let external = bindings
                .as_array()?
                .iter()
                .find_map(|b| port(b.get("HostPort")?))?;
            (external != 0).then(|| {
                let e = Endpoint {
                    host: host.to_owned(),
                    port: external,
                };
                (internal, e)
            })
        })
        .collect()
}

/// Usage from the instance's `cpu_util` and `mem_usage`; `None` when Vast reports neither.
///
/// Units (vast-ai/docs `api-reference/openapi/yaml/show_instances.yaml` gives examples, not
/// units): `mem_usage` and `mem_limit` are GB (the example `mem_limit` 15.7 beside `cpu_ram`
/// 15989 MB); `cpu_util` is taken as percent of one core, as `docker stats` reports it (so
/// 250 is 2.5 cores); `gpu_util` is percent (vast-cli prints it under "Util. %"), and has no
/// place in the kubelet's CPU/memory summary. Cumulative CPU time is estimated as the current
/// rate over `uptime_mins`, as for RunPod.
fn usage(inst: &Instance) -> Option<Usage> {
    if inst.cpu_util.is_none() && inst.mem_usage.is_none() {
        return None;
    }
    let finite = |v: Option<f64>| v.filter(|x| x.is_finite()).unwrap_or(0.0).max(0.0);
    // A figure no counter can hold is no figure: the usage is unknown.
    let cpu_millis = rest::usage_figure(finite(inst.cpu_util) * 10.0)?;
    let memory_bytes = rest::usage_figure(finite(inst.mem_usage) * 1e9)?;
    let uptime_s = finite(inst.uptime_mins) * 60.0;
    Some(Usage {
        cpu_usage_nanos: rest::usage_figure(cpu_millis as f64 * uptime_s * 1_000_000.0)?,
        cpu_millis,
        memory_bytes,
        timestamp: jiff::Timestamp::now(),
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
        // The host is disconnected (`offline`) or silent (`unknown`): Vast notifies "Instance
        // back online: your instance recovered after an outage. Pairs with Instance offline"
        // (vast-ai/docs `guides/reference/notifications.mdx`), and `offline` is "computed, not
        // stored" (`cli/reference/show-instances.mdx`): the workload is not lost, the pod stays
        // Running with Ready=False until the host returns (or is deleted by the user).
        "offline" => WorkloadState::NotReady {
            reason: "host offline (disconnected from Vast)".into(),
        },
        "unknown" => WorkloadState::NotReady {
            reason: "host unknown (no recent heartbeat)".into(),
        },
        other => WorkloadState::Unknown {
            raw: other.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_or_unfitting_pull_of_a_loading_instance_is_a_pull_failure() {
        let starting = WorkloadState::Starting;
        for msg in [
            "Error response from daemon: pull access denied for private/image, repository does not exist or may require authorization",
            "Error response from daemon: manifest for vastai/test:x not found",
            "failed to register layer: write /var/lib/docker/overlay2: no space left on device",
        ] {
            assert_eq!(pull_failure(&starting, Some(msg)).as_deref(), Some(msg));
        }
        assert_eq!(pull_failure(&starting, Some("Pulling image busybox")), None);
        assert_eq!(
            pull_failure(&WorkloadState::Running, Some("pull access denied")),
            None,
            "a running instance pulled"
        );
    }
    use serde_json::json;

    #[test]
    fn usage_figures_no_counter_can_hold_make_the_usage_unknown() {
        // Found by fuzzing (providers::vast::fuzz): 18446744074 GB saturated to u64::MAX bytes.
        let huge = inst(json!({"actual_status": "running", "mem_usage": 18_446_744_074.0}));
        assert!(usage(&huge).is_none());
        let long =
            inst(json!({"actual_status": "running", "cpu_util": 100.0, "uptime_mins": 1e300}));
        assert!(usage(&long).is_none());
    }

    #[test]
    fn running_instances_report_usage_in_kubelet_units() {
        let u = usage(&inst(json!({"actual_status": "running", "cpu_util": 250.0,
                                   "mem_usage": 1.5, "mem_limit": 32.0, "uptime_mins": 2.0})))
        .expect("usage");
        assert_eq!(u.cpu_millis, 2500);
        assert_eq!(u.memory_bytes, 1_500_000_000);
        assert_eq!(u.cpu_usage_nanos, 2500 * 120 * 1_000_000);
        let loading = inst(json!({"actual_status": "loading", "cpu_util": 5.0}));
        assert_eq!(state_of(&loading), WorkloadState::Starting);
        assert!(usage(&inst(json!({"actual_status": "running"}))).is_none());
    }

    #[test]
    fn published_ports_are_the_external_ports_at_the_public_address() {
        let i = inst(
            json!({"actual_status": "running", "public_ipaddr": " 203.0.113.9 ",
            "ports": {"8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "33526"}],
                      "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": 41022}],
                      "8082/udp": [{"HostIp": "0.0.0.0", "HostPort": "33527"}],
                      "9090/tcp": [], "bad/tcp": [{"HostPort": "1"}], "7000/tcp": [{"HostPort": "x"}]}}),
        );
        let p = published(&i);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[&8080].to_string(), "203.0.113.9:33526");
        assert_eq!(p[&22].to_string(), "203.0.113.9:41022");
        // No public address, or a map of another type: nothing published.
        assert!(published(&inst(json!({"ports": {"8080/tcp": [{"HostPort": "1"}]}}))).is_empty());
        assert!(published(&inst(json!({"public_ipaddr": "1.2.3.4", "ports": "8080"}))).is_empty());
    }

    fn inst(v: serde_json::Value) -> Instance {
        serde_json::from_value(v).unwrap()
    }

    /// The rental contract's end is on a running instance's pod before Vast stops it, and on
    /// the stopped instance's after; without an `end_date`, a running instance says nothing
    /// (its `status_msg` is not shown while it runs).
    #[test]
    fn the_rental_contracts_end_is_said_before_and_after_it_stops_the_instance() {
        let label = crate::test_support::workload().id.as_str().to_owned();
        let now = jiff::Timestamp::now().as_second() as f64;
        let obs = |v: serde_json::Value| {
            let mut v = v;
            v["id"] = json!(7);
            v["label"] = json!(label);
            observe("vast", inst(v)).unwrap()
        };
        let running = obs(
            json!({"actual_status": "running", "status_msg": "success, running x",
                                 "end_date": 2_000_000_000.0}),
        );
        assert_eq!(running.state, WorkloadState::Running);
        assert_eq!(
            running.message.as_deref(),
            Some(
                "the Vast rental contract ends at 2033-05-18T03:33:20Z (end_date): Vast stops the instance then, unless the host extends it"
            )
        );
        let quiet = obs(json!({"actual_status": "running", "status_msg": "success, running x"}));
        assert_eq!(quiet.message, None);
        let ended = obs(
            json!({"actual_status": "stopped", "intended_status": "running",
                               "status_msg": "stopped", "end_date": now - 60.0}),
        );
        assert!(matches!(ended.state, WorkloadState::NotReady { .. }));
        let m = ended.message.unwrap();
        assert!(
            m.starts_with("stopped; the Vast rental contract ended at "),
            "{m}"
        );
        let loading = obs(json!({"actual_status": "loading", "status_msg": "pulling",
                                 "end_date": 2_000_000_000.0}));
        assert_eq!(loading.message.as_deref(), Some("pulling"));
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
        assert!(matches!(
            s(json!({"actual_status": "offline"})),
            WorkloadState::NotReady { reason } if reason.contains("offline")
        ));
        assert!(matches!(
            s(json!({"actual_status": "unknown"})),
            WorkloadState::NotReady { reason } if reason.contains("heartbeat")
        ));
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
