//! Reclaim's decisions: the snapshot, the fit and the step, on hand-made clusters.
use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

fn node(name: &str, gpus: i64, virtual_: bool) -> Node {
    let labels = if virtual_ {
        json!({"type": "virtual-kubelet"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn pod(name: &str, node: Option<&str>, gpus: i64, labels: Value, owner: &str, age: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "labels": labels,
            "creationTimestamp": format!("2026-12-01T00:00:{age:02}Z"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": owner, "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "m", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    }))
    .unwrap()
}
use serde_json::Value;

fn both() -> Value {
    json!({"gpu-vk.io/overflow": "true", "gpu-vk.io/reclaim": "true"})
}

const SETTINGS: Settings = Settings {
    settle: Duration::from_secs(30),
    interval: Duration::from_secs(5),
    virtual_node: None,
    max_failed_moves: 3,
};

#[test]
fn a_controller_moves_only_the_replicas_of_its_own_virtual_node() {
    let nodes = vec![
        node("w1", 2, false),
        node("vk-a", 1000, true),
        node("vk-b", 1000, true),
    ];
    let pods = [
        pod("serve-a", Some("vk-a"), 1, both(), "rs1", 2),
        pod("serve-b", Some("vk-b"), 1, both(), "rs2", 1),
    ];
    let mine = snapshot(&own_nodes(nodes.clone(), Some("vk-a")), &pods);
    let names: Vec<&str> = mine.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["serve-a"],
        "only vk-a's replica is this controller's"
    );
    assert_eq!(mine.offloaded_owners, ["rs1"]);
    let all = snapshot(&own_nodes(nodes, None), &pods);
    let names: Vec<&str> = all.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["serve-b", "serve-a"],
        "oldest first, on every virtual node"
    );
}

#[test]
fn free_gpus_and_candidates_come_from_nodes_and_pods() {
    let nodes = [
        node("w1", 2, false),
        node("w2", 2, false),
        node("vk", 1000, true),
    ];
    let pods = [
        pod("research-0", Some("w1"), 2, json!({}), "job", 1),
        pod("serve-a", Some("w2"), 1, both(), "rs1", 2),
        pod("serve-b", Some("vk"), 1, both(), "rs1", 3),
        pod(
            "serve-c",
            Some("vk"),
            1,
            json!({"gpu-vk.io/overflow": "true"}),
            "rs1",
            4,
        ),
    ];
    let s = snapshot(&nodes, &pods);
    assert_eq!((s.allocatable, s.allocated), (4, 3));
    let free: BTreeMap<&str, i64> = s
        .rooms
        .iter()
        .map(|(n, r)| (n.as_str(), r.free.gpus))
        .collect();
    assert_eq!(free, BTreeMap::from([("w1", 0), ("w2", 1)]));
    // serve-c did not opt in to reclaim: it is offloaded but never moved.
    assert_eq!(
        s.candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["serve-b"]
    );
    assert_eq!(s.offloaded_owners.len(), 2);
    assert_eq!(
        s.fit(&BTreeSet::new()).map(|(c, n)| (c.name.as_str(), n)),
        Some(("serve-b", "w2"))
    );
}

#[test]
fn pods_refused_by_the_webhook_that_wait_unscheduled_are_found_with_the_reason() {
    let mut waiting = pod(
        "big",
        None,
        3,
        json!({"gpu-vk.io/overflow": "true"}),
        "rs2",
        1,
    );
    waiting.metadata.annotations = Some(BTreeMap::from([(
        super::super::DECISION_ANNOTATION.to_owned(),
        "refused: hostNetwork, hostPID and hostIPC are not supported".to_owned(),
    )]));
    let mut admitted = waiting.clone();
    admitted.metadata.name = Some("ok".into());
    admitted.metadata.annotations = Some(BTreeMap::from([(
        super::super::DECISION_ANNOTATION.to_owned(),
        "offload".to_owned(),
    )]));
    let mut running = waiting.clone();
    running.metadata.name = Some("placed".into());
    running.spec.as_mut().unwrap().node_name = Some("w1".into());
    let pods = [waiting, admitted, running];
    let found = refused_and_pending(&pods);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0.metadata.name.as_deref(), Some("big"));
    assert_eq!(
        found[0].1,
        "hostNetwork, hostPID and hostIPC are not supported"
    );
}

#[test]
fn nothing_moves_while_in_cluster_gpus_are_full() {
    let nodes = [node("w1", 1, false), node("vk", 1000, true)];
    let pods = [
        pod("research", Some("w1"), 1, json!({}), "job", 1),
        pod("serve-b", Some("vk"), 1, both(), "rs1", 2),
    ];
    let s = snapshot(&nodes, &pods);
    assert!(s.fit(&BTreeSet::new()).is_none());
    let mut st = State::default();
    let t0 = Instant::now();
    assert_eq!(
        st.step(&s, &SETTINGS, t0 + Duration::from_secs(600)),
        Step::Wait
    );
}

#[test]
fn a_move_waits_for_the_settle_period_and_then_one_at_a_time() {
    let nodes = [node("w1", 2, false), node("vk", 1000, true)];
    let pods = [
        pod("serve-b", Some("vk"), 1, both(), "rs1", 2),
        pod("serve-c", Some("vk"), 1, both(), "rs1", 3),
    ];
    let s = snapshot(&nodes, &pods);
    let mut st = State::default();
    let t0 = Instant::now();
    assert_eq!(st.step(&s, &SETTINGS, t0), Step::Wait);
    assert_eq!(
        st.step(&s, &SETTINGS, t0 + Duration::from_secs(29)),
        Step::Wait
    );
    let Step::Move(c, n) = st.step(&s, &SETTINGS, t0 + Duration::from_secs(30)) else {
        panic!("expected a move after the settle period")
    };
    assert_eq!(
        (c.name.as_str(), n.as_str()),
        ("serve-b", "w1"),
        "the oldest replica first"
    );
    // Its replacement is pending: no second move, however long GPUs stay free.
    let mut pending = pods.to_vec();
    pending[0] = pod("serve-b2", None, 1, both(), "rs1", 9);
    let s2 = snapshot(&nodes, &pending);
    assert_eq!(
        st.step(&s2, &SETTINGS, t0 + Duration::from_secs(90)),
        Step::Wait
    );
}

#[test]
fn a_replacement_that_lands_on_the_virtual_node_again_doubles_the_settle_period() {
    let nodes = [node("w1", 1, false), node("vk", 1000, true)];
    let pods = [pod("serve-b", Some("vk"), 1, both(), "rs1", 2)];
    let s = snapshot(&nodes, &pods);
    let mut st = State::default();
    let t0 = Instant::now();
    st.step(&s, &SETTINGS, t0);
    assert!(matches!(
        st.step(&s, &SETTINGS, t0 + Duration::from_secs(30)),
        Step::Move(..)
    ));
    // The replacement went to the virtual node again (someone took w1's GPU meanwhile),
    // and w1 is free again right after: the next move needs 60 s, not 30.
    let again = [pod("serve-b2", Some("vk"), 1, both(), "rs1", 9)];
    let s2 = snapshot(&nodes, &again);
    let t1 = t0 + Duration::from_secs(40);
    assert_eq!(st.step(&s2, &SETTINGS, t1), Step::Wait);
    assert_eq!(
        st.step(&s2, &SETTINGS, t1 + Duration::from_secs(59)),
        Step::Wait
    );
    assert!(matches!(
        st.step(&s2, &SETTINGS, t1 + Duration::from_secs(60)),
        Step::Move(..)
    ));
}

#[test]
fn a_replica_pinned_to_the_virtual_node_is_never_moved_and_says_why() {
    let nodes = [node("w1", 2, false), node("vk", 1000, true)];
    let mut pinned = pod("pinned", Some("vk"), 1, both(), "rs1", 2);
    pinned.spec.as_mut().unwrap().node_selector =
        Some(BTreeMap::from([("type".into(), "virtual-kubelet".into())]));
    let s = snapshot(&nodes, &[pinned]);
    assert!(
        s.fit(&BTreeSet::new()).is_none(),
        "w1 has free GPUs, but its labels do not match the selector"
    );
    let never = s.never_fit();
    assert_eq!(never.len(), 1);
    assert_eq!(
        never[0].1,
        "w1: node selector type=virtual-kubelet does not match"
    );
    let mut st = State::default();
    let t0 = Instant::now();
    for secs in [0, 30, 600] {
        assert_eq!(
            st.step(&s, &SETTINGS, t0 + Duration::from_secs(secs)),
            Step::Wait
        );
    }
}

#[test]
fn cpu_and_memory_in_use_on_a_node_count_as_much_as_gpus() {
    let mut w1 = node("w1", 2, false);
    let alloc = w1.status.as_mut().unwrap().allocatable.as_mut().unwrap();
    alloc.insert("cpu".into(), Quantity("4".into()));
    alloc.insert("memory".into(), Quantity("16Gi".into()));
    let nodes = [w1, node("vk", 1000, true)];
    let mut hungry = pod("hungry", Some("w1"), 0, json!({}), "other", 1);
    hungry.spec.as_mut().unwrap().containers[0].resources =
        serde_json::from_value(json!({"requests": {"cpu": "3500m", "memory": "8Gi"}})).unwrap();
    let mut serve = pod("serve", Some("vk"), 1, both(), "rs1", 2);
    serve.spec.as_mut().unwrap().containers[0].resources = serde_json::from_value(
        json!({"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}),
    )
    .unwrap();
    let s = snapshot(&nodes, &[hungry.clone(), serve.clone()]);
    assert!(
        s.fit(&BTreeSet::new()).is_none(),
        "half a core is left on w1, the replica asks for one"
    );
    assert!(s.never_fit().is_empty(), "w1 could take it once freed");
    let s = snapshot(&nodes, &[serve]);
    assert_eq!(
        s.fit(&BTreeSet::new()).map(|(c, n)| (c.name.as_str(), n)),
        Some(("serve", "w1"))
    );
}

/// Steps every 5 s from `t` until a move; the time of the move.
fn until_move(st: &mut State, s: &Snapshot, mut t: Instant) -> Instant {
    for _ in 0..1000 {
        match st.step(s, &SETTINGS, t) {
            Step::Move(..) => return t,
            Step::Wait => t += Duration::from_secs(5),
            other => panic!("{other:?}"),
        }
    }
    panic!("no move")
}

#[test]
fn a_replicaset_whose_replacements_keep_landing_on_the_virtual_node_is_given_up() {
    let nodes = [node("w1", 1, false), node("vk", 1000, true)];
    let on_vk = |name: &str, owner: &str, age| {
        snapshot(&nodes, &[pod(name, Some("vk"), 1, both(), owner, age)])
    };
    let mut st = State::default();
    let mut t = until_move(&mut st, &on_vk("serve-a", "rs1", 1), Instant::now());
    // Twice the replacement lands on the virtual node again (w1 looks free, yet something
    // keeps it out): the controller keeps trying, less often.
    for (n, name) in ["serve-b", "serve-c"].into_iter().enumerate() {
        let again = on_vk(name, "rs1", 2 + n as i64);
        t = until_move(&mut st, &again, t + Duration::from_secs(10));
    }
    // The third time it gives up on the ReplicaSet, and says so once.
    let again = on_vk("serve-d", "rs1", 5);
    t += Duration::from_secs(10);
    match st.step(&again, &SETTINGS, t) {
        Step::GiveUp(c, n) => assert_eq!((c.owner_name.as_str(), n), ("rs", 3)),
        other => panic!("expected to give up, got {other:?}"),
    }
    for secs in [10, 1_000, 100_000] {
        assert_eq!(
            st.step(&again, &SETTINGS, t + Duration::from_secs(secs)),
            Step::Wait,
            "the ReplicaSet's replicas stay where they are"
        );
    }
    // A refused eviction of another move forgets that move, not the ReplicaSet given up.
    st.forget_move();
    assert!(st.stopped.contains("rs1"));
    // A new ReplicaSet (a rollout) is moved as before.
    let t = t + Duration::from_secs(100_005);
    until_move(&mut st, &on_vk("serve-new", "rs2", 6), t);
}

#[test]
fn a_successful_move_forgets_earlier_failures() {
    let nodes = [node("w1", 1, false), node("vk", 1000, true)];
    let on_vk = |name: &str, age| snapshot(&nodes, &[pod(name, Some("vk"), 1, both(), "rs1", age)]);
    let mut st = State::default();
    let mut t = Instant::now();
    for round in 0..4 {
        // Two failed moves, then one that works (the replica left the virtual node), ...
        t = until_move(
            &mut st,
            &on_vk("a", round * 4 + 1),
            t + Duration::from_secs(10),
        );
        t = until_move(
            &mut st,
            &on_vk("b", round * 4 + 2),
            t + Duration::from_secs(10),
        );
        t = until_move(
            &mut st,
            &on_vk("c", round * 4 + 3),
            t + Duration::from_secs(10),
        );
        let gone = snapshot(&nodes, &[]);
        assert_eq!(
            st.step(&gone, &SETTINGS, t + Duration::from_secs(10)),
            Step::Wait
        );
        t += Duration::from_secs(10);
    }
    // ... never adds up to giving up.
    assert!(st.stopped.is_empty());
}
