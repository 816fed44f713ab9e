//! The fit rules on hand-made pods and nodes, each against the scheduler's documented rule.
use super::*;
use serde_json::{Value, json};

fn pod(spec: Value) -> Pod {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "m", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
    }
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

fn room(labels: Value, taints: Value) -> Room {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "w1", "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}}
    }))
    .unwrap();
    Room::of(&node)
}

fn plain() -> Room {
    room(json!({"zone": "a", "gpu.count": "2"}), json!([]))
}

#[test]
fn requests_default_to_limits_and_count_init_containers_and_overhead() {
    let p = pod(json!({
        "containers": [
            {"name": "a", "image": "x", "resources": {"requests": {"cpu": "500m"},
                "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}}},
            {"name": "b", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}
        ],
        "initContainers": [{"name": "i", "image": "x",
            "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
        "overhead": {"memory": "16Mi"}
    }));
    let mi = 1024 * 1024;
    assert_eq!(
        requests(&p),
        Amounts {
            gpus: 1,
            // The init container's 2 cores are more than the containers' 750m together.
            milli_cpu: 2000,
            memory: 1024 * mi + 256 * mi + 16 * mi,
        }
    );
}

#[test]
fn a_node_selector_must_match_every_label() {
    let needs = |sel: Value| Needs::of(&pod(json!({"nodeSelector": sel})));
    assert_eq!(needs(json!({"zone": "a"})).misfit(&plain()), None);
    assert_eq!(
        needs(json!({"zone": "a", "pool": "h100"})).misfit(&plain()),
        Some("node selector pool=h100 does not match".into())
    );
}

#[test]
fn required_node_affinity_ors_its_terms_and_ands_their_expressions() {
    let needs = |terms: Value| {
        Needs::of(&pod(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})))
    };
    let expr = |k: &str, op: &str, v: Value| json!({"key": k, "operator": op, "values": v});
    let fits = |terms: Value| needs(terms).misfit(&plain()).is_none();
    assert!(fits(
        json!([{"matchExpressions": [expr("zone", "In", json!(["a", "b"]))]}])
    ));
    assert!(!fits(
        json!([{"matchExpressions": [expr("zone", "NotIn", json!(["a"]))]}])
    ));
    assert!(fits(json!([
        {"matchExpressions": [expr("zone", "In", json!(["b"]))]},
        {"matchExpressions": [expr("zone", "Exists", Value::Null)]}
    ])));
    assert!(!fits(json!([{"matchExpressions": [
        expr("zone", "Exists", Value::Null),
        expr("pool", "Exists", Value::Null)
    ]}])));
    assert!(fits(
        json!([{"matchExpressions": [expr("pool", "DoesNotExist", Value::Null)]}])
    ));
    assert!(fits(
        json!([{"matchExpressions": [expr("gpu.count", "Gt", json!(["1"]))]}])
    ));
    assert!(!fits(
        json!([{"matchExpressions": [expr("gpu.count", "Lt", json!(["2"]))]}])
    ));
    assert!(fits(
        json!([{"matchFields": [expr("metadata.name", "In", json!(["w1"]))]}])
    ));
    assert!(!fits(
        json!([{"matchFields": [expr("metadata.name", "In", json!(["w2"]))]}])
    ));
    // An empty term matches nothing.
    assert!(!fits(json!([{}])));
    assert_eq!(
        needs(json!([{"matchExpressions": [expr("zone", "In", json!(["c"]))]}])).misfit(&plain()),
        Some("required node affinity does not match".into())
    );
}

#[test]
fn taints_that_keep_pods_off_must_be_tolerated() {
    let tainted = room(
        json!({}),
        json!([
            {"key": "dedicated", "value": "training", "effect": "NoSchedule"},
            {"key": "spot", "effect": "PreferNoSchedule"}
        ]),
    );
    let with = |tols: Value| Needs::of(&pod(json!({"tolerations": tols}))).misfit(&tainted);
    assert_eq!(
        with(json!([])),
        Some("untolerated taint dedicated=training:NoSchedule".into()),
        "PreferNoSchedule is no bar; NoSchedule is"
    );
    assert_eq!(
        with(json!([{"key": "dedicated", "operator": "Equal", "value": "training"}])),
        None
    );
    assert!(with(json!([{"key": "dedicated", "value": "serving"}])).is_some());
    assert_eq!(
        with(json!([{"key": "dedicated", "operator": "Exists"}])),
        None
    );
    assert_eq!(with(json!([{"operator": "Exists"}])), None);
    assert!(
        with(json!([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}])).is_some()
    );
}

#[test]
fn what_a_node_could_never_give_differs_from_what_it_lacks_now() {
    let mut busy = plain();
    busy.free = Amounts {
        gpus: 1,
        milli_cpu: 500,
        memory: 1 << 30,
    };
    let needs = |cpu: &str| {
        Needs::of(&pod(
            json!({"containers": [{"name": "m", "image": "x", "resources": {
            "requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": "1"}}}]}),
        ))
    };
    assert_eq!(needs("1").never_on(&busy), None);
    assert_eq!(needs("1").misfit(&busy), Some("insufficient cpu".into()));
    assert_eq!(needs("400m").misfit(&busy), None);
    assert_eq!(
        needs("16").never_on(&busy),
        Some("cpu requested exceeds the node's allocatable".into())
    );
}
