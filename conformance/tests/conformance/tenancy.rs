//! Steps of `tenancy.feature`: what a tenant who may edit its own namespace tries against the
//! virtual node (annotations the VK owns, a Service pointed elsewhere) has no effect, and is
//! refused where the chart's policies run. The tenant is a user impersonated by the suite's own
//! credentials, bound to the cluster's `edit` role in the scenario's namespace only.

use std::time::{Duration, Instant};

use conformance::harness::pod::pod_mode;
use conformance::harness::{gpu_pod, wait_for};
use cucumber::then;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::Vkw;
use super::pod_ip::{api_server_service_ip, reached, ready_endpoints};
use super::privilege::{impersonating, status};

/// The tenant's user name.
const TENANT: &str = "tenant-a";
/// What the chart's `*-owned-annotations` policy says when it refuses a write.
const REFUSAL: &str = "is written only by the virtual kubelet";
/// The annotations the VK owns (vk/src/pods/spec.rs `VK_OWNED`; the chart's policy lists them).
const OWNED: [&str; 5] = [
    "gpu-vk.io/published-ports",
    "gpu-vk.io/assigned-provider",
    "gpu-vk.io/dispatch",
    "gpu-vk.io/start-attempts",
    "gpu-vk.io/pull-failures",
];

/// A client acting as [`TENANT`], once the `edit` role is bound to it in the scenario's
/// namespace and the API server's authorizer has seen the binding.
async fn tenant(w: &Vkw) -> Client {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
    }))
    .unwrap();
    match Api::<RoleBinding>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("binding the tenant: {e}"),
    }
    let client = impersonating(TENANT).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &w.ns);
    wait_for(
        Duration::from_secs(20),
        "the tenant may list pods",
        || async { pods.list(&Default::default()).await.ok().map(|_| ()) },
    )
    .await;
    client
}

/// Sets annotation `key` of pod `name` to `value`, as the tenant: the answer.
async fn annotate(pods: &Api<Pod>, name: &str, key: &str, value: &str) -> (u16, String) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    status(
        pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    )
}

/// A tenant's write of an annotation the VK owns must be refused by the chart's policy where
/// the chart runs, and is stored elsewhere (a local testbed has no policy: the VK itself must
/// not follow it).
fn check_owned_write(got: &(u16, String), key: &str) {
    if pod_mode() {
        assert!(
            got.0 == 403 && got.1.contains(REFUSAL) && got.1.contains(key),
            "the chart's policy should refuse the tenant's write of {key}: {got:?}"
        );
    } else {
        assert_eq!(got.0, 200, "the tenant's write of {key}: {got:?}");
    }
}

#[then(
    expr = "while a tenant points pod {string} at the API server's Service every 100 ms, for {int} of the virtual kubelet's polls the EndpointSlices of Service {string} list {string} and {string} where they are reached"
)]
async fn steered(w: &mut Vkw, victim: String, polls: u64, svc: String, a: String, b: String) {
    let want = reached(w, &[&a, &b]).await;
    assert_eq!(
        ready_endpoints(w, &svc).await,
        want,
        "before the tenant writes"
    );
    let pods: Api<Pod> = Api::namespaced(tenant(w).await, &w.ns);
    // The API server's own Service address: never where a tenant's pod is reached.
    let target = api_server_service_ip(w).await;
    let poll = w.vk.as_ref().expect("a virtual kubelet").timings.poll_ms;
    let window = Duration::from_millis(poll * polls) + Duration::from_secs(2);
    println!(
        "    (watching {} ms, {polls} polls of {poll} ms + 2000 ms, while the tenant writes)",
        window.as_millis()
    );
    let start = Instant::now();
    let mut writes = 0;
    // The whole window, and at least 10 writes however slow the API server answers (a busy
    // kind node took more than half a second a round).
    while start.elapsed() < window || writes < 10 {
        // Alternating values: each write is a change, whatever the VK restored in between.
        let value = format!("8080={target}:{}", 443 + writes % 2);
        let got = annotate(&pods, &victim, OWNED[0], &value).await;
        check_owned_write(&got, OWNED[0]);
        writes += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ready = ready_endpoints(w, &svc).await;
        assert_eq!(
            ready, want,
            "the Service followed the tenant's annotation after {writes} writes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Whatever the tenant left, the VK's record of the pod is its own again.
    let original = reached(w, &[&victim]).await;
    wait_for(
        Duration::from_secs(30),
        "the virtual kubelet's published-ports annotation back on the pod",
        || async {
            let p = w.get(&victim).await?;
            let text = p.metadata.annotations.unwrap_or_default().remove(OWNED[0]);
            let forged = text.as_deref().is_some_and(|t| t.contains(&target));
            (!forged).then_some(())
        },
    )
    .await;
    assert_eq!(reached(w, &[&victim]).await, original);
}

#[then(
    expr = "a tenant is refused writing each annotation the virtual kubelet owns on pod {string}"
)]
async fn owned_refused(w: &mut Vkw, name: String) {
    assert!(
        pod_mode(),
        "only where the chart's policies run (the scenario's gate)"
    );
    let pods: Api<Pod> = Api::namespaced(tenant(w).await, &w.ns);
    for key in OWNED {
        let got = annotate(&pods, &name, key, "forged").await;
        check_owned_write(&got, key);
    }
    // Its own annotations are the tenant's to write.
    let got = annotate(&pods, &name, "example.com/note", "mine").await;
    assert_eq!(got.0, 200, "a tenant's own annotation: {got:?}");
}

#[then(expr = "a tenant is refused creating a pod that carries {string}")]
async fn create_refused(w: &mut Vkw, key: String) {
    assert!(
        pod_mode(),
        "only where the chart's policies run (the scenario's gate)"
    );
    let pods: Api<Pod> = Api::namespaced(tenant(w).await, &w.ns);
    let mut p = gpu_pod("forged", &w.node(), 1, &[]);
    p.metadata
        .annotations
        .get_or_insert_default()
        .insert(key.clone(), "8080=10.0.0.1:10250".into());
    let got = status(pods.create(&PostParams::default(), &p).await);
    assert!(
        got.0 == 403 && got.1.contains(REFUSAL) && got.1.contains(&key),
        "creating a pod carrying {key}: {got:?}"
    );
    assert!(w.get("forged").await.is_none(), "the pod exists");
}

/// A research pod of namespace `ns` as the API server would store it (server-side dry run:
/// the webhooks run, nothing is kept): whether it carries the hand-off's gate.
async fn gated_in(w: &Vkw, ns: &str) -> bool {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "research-", "labels": {"gpu-vk.io/handoff": "true"}},
        "spec": {"containers": [{"name": "train", "image": "registry.invalid/train",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let created = Api::<Pod>::namespaced(w.c(), ns)
        .create(&dry, &pod)
        .await
        .unwrap_or_else(|e| panic!("a research pod in {ns}: {e}"));
    created
        .spec
        .and_then(|s| s.scheduling_gates)
        .is_some_and(|g| g.iter().any(|g| g.name == "gpu-vk.io/handoff"))
}

#[then(
    "a research pod of this scenario's namespace is admitted behind the hand-off's gate, and one of another namespace is not"
)]
async fn research_only_where_listed(w: &mut Vkw) {
    use k8s_openapi::api::core::v1::Namespace;
    let other = format!("{}-b", w.ns);
    let namespaces: Api<Namespace> = Api::all(w.c());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": other}})).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("namespace {other}: {e}"),
    }
    let here = gated_in(w, &w.ns.clone()).await;
    let there = gated_in(w, &other).await;
    let _ = namespaces.delete(&other, &Default::default()).await;
    assert!(
        here,
        "a research pod of the listed namespace should wait behind the gate"
    );
    assert!(
        !there,
        "a research pod of namespace {other}, not listed in researchNamespaces, was gated: it \
         would move another team's production onto paid providers"
    );
}
