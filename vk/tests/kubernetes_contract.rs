//! Contract tests of the Kubernetes adapter against a real API server: the testbed under
//! `KUBECONFIG` plays the remote cluster, and the project's own VK (over a slurmrestd
//! emulator that runs commands as processes, so exit codes and output are real) is its node.
//! The adapter runs in the test: the remote pods it creates are scheduled by the remote
//! scheduler onto that node, run, and report back through the remote API server.
//!
//! Run: `TESTBED_NAME=k8s scripts/testbed/with cargo test -p vk --test kubernetes_contract`
//! (the `vk` binary must be built: `cargo build -p vk`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;
#[path = "support/workload.rs"]
mod workload_builder;

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use harness::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota, ServiceAccount, Toleration};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::json;
use vk::naming::Owner;
use vk::provider::{FailureReason, LogOptions, Observed, Provider, ProviderError, WorkloadState};
use vk::providers::kubernetes::{Kubernetes, KubernetesConfig};
use workload_builder::WorkloadBuilder;

const WAIT: Duration = Duration::from_secs(90);

fn kubeconfig() -> PathBuf {
    std::env::var_os("KUBECONFIG")
        .expect("KUBECONFIG names the testbed that plays the remote cluster")
        .into()
}

/// The local side's identity: the cluster and node the remote pods belong to.
fn owner() -> Owner {
    Owner::new("local-cluster", &unique("vk-local"))
}

fn settings(ns: &str, node: &str) -> KubernetesConfig {
    KubernetesConfig {
        kubeconfig: Some(kubeconfig()),
        namespace: ns.into(),
        node_selector: [("kubernetes.io/hostname".to_owned(), node.to_owned())].into(),
        tolerations: vec![Toleration {
            key: Some("virtual-kubelet.io/provider".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }],
        request_timeout_secs: 10,
        ..KubernetesConfig::default()
    }
}

fn adapter(cfg: KubernetesConfig, owner: &Owner) -> Kubernetes {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Kubernetes::new("remote".into(), cfg, owner.clone()).unwrap()
}

/// The remote cluster with our VK as its node, and a fresh namespace there.
struct Remote {
    c: Client,
    emu: Emulator,
    vk: Vk,
    ns: String,
}

impl Remote {
    async fn start() -> Self {
        Self::start_on(Emulator::slurm(ExecutionMode::process(), SlurmDialect::V0041).await).await
    }

    /// The same with another provider under the remote node.
    async fn start_on(emu: Emulator) -> Self {
        let c = client().await;
        let vk = Vk::start(&[("hpc", &emu)], VkOptions::default()).await;
        wait_node_ready(&c, &vk.node).await;
        let ns = namespace(&c, "k8s-remote").await;
        Self { c, emu, vk, ns }
    }

    fn settings(&self) -> KubernetesConfig {
        settings(&self.ns, &self.vk.node)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.c.clone(), &self.ns)
    }

    /// Remote pods carrying `owner`'s label, by name.
    async fn remote_pods(&self, owner: &Owner) -> Vec<String> {
        let lp = ListParams::default().labels(&format!("gpu-vk.io/owner={}", owner.tag()));
        let mut names: Vec<String> = self
            .pods()
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    }

    async fn finish(mut self) {
        delete_namespace(&self.c, &self.ns).await;
        self.vk.cleanup(&self.c).await;
    }
}

/// Polls the adapter's list until `f` accepts this workload's entry.
async fn wait_listed(
    k: &Kubernetes,
    id: &str,
    what: &str,
    f: impl Fn(&Observed) -> bool,
) -> Observed {
    wait_for(WAIT, what, || async {
        let list = k.list().await.ok()?;
        list.into_iter().find(|o| o.id.as_str() == id && f(o))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workload_runs_as_one_remote_pod_reports_its_exit_logs_and_is_deleted() {
    let r = Remote::start().await;
    let me = owner();
    let k = adapter(r.settings(), &me);
    let w = WorkloadBuilder::fresh(&me)
        .pod("ml", "train-0")
        .command(["/bin/sh", "-c"])
        .args(["echo hello-from-remote; echo \"mode=$MODE\"; sleep 6; exit 3"])
        .env("MODE", "fast")
        .gpu("A100-80GB", 1)
        .cpu_millis(500)
        .build();
    k.create(&w).await.unwrap();

    // One remote pod, named by the workload id, labelled with the owner.
    assert_eq!(r.remote_pods(&me).await, [w.id.as_str()]);
    let pod = r.pods().get(w.id.as_str()).await.unwrap();
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["gpu-vk.io/owner"], me.tag());
    assert_eq!(labels["gpu-vk.io/pod-uid"], w.id.pod_uid());
    let spec = pod.spec.clone().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let c = &spec.containers[0];
    assert_eq!(c.args.as_deref().unwrap(), w.args.as_slice());
    let limits = c.resources.as_ref().unwrap().limits.clone().unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    // The value is not in the pod spec: it reads the workload's Secret, which the pod owns.
    let env = c.env.clone().unwrap();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].value, None, "an env value in the remote pod spec");
    let from = env[0].value_from.clone().unwrap().secret_key_ref.unwrap();
    assert_eq!(
        (from.name.as_str(), from.key.as_str()),
        (w.id.as_str(), "MODE")
    );
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(r.c.clone(), &r.ns)
        .get(w.id.as_str())
        .await
        .unwrap();
    assert_eq!(secret.data.unwrap()["MODE"].0, b"fast");
    let owners = secret.metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(Some(owners[0].uid.as_str()), pod.metadata.uid.as_deref());

    // The remote scheduler binds it to our VK node, which runs it.
    let running = wait_listed(&k, w.id.as_str(), "the remote pod to run", |o| {
        o.state == WorkloadState::Running
    })
    .await;
    assert!(running.started_at.is_some(), "{running:?}");
    let bound = r.pods().get(w.id.as_str()).await.unwrap();
    assert_eq!(
        bound.spec.unwrap().node_name.as_deref(),
        Some(r.vk.node.as_str())
    );
    let (ns, name) = (r.ns.clone(), w.id.to_string());
    assert!(running.provider_id.starts_with(&format!("{ns}/{name}/")));

    // Logs through the remote API server (followed while it runs).
    let follow = LogOptions {
        follow: true,
        ..LogOptions::default()
    };
    let mut stream = k.logs(&running.provider_id, &follow).await.unwrap();
    let first = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a first log chunk")
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("hello-from-remote"),
        "{first:?}"
    );

    let failed = wait_listed(&k, w.id.as_str(), "the remote pod to fail", |o| {
        o.state.is_terminal()
    })
    .await;
    assert_eq!(
        failed.state,
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert!(failed.finished_at.is_some());
    let all = k
        .logs(&failed.provider_id, &LogOptions::default())
        .await
        .unwrap()
        .map(|c| c.unwrap())
        .collect::<Vec<_>>()
        .await
        .concat();
    let text = String::from_utf8_lossy(&all);
    assert!(
        text.contains("hello-from-remote") && text.contains("mode=fast"),
        "{text}"
    );
    let previous = LogOptions {
        previous: true,
        ..LogOptions::default()
    };
    assert!(matches!(
        k.logs(&failed.provider_id, &previous).await,
        Err(ProviderError::Unsupported { .. })
    ));

    // Delete: gone from the list at once, from the remote cluster soon after; again is fine.
    k.delete(&failed.provider_id).await.unwrap();
    assert!(k.list().await.unwrap().iter().all(|o| o.id != w.id));
    wait_for(WAIT, "the remote pod to be gone", || async {
        r.pods()
            .get_opt(w.id.as_str())
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    k.delete(&failed.provider_id).await.unwrap();
    r.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_adapter_restart_the_same_pods_are_listed_and_none_is_created_twice() {
    let r = Remote::start().await;
    let me = owner();
    let first = adapter(r.settings(), &me);
    let ws: Vec<_> = (0..3)
        .map(|i| {
            WorkloadBuilder::fresh(&me)
                .pod("ml", &format!("p-{i}"))
                .command(["/bin/sh", "-c", "sleep 300"])
                .build()
        })
        .collect();
    for w in &ws {
        first.create(w).await.unwrap();
    }
    drop(first);

    // A new process: nothing remembered, everything re-derived from the remote list.
    let second = adapter(r.settings(), &me);
    let mut ids: Vec<String> = ws.iter().map(|w| w.id.to_string()).collect();
    ids.sort();
    let listed = wait_for(WAIT, "all three remote pods running", || async {
        let l = second.list().await.ok()?;
        (l.len() == 3 && l.iter().all(|o| o.state == WorkloadState::Running)).then_some(l)
    })
    .await;
    let got: Vec<String> = listed.iter().map(|o| o.id.to_string()).collect();
    assert_eq!(got, ids);
    // A create that repeats one (a lost answer retried) never makes a second remote pod.
    let again = second.create(&ws[0]).await.unwrap_err();
    assert!(
        matches!(&again, ProviderError::Transient { message, .. } if message.contains("exists")),
        "{again:?}"
    );
    assert_eq!(r.remote_pods(&me).await, ids);
    // Another VK's adapter on the same namespace sees none of them.
    let other = adapter(r.settings(), &owner());
    assert!(other.list().await.unwrap().is_empty());

    for o in &listed {
        second.delete(&o.provider_id).await.unwrap();
    }
    assert!(second.list().await.unwrap().is_empty());
    wait_for(WAIT, "the remote pods to be gone", || async {
        r.remote_pods(&me).await.is_empty().then_some(())
    })
    .await;
    r.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unschedulable_remote_pod_is_queued_with_the_schedulers_reason() {
    let c = client().await;
    let ns = namespace(&c, "k8s-queue").await;
    let me = owner();
    let k = adapter(settings(&ns, "no-such-node"), &me);
    let w = WorkloadBuilder::fresh(&me)
        .command(["/bin/sh", "-c", "true"])
        .build();
    k.create(&w).await.unwrap();
    let queued = wait_listed(&k, w.id.as_str(), "the scheduler's verdict", |o| {
        matches!(&o.state, WorkloadState::Queued { reason: Some(_) })
    })
    .await;
    let WorkloadState::Queued {
        reason: Some(reason),
    } = &queued.state
    else {
        unreachable!()
    };
    assert!(reason.contains("nodes are available"), "{reason}");
    k.delete(&queued.provider_id).await.unwrap();
    delete_namespace(&c, &ns).await;
}

/// A kubeconfig for the testbed's API server with `user` (YAML, as a Secret would hold it).
fn kubeconfig_text(server: &str, user: serde_json::Value) -> String {
    let ca = std::env::var("TESTBED_CA_CERT").expect("the testbed's env (TESTBED_CA_CERT)");
    serde_saphyr::to_string(&json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "r", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "r", "context": {"cluster": "r", "user": "u"}}],
        "current-context": "r",
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_and_an_unreachable_cluster_are_provider_errors_and_check_config_needs_the_namespace()
 {
    let c = client().await;
    let ns = namespace(&c, "k8s-refuse").await;
    let me = owner();
    let server = std::env::var("TESTBED_APISERVER_URL").expect("the testbed's env");

    // Quota: the second pod exceeds it, which is the remote cluster's capacity.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    let k = adapter(settings(&ns, "no-such-node"), &me);
    let w1 = WorkloadBuilder::fresh(&me).command(["true"]).build();
    let w2 = WorkloadBuilder::fresh(&me).command(["true"]).build();
    // The quota controller must have computed the usage before admission enforces it.
    wait_for(WAIT, "the quota to be in force", || async {
        let q = Api::<ResourceQuota>::namespaced(c.clone(), &ns)
            .get("one-pod")
            .await
            .ok()?;
        q.status?.hard.map(|_| ())
    })
    .await;
    k.create(&w1).await.unwrap();
    let e = k.create(&w2).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Capacity { message } if message.contains("exceeded quota")),
        "{e:?}"
    );

    // RBAC: a service account with no role gets Auth errors, from a kubeconfig given as text.
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
    let sas = Api::<ServiceAccount>::namespaced(c.clone(), &ns);
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let token = sas
        .create_token_request(
            "nobody",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token");
    let mut cfg = settings(&ns, "no-such-node");
    cfg.kubeconfig = None;
    let text = kubeconfig_text(&server, json!({"token": token}));
    let nobody = adapter(cfg.clone().with_api_key(text), &me);
    let e = nobody.list().await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Auth { message } if message.contains("forbidden")),
        "{e:?}"
    );
    assert!(
        !format!("{e:?}").contains(&token),
        "the token leaked: {e:?}"
    );
    assert!(matches!(
        nobody.create(&w2).await,
        Err(ProviderError::Auth { .. })
    ));

    // An API server that does not answer: a transient provider error, no panic.
    let gone = adapter(
        cfg.with_api_key(kubeconfig_text(
            "https://127.0.0.1:1",
            json!({"token": "x"}),
        )),
        &me,
    );
    let e = gone.list().await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Transient { message, .. } if message.contains("not reachable")),
        "{e:?}"
    );

    // check-config: the namespace must exist in the remote cluster.
    assert_eq!(k.preflight().await, Ok(()));
    let missing = adapter(settings("k8s-no-such-namespace", "x"), &me);
    let e = missing.preflight().await.unwrap_err();
    assert!(e.contains("does not exist"), "{e}");
    let dir = std::env::temp_dir().join(unique("k8s-check-config"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = |namespace: &str| {
        format!(
            "nodeName: vk-a\nclusterId: c\nproviders:\n- name: remote\n  kind: kubernetes\n  \
             settings:\n    kubeconfig: {}\n    namespace: {namespace}\n",
            kubeconfig().display()
        )
    };
    for (namespace, ok) in [(ns.as_str(), true), ("k8s-no-such-namespace", false)] {
        let file = dir.join(format!("{namespace}.yaml"));
        std::fs::write(&file, config(namespace)).unwrap();
        let out = std::process::Command::new(vk_binary())
            .args(["check-config", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{namespace}: {stderr}");
        if !ok {
            assert!(stderr.contains("does not exist"), "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    delete_namespace(&c, &ns).await;
}

#[path = "kubernetes_contract/remote_events.rs"]
mod remote_events;
