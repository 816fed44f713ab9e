//! Steps for provider incidents: empty, partial and failing lists (`POST /_admin/hide` and
//! `/_admin/faults` of the emulators, or the remote cluster's proxy), checked against the
//! provider's own call counters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use conformance::harness::*;
use cucumber::{then, when};
use kube::Api;

use crate::Vkw;

/// Remembers the replicas' workloads and the provider's create/delete counters before an
/// incident, for the checks after it.
pub async fn mark_incident(w: &mut Vkw, app: &str) {
    let mut before = BTreeMap::new();
    for p in w.replicas(app).await {
        let live = w.live_of(&uid(&p)).await;
        assert_eq!(
            live.len(),
            1,
            "replica {:?} before the incident",
            p.metadata.name
        );
        let id = live[0]["id"].as_str().unwrap_or_default().to_owned();
        before.insert(uid(&p), id);
    }
    w.incident = Some(Incident {
        workloads: before,
        creates: w.obs().counter("create").await,
        deletes: w.obs().counter("delete").await,
        retried: starts_retried(w).await,
    });
}

/// Starts the VK gave up at their deadline and made again so far in the scenario's namespace
/// (its `StartRetried` Events, repeats included): each is one create and one delete of its
/// own, which the realistic profile's starts that never run cause (`lab`).
pub async fn starts_retried(w: &Vkw) -> u64 {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.c(), &w.ns);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("StartRetried"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64))
        .sum()
}

/// What was true when an incident began.
#[derive(Debug)]
pub struct Incident {
    /// Pod UID -> provider id of its workload.
    workloads: BTreeMap<String, String>,
    creates: u64,
    deletes: u64,
    retried: u64,
}

#[when(expr = "the provider answers the next {int} lists empty")]
async fn empty_lists(w: &mut Vkw, lists: u32) {
    mark_incident(w, "serve").await;
    w.obs().hide_lists(lists, &[]).await;
}

#[when(
    expr = "the provider leaves the workload of one replica of deployment {string} out of the next {int} lists"
)]
async fn partial_lists(w: &mut Vkw, app: String, lists: u32) {
    mark_incident(w, &app).await;
    let victim = w.replicas(&app).await[0].clone();
    let id = w.live_of(&uid(&victim)).await[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    w.obs().hide_lists(lists, &[id]).await;
}

#[when(expr = "the provider's list fails for the next {int} calls")]
async fn failing_lists(w: &mut Vkw, calls: u32) {
    mark_incident(w, "serve").await;
    w.obs().fail_lists(calls).await;
}

#[then(
    expr = "for {int} seconds every replica of deployment {string} stays Running on its own workload"
)]
async fn stays_running(w: &mut Vkw, secs: u64, app: String) {
    let before = &w.incident.as_ref().expect("an incident began").workloads;
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        let pods = w.replicas(&app).await;
        let running: BTreeMap<String, &str> = pods.iter().map(|p| (uid(p), phase(p))).collect();
        for (pod_uid, id) in before {
            assert_eq!(
                running.get(pod_uid).copied(),
                Some("Running"),
                "replica {pod_uid} left Running during the incident: {running:?}"
            );
            let live = w.live_of(pod_uid).await;
            assert!(
                live.len() == 1 && live[0]["id"].as_str() == Some(id.as_str()),
                "replica {pod_uid} no longer runs on workload {id}: {live:?}"
            );
        }
        assert_eq!(
            pods.len(),
            before.len(),
            "replicas were replaced: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[then("the provider saw no create and no delete since the incident began")]
async fn no_calls(w: &mut Vkw) {
    calls_since(w, 0).await;
}

#[then(expr = "the provider saw exactly {int} create and no delete since the incident began")]
async fn creates_since(w: &mut Vkw, creates: u64) {
    calls_since(w, creates).await;
}

async fn calls_since(w: &mut Vkw, creates: u64) {
    let (c0, d0, r0) = match &w.incident {
        Some(i) => (i.creates, i.deletes, i.retried),
        None => (0, 0, 0),
    };
    // Let anything the incident might still trigger happen before counting.
    w.vk()
        .hold_still(
            "no create or delete the incident would trigger",
            4,
            Duration::ZERO,
        )
        .await;
    // A start retried at its deadline is one create and one delete besides those counted.
    let retried = (starts_retried(w).await - r0) as i64;
    let c = (w.obs().counter("create").await - c0) as i64 - retried;
    let d = (w.obs().counter("delete").await - d0) as i64 - retried;
    assert_eq!(
        (c, d),
        (creates as i64, 0),
        "provider creates and deletes since the incident began"
    );
}

#[when(expr = "the provider holds a second workload for one replica of deployment {string}")]
async fn duplicate(w: &mut Vkw, app: String) {
    mark_incident(w, &app).await;
    let victim = w.replicas(&app).await[0].clone();
    let name = victim.metadata.name.clone().unwrap_or_default();
    let vk = w.vk.as_ref().expect("a virtual kubelet");
    let workload = workload_name(&vk.cluster_id, &vk.node, &uid(&victim));
    w.victim = Some((name, uid(&victim)));
    let second = w.obs().inject(&workload).await;
    w.orphan = Some(second);
}

#[then(expr = "within {int} seconds that replica is back to exactly one workload, the one it had")]
async fn back_to_one(w: &mut Vkw, secs: u64) {
    let (_, pod_uid) = w.victim.clone().expect("a replica was picked");
    let had = w.incident.as_ref().expect("an incident began").workloads[&pod_uid].clone();
    let second = w.orphan.clone().unwrap_or_default();
    // The emulator took the second workload (the VK may already be deleting it, as it should,
    // so its presence is not looked for here: the delete counted below is the evidence)...
    assert!(!second.is_empty(), "the second workload was not injected");
    // ...then only the original remains.
    let live = wait_for(
        Duration::from_secs(secs),
        "one workload for the replica",
        || async {
            let l = w.live_of(&pod_uid).await;
            (l.len() == 1).then_some(l)
        },
    )
    .await;
    assert_eq!(
        live[0]["id"].as_str(),
        Some(had.as_str()),
        "the wrong workload was kept"
    );
    assert_ne!(had, second);
    // ...and exactly one workload was deleted to get there: the second one, once, even while
    // the provider goes on listing it as it ends (slurmctld lists a cancelled job until
    // `MinJobAge`). A few more lists first, so a delete repeated on them is counted.
    w.vk()
        .hold_still("no repeated delete of the duplicate", 8, Duration::ZERO)
        .await;
    let deletes_before = w.incident.as_ref().expect("an incident began").deletes;
    assert_eq!(
        w.obs().counter("delete").await - deletes_before,
        1,
        "the VK deleted more than the duplicate"
    );
}

#[then(expr = "that replica has an event {string}")]
async fn replica_event(w: &mut Vkw, reason: String) {
    let (name, _) = w.victim.clone().expect("a replica was picked");
    crate::has_event(w, name, reason).await;
}
