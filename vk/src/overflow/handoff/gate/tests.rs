//! Who is gated: research by namespace and PriorityClass or by the label, and the gate's patch.

use super::*;
use serde_json::json;

fn settings() -> Settings {
    Settings {
        max_delay: Duration::from_secs(300),
        virtual_node: "gpu-vk".into(),
        warm_replicas: 0,
        research_namespaces: vec!["lab".into()],
        research_priority_classes: vec!["research-high".into()],
    }
}

/// Research is known by namespace and PriorityClass, or by the label: a GPU pod of a research
/// namespace with a research class is gated without the label; nothing else of the namespace,
/// nothing of another namespace, and no pod without GPUs.
#[test]
fn the_gate_takes_research_by_namespace_and_priority_class_or_label() {
    let s = settings();
    let pod = |labels: serde_json::Value, class: Option<&str>, gpus: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"generateName": "train-", "labels": labels},
            "spec": {"priorityClassName": class, "containers": [{"name": "t", "image": "t",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
        }))
        .unwrap()
    };
    let none = json!({});
    let opted = json!({PREEMPTOR_LABEL: "true"});
    assert!(s.gates(&pod(none.clone(), Some("research-high"), 1), "lab"));
    assert!(s.gates(&pod(opted.clone(), None, 1), "lab"));
    assert!(!s.gates(&pod(none.clone(), Some("batch-low"), 1), "lab"));
    assert!(!s.gates(&pod(none.clone(), None, 1), "lab"));
    assert!(!s.gates(&pod(none.clone(), Some("research-high"), 1), "prod"));
    assert!(!s.gates(&pod(opted, None, 1), "prod"));
    assert!(!s.gates(&pod(none, Some("research-high"), 0), "lab"));
}

/// The gate's patch is the pod with the gate added, diffed: it adds the list, appends to
/// another gate, and is empty when the pod has it already.
#[test]
fn the_gate_patch_adds_the_gate_once_beside_others() {
    let with = |gates: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"schedulingGates": gates, "containers": [{"name": "t", "image": "t"}]}}))
        .unwrap()
    };
    let apply = |p: &Pod| -> Vec<String> {
        let mut v = serde_json::to_value(p).unwrap();
        json_patch::patch(&mut v, &gate_patch(p)).unwrap();
        let p: Pod = serde_json::from_value(v).unwrap();
        let gates = p.spec.unwrap().scheduling_gates.unwrap_or_default();
        gates.into_iter().map(|g| g.name).collect()
    };
    assert_eq!(apply(&with(json!(null))), [GATE]);
    assert_eq!(apply(&with(json!([{"name": "other"}]))), ["other", GATE]);
    let gated = with(json!([{"name": GATE}]));
    assert!(gate_patch(&gated).0.is_empty());
    assert_eq!(apply(&gated), [GATE]);
}
