//! Steps of the overflow feature's refused pod: an opted-in pod the virtual kubelet cannot run
//! stays Pending in-cluster, and the webhook says why.

use std::time::{Duration, Instant};

use conformance::harness::*;
use cucumber::{then, when};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::Vkw;
use crate::overflow::placement;

#[when(expr = "I create an opted-in pod {string} with host networking that asks for {int} GPUs")]
async fn opted_in_refused(w: &mut Vkw, name: String, gpus: u32) {
    let vnode = w.node();
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"gpu-vk.io/overflow": "true"}},
        "spec": {"hostNetwork": true, "affinity": placement(&vnode),
            "containers": [{"name": "c", "image": crate::traffic::image("vk"), "imagePullPolicy": "Never",
                "command": ["sleep", "infinity"],
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
    }))
    .unwrap();
    let created = w.create_pod(p).await;
    let decision = created
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("overflow.gpu-vk.io/decision"))
        .cloned()
        .unwrap_or_default();
    assert!(
        decision.starts_with("refused: ") && decision.contains("hostNetwork"),
        "the webhook's decision: {decision:?}"
    );
    let tolerates = created
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key.as_deref() == Some("virtual-kubelet.io/provider"))
        });
    assert!(
        !tolerates,
        "a refused pod must not tolerate the virtual node"
    );
}

#[then(expr = "pod {string} stays Pending and unscheduled for {int} seconds")]
async fn stays_pending(w: &mut Vkw, name: String, secs: u64) {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        let p = w.get(&name).await.expect("the pod exists");
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(node, None, "pod {name} was scheduled");
        assert_eq!(phase(&p), "Pending");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
