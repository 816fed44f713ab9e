//! Cluster tests of pod lifecycles on the real testbed: restart policies, failover between
//! providers on capacity errors, provider faults retried without crashing, and secrets kept out
//! of the VK's logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::time::Duration;

use harness::*;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::PostParams;
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::json;

fn fast() -> ExecutionMode {
    ExecutionMode::simulated(100, 100, None)
}

async fn ready_node(c: &Client, vk: &Vk) {
    wait_for(Duration::from_secs(15), "node Ready", || async {
        let n = Api::<Node>::all(c.clone()).get_opt(&vk.node).await.ok()??;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

async fn create(c: &Client, ns: &str, pod: Pod) -> Pod {
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

async fn get(c: &Client, ns: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(c.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

fn with_restart_policy(mut p: Pod, policy: &str) -> Pod {
    p.spec.as_mut().unwrap().restart_policy = Some(policy.into());
    p
}

async fn running_workload(c: &Client, ns: &str, name: &str, rp: &Emulator) -> (Pod, String) {
    wait_for(
        Duration::from_secs(30),
        &format!("{name} running with a workload"),
        || async {
            let p = get(c, ns, name).await;
            if phase(&p) != "Running" {
                return None;
            }
            let w = rp.workloads_of(&uid(&p)).await;
            let running = w.iter().find(|w| w["state"] == "RUNNING")?;
            Some((p.clone(), running["id"].as_str()?.to_owned()))
        },
    )
    .await
}

#[tokio::test]
async fn restart_policies_relaunch_with_a_growing_restart_count_or_end_the_pod() {
    let c = client().await;
    let ns = namespace(&c, "life-restart").await;
    let rp = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 16, 1.89)]).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    ready_node(&c, &vk).await;

    create(
        &c,
        &ns,
        with_restart_policy(gpu_pod("always", &vk.node, 1, &[]), "Always"),
    )
    .await;
    create(
        &c,
        &ns,
        with_restart_policy(gpu_pod("never", &vk.node, 1, &[]), "Never"),
    )
    .await;
    create(
        &c,
        &ns,
        with_restart_policy(gpu_pod("onfailure", &vk.node, 1, &[]), "OnFailure"),
    )
    .await;

    // Always: the workload ends, a new one is launched, restartCount grows, lastState is kept.
    let (always, first) = running_workload(&c, &ns, "always", &rp).await;
    rp.admin_post(&format!("/workloads/{first}/exit"), json!({"exit_code": 0}))
        .await;
    let restarted = wait_for(Duration::from_secs(30), "always restarted", || async {
        let p = get(&c, &ns, "always").await;
        let cs = p
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        (cs.restart_count == 1 && cs.state.as_ref()?.running.is_some()).then_some(cs)
    })
    .await;
    let last = restarted.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.reason.as_deref(), Some("Completed"));
    let live = rp.workloads_of(&uid(&always)).await;
    assert_eq!(live.len(), 1, "exactly one live workload after the restart");
    assert_ne!(
        live[0]["id"].as_str().unwrap(),
        first,
        "the restart launched a new workload"
    );
    let events = events_when(&c, &ns, "always", |e| e.iter().any(|(r, _)| r == "BackOff")).await;
    assert!(events.iter().any(|(r, _)| r == "BackOff"), "{events:?}");

    // Never: a provider failure ends the pod, with the reason and exit code.
    let (_, w) = running_workload(&c, &ns, "never", &rp).await;
    rp.admin_post(&format!("/workloads/{w}/fail"), json!({}))
        .await;
    let failed = wait_for(Duration::from_secs(30), "never Failed", || async {
        let p = get(&c, &ns, "never").await;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let cs = &failed
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (1, Some("ProviderError"))
    );
    assert_eq!(cs.restart_count, 0);

    // OnFailure: a clean exit completes the pod.
    let (_, w) = running_workload(&c, &ns, "onfailure", &rp).await;
    rp.admin_post(&format!("/workloads/{w}/exit"), json!({"exit_code": 0}))
        .await;
    wait_for(Duration::from_secs(30), "onfailure Succeeded", || async {
        (phase(&get(&c, &ns, "onfailure").await) == "Succeeded").then_some(())
    })
    .await;
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn capacity_errors_fail_over_to_the_next_provider_and_the_choice_is_recorded() {
    let c = client().await;
    let ns = namespace(&c, "life-failover").await;
    let full = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 0, 1.89)]).await;
    let spare = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 8, 2.10)]).await;
    let mut vk = Vk::start(
        &[("cloud-a", &full), ("cloud-b", &spare)],
        VkOptions::default(),
    )
    .await;
    ready_node(&c, &vk).await;

    create(&c, &ns, gpu_pod("job", &vk.node, 1, &[])).await;
    let p = wait_for(Duration::from_secs(30), "job Running", || async {
        let p = get(&c, &ns, "job").await;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    assert_eq!(
        p.metadata.annotations.as_ref().unwrap()["gpu-vk.io/assigned-provider"],
        "cloud-b"
    );
    assert!(full.live().await.is_empty());
    assert_eq!(spare.workloads_of(&uid(&p)).await.len(), 1);
    let events = events_when(&c, &ns, "job", |e| {
        e.iter()
            .any(|(r, n)| r == "ProviderCapacity" && n.contains("cloud-a"))
    })
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ProviderCapacity" && n.contains("cloud-a")),
        "{events:?}"
    );

    // Pinned to the full provider: it waits with ProviderCapacity, never runs elsewhere.
    create(
        &c,
        &ns,
        gpu_pod("pinned", &vk.node, 1, &[("gpu-vk.io/provider", "cloud-a")]),
    )
    .await;
    let waiting = wait_for(
        Duration::from_secs(30),
        "pinned waiting on capacity",
        || async {
            let p = get(&c, &ns, "pinned").await;
            let cs = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .clone();
            (cs.state?.waiting?.reason.as_deref() == Some("ProviderCapacity")).then_some(p)
        },
    )
    .await;
    assert_eq!(phase(&waiting), "Pending");
    assert!(spare.workloads_of(&uid(&waiting)).await.is_empty());
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn provider_faults_are_retried_and_never_crash_the_vk() {
    let c = client().await;
    let ns = namespace(&c, "life-faults").await;
    let rp = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 8, 1.89)]).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    ready_node(&c, &vk).await;

    rp.admin_post("/faults", json!({"route": "create", "fail_next": 2, "status": 503, "body": {"title": "Service Unavailable", "status": 503, "detail": "maintenance"}})).await;
    rp.admin_post(
        "/faults",
        json!({"route": "create", "fail_next": 1, "status": 429, "retry_after_s": 1}),
    )
    .await;
    rp.admin_post(
        "/faults",
        json!({"route": "list", "fail_next": 3, "status": 200, "body": "not json at all"}),
    )
    .await;
    create(&c, &ns, gpu_pod("flaky", &vk.node, 1, &[])).await;
    let p = wait_for(
        Duration::from_secs(60),
        "flaky Running despite faults",
        || async {
            let p = get(&c, &ns, "flaky").await;
            (phase(&p) == "Running").then_some(p)
        },
    )
    .await;
    assert_eq!(
        rp.workloads_of(&uid(&p)).await.len(),
        1,
        "retries created a duplicate"
    );
    // Events of one pod are sent in order: once "Created" is there, the errors before it are.
    let events = events_when(&c, &ns, "flaky", |e| e.iter().any(|(r, _)| r == "Created")).await;
    assert!(
        events.iter().any(|(r, _)| r == "ProviderError"),
        "{events:?}"
    );
    // The three failed creates are one Event whose series counts them, as the kubelet folds
    // repeats, not three objects.
    let errors: Vec<_> = Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ProviderError"))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].series.as_ref().map(|s| s.count),
        Some(3),
        "{errors:?}"
    );
    assert!(
        vk.metric("gpu_vk_reconciles_total").await > 0.0,
        "the VK stopped serving metrics"
    );
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn secret_values_and_provider_keys_never_reach_the_logs() {
    let c = client().await;
    let ns = namespace(&c, "life-secret").await;
    let rp = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 8, 1.89)]).await;
    let opts = VkOptions {
        rust_log: "trace".into(),
        ..Default::default()
    };
    let mut vk = Vk::start(&[("runpod", &rp)], opts).await;
    ready_node(&c, &vk).await;

    const VALUE: &str = "s3cr3t-Value-9c1e";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "stringData": {"token": VALUE}
    }))
    .unwrap();
    Api::<Secret>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut pod = gpu_pod("uses-secret", &vk.node, 1, &[]);
    pod.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({
            "name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}
        }))
        .unwrap(),
    ]);
    create(&c, &ns, pod).await;
    let p = wait_for(Duration::from_secs(30), "uses-secret Running", || async {
        let p = get(&c, &ns, "uses-secret").await;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    // The value really reached the provider...
    let w = &rp.workloads_of(&uid(&p)).await[0];
    assert_eq!(
        w["env"]["TOKEN"], VALUE,
        "the secret was not passed to the workload: {w}"
    );
    // ...and never the VK's logs, even at trace level; nor did the provider API key.
    let log = vk.log();
    assert!(log.len() > 1000, "trace logging produced almost nothing");
    assert!(!log.contains(VALUE), "secret value found in the VK log");
    assert!(
        !log.contains(API_KEY),
        "provider API key found in the VK log"
    );
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

/// An image that never pulls leaves the provider's workload starting forever (here: a start
/// phase of ten minutes). At the provider's start deadline the workload is deleted and created
/// again once (`startAttempts` 2 by default, an Event `StartRetried`); the second stuck start
/// fails the pod with a reason and an Event, and is deleted too, so nothing keeps billing.
#[tokio::test]
async fn a_workload_stuck_starting_is_retried_once_then_fails_the_pod_and_is_deleted() {
    let c = client().await;
    let ns = namespace(&c, "life-stuck").await;
    let stuck = ExecutionMode::simulated(100, 600_000, None);
    let rp = Emulator::runpod(stuck, vec![GpuStock::new("A100-80GB", 8, 1.89)]).await;
    let providers = format!("{}  startDeadlineSeconds: 3\n", rp.provider_yaml("runpod"));
    let mut vk = Vk::start_with(providers, VkOptions::default()).await;
    ready_node(&c, &vk).await;
    // The first two deletes fail (a rate limit, say): the stuck start is deleted at the third
    // try and counted once, not once per try.
    rp.admin_post(
        "/faults",
        json!({"route": "delete", "status": 429, "fail_next": 2}),
    )
    .await;
    create(&c, &ns, gpu_pod("stuck", &vk.node, 1, &[])).await;
    let p = wait_for(Duration::from_secs(40), "stuck Failed", || async {
        let p = get(&c, &ns, "stuck").await;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let status = p.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("StartDeadlineExceeded"));
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.contains("still starting") && message.contains("the last of 2 attempts"),
        "{status:?}"
    );
    let id = uid(&p);
    wait_for(
        Duration::from_secs(20),
        "the stuck workloads deleted",
        || async {
            rp.workloads_of(&id)
                .await
                .iter()
                .all(is_terminated)
                .then_some(())
        },
    )
    .await;
    // One workload per attempt, each deleted (this test's emulator served this pod alone).
    assert_eq!(rp.counter("create").await, 2, "one create per attempt");
    assert_eq!(
        rp.counter("delete").await,
        4,
        "each stuck workload deleted, the first after two refusals"
    );
    let events = events_when(&c, &ns, "stuck", |e| {
        e.iter().any(|(r, _)| r == "StartDeadlineExceeded")
    })
    .await;
    let retried: Vec<&String> = events
        .iter()
        .filter(|(r, _)| r == "StartRetried")
        .map(|(_, m)| m)
        .collect();
    assert!(
        retried.len() == 1 && retried[0].contains("attempt 2 of 2"),
        "{events:?}"
    );
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

/// The realistic profile's failure mode at the scale of a Deployment: one create in three never
/// starts. At the start deadline each stuck workload is deleted and the pod's workload created
/// again (`StartRetried`), so the Deployment reaches its replicas with the pods it has: no pod
/// fails, none is replaced, nothing is left starting at the provider.
#[tokio::test]
async fn a_deployment_reaches_its_replicas_when_some_starts_never_run() {
    use k8s_openapi::api::apps::v1::Deployment;
    use mock_providers::config::EmulatorConfig;

    let c = client().await;
    let ns = namespace(&c, "life-stuck-share").await;
    let cfg = EmulatorConfig::new(API_KEY, vec![GpuStock::new("A100-80GB", 16, 1.89)])
        .with_mode(fast())
        .with_stuck_every(Some(3));
    let rp = Emulator::runpod_from(cfg).await;
    let providers = format!("{}  startDeadlineSeconds: 3\n", rp.provider_yaml("runpod"));
    let mut vk = Vk::start_with(providers, VkOptions::default()).await;
    ready_node(&c, &vk).await;
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "train"}},
            "template": {"metadata": {"labels": {"app": "train"}}, "spec": pod_spec(&vk.node, 1)},
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let pods = wait_for(Duration::from_secs(90), "4 replicas Running", || async {
        let pods = pods_with_label(&c, &ns, "train").await;
        (pods.iter().filter(|p| phase(p) == "Running").count() == 4).then_some(pods)
    })
    .await;
    assert_eq!(pods.len(), 4, "a stuck start is retried on its own pod");
    // The third create never starts: its pod's workload was created again.
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    wait_for(Duration::from_secs(20), "a StartRetried event", || async {
        for name in &names {
            if events_for(&c, &ns, name)
                .await
                .iter()
                .any(|(r, _)| r == "StartRetried")
            {
                return Some(());
            }
        }
        None
    })
    .await;
    wait_for(
        Duration::from_secs(20),
        "no workload left starting",
        || async {
            let live = rp.live().await;
            (live.len() == 4 && live.iter().all(|w| w["state"] == "RUNNING")).then_some(())
        },
    )
    .await;
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[path = "lifecycle/probes.rs"]
mod probes;
