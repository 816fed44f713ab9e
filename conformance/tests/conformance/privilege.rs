//! Steps of `least_privilege.feature`: what the Helm chart lets the VK's ServiceAccount do,
//! checked by impersonating it (the suite's own credentials may impersonate) with server-side
//! dry runs, so nothing is changed: the API server runs authorization and admission (the
//! ValidatingAdmissionPolicy included) on a dry run as on a real write.

use conformance::harness::pod::NAMESPACE;
use conformance::harness::{Vk, VkOptions};
use cucumber::{given, then};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::Vkw;

/// A client acting as the VK's ServiceAccount: the release's, named after the node
/// (`fullnameOverride`), in the release namespace.
async fn as_vk(w: &Vkw) -> Client {
    impersonating(&format!("system:serviceaccount:{NAMESPACE}:{}", w.node())).await
}

/// A client acting as `user` (the suite's own credentials may impersonate).
pub(crate) async fn impersonating(user: &str) -> Client {
    let mut cfg = kube::Config::infer().await.expect("a kubeconfig");
    cfg.auth_info.impersonate = Some(user.to_owned());
    Client::try_from(cfg).expect("an impersonating client")
}

/// The HTTP status of a refusal, or 200 for success.
pub(crate) fn status<T>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(e)) => (e.code, e.message),
        Err(e) => panic!("not an answer of the API server: {e}"),
    }
}

#[given("a virtual kubelet with the provider under test, serving only this scenario's namespace")]
async fn vk_for_namespace(w: &mut Vkw) {
    crate::setup_provider(w).await;
    let providers = w.obs().provider_yaml(&crate::target());
    let vk = Vk::start_with(
        providers,
        VkOptions {
            extra_config: format!("allowedNamespaces: [{}]\n", w.ns),
            ..VkOptions::default()
        },
    )
    .await;
    w.vk = Some(vk);
    crate::wait_node_ready(w).await;
}

#[given(expr = "a pod {string} bound to another node")]
async fn pod_elsewhere(w: &mut Vkw, name: String) {
    // A node that does not exist: no kubelet ever runs the pod, and it stays bound there.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": format!("not-{}", w.node()),
                 "containers": [{"name": "c", "image": "registry.invalid/none"}]}
    }))
    .unwrap();
    w.pods().create(&PostParams::default(), &pod).await.unwrap();
}

/// A dry-run label patch, status patch and delete of pod `name`, as the VK: their statuses.
async fn writes(w: &Vkw, name: &str) -> Vec<(u16, String)> {
    let pods: Api<Pod> = Api::namespaced(as_vk(w).await, &w.ns);
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let label = json!({"metadata": {"labels": {"checked": "yes"}}});
    let condition = json!({"status": {"conditions": [{"type": "Checked", "status": "True"}]}});
    vec![
        status(pods.patch(name, &dry, &Patch::Merge(&label)).await),
        status(
            pods.patch_status(name, &dry, &Patch::Merge(&condition))
                .await,
        ),
        status(
            pods.delete(
                name,
                &DeleteParams {
                    dry_run: true,
                    ..DeleteParams::default()
                },
            )
            .await
            .map(|_| ()),
        ),
    ]
}

#[then(expr = "as the virtual kubelet, updating and deleting pod {string} are allowed")]
async fn writes_allowed(w: &mut Vkw, name: String) {
    let got = writes(w, &name).await;
    assert!(
        got.iter().all(|(code, _)| *code == 200),
        "patch, status patch and delete of {name}: {got:?}"
    );
}

#[then(expr = "as the virtual kubelet, updating and deleting pod {string} are refused: {string}")]
async fn writes_refused(w: &mut Vkw, name: String, why: String) {
    let got = writes(w, &name).await;
    assert!(
        got.iter()
            .all(|(code, msg)| *code == 403 && msg.contains(&why)),
        "patch, status patch and delete of {name} should be refused with {why:?}: {got:?}"
    );
}

#[then("as the virtual kubelet, its own Node and Lease can be read, another node's cannot")]
async fn nodes_and_leases(w: &mut Vkw) {
    let node = w.node();
    // Another node of the cluster, with its kubelet's heartbeat Lease.
    let other = Api::<Node>::all(w.c())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .find(|n| *n != node)
        .expect("the cluster has another node");
    let c = as_vk(w).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let leases: Api<Lease> = Api::namespaced(c, "kube-node-lease");
    let got = [
        ("own node", status(nodes.get(&node).await)),
        ("own lease", status(leases.get(&node).await)),
        ("other node", status(nodes.get(&other).await)),
        ("other lease", status(leases.get(&other).await)),
        // Listed for the cluster's own networks (pod ranges, node addresses: pods::networks).
        ("all nodes", status(nodes.list(&Default::default()).await)),
        (
            "other node patched",
            status(
                nodes
                    .patch(
                        &other,
                        &PatchParams {
                            dry_run: true,
                            ..PatchParams::default()
                        },
                        &Patch::Merge(&json!({"metadata": {"labels": {"checked": "yes"}}})),
                    )
                    .await,
            ),
        ),
    ];
    let codes: Vec<_> = got.iter().map(|(what, (code, _))| (*what, *code)).collect();
    assert_eq!(
        codes,
        [
            ("own node", 200),
            ("own lease", 200),
            ("other node", 403),
            ("other lease", 403),
            ("all nodes", 200),
            ("other node patched", 403)
        ],
        "{got:?}"
    );
}

#[then(
    expr = "as the virtual kubelet, Secrets can be read and EndpointSlices written in this scenario's namespace, not in namespace {string}"
)]
async fn secrets_where_allowed(w: &mut Vkw, other: String) {
    let c = as_vk(w).await;
    // Authorization comes before the lookup: 404 means allowed to read, 403 refused.
    let mine = status(
        Api::<Secret>::namespaced(c.clone(), &w.ns)
            .get("absent")
            .await,
    );
    let theirs = status(
        Api::<Secret>::namespaced(c.clone(), &other)
            .get("absent")
            .await,
    );
    assert_eq!((mine.0, theirs.0), (404, 403), "{mine:?} {theirs:?}");
    // The EndpointSlices of offloaded pods' Services: written where pods may run, not elsewhere.
    let slices =
        |ns: &str| Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(c.clone(), ns);
    let mine = status(
        slices(&w.ns)
            .delete("absent", &Default::default())
            .await
            .map(|_| ()),
    );
    let theirs = status(
        slices(&other)
            .delete("absent", &Default::default())
            .await
            .map(|_| ()),
    );
    assert_eq!(
        (mine.0, theirs.0),
        (404, 403),
        "EndpointSlices: {mine:?} {theirs:?}"
    );
}

/// A server-side dry-run create as the VK: its status.
async fn dry_create<K>(api: &Api<K>, obj: &K) -> (u16, String)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    status(api.create(&pp, obj).await)
}

#[then(
    expr = "as the virtual kubelet, only EndpointSlices labelled as its own can be written: {string}"
)]
async fn slices_labelled(w: &mut Vkw, why: String) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let api: Api<EndpointSlice> = Api::namespaced(as_vk(w).await, &w.ns);
    let slice = |managed_by: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "checked", "labels": {
                "endpointslice.kubernetes.io/managed-by": managed_by,
                "kubernetes.io/service-name": "checked"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["198.18.0.1"]}]
        }))
        .unwrap()
    };
    let ours = dry_create(&api, &slice("gpu-vk.io")).await;
    let theirs = dry_create(&api, &slice("endpointslice-controller.k8s.io")).await;
    assert_eq!(ours.0, 200, "its own slice: {ours:?}");
    assert!(
        theirs.0 == 403 && theirs.1.contains(&why),
        "a slice of the Service controller's should be refused with {why:?}: {theirs:?}"
    );
}

#[then(
    expr = "as the virtual kubelet, its webhook cannot be made to fail closed, see Secrets or call another address: {string}"
)]
async fn webhook_pinned(w: &mut Vkw, why: String) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(as_vk(w).await);
    let name = format!("gpu-vk-{}", w.node());
    // What the VK registers (vk/src/admission/register.rs), as it is now in the cluster.
    let all = Api::<ValidatingWebhookConfiguration>::all(w.c());
    let current = conformance::harness::wait_for(
        std::time::Duration::from_secs(60),
        "the VK's webhook registered",
        || async { all.get_opt(&name).await.ok().flatten() },
    )
    .await;
    let mut base = current.clone();
    base.metadata = kube::api::ObjectMeta {
        name: Some(name),
        ..Default::default()
    };
    let widened = |f: &dyn Fn(&mut serde_json::Value)| -> ValidatingWebhookConfiguration {
        let mut v = serde_json::to_value(&base).unwrap();
        f(&mut v["webhooks"][0]);
        serde_json::from_value(v).unwrap()
    };
    // Applied as the VK applies it (server-side apply, dry run): what it has is allowed.
    let pp = PatchParams::apply("gpu-vk").force().dry_run();
    let name = base.metadata.name.clone().unwrap_or_default();
    let same = status(api.patch(&name, &pp, &Patch::Apply(&base)).await);
    assert_eq!(same.0, 200, "its own webhook as registered: {same:?}");
    for (what, c) in [
        (
            "failing closed",
            widened(&|h| h["failurePolicy"] = json!("Fail")),
        ),
        (
            "seeing Secrets",
            widened(&|h| h["rules"][0]["resources"] = json!(["secrets"])),
        ),
        (
            "calling another address",
            widened(&|h| h["clientConfig"] = json!({"url": "https://203.0.113.9/steal"})),
        ),
    ] {
        let got = status(api.patch(&name, &pp, &Patch::Apply(&c)).await);
        assert!(
            got.0 == 403 && got.1.contains(&why),
            "its webhook {what} should be refused with {why:?}: {got:?}"
        );
    }
}

#[then(
    "the chart's NetworkPolicy lets only the API server's addresses reach the kubelet API and the admission check"
)]
async fn network_policy(w: &mut Vkw) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    // The API server's addresses, as the chart looked them up at install.
    let slices: Api<EndpointSlice> = Api::namespaced(w.c(), "default");
    let lp = kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes");
    let mut want: Vec<String> = slices
        .list(&lp)
        .await
        .expect("the kubernetes Service's EndpointSlices")
        .items
        .into_iter()
        .flat_map(|s| s.endpoints.into_iter().flatten().flat_map(|e| e.addresses))
        .map(|a| format!("{a}/{}", if a.contains(':') { 128 } else { 32 }))
        .collect();
    want.sort();
    want.dedup();
    assert!(!want.is_empty(), "the kubernetes Service lists no address");
    let policy = Api::<NetworkPolicy>::namespaced(w.c(), NAMESPACE)
        .get(&w.node())
        .await
        .expect("the chart's NetworkPolicy, named after the release");
    let spec = policy.spec.expect("a NetworkPolicy spec");
    let rules = spec.ingress.unwrap_or_default();
    let port_names =
        |r: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| -> Vec<String> {
            r.ports
                .iter()
                .flatten()
                .filter_map(|p| p.port.as_ref())
                .map(|p| match p {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                        s.clone()
                    }
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                        i.to_string()
                    }
                })
                .collect()
        };
    let api_server: Vec<_> = rules
        .iter()
        .filter(|r| port_names(r).contains(&"admission".to_owned()))
        .collect();
    assert_eq!(
        api_server.len(),
        1,
        "one rule for the admission port: {rules:?}"
    );
    let mut from: Vec<String> = api_server[0]
        .from
        .iter()
        .flatten()
        .map(|p| {
            assert!(
                p.pod_selector.is_none() && p.namespace_selector.is_none(),
                "the admission port is open to pods: {p:?}"
            );
            p.ip_block.as_ref().expect("an ipBlock").cidr.clone()
        })
        .collect();
    from.sort();
    assert_eq!(
        from, want,
        "the admission and kubelet ports' peers are not the API server's addresses"
    );
    assert!(port_names(api_server[0]).contains(&"kubelet".to_owned()));
    for r in &rules {
        let open = r.from.as_ref().is_none_or(|f| f.is_empty());
        assert!(
            !(open
                && (port_names(r)
                    .iter()
                    .any(|p| p == "kubelet" || p == "admission"))),
            "a rule opens the kubelet API or the admission check to every source: {r:?}"
        );
    }
}
