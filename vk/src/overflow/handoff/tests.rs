//! The hand-off's decisions on small clusters: two in-cluster nodes of 2 GPUs, production of
//! priority 100 on them, research of priority 1000.

use super::*;
use serde_json::json;
use std::time::Duration;

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn t(s: i64) -> String {
    Timestamp::from_second(1_800_000_000 + s)
        .unwrap()
        .to_string()
}

fn replica(name: &str, node: &str, created: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"),
            "creationTimestamp": t(created),
            "labels": {"app": "serve", "pod-template-hash": "h1", OPT_IN_LABEL: "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-h1",
                "uid": "rs", "controller": true}]},
        "spec": {"nodeName": node, "priority": 100, "containers": [{"name": "m", "image": "m",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn research(name: &str, created: i64, gpus: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "lab", "uid": format!("uid-{name}"),
            "creationTimestamp": t(created), "labels": {PREEMPTOR_LABEL: "true"}},
        "spec": {"priority": 1000, "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "train", "image": "t",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn settings() -> Settings {
    Settings {
        max_delay: Duration::from_secs(300),
        virtual_node: "gpu-vk".into(),
        warm_replicas: 0,
        research_namespaces: vec!["lab".into()],
        research_priority_classes: vec!["research-high".into()],
    }
}

fn cluster() -> (Vec<Node>, Vec<Pod>) {
    let nodes = vec![node("w1"), node("w2")];
    let pods = vec![
        replica("serve-a", "w1", 0),
        replica("serve-b", "w1", 10),
        replica("serve-c", "w2", 20),
        replica("serve-d", "w2", 30),
    ];
    (nodes, pods)
}

fn now(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn started(actions: &[Action]) -> Vec<Pod> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start(p) => Some((**p).clone()),
            _ => None,
        })
        .collect()
}

fn make_ready(mut p: Pod) -> Pod {
    p.metadata.uid = Some(format!("uid-{}", p.metadata.name.clone().unwrap()));
    p.status = serde_json::from_value(json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}))
    .unwrap();
    p
}

#[test]
fn research_that_needs_production_gpus_first_gets_stand_ins_of_the_youngest_replicas() {
    let (nodes, mut pods) = cluster();
    pods.push(research("train-0", 100, 2));
    let actions = plan(&nodes, &pods, &settings(), now(101));
    let s = started(&actions);
    assert_eq!(s.len(), 2, "{actions:?}");
    for x in &s {
        let m = &x.metadata;
        let labels = m.labels.as_ref().unwrap();
        assert!(
            !labels.contains_key("pod-template-hash"),
            "a stand-in is no replica yet"
        );
        assert_eq!(labels["app"], "serve", "its Service selects it");
        assert_eq!(labels[STANDIN_LABEL], "true");
        assert_eq!(
            m.annotations.as_ref().unwrap()[FOR_ANNOTATION],
            "uid-train-0"
        );
        assert!(m.owner_references.is_none(), "no controller yet");
        assert_eq!(
            x.spec.as_ref().unwrap().node_name.as_deref(),
            Some("gpu-vk")
        );
        assert!(m.uid.is_none() && x.status.is_none());
    }
    // Both from one node (2 GPUs), the fewest replicas that free them.
    let mut replaced: Vec<&str> = s
        .iter()
        .map(|x| x.metadata.annotations.as_ref().unwrap()[REPLACES_ANNOTATION].as_str())
        .collect();
    replaced.sort();
    assert_eq!(replaced, ["serve-a", "serve-b"]);
    // No release while they start.
    assert!(!actions.iter().any(|a| matches!(a, Action::Release { .. })));
}

#[test]
fn stand_ins_are_adopted_when_all_ready_and_the_gate_goes_once_the_gpus_are_free() {
    let (nodes, mut pods) = cluster();
    pods.push(research("train-0", 100, 1));
    let s = started(&plan(&nodes, &pods, &settings(), now(101)));
    assert_eq!(s.len(), 1);
    // Starting: nothing to do.
    pods.push(s[0].clone());
    let a = plan(&nodes, &pods, &settings(), now(110));
    assert!(a.is_empty(), "{a:?}");
    // Ready: the replaced replica gets the lowest cost and the stand-in the hash label.
    let last = pods.len() - 1;
    pods[last] = make_ready(pods[last].clone());
    let a = plan(&nodes, &pods, &settings(), now(160));
    assert_eq!(
        a,
        vec![Action::Adopt {
            standin: ("prod".into(), "serve-b-handoff".into()),
            replaced: ("prod".into(), "serve-b".into()),
            hash: "h1".into()
        }]
    );
    // Adopted, the replica gone: the GPU is free, the gate goes.
    pods[last].metadata.owner_references = pods[0].metadata.owner_references.clone();
    pods.retain(|p| p.metadata.name.as_deref() != Some("serve-b"));
    let a = plan(&nodes, &pods, &settings(), now(170));
    assert!(
        matches!(&a[..], [Action::Release { pod, timed_out: false, .. }] if pod.1 == "train-0"),
        "{a:?}"
    );
}

#[test]
fn several_research_pods_never_choose_one_replica_twice() {
    let (nodes, mut pods) = cluster();
    for i in 0..4 {
        pods.push(research(&format!("train-{i}"), 100 + i, 1));
    }
    let s = started(&plan(&nodes, &pods, &settings(), now(105)));
    let mut replaced: Vec<String> = s
        .iter()
        .map(|x| x.metadata.annotations.as_ref().unwrap()[REPLACES_ANNOTATION].clone())
        .collect();
    replaced.sort();
    assert_eq!(replaced, ["serve-a", "serve-b", "serve-c", "serve-d"]);
    // Next look, with them created: nothing chosen again.
    pods.extend(s);
    assert!(started(&plan(&nodes, &pods, &settings(), now(106))).is_empty());
}

/// The plan is only to release the gate, not for a timeout.
fn released_at_once(a: &[Action]) -> bool {
    matches!(
        a,
        [Action::Release {
            timed_out: false,
            ..
        }]
    )
}

#[test]
fn research_that_fits_or_waited_too_long_or_has_nothing_to_hand_off_is_released() {
    // Fits: a node with a free GPU.
    let nodes = vec![node("w1")];
    let pods = vec![replica("serve-a", "w1", 0), research("train-0", 100, 1)];
    let a = plan(&nodes, &pods, &settings(), now(101));
    assert!(released_at_once(&a), "{a:?}");
    // Two pods, one free GPU: one released, the other gets a stand-in.
    let pods = vec![
        replica("serve-a", "w1", 0),
        research("train-0", 100, 1),
        research("train-1", 101, 1),
    ];
    let a = plan(&nodes, &pods, &settings(), now(102));
    assert_eq!(
        a.iter()
            .filter(|a| matches!(a, Action::Release { .. }))
            .count(),
        1
    );
    assert_eq!(started(&a).len(), 1);
    // Waited past the maximum delay: released, its stand-in not adopted dropped.
    let (nodes, mut pods) = cluster();
    pods.push(research("train-0", 100, 1));
    let s = started(&plan(&nodes, &pods, &settings(), now(101)));
    pods.extend(s);
    let a = plan(&nodes, &pods, &settings(), now(401));
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::Release {
                timed_out: true,
                ..
            }
        )),
        "{a:?}"
    );
    assert!(
        a.contains(&Action::Drop(("prod".into(), "serve-b-handoff".into()))),
        "{a:?}"
    );
    // Nothing of lower priority (or not opted in) to hand off: released at once.
    let (nodes, mut pods) = cluster();
    for p in &mut pods {
        p.metadata.labels.as_mut().unwrap().remove(OPT_IN_LABEL);
    }
    pods.push(research("train-0", 100, 1));
    let a = plan(&nodes, &pods, &settings(), now(101));
    assert!(released_at_once(&a), "{a:?}");
}

#[test]
fn stand_ins_of_pods_no_longer_waiting_are_dropped_unless_adopted() {
    let (nodes, mut pods) = cluster();
    pods.push(research("train-0", 100, 1));
    let s = started(&plan(&nodes, &pods, &settings(), now(101)));
    pods.extend(s);
    // The research pod was deleted.
    pods.retain(|p| p.metadata.name.as_deref() != Some("train-0"));
    let a = plan(&nodes, &pods, &settings(), now(102));
    assert_eq!(
        a,
        vec![Action::Drop(("prod".into(), "serve-b-handoff".into()))]
    );
    // Once adopted, it is a replica like the others.
    let last = pods.len() - 1;
    pods[last].metadata.owner_references = pods[0].metadata.owner_references.clone();
    assert!(plan(&nodes, &pods, &settings(), now(103)).is_empty());
}

fn warm(n: u32) -> Settings {
    Settings {
        warm_replicas: n,
        ..settings()
    }
}

/// A research pod past its gate, running on `node`.
fn running_research(name: &str, node: &str) -> Pod {
    let mut p = research(name, 50, 1);
    let spec = p.spec.as_mut().unwrap();
    spec.scheduling_gates = None;
    spec.node_name = Some(node.into());
    p.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
    p
}

#[test]
fn while_research_is_active_each_replicaset_keeps_its_warm_replicas_and_only_then() {
    let (nodes, mut pods) = cluster();
    // No research: no warm replicas, however many are configured.
    assert!(plan(&nodes, &pods, &warm(2), now(60)).is_empty());
    pods.push(running_research("train-0", "w1"));
    let a = plan(&nodes, &pods, &warm(2), now(60));
    let s = started(&a);
    let names: Vec<&str> = s
        .iter()
        .map(|x| x.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        names,
        ["serve-a-warm", "serve-b-warm"],
        "copies of the oldest replicas"
    );
    for x in &s {
        let ann = x.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[warm::WARM_OF_ANNOTATION], "rs");
        assert!(!ann.contains_key(FOR_ANNOTATION) && !ann.contains_key(REPLACES_ANNOTATION));
        assert_eq!(
            x.spec.as_ref().unwrap().node_name.as_deref(),
            Some("gpu-vk")
        );
        assert!(
            !x.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("pod-template-hash")
        );
    }
    // Running: nothing more to do, and they are not taken for stand-ins of a gone pod.
    pods.extend(s.into_iter().map(make_ready));
    assert!(plan(&nodes, &pods, &warm(2), now(70)).is_empty());
    // Fewer wanted: the extra one goes.
    assert_eq!(
        plan(&nodes, &pods, &warm(1), now(71)),
        vec![Action::Drop(("prod".into(), "serve-b-warm".into()))]
    );
    // Research over: every unclaimed warm replica goes.
    pods.retain(|p| p.metadata.name.as_deref() != Some("train-0"));
    let mut a = plan(&nodes, &pods, &warm(2), now(80));
    a.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        a,
        vec![
            Action::Drop(("prod".into(), "serve-a-warm".into())),
            Action::Drop(("prod".into(), "serve-b-warm".into())),
        ]
    );
}

#[test]
fn a_pod_template_sets_its_own_warm_count() {
    let (nodes, mut pods) = cluster();
    for p in &mut pods {
        p.metadata.annotations =
            Some([(warm::WARM_REPLICAS_ANNOTATION.to_owned(), "1".to_owned())].into());
    }
    pods.push(running_research("train-0", "w1"));
    assert_eq!(started(&plan(&nodes, &pods, &warm(2), now(60))).len(), 1);
    // The operator's figure is a ceiling: a template cannot raise it.
    for p in pods
        .iter_mut()
        .filter(|p| p.metadata.name.as_deref() != Some("train-0"))
    {
        p.metadata.annotations =
            Some([(warm::WARM_REPLICAS_ANNOTATION.to_owned(), "3".to_owned())].into());
    }
    assert!(started(&plan(&nodes, &pods, &warm(0), now(60))).is_empty());
    assert_eq!(started(&plan(&nodes, &pods, &warm(1), now(60))).len(), 1);
}

#[test]
fn an_action_is_logged_by_its_keys_never_with_the_pods_env() {
    let mut r = replica("serve-a", "w1", 0);
    r.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": "TOKEN", "value": "s3cr3t"})).unwrap(),
    ]);
    let a = Action::Start(Box::new(standin(&r, "uid-x", "gpu-vk")));
    assert_eq!(a.summary(), "start stand-in prod/serve-a-handoff");
    assert!(
        format!("{a:?}").contains("s3cr3t"),
        "the Debug form would leak it"
    );
}

#[test]
fn research_counts_only_from_the_listed_namespaces_and_only_while_gated_or_placed() {
    let (nodes, mut pods) = cluster();
    // Gated in a namespace the operator does not list: released at once, nothing started.
    let mut elsewhere = research("train-x", 50, 4);
    elsewhere.metadata.namespace = Some("team-b".into());
    pods.push(elsewhere);
    let a = plan(&nodes, &pods, &warm(2), now(60));
    assert!(started(&a).is_empty(), "{a:?}");
    assert!(
        matches!(&a[..], [Action::Release { pod, why, .. }]
            if pod.1 == "train-x" && why.contains("namespace team-b is not a research namespace")),
        "{a:?}"
    );
    // A labelled research pod that is neither gated nor placed (Pending for ever) keeps no warm
    // stand-in running.
    pods.pop();
    let mut stuck = research("train-y", 50, 1);
    stuck.spec.as_mut().unwrap().scheduling_gates = None;
    pods.push(stuck);
    assert!(plan(&nodes, &pods, &warm(2), now(60)).is_empty());
    // A running one of another namespace counts for nothing either.
    pods.pop();
    let mut other = running_research("train-z", "w1");
    other.metadata.namespace = Some("team-b".into());
    pods.push(other);
    assert!(plan(&nodes, &pods, &warm(2), now(60)).is_empty());
}

#[test]
fn a_pod_of_another_namespace_naming_the_replicaset_is_never_a_warm_stand_in() {
    let (nodes, mut pods) = cluster();
    pods.push(running_research("train-0", "w2"));
    // Another team's pod made to look like a warm stand-in of production's ReplicaSet.
    let mut fake = make_ready(started(&plan(&nodes, &pods, &warm(1), now(60))).remove(0));
    fake.metadata.namespace = Some("team-b".into());
    pods.push(fake);
    // Production still gets its own warm replica, and the fake is not counted for it.
    let a = plan(&nodes, &pods, &warm(1), now(61));
    assert_eq!(started(&a).len(), 1, "{a:?}");
    // A research pod's hand-off never claims it.
    pods.push(research("train-1", 100, 1));
    let a = plan(&nodes, &pods, &warm(1), now(101));
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Claim { standin, .. } if standin.0 == "team-b")),
        "{a:?}"
    );
}

#[test]
fn a_ready_warm_replica_is_claimed_instead_of_starting_a_stand_in() {
    let (nodes, mut pods) = cluster();
    pods.push(running_research("train-0", "w2"));
    let w = started(&plan(&nodes, &pods, &warm(1), now(60)));
    assert_eq!(w.len(), 1);
    pods.extend(w.into_iter().map(make_ready));
    // A second research pod needs a GPU: the warm replica takes the youngest replica's place.
    pods.push(research("train-1", 100, 1));
    let a = plan(&nodes, &pods, &warm(1), now(101));
    assert!(
        started(&a)
            .iter()
            .all(|x| x.metadata.name.as_deref() != Some("serve-b-handoff"))
    );
    let claim = Action::Claim {
        standin: ("prod".into(), "serve-a-warm".into()),
        for_uid: "uid-train-1".into(),
        replaces: "serve-b".into(),
    };
    assert!(a.contains(&claim), "{a:?}");
    // Claimed (as the controller patches it), Ready already: adopted at the next look.
    let x = pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some("serve-a-warm"))
        .unwrap();
    let ann = x.metadata.annotations.as_mut().unwrap();
    ann.insert(FOR_ANNOTATION.into(), "uid-train-1".into());
    ann.insert(REPLACES_ANNOTATION.into(), "serve-b".into());
    let a = plan(&nodes, &pods, &warm(1), now(102));
    assert!(
        a.contains(&Action::Adopt {
            standin: ("prod".into(), "serve-a-warm".into()),
            replaced: ("prod".into(), "serve-b".into()),
            hash: "h1".into()
        }),
        "{a:?}"
    );
    // And the pool is refilled meanwhile.
    assert_eq!(started(&a).len(), 1, "{a:?}");
}
