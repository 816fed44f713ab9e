//! Unit tests of how the Kubernetes adapter reads remote pods as an API server, scheduler and
//! kubelet write them: states, evictions and deletions by others, foreign pods, provider ids,
//! the remote API's refusals, metrics and the CPU counter.

use super::super::adapter::{exit_code, parse_pod_metrics};
use super::super::api_error;
use super::super::state::{PodUsage, parse_provider_id};
use super::*;
use crate::provider::{FailureReason, ProviderError};
use crate::test_support::workload_id;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

#[test]
fn pending_pods_are_queued_until_bound_then_starting() {
    let unschedulable = remote(json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}));
    assert_eq!(
        state(&unschedulable),
        WorkloadState::Queued {
            reason: Some("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".into())
        }
    );
    assert_eq!(
        state(&remote(json!({"phase": "Pending"}))),
        WorkloadState::Queued { reason: None }
    );
    let mut creating = remote(json!({"phase": "Pending",
        "containerStatuses": container(json!({"waiting": {"reason": "ContainerCreating"}}), false)}));
    creating.spec.as_mut().unwrap().node_name = Some("gpu-1".into());
    assert_eq!(state(&creating), WorkloadState::Starting);
    let mut pulling = remote(json!({"phase": "Pending",
        "containerStatuses": container(json!({"waiting": {"reason": "ImagePullBackOff",
            "message": "Back-off pulling image \"nope:1\""}}), false)}));
    pulling.spec.as_mut().unwrap().node_name = Some("gpu-1".into());
    let o = observe(&owner(), &pulling, None, "nvidia.com/gpu", None).unwrap();
    assert_eq!(
        o.state,
        WorkloadState::Starting,
        "the start deadline applies"
    );
    assert_eq!(
        o.message.as_deref(),
        Some("ImagePullBackOff: Back-off pulling image \"nope:1\"")
    );
    // The remote kubelet's failed pull is reported as one, in its words.
    assert_eq!(
        o.pull_failure.as_deref(),
        Some("Back-off pulling image \"nope:1\"")
    );
    let o = observe(&owner(), &creating, None, "nvidia.com/gpu", None).unwrap();
    assert_eq!(
        o.pull_failure, None,
        "creating a container is no failed pull"
    );
}

#[test]
fn running_succeeded_and_failed_pods_translate_with_times_and_exit_codes() {
    let running = remote(json!({"phase": "Running", "podIP": "10.4.0.7",
        "containerStatuses": container(json!({"running": {"startedAt": "2026-11-29T10:00:07Z"}}), true)}));
    let o = observe(
        &owner(),
        &running,
        None,
        "nvidia.com/gpu",
        Some(PodUsage {
            cpu_millis: 250,
            memory_bytes: 1 << 20,
        }),
    )
    .unwrap();
    assert_eq!(o.state, WorkloadState::Running);
    assert_eq!(o.ip.as_deref(), Some("10.4.0.7"));
    assert_eq!(
        o.started_at,
        Some(crate::test_support::ts("2026-11-29T10:00:07Z"))
    );
    assert_eq!(
        o.created_at,
        Some(crate::test_support::ts("2026-11-29T10:00:00Z"))
    );
    assert_eq!(
        o.provider_id,
        format!(
            "gpu-offload/{}/0b9d1c1e-aaaa-4bbb-8ccc-0123456789ab",
            workload_id()
        )
    );
    let u = o.usage.unwrap();
    assert_eq!((u.cpu_millis, u.memory_bytes), (250, 1 << 20));
    assert!(u.cpu_usage_nanos > 0);

    let done = |code: i64, reason: &str| {
        remote(json!({"phase": if code == 0 {"Succeeded"} else {"Failed"},
            "containerStatuses": container(json!({"terminated": {"exitCode": code, "reason": reason,
                "startedAt": "2026-11-29T10:00:07Z", "finishedAt": "2026-11-29T10:05:00Z"}}), false)}))
    };
    let ok = observe(
        &owner(),
        &done(0, "Completed"),
        None,
        "nvidia.com/gpu",
        None,
    )
    .unwrap();
    assert_eq!(ok.state, WorkloadState::Succeeded);
    assert_eq!(
        ok.finished_at,
        Some(crate::test_support::ts("2026-11-29T10:05:00Z"))
    );
    assert_eq!(
        state(&done(3, "Error")),
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert_eq!(
        state(&done(137, "OOMKilled")),
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::OomKilled
        }
    );
}

#[test]
fn evictions_preemptions_and_deletions_by_others() {
    let evicted = remote(json!({"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory."}));
    let o = observe(&owner(), &evicted, None, "nvidia.com/gpu", None).unwrap();
    assert_eq!(
        o.state,
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted
        }
    );
    assert_eq!(
        o.message.as_deref(),
        Some("The node was low on resource: memory.")
    );

    let disrupted = |reason: &str| {
        remote_with(
            json!({"deletionTimestamp": "2026-11-29T10:06:00Z"}),
            json!({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": reason, "message": "Eviction API: evicting"}]}),
        )
    };
    assert_eq!(
        state(&disrupted("EvictionByEvictionAPI")),
        WorkloadState::Preempted
    );
    assert_eq!(
        state(&disrupted("PreemptionByScheduler")),
        WorkloadState::Preempted
    );
    assert_eq!(
        state(&disrupted("DeletionByTaintManager")),
        WorkloadState::Lost
    );
    assert_eq!(
        state(&disrupted("TerminationByKubelet")),
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted
        }
    );
    // Deleted with no disruption (our delete, or `kubectl delete`): not listed, so gone.
    let deleting = remote_with(
        json!({"deletionTimestamp": "2026-11-29T10:06:00Z"}),
        json!({"phase": "Running"}),
    );
    assert_eq!(
        observe(&owner(), &deleting, None, "nvidia.com/gpu", None),
        None
    );
}

#[test]
fn foreign_pods_are_ignored() {
    let other = crate::naming::Owner::new("c1", "another-node");
    let p = remote(json!({"phase": "Running"}));
    assert_eq!(observe(&other, &p, None, "nvidia.com/gpu", None), None);
    let mine_by_label_only =
        remote_with(json!({"name": "my-notebook"}), json!({"phase": "Running"}));
    assert_eq!(
        observe(&owner(), &mine_by_label_only, None, "nvidia.com/gpu", None),
        None
    );
}

#[test]
fn provider_ids_round_trip() {
    assert_eq!(
        parse_provider_id("ns/name/uid"),
        Some(("ns", "name", "uid"))
    );
    assert_eq!(parse_provider_id("ns/name"), Some(("ns", "name", "")));
    assert_eq!(parse_provider_id("name"), None);
    assert_eq!(parse_provider_id("/name/x"), None);
}

fn api(code: u16, reason: &str, message: &str) -> kube::Error {
    kube::Error::Api(Box::new(
        kube::core::Status::failure(message, reason).with_code(code),
    ))
}

#[test]
fn refusals_map_to_provider_error_kinds() {
    let quota = api(
        403,
        "Forbidden",
        "pods \"x\" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4",
    );
    assert!(
        matches!(api_error("create", quota), ProviderError::Capacity { message } if message.contains("exceeded quota"))
    );
    let rbac = api(
        403,
        "Forbidden",
        "pods is forbidden: User \"vk\" cannot create resource \"pods\"",
    );
    assert!(matches!(
        api_error("create", rbac),
        ProviderError::Auth { .. }
    ));
    assert!(matches!(
        api_error("create", api(401, "Unauthorized", "Unauthorized")),
        ProviderError::Auth { .. }
    ));
    assert!(matches!(
        api_error("create", api(422, "Invalid", "bad")),
        ProviderError::Invalid { .. }
    ));
    assert_eq!(
        api_error("delete", api(404, "NotFound", "gone")),
        ProviderError::NotFound
    );
    assert!(matches!(
        api_error("list", api(503, "ServiceUnavailable", "etcd")),
        ProviderError::Transient { .. }
    ));
}

#[test]
fn metrics_and_exec_status_are_read() {
    let m = parse_pod_metrics(&json!({"items": [{"metadata": {"name": "p1"},
        "containers": [{"name": "c", "usage": {"cpu": "250000000n", "memory": "2048Ki"}}]}]}));
    assert_eq!(
        m["p1"],
        PodUsage {
            cpu_millis: 250,
            memory_bytes: 2048 * 1024
        }
    );
    let ok: Status = serde_json::from_value(json!({"status": "Success"})).unwrap();
    assert_eq!(exit_code(Some(&ok)), Ok(0));
    let failed: Status = serde_json::from_value(json!({"status": "Failure",
        "message": "command terminated with non-zero exit code", "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}))
    .unwrap();
    assert_eq!(exit_code(Some(&failed)), Ok(3));
    assert!(exit_code(None).is_err());
}

#[test]
fn the_cpu_counter_integrates_the_metrics_rate_and_never_falls() {
    use crate::provider::Usage;
    use crate::test_support::ts;
    let started = ts("2026-11-29T10:00:00Z");
    let at = |millis: u64| {
        let mut o = crate::test_support::observed(WorkloadState::Running);
        o.started_at = Some(started);
        o.usage = Some(Usage {
            cpu_usage_nanos: 0,
            cpu_millis: millis,
            memory_bytes: 1,
            timestamp: started,
        });
        vec![o]
    };
    let nanos = |out: &[crate::provider::Observed]| out[0].usage.as_ref().unwrap().cpu_usage_nanos;
    let mut cpu = crate::providers::cpu::CpuCounters::default();
    let mut first = at(900);
    super::super::state::count_cpu(&mut cpu, &mut first, ts("2026-11-29T10:01:40Z"));
    assert_eq!(
        nanos(&first),
        900 * 100 * 1_000_000,
        "rate times uptime at first"
    );
    let mut later = at(50);
    super::super::state::count_cpu(&mut cpu, &mut later, ts("2026-11-29T10:01:55Z"));
    assert_eq!(
        nanos(&later),
        (900 * 100 + 50 * 15) * 1_000_000,
        "50m for the 15 s since, not 50m times the uptime"
    );
    // A pod gone from the list is forgotten; seen again, it starts over.
    super::super::state::count_cpu(&mut cpu, &mut [], ts("2026-11-29T10:02:00Z"));
    let mut back = at(50);
    super::super::state::count_cpu(&mut cpu, &mut back, ts("2026-11-29T10:02:10Z"));
    assert_eq!(nanos(&back), 50 * 130 * 1_000_000);
}
