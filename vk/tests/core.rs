//! Cluster tests of the VK core on the real testbed, with the RunPod v2 emulator over HTTP:
//! node registration, pods running on the provider, per-pod deletion, restart statelessness,
//! garbage collection, lost workloads and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::time::Duration;

use harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::json;

fn gpus() -> Vec<GpuStock> {
    vec![GpuStock::new("A100-80GB", 64, 1.89)]
}

fn fast() -> ExecutionMode {
    ExecutionMode::simulated(200, 200, None)
}

async fn node_ready(c: &Client, name: &str) -> Option<Node> {
    let n = Api::<Node>::all(c.clone()).get_opt(name).await.ok()??;
    let ready = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then_some(n)
}

async fn create_pod(c: &Client, ns: &str, pod: Pod) -> Pod {
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

async fn get_pod(c: &Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

async fn wait_running(c: &Client, ns: &str, name: &str) -> Pod {
    wait_for(
        Duration::from_secs(60),
        &format!("pod {name} Running"),
        || async { get_pod(c, ns, name).await.filter(|p| phase(p) == "Running") },
    )
    .await
}

#[tokio::test]
async fn node_registers_ready_renews_its_lease_and_comes_back_when_deleted() {
    let c = client().await;
    let rp = Emulator::runpod(fast(), gpus()).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;

    let t0 = std::time::Instant::now();
    let node = wait_for(Duration::from_secs(15), "node Ready", || {
        node_ready(&c, &vk.node)
    })
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "node took {:?} to be Ready",
        t0.elapsed()
    );
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(
        labels.get("type").map(String::as_str),
        Some("virtual-kubelet")
    );
    assert_eq!(
        labels.get("gpu-vk.io/provider.runpod").map(String::as_str),
        Some("true")
    );
    let taints = node.spec.as_ref().unwrap().taints.clone().unwrap();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "virtual-kubelet.io/provider" && t.effect == "NoSchedule")
    );
    let status = node.status.unwrap();
    // The apiserver canonicalises quantities: 1000 GPUs reads back as "1k".
    assert_eq!(status.allocatable.unwrap()["nvidia.com/gpu"].0, "1k");
    assert_eq!(status.addresses.unwrap()[0].address, "127.0.0.1");
    assert!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port
            > 0
    );

    // The lease renews (renew interval 2 s in tests) and is owned by the node.
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let first = wait_for(Duration::from_secs(10), "lease", || async {
        leases.get_opt(&vk.node).await.ok().flatten()
    })
    .await;
    let owner = &first.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", vk.node.as_str())
    );
    let t1 = first.spec.as_ref().unwrap().renew_time.clone().unwrap().0;
    wait_for(Duration::from_secs(10), "lease renewal", || async {
        let l = leases.get_opt(&vk.node).await.ok().flatten()?;
        (l.spec?.renew_time?.0 > t1).then_some(())
    })
    .await;

    // Deleting the Node brings it back.
    let old_uid = Api::<Node>::all(c.clone())
        .get(&vk.node)
        .await
        .unwrap()
        .metadata
        .uid;
    Api::<Node>::all(c.clone())
        .delete(&vk.node, &DeleteParams::default())
        .await
        .unwrap();
    let back = wait_for(Duration::from_secs(15), "node re-created", || async {
        node_ready(&c, &vk.node)
            .await
            .filter(|n| n.metadata.uid != old_uid)
    })
    .await;
    assert!(back.metadata.uid.is_some());

    // SIGTERM marks it not ready.
    vk.stop().await;
    let n = Api::<Node>::all(c.clone()).get(&vk.node).await.unwrap();
    let ready = n
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn deployment_runs_on_the_provider_and_each_pod_delete_removes_exactly_its_workload() {
    let c = client().await;
    let ns = namespace(&c, "core-deploy").await;
    let rp = Emulator::runpod(fast(), gpus()).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    wait_for(Duration::from_secs(15), "node Ready", || {
        node_ready(&c, &vk.node)
    })
    .await;

    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": pod_spec(&vk.node, 1)},
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();

    let pods = wait_for(Duration::from_secs(60), "3 running replicas", || async {
        let pods = pods_with_label(&c, &ns, "trainer").await;
        (pods.len() == 3 && pods.iter().all(|p| phase(p) == "Running")).then_some(pods)
    })
    .await;
    for p in &pods {
        assert_eq!(
            p.spec.as_ref().unwrap().node_name.as_deref(),
            Some(vk.node.as_str())
        );
        let st = p.status.as_ref().unwrap();
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready, "container ready");
        assert!(
            cs.state
                .as_ref()
                .unwrap()
                .running
                .as_ref()
                .unwrap()
                .started_at
                .is_some()
        );
        assert!(
            cs.container_id
                .as_deref()
                .unwrap()
                .starts_with("runpod://vk-")
        );
        assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
        assert!(
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        // Exactly one live workload per pod, named after its UID.
        assert_eq!(
            rp.workloads_of(&uid(p)).await.len(),
            1,
            "workloads of {}",
            uid(p)
        );
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            ann.get("gpu-vk.io/assigned-provider").map(String::as_str),
            Some("runpod")
        );
    }
    assert_eq!(rp.live().await.len(), 3);
    // The VK's own share of the latency is exported: one create sample per pod, and a status
    // sample for each workload state change it reported (at least Running for each).
    assert_eq!(
        vk.metric("gpu_vk_pod_create_latency_seconds_count").await,
        3.0
    );
    assert!(vk.metric("gpu_vk_pod_status_latency_seconds_count").await >= 3.0);

    // Delete one replica: exactly its workload goes; the replacement gets a new one.
    let victim = &pods[0];
    let others: Vec<String> = pods[1..].iter().map(uid).collect();
    Api::<Pod>::namespaced(c.clone(), &ns)
        .delete(
            &victim.metadata.name.clone().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    wait_for(Duration::from_secs(30), "victim pod gone", || async {
        get_pod(&c, &ns, victim.metadata.name.as_deref().unwrap())
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        rp.workloads_of(&uid(victim)).await.is_empty(),
        "victim's workload still live"
    );
    for o in &others {
        assert_eq!(
            rp.workloads_of(o).await.len(),
            1,
            "a sibling's workload was touched"
        );
    }
    let replaced = wait_for(Duration::from_secs(60), "replacement running", || async {
        let pods = pods_with_label(&c, &ns, "trainer").await;
        (pods.len() == 3 && pods.iter().all(|p| phase(p) == "Running")).then_some(pods)
    })
    .await;
    let new = replaced.iter().find(|p| !others.contains(&uid(p))).unwrap();
    assert_eq!(rp.workloads_of(&uid(new)).await.len(), 1);
    assert_eq!(rp.live().await.len(), 3);

    // One list per poll interval, whatever the number of pods: no per-pod polling.
    let lists0 = rp.counter("list").await;
    let gets0 = rp.counter("get").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lists = rp.counter("list").await - lists0;
    assert!(
        (6..=14).contains(&lists),
        "{lists} list calls in 5 s at a 500 ms interval"
    );
    assert_eq!(
        rp.counter("get").await - gets0,
        0,
        "per-pod GETs while nothing changes"
    );

    delete_namespace(&c, &ns).await;
    wait_for(
        Duration::from_secs(60),
        "all workloads gone after namespace deletion",
        || async { rp.live().await.is_empty().then_some(()) },
    )
    .await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn kill9_restart_creates_nothing_twice_and_rewrites_no_status() {
    let c = client().await;
    let ns = namespace(&c, "core-restart").await;
    let rp = Emulator::runpod(fast(), gpus()).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    wait_for(Duration::from_secs(15), "node Ready", || {
        node_ready(&c, &vk.node)
    })
    .await;

    // Kill the VK while pods are being created.
    for i in 0..6 {
        create_pod(&c, &ns, gpu_pod(&format!("p{i}"), &vk.node, 1, &[])).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    vk.kill9().await;
    vk.restart();
    for i in 0..6 {
        wait_running(&c, &ns, &format!("p{i}")).await;
    }
    assert_eq!(
        rp.counter("create").await,
        6,
        "exactly one create per pod across a kill -9"
    );

    // Steady state: kill -9 again, restart, nothing is created or rewritten.
    let mut before: Vec<Pod> = Vec::new();
    for i in 0..6 {
        before.push(get_pod(&c, &ns, &format!("p{i}")).await.unwrap());
    }
    vk.kill9().await;
    let doomed = before[5].clone();
    Api::<Pod>::namespaced(c.clone(), &ns)
        .delete("p5", &DeleteParams::default())
        .await
        .unwrap();
    vk.restart();
    wait_for(
        Duration::from_secs(30),
        "pod deleted while down is gone with its workload",
        || async {
            (get_pod(&c, &ns, "p5").await.is_none()
                && rp.workloads_of(&uid(&doomed)).await.is_empty())
            .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        rp.counter("create").await,
        6,
        "a restart created workloads again"
    );
    assert_eq!(
        vk.metric("gpu_vk_pod_status_writes_total").await,
        0.0,
        "a restart rewrote unchanged statuses"
    );
    for p in &before[..5] {
        let now = get_pod(&c, &ns, p.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(
            now.status,
            p.status,
            "status of {} changed across restart",
            p.metadata.name.as_deref().unwrap()
        );
        assert_eq!(rp.workloads_of(&uid(p)).await.len(), 1);
    }
    assert_eq!(rp.live().await.len(), 5);
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn orphans_are_collected_foreign_workloads_kept_and_lost_workloads_fail_the_pod() {
    let c = client().await;
    let ns = namespace(&c, "core-gc").await;
    let rp = Emulator::runpod(fast(), gpus()).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    wait_for(Duration::from_secs(15), "node Ready", || {
        node_ready(&c, &vk.node)
    })
    .await;

    // An orphan of ours (our owner marker, no pod) and a workload of another node.
    let ours = vk::naming::Owner::new(&vk.cluster_id, &vk.node);
    let theirs = vk::naming::Owner::new(&vk.cluster_id, "some-other-node");
    let orphan_uid = uuid::Uuid::new_v4().to_string();
    let orphan_id = rp
        .inject(ours.workload_id(&orphan_uid).unwrap().as_str())
        .await;
    let foreign_uid = uuid::Uuid::new_v4().to_string();
    rp.inject(theirs.workload_id(&foreign_uid).unwrap().as_str())
        .await;
    rp.inject("someone-elses-pod").await;

    wait_for(Duration::from_secs(20), "orphan collected", || async {
        rp.workloads_of(&orphan_uid).await.is_empty().then_some(())
    })
    .await;
    assert!(!orphan_id.is_empty());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        rp.workloads_of(&foreign_uid).await.len(),
        1,
        "another node's workload was collected"
    );
    assert_eq!(rp.live().await.len(), 2, "a foreign workload was touched");

    // A ReplicaSet-owned pod whose workload vanishes: Failed/ProviderLost, then replaced.
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "svc"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "svc"}},
                 "template": {"metadata": {"labels": {"app": "svc"}}, "spec": pod_spec(&vk.node, 1)}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let pod = wait_for(Duration::from_secs(60), "svc running", || async {
        pods_with_label(&c, &ns, "svc")
            .await
            .into_iter()
            .find(|p| phase(p) == "Running")
    })
    .await;
    let w = rp.workloads_of(&uid(&pod)).await;
    rp.vanish(w[0]["id"].as_str().unwrap()).await;
    let lost = wait_for(
        Duration::from_secs(30),
        "pod Failed with ProviderLost",
        || async {
            get_pod(&c, &ns, pod.metadata.name.as_deref().unwrap())
                .await
                .filter(|p| phase(p) == "Failed")
        },
    )
    .await;
    assert_eq!(
        lost.status.as_ref().unwrap().reason.as_deref(),
        Some("ProviderLost")
    );
    let events = events_when(&c, &ns, pod.metadata.name.as_deref().unwrap(), |e| {
        e.iter().any(|(r, _)| r == "ProviderLost")
    })
    .await;
    assert!(
        events.iter().any(|(r, _)| r == "ProviderLost"),
        "no ProviderLost event: {events:?}"
    );
    wait_for(Duration::from_secs(60), "replacement running", || async {
        pods_with_label(&c, &ns, "svc")
            .await
            .into_iter()
            .find(|p| phase(p) == "Running" && uid(p) != uid(&pod))
    })
    .await;
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[path = "core/refusals.rs"]
mod refusals;
