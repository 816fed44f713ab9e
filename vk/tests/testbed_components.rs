//! Proves that the testbed's control plane is real: every component the virtual kubelet relies on
//! does its job against the cluster in `KUBECONFIG` (started by `make test`, see
//! `scripts/testbed/up`).
//!
//! - controller-manager: a Deployment gets a ReplicaSet, the ReplicaSet gets Pods;
//! - scheduler: those Pods are bound to a Node registered through the API (as the VK does);
//! - garbage collector and namespace controller: deleting a Deployment removes its ReplicaSet
//!   and Pods, deleting a namespace removes everything in it and then the namespace;
//! - aggregator and metrics-server: `v1beta1.metrics.k8s.io` is registered, Available, and
//!   answers through the apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// A client for the testbed; fails (never skips) when no testbed was given.
async fn client() -> Client {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: these tests need the local control plane. Run them with \
         `make test`, or start one with `eval \"$(make -s testbed-up)\"` first."
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_default()
        .await
        .expect("cannot build a client from KUBECONFIG")
}

/// A short random suffix, so concurrent tests (and runs) never share objects.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Polls `check` until it yields a value, or panics naming `what` after [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"gpu-vk/test": "testbed-components"}}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// A Deployment of `replicas` pause pods that tolerate every taint, pinned by `node_selector`.
fn deployment(name: &str, replicas: i32, node_selector: &BTreeMap<String, String>) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
                    }]
                }
            }
        }
    }))
    .unwrap()
}

/// A Node as a kubelet (or the virtual kubelet) registers it: Ready, with capacity, on 127.0.0.1.
fn node(name: &str) -> Node {
    let now = Time(Timestamp::now());
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu-vk/test": "testbed-components"}},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [ready_condition(&now)],
        }
    }))
    .unwrap()
}

fn ready_condition(now: &Time) -> serde_json::Value {
    json!({
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    })
}

/// Keeps the node's Ready heartbeat fresh, as a kubelet does, so the node-lifecycle controller
/// does not mark it unreachable while the test runs.
fn keep_node_ready(nodes: Api<Node>, name: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let now = Time(Timestamp::now());
            let patch = json!({"status": {"conditions": [ready_condition(&now)]}});
            let _ = nodes
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await;
        }
    })
}

/// Deletes a namespace; pods bound to a node without a kubelet would wait for one forever, so
/// they are removed with grace period 0, as the kubelet confirms a stopped pod.
async fn delete_namespace(client: &Client, name: &str) {
    let namespaces = Api::<Namespace>::all(client.clone());
    let _ = namespaces.delete(name, &DeleteParams::default()).await;
    let pods = Api::<Pod>::namespaced(client.clone(), name);
    eventually(&format!("namespace {name} to be deleted"), || async {
        if let Ok(list) = pods.list(&ListParams::default()).await {
            for pod in list {
                let _ = pods
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
        namespaces
            .get_opt(name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

fn owned_by<K: Resource<DynamicType = ()>>(obj: &impl ResourceExt, owner: &K) -> bool {
    let uid = owner.meta().uid.as_deref();
    obj.owner_references()
        .iter()
        .any(|r| Some(r.uid.as_str()) == uid && r.controller == Some(true))
}

#[tokio::test]
async fn controller_manager_and_scheduler_place_deployment_pods_on_a_registered_node() {
    let client = client().await;
    let ns = unique("tb-sched");
    let node_name = unique("tb-node");
    create_namespace(&client, &ns).await;
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &node(&node_name))
        .await
        .expect("create node");
    let heartbeat = keep_node_ready(nodes.clone(), node_name.clone());

    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let selector = BTreeMap::from([("kubernetes.io/hostname".to_owned(), node_name.clone())]);
    let deploy = deployments
        .create(&PostParams::default(), &deployment("web", 2, &selector))
        .await
        .expect("create deployment");

    // controller-manager (deployment controller): a ReplicaSet owned by the Deployment.
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
    let rs = eventually("a ReplicaSet owned by the Deployment", || async {
        let list = replicasets.list(&ListParams::default()).await.unwrap();
        list.into_iter().find(|rs| owned_by(rs, &deploy))
    })
    .await;

    // controller-manager (replicaset controller) creates the Pods; the scheduler binds them.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let bound = eventually(
        "2 Pods of the ReplicaSet bound to the test node",
        || async {
            let list = pods.list(&ListParams::default()).await.unwrap();
            let mine: Vec<Pod> = list.into_iter().filter(|p| owned_by(p, &rs)).collect();
            let all_bound = mine.len() == 2
                && mine.iter().all(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str())
                });
            all_bound.then_some(mine)
        },
    )
    .await;
    for pod in &bound {
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| c.status.as_str());
        assert_eq!(
            scheduled,
            Some("True"),
            "pod {} has no PodScheduled=True",
            pod.name_any()
        );
    }

    heartbeat.abort();
    delete_namespace(&client, &ns).await;
    nodes
        .delete(&node_name, &DeleteParams::default())
        .await
        .expect("delete node");
}

#[tokio::test]
async fn garbage_collector_and_namespace_controller_cascade_deletions() {
    let client = client().await;
    let ns = unique("tb-gc");
    create_namespace(&client, &ns).await;
    // No node carries this label: the pods stay unscheduled, so deleting them needs no kubelet.
    let nowhere = BTreeMap::from([("gpu-vk/test-nowhere".to_owned(), "true".to_owned())]);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for name in ["doomed", "kept"] {
        deployments
            .create(&PostParams::default(), &deployment(name, 2, &nowhere))
            .await
            .expect("create deployment");
    }
    eventually("4 pods from 2 Deployments", || async {
        (pods.list(&ListParams::default()).await.unwrap().items.len() == 4).then_some(())
    })
    .await;

    // Garbage collector: the ReplicaSet and Pods of a deleted Deployment go with it.
    deployments
        .delete("doomed", &DeleteParams::background())
        .await
        .expect("delete deployment");
    let by_app = ListParams::default().labels("app=doomed");
    eventually(
        "the ReplicaSet and Pods of the deleted Deployment to be collected",
        || async {
            let rs = replicasets.list(&by_app).await.unwrap().items.len();
            let p = pods.list(&by_app).await.unwrap().items.len();
            (rs == 0 && p == 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        pods.list(&ListParams::default().labels("app=kept"))
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    // Namespace controller: deleting the namespace removes what is left, then the namespace.
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    eventually("the namespace and everything in it to be gone", || async {
        namespaces
            .get_opt(&ns)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn metrics_api_is_registered_and_served_by_metrics_server() {
    let client = client().await;
    let apiservices = Api::<APIService>::all(client.clone());
    let svc = apiservices
        .get("v1beta1.metrics.k8s.io")
        .await
        .expect("APIService v1beta1.metrics.k8s.io is not registered");
    let available = svc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"))
        .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()));
    assert_eq!(
        available.as_ref().map(|(s, _)| s.as_str()),
        Some("True"),
        "APIService not Available: {available:?}"
    );

    // The aggregator proxies to metrics-server: the list answers (empty without kubelets).
    let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "NodeMetrics");
    let node_metrics =
        Api::<DynamicObject>::all_with(client, &ApiResource::from_gvk_with_plural(&gvk, "nodes"));
    node_metrics
        .list(&ListParams::default())
        .await
        .expect("GET /apis/metrics.k8s.io/v1beta1/nodes through the aggregator");
}
