//! Steps on Deployments and deletion, restarts of the virtual kubelet, and garbage collection.

use super::*;

// ----------------------------------------------------------------------------------------------
// Deployments and deletion

#[given(regex = r#"^a deployment "([^"]+)" with (\d+) (interruptible )?GPU replicas is Running$"#)]
pub(super) async fn deployment(w: &mut Vkw, name: String, n: usize, interruptible: String) {
    let annotations = if interruptible.is_empty() {
        json!({})
    } else {
        json!({"gpu-vk.io/interruptible": "true"})
    };
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": pod_spec(&w.node(), 1)}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let pods = w.wait_replicas(&name, n).await;
    for p in &pods {
        assert_eq!(w.live_of(&uid(p)).await.len(), 1);
    }
}

#[when(expr = "I delete one replica of deployment {string}")]
pub(super) async fn delete_replica(w: &mut Vkw, app: String) {
    pick_replica(w, &app).await;
    let (name, _) = w.victim.clone().unwrap();
    w.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

pub(super) async fn gone_with_workload(w: &Vkw, name: &str, pod_uid: &str) {
    wait_for(
        wait(),
        &format!("pod {name} and its workload gone"),
        || async {
            let pod_gone = w.get(name).await.is_none_or(|p| uid(&p) != pod_uid);
            (pod_gone && w.live_of(pod_uid).await.is_empty()).then_some(())
        },
    )
    .await;
}

#[then("that replica is gone and so is its workload")]
pub(super) async fn victim_gone(w: &mut Vkw) {
    let (name, u) = w.victim.clone().unwrap();
    gone_with_workload(w, &name, &u).await;
}

#[then("the workloads of the other replicas are untouched")]
pub(super) async fn others_untouched(w: &mut Vkw) {
    for u in w.others.clone() {
        assert_eq!(
            w.live_of(&u).await.len(),
            1,
            "a sibling's workload was touched"
        );
    }
}

#[then(
    regex = r#"^deployment "([^"]+)" (?:returns to|has) (\d+) Running replicas?, (?:each )?with exactly one workload$"#
)]
pub(super) async fn deployment_back(w: &mut Vkw, app: String, n: usize) {
    let pods = w.wait_replicas(&app, n).await;
    for p in &pods {
        let live = wait_for(wait(), "one workload per replica", || async {
            let l = w.live_of(&uid(p)).await;
            (l.len() == 1).then_some(l)
        })
        .await;
        assert_eq!(live.len(), 1);
    }
}

#[when(expr = "I scale deployment {string} to {int} replica(s)")]
pub(super) async fn scale(w: &mut Vkw, app: String, n: i32) {
    let api: Api<Deployment> = Api::namespaced(w.c(), &w.ns);
    api.patch(
        &app,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": n}})),
    )
    .await
    .unwrap();
}

#[then(expr = "the provider runs exactly {int} workload(s) of this node")]
pub(super) async fn exactly_ours(w: &mut Vkw, n: usize) {
    wait_for(
        wait(),
        &format!("{n} live workloads of this node"),
        || async { (w.ours().await.len() == n).then_some(()) },
    )
    .await;
}

#[when(expr = "I delete pod {string}")]
pub(super) async fn delete_pod(w: &mut Vkw, name: String) {
    w.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[when(expr = "I force delete pod {string}")]
pub(super) async fn force_delete(w: &mut Vkw, name: String) {
    w.pods()
        .delete(
            &name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

#[then(expr = "pod {string} is gone and so is its workload")]
pub(super) async fn pod_gone(w: &mut Vkw, name: String) {
    let u = w.uids[&name].clone();
    gone_with_workload(w, &name, &u).await;
}

// ----------------------------------------------------------------------------------------------
// Restarts

#[when("the virtual kubelet is stopped")]
pub(super) async fn vk_stop(w: &mut Vkw) {
    w.vk().kill9().await;
}

/// Starts the VK again and returns once it has finished its start-up reconcile (its log says
/// so): what a step checks next is what the new VK derived, not what the old one left.
#[when("the virtual kubelet is started again")]
pub(super) async fn vk_start(w: &mut Vkw) {
    let before = w.vk().reconciles();
    w.vk().restart();
    w.vk().wait_reconciled(before).await;
}

#[then(expr = "pod {string} is Running with the same workload as before")]
pub(super) async fn same_workload(w: &mut Vkw, name: String) {
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0]["id"].as_str().unwrap(),
        w.workloads[&name],
        "the workload was replaced"
    );
}

#[then("every pod has exactly one workload at the provider")]
pub(super) async fn one_each(w: &mut Vkw) {
    let pods = w.pods().list(&Default::default()).await.unwrap().items;
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let live = wait_for(wait(), "one workload per pod", || async {
            let l = w.live_of(&uid(p)).await;
            (l.len() == 1).then_some(l)
        })
        .await;
        assert_eq!(live.len(), 1, "pod {:?}", p.metadata.name);
    }
}

#[then("no workload was created twice")]
pub(super) async fn no_duplicates(w: &mut Vkw) {
    let prefix = w.prefix();
    let all = w.obs().workloads().await;
    let mut per_uid: HashMap<String, usize> = HashMap::new();
    for x in &all {
        if let Some(n) = x["name"].as_str().filter(|n| n.starts_with(&prefix)) {
            *per_uid.entry(n.to_owned()).or_default() += 1;
        }
    }
    let dups: Vec<_> = per_uid.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dups.is_empty(),
        "workloads created more than once: {dups:?}"
    );
    assert!(
        w.obs().creates(&prefix).await <= w.all_uids.len(),
        "more creates than pods"
    );
}

#[then("the provider runs no workload without a pod")]
pub(super) async fn no_leaks(w: &mut Vkw) {
    let pods: HashSet<String> = w
        .pods()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(uid)
        .collect();
    wait_for(wait(), "no leaked workloads", || async {
        let ours = w.ours().await;
        ours.iter()
            .all(|x| {
                x["name"]
                    .as_str()
                    .is_some_and(|n| pods.iter().any(|u| n.ends_with(u.as_str())))
            })
            .then_some(())
    })
    .await;
}

#[when(
    expr = "{int} GPU pods are created and {int} of them deleted while the virtual kubelet is killed {int} times at random moments"
)]
pub(super) async fn churn(w: &mut Vkw, n: usize, deleted: usize, kills: usize) {
    use rand_like::pick;
    let node = w.node();
    let mut names = Vec::new();
    let mut kills_left = kills;
    for i in 0..n {
        let name = format!("churn-{i}");
        w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
        names.push(name);
        if i < deleted {
            // Delete an earlier pod, sometimes before the VK saw it.
            let victim = names[pick(names.len())].clone();
            let _ = w.pods().delete(&victim, &DeleteParams::default()).await;
        }
        if kills_left > 0 && pick(n / kills + 1) == 0 {
            let after = pick(400) as u64;
            println!("    (killing the VK {after} ms after creating pod churn-{i})");
            tokio::time::sleep(Duration::from_millis(after)).await;
            w.vk().kill9().await;
            w.vk().restart();
            kills_left -= 1;
        }
        tokio::time::sleep(Duration::from_millis(pick(150) as u64)).await;
    }
    while kills_left > 0 {
        let after = pick(600) as u64;
        println!("    (killing the VK {after} ms after the last pod)");
        tokio::time::sleep(Duration::from_millis(after)).await;
        w.vk().kill9().await;
        w.vk().restart();
        kills_left -= 1;
    }
    w.vk().kill9().await;
}

/// Random moments from the run's printed, settable seed (`CONFORMANCE_SEED`,
/// [`conformance::harness::lab::seed`]): a splitmix64 sequence, so a run can be replayed (with
/// scenarios side by side, each draws from the shared sequence in the order they reach it).
mod rand_like {
    use std::sync::atomic::{AtomicU64, Ordering};

    static STATE: AtomicU64 = AtomicU64::new(0);

    fn next() -> u64 {
        let _ = STATE.compare_exchange(
            0,
            conformance::harness::lab::seed(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let mut z = STATE
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn pick(n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (next() % n as u64) as usize
        }
    }
}

#[then("every remaining pod becomes Running")]
pub(super) async fn remaining_running(w: &mut Vkw) {
    wait_for(
        Duration::from_secs(90),
        "remaining pods Running",
        || async {
            let pods = w.pods().list(&Default::default()).await.unwrap().items;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let terminating = pods.len() - live.len();
            (terminating == 0 && live.iter().all(|p| phase(p) == "Running")).then_some(())
        },
    )
    .await;
}

// ----------------------------------------------------------------------------------------------
// Garbage collection

#[given("a workload owned by this node whose pod does not exist")]
pub(super) async fn orphan(w: &mut Vkw) {
    let vk = w.vk.as_ref().unwrap();
    let (name, _) = w.inject_name(&vk.cluster_id, &vk.node);
    w.obs().inject(&name).await;
    w.orphan = Some(name);
}

#[given("a workload owned by another node of this cluster")]
pub(super) async fn foreign_node(w: &mut Vkw) {
    let cluster = w.vk.as_ref().unwrap().cluster_id.clone();
    let (name, _) = w.inject_name(&cluster, "another-node");
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[given("a workload owned by this node name in another cluster")]
pub(super) async fn foreign_cluster(w: &mut Vkw) {
    let node = w.node();
    let (name, _) = w.inject_name("another-cluster", &node);
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[given("a workload that no virtual kubelet created")]
pub(super) async fn unowned(w: &mut Vkw) {
    let name = unique("notebook");
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[then(expr = "that workload is deleted within {int} seconds")]
#[when(expr = "that workload is deleted within {int} seconds")]
pub(super) async fn orphan_deleted(w: &mut Vkw, secs: u64) {
    let name = w.orphan.clone().unwrap();
    wait_for(Duration::from_secs(secs), "orphan collected", || async {
        (!w.obs()
            .live()
            .await
            .iter()
            .any(|x| x["name"] == name.as_str()))
        .then_some(())
    })
    .await;
}

#[then(expr = "the other {int} workloads are still running")]
pub(super) async fn foreign_kept(w: &mut Vkw, n: usize) {
    // A collection pass more than the one that took the orphan: its grace, and a poll or two.
    let grace = Duration::from_millis(w.vk().timings.gc_grace_ms);
    w.vk()
        .hold_still(
            "the collector to leave other owners' workloads alone",
            2,
            grace,
        )
        .await;
    let live = w.obs().live().await;
    let kept = w
        .foreign
        .iter()
        .filter(|f| live.iter().any(|x| x["name"] == f.as_str()))
        .count();
    assert_eq!(kept, n, "foreign workloads were touched");
}
