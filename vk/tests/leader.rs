//! Cluster tests of leader election on the real testbed: a new leader keeps its Lease renewed
//! from the moment it leads, whatever else it still has to do (labelling its pod).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::time::Duration;

use harness::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use vk::config::LeaderElection;
use vk::leader::{Elector, PodRef};

#[tokio::test]
async fn a_new_leader_renews_its_lease_while_its_pod_label_is_still_being_set() {
    let c = client().await;
    let ns = namespace(&c, "leader").await;
    let cfg: LeaderElection = serde_json::from_value(serde_json::json!({
        "enabled": true, "namespace": ns, "leaseName": "l",
        "leaseDurationMs": 2000, "renewDeadlineMs": 1500, "retryPeriodMs": 300
    }))
    .unwrap();
    // The pod to label does not exist: every patch fails, and labelling retries for ~27 s.
    let pod = PodRef {
        namespace: ns.clone(),
        name: "no-such-pod".into(),
    };
    let elector = Elector::new(c.clone(), cfg, "node-x", "me".into(), Some(pod));
    let term = tokio::time::timeout(
        Duration::from_secs(5),
        elector.acquire(std::future::pending()),
    )
    .await
    .expect("leading waited for the pod's label")
    .expect("a term");
    let leases: Api<Lease> = Api::namespaced(c.clone(), &ns);
    let renewed = || async {
        let l = leases.get("l").await.unwrap();
        let spec = l.spec.unwrap();
        (spec.holder_identity, spec.renew_time.map(|t| t.0))
    };
    let (holder, first) = renewed().await;
    // Two lease durations later the Lease is still ours and was renewed meanwhile.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (holder_later, later) = renewed().await;
    assert_eq!(holder.as_deref(), Some("me"));
    assert_eq!(holder_later.as_deref(), Some("me"));
    let gap = later.unwrap().duration_since(first.unwrap());
    assert!(
        gap >= jiff::SignedDuration::from_secs(3),
        "the Lease was renewed only {gap:?} later"
    );
    assert!(!term.is_lost(), "the term ended while labelling");
}
