//! Unit tests of the Kubernetes adapter: the remote pod it creates and how it reads remote
//! pods as an API server, scheduler and kubelet write them.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde_json::{Value, json};

use super::adapter::{exit_code, parse_pod_metrics};
use super::spec::{LABEL_OWNER, env_secret, remote_pod, selector};
use super::state::{PodUsage, observe, parse_provider_id};
use super::{KubernetesConfig, api_error};
use crate::provider::{FailureReason, ProviderError, Workload, WorkloadState};
use crate::test_support::{owner, workload, workload_id};

fn cfg() -> KubernetesConfig {
    KubernetesConfig {
        namespace: "gpu-offload".into(),
        namespace_mapping: [("team-a".to_owned(), "remote-a".to_owned())].into(),
        gpu_types: [("RTX4090".to_owned(), "NVIDIA-GeForce-RTX-4090".to_owned())].into(),
        node_selector: [("pool".to_owned(), "gpu".to_owned())].into(),
        ..KubernetesConfig::default()
    }
}

/// A remote pod of ours with the given status (and metadata merged over the defaults).
fn remote(status: Value) -> Pod {
    remote_with(json!({}), status)
}

fn remote_with(meta: Value, status: Value) -> Pod {
    let mut metadata = json!({
        "name": workload_id().as_str(), "namespace": "gpu-offload",
        "uid": "0b9d1c1e-aaaa-4bbb-8ccc-0123456789ab",
        "creationTimestamp": "2026-11-29T10:00:00Z",
        "labels": {LABEL_OWNER: owner().tag()},
    });
    if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {"containers": [{"name": "trainer", "image": "img",
                  "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": status,
    }))
    .unwrap()
}

fn state(p: &Pod) -> WorkloadState {
    observe(&owner(), p, None, "nvidia.com/gpu", None)
        .unwrap()
        .state
}

fn container(state: Value, ready: bool) -> Value {
    json!([{"name": "trainer", "image": "img", "imageID": "", "ready": ready,
            "restartCount": 0, "state": state}])
}

#[test]
fn the_remote_pod_copies_the_container_and_carries_the_owner() {
    let mut w = workload();
    w.args = vec!["--epochs".into(), "3".into()];
    w.working_dir = Some("/work".into());
    w.cpu_millis = Some(1500);
    w.memory_bytes = Some(2 * 1024 * 1024 * 1024);
    w.ports = vec![8080];
    let p = remote_pod(&cfg(), &owner(), &w).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["metadata"]["name"], workload_id().as_str());
    assert_eq!(v["metadata"]["namespace"], "gpu-offload");
    assert_eq!(v["metadata"]["labels"][LABEL_OWNER], owner().tag());
    assert_eq!(v["metadata"]["labels"]["gpu-vk.io/pod-uid"], w.id.pod_uid());
    assert_eq!(
        v["metadata"]["annotations"]["offload.gpu-vk.io/source-pod"],
        "research/train-0"
    );
    assert_eq!(
        v["metadata"]["annotations"]["offload.gpu-vk.io/node"],
        "vk-gpu"
    );
    let spec = &v["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec.get("nodeName"), None);
    assert_eq!(spec.get("tolerations"), None);
    assert_eq!(
        spec["nodeSelector"],
        json!({"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"})
    );
    let c = &spec["containers"][0];
    assert_eq!(c["name"], "trainer");
    assert_eq!(c["image"], "ghcr.io/acme/train:1");
    assert_eq!(c["command"], json!(["python", "-m", "train"]));
    assert_eq!(c["args"], json!(["--epochs", "3"]));
    assert_eq!(c["workingDir"], "/work");
    // Values stay out of the pod spec: each variable reads the workload's own Secret.
    assert_eq!(
        c["env"],
        json!([{"name": "MODE", "valueFrom": {"secretKeyRef": {
            "name": w.id.as_str(), "key": "MODE", "optional": false}}}])
    );
    let secret = serde_json::to_value(env_secret(&cfg(), &owner(), &w, "uid-1").unwrap()).unwrap();
    assert_eq!(secret["metadata"]["name"], w.id.as_str());
    assert_eq!(
        secret["metadata"]["namespace"],
        p.metadata.namespace.clone().unwrap()
    );
    assert_eq!(secret["stringData"], json!({"MODE": "fast"}));
    assert_eq!(
        secret["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": w.id.as_str(), "uid": "uid-1"}])
    );
    assert_eq!(
        secret["metadata"]["labels"]["gpu-vk.io/owner"],
        owner().tag()
    );
    let no_env = Workload {
        env: Vec::new(),
        ..w.clone()
    };
    assert!(env_secret(&cfg(), &owner(), &no_env, "uid-1").is_none());
    assert_eq!(c["ports"], json!([{"containerPort": 8080}]));
    assert_eq!(
        c["resources"],
        json!({"limits": {"nvidia.com/gpu": "1"},
               "requests": {"cpu": "1500m", "memory": "2147483648"}})
    );
    assert_eq!(
        selector(&owner()),
        format!("gpu-vk.io/owner={}", owner().tag())
    );
}

#[test]
fn namespaces_map_and_unknown_gpu_types_or_counts_are_refused() {
    let mut w = workload();
    w.namespace = "team-a".into();
    let p = remote_pod(&cfg(), &owner(), &w).unwrap();
    assert_eq!(p.metadata.namespace.as_deref(), Some("remote-a"));
    assert_eq!(cfg().remote_namespaces(), ["gpu-offload", "remote-a"]);

    let mut w = workload();
    w.gpu.as_mut().unwrap().gpu_type = Some("H100".into());
    let e = remote_pod(&cfg(), &owner(), &w).unwrap_err();
    assert!(
        matches!(&e, ProviderError::Invalid { message } if message.contains("H100")),
        "{e:?}"
    );
    w.gpu.as_mut().unwrap().count = 9;
    w.gpu.as_mut().unwrap().gpu_type = None;
    assert!(matches!(
        remote_pod(&cfg(), &owner(), &w),
        Err(ProviderError::Invalid { .. })
    ));
    // With no gpuTypes configured, the type is not passed on.
    let mut w = workload();
    w.gpu.as_mut().unwrap().gpu_type = Some("H100".into());
    let p = remote_pod(&KubernetesConfig::default(), &owner(), &w).unwrap();
    assert_eq!(p.spec.unwrap().node_selector, None);
}

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
    super::state::count_cpu(&mut cpu, &mut first, ts("2026-11-29T10:01:40Z"));
    assert_eq!(
        nanos(&first),
        900 * 100 * 1_000_000,
        "rate times uptime at first"
    );
    let mut later = at(50);
    super::state::count_cpu(&mut cpu, &mut later, ts("2026-11-29T10:01:55Z"));
    assert_eq!(
        nanos(&later),
        (900 * 100 + 50 * 15) * 1_000_000,
        "50m for the 15 s since, not 50m times the uptime"
    );
    // A pod gone from the list is forgotten; seen again, it starts over.
    super::state::count_cpu(&mut cpu, &mut [], ts("2026-11-29T10:02:00Z"));
    let mut back = at(50);
    super::state::count_cpu(&mut cpu, &mut back, ts("2026-11-29T10:02:10Z"));
    assert_eq!(nanos(&back), 50 * 130 * 1_000_000);
}

#[test]
fn the_pods_narrowing_security_settings_are_kept_and_nothing_else() {
    let mut w = workload();
    let p = serde_json::to_value(remote_pod(&cfg(), &owner(), &w).unwrap()).unwrap();
    assert_eq!(p["spec"]["containers"][0].get("securityContext"), None);
    assert_eq!(p["spec"].get("securityContext"), None);
    w.hardening = crate::provider::Hardening {
        run_as_non_root: true,
        run_as_user: Some(65532),
        run_as_group: None,
        read_only_root_filesystem: true,
        no_privilege_escalation: true,
        drop_capabilities: vec!["ALL".into()],
        seccomp_runtime_default: true,
    };
    let p = serde_json::to_value(remote_pod(&cfg(), &owner(), &w).unwrap()).unwrap();
    assert_eq!(
        p["spec"]["containers"][0]["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "readOnlyRootFilesystem": true,
               "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(
        p["spec"]["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
}

#[test]
fn a_kubeconfig_that_does_not_parse_is_refused_by_line_and_column_never_quoted() {
    let secret = "token-s3cr3t-value";
    for (text, want) in [
        // A tab where YAML wants spaces, on the line of the token.
        (
            format!("apiVersion: v1\nusers:\n- name: u\n  user:\n\ttoken: {secret}\n"),
            "invalid YAML at line 5, column",
        ),
        // Valid YAML of the wrong shape: the token where a list belongs.
        (
            format!("apiVersion: v1\nusers: {secret}\n"),
            "not a kubeconfig",
        ),
    ] {
        let cfg = cfg().with_api_key(text);
        let err = match super::Kubernetes::new("remote".into(), cfg, owner()) {
            Ok(_) => panic!("a broken kubeconfig was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{err}");
        assert!(
            !err.contains(secret),
            "the error quotes the kubeconfig: {err}"
        );
    }
}
