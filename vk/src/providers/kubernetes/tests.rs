//! Unit tests of the Kubernetes adapter: the remote pod it creates from a workload, and its
//! configuration (`reading.rs`: how it reads remote pods back).

#[path = "tests/reading.rs"]
mod reading;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::KubernetesConfig;
use super::spec::{LABEL_OWNER, env_secret, pull_secret, remote_pod, selector};
use super::state::observe;
use crate::provider::{ProviderError, Workload, WorkloadState};
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
    assert!(pull_secret(&cfg(), &owner(), &w, "uid-1").is_none());
    assert!(p.spec.as_ref().unwrap().image_pull_secrets.is_none());

    // Registry logins: a docker config Secret beside the pod, owned by it, named in its spec.
    let private = Workload {
        registry_logins: vec![crate::provider::RegistryLogin {
            registry: "registry.example.com".into(),
            username: "robot".into(),
            password: "pw".into(),
        }],
        ..w.clone()
    };
    let pod = remote_pod(&cfg(), &owner(), &private).unwrap();
    let name = format!("{}-pull", w.id.as_str());
    assert_eq!(pod.spec.unwrap().image_pull_secrets.unwrap()[0].name, name);
    let secret =
        serde_json::to_value(pull_secret(&cfg(), &owner(), &private, "uid-1").unwrap()).unwrap();
    assert_eq!(secret["metadata"]["name"], name);
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"], "uid-1",
        "collected with the remote pod"
    );
    let config: Value =
        serde_json::from_str(secret["stringData"][".dockerconfigjson"].as_str().unwrap()).unwrap();
    assert_eq!(
        config["auths"]["registry.example.com"],
        json!({"username": "robot", "password": "pw", "auth": "cm9ib3Q6cHc="})
    );
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
