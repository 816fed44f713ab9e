//! Steps for replicas electing a leader (`features/leader_election.feature`): the leader is
//! killed over and over while a deployment scales, and the provider's workloads are watched
//! the whole time for a pod with two live workloads at once.

use std::collections::BTreeMap;
use std::time::Duration;

use conformance::harness::*;
use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{LogParams, Patch, PatchParams};
use serde_json::json;

use crate::Vkw;

#[given(
    expr = "a virtual kubelet of {int} replicas electing a leader, with the provider under test"
)]
async fn replicas(w: &mut Vkw, n: u32) {
    crate::setup_provider(w).await;
    let providers = w.obs().provider_yaml(&crate::target());
    let vk = Vk::start_with(
        providers,
        VkOptions {
            replicas: n,
            ..VkOptions::default()
        },
    )
    .await;
    w.vk = Some(vk);
    crate::wait_node_ready(w).await;
}

#[when(
    expr = "the leader is killed {int} times while deployment {string} scales between {int} and {int} replicas"
)]
async fn kill_leader_during_churn(w: &mut Vkw, kills: u32, app: String, low: i32, high: i32) {
    let c = w.c();
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &w.ns);
    let prefix = w.vk.as_ref().unwrap().owner_prefix();
    let (vk, obs) = (w.vk.as_mut().unwrap(), w.provider.as_ref().unwrap());
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    // The provider's live workloads, every 200 ms for the whole churn: a duplicate lives at
    // least `lossLists` polls (1.5 s) before the VK deletes it, so none goes unseen.
    let watch_duplicates = async {
        let mut seen = BTreeMap::<String, usize>::new();
        while !*done_rx.borrow() {
            let mut by_name = BTreeMap::<String, usize>::new();
            for wl in obs.live_with_prefix(&prefix).await {
                *by_name
                    .entry(wl["name"].as_str().unwrap_or_default().to_owned())
                    .or_default() += 1;
            }
            for (name, n) in by_name.into_iter().filter(|(_, n)| *n > 1) {
                seen.insert(name, n);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    };
    let churn = async {
        let mut takeovers = Vec::new();
        for i in 0..kills {
            vk.wait_standbys(&c).await;
            // Alternate high and low sizes, so pods are created and deleted around each kill.
            let size = if i % 2 == 0 { high } else { low };
            deployments
                .patch(
                    &app,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": size}})),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(700)).await;
            let (old, took) = vk.kill_leader(&c).await;
            println!(
                "    kill {}: leader {old} killed, a standby led {took:.1?} after its last renewal",
                i + 1
            );
            takeovers.push(took);
        }
        let _ = done_tx.send(true);
        takeovers
    };
    let (duplicates, takeovers) = tokio::join!(watch_duplicates, churn);
    let mut sorted = takeovers.clone();
    sorted.sort();
    println!(
        "    takeover after a kill: min {:.1?}, median {:.1?}, max {:.1?} over {} kills",
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        sorted.len()
    );
    w.takeovers = takeovers;
    w.duplicates_seen = duplicates;
}

/// The election's own bound is the lease duration after the last renewal the standby saw, plus
/// a retry period; on top come the standby's API calls, which take seconds when the whole suite
/// runs side by side on two cores. Measured from the old leader's last renewal, not from the
/// kill: on kind a pod deleted without grace renews until its kubelet stops the container
/// (12.8 s from the kill once, in a flake hunt). A standby that waited out a default 15 s
/// lease, or never led, fails.
#[then(
    expr = "each time a standby led within {int} seconds of the old leader's last renewal \\(lease duration {int} s)"
)]
async fn takeovers_within(w: &mut Vkw, secs: u64, lease: u64) {
    assert!(
        (lease..15).contains(&secs),
        "the bound must tell a {lease} s lease from the 15 s default"
    );
    assert!(!w.takeovers.is_empty(), "no kill happened");
    let slow: Vec<_> = w
        .takeovers
        .iter()
        .filter(|t| **t > Duration::from_secs(secs))
        .collect();
    assert!(slow.is_empty(), "takeovers slower than {secs} s: {slow:?}");
}

#[then(expr = "no pod ever had two live workloads at once, and no replica reported a {string}")]
async fn no_duplicates(w: &mut Vkw, reason: String) {
    assert!(
        w.duplicates_seen.is_empty(),
        "workloads seen twice at once: {:?}",
        w.duplicates_seen
    );
    let events = crate::namespace_event_reasons(w).await;
    assert!(
        !events.contains(&reason),
        "a replica reported {reason}: {events:?}"
    );
}

#[then("the node is Ready")]
async fn node_ready(w: &mut Vkw) {
    let node = w.node();
    let n = Api::<Node>::all(w.c()).get(&node).await.unwrap();
    let ready = n
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    assert_eq!(
        ready.map(|c| c.status),
        Some("True".to_owned()),
        "node {node}"
    );
}

/// The API server reaches the leader's kubelet API (the Node's address and port are the
/// leader's; as pods, the kubelet Service selects the leader's pod): the answer is the logs, or
/// the VK's own refusal on a provider without logs, never a connection error. The replica asked
/// is a live one: after the churn, a replica being deleted (the scale-down just before) or a
/// Failed record has no workload whose logs a kubelet could serve. A failure says what each
/// replica was and who held the leader Lease.
#[then(expr = "the node's kubelet API answers a logs request for a replica of deployment {string}")]
async fn kubelet_api_answers(w: &mut Vkw, app: String) {
    let live = |p: &Pod| p.metadata.deletion_timestamp.is_none() && phase(p) == "Running";
    let all = w.replicas(&app).await;
    for p in all.iter().filter(|p| !live(p)) {
        println!("    not asked: {}", replica_state(p));
    }
    let replica = all
        .into_iter()
        .find(live)
        .and_then(|p| p.metadata.name)
        .unwrap_or_else(|| panic!("no Running replica of {app} to ask for logs"));
    let pods = w.pods();
    let c = w.c();
    wait_seeing(
        Duration::from_secs(30),
        "the leader's kubelet API to answer",
        || async {
            let e = match pods.logs(&replica, &LogParams::default()).await {
                Ok(_) => return Ok(()),
                Err(e) if e.to_string().contains("not supported") => return Ok(()),
                Err(e) => e,
            };
            let replicas: Vec<String> = w.replicas(&app).await.iter().map(replica_state).collect();
            let leader = match &w.vk {
                Some(vk) => vk.leader(&c).await,
                None => None,
            };
            Err(format!(
                "logs of {replica}: {e}; replicas: {replicas:?}; leader Lease held by {leader:?}"
            ))
        },
    )
    .await;
}

/// A replica as a failure or a skip names it: its name, phase, whether it is being deleted, and
/// its status message.
fn replica_state(p: &Pod) -> String {
    let deleting = if p.metadata.deletion_timestamp.is_some() {
        " (deleting)"
    } else {
        ""
    };
    let message = p
        .status
        .as_ref()
        .and_then(|s| s.message.as_deref())
        .unwrap_or_default();
    format!(
        "{} {}{deleting} {message}",
        p.metadata.name.as_deref().unwrap_or("?"),
        phase(p)
    )
}
