//! What the webhook does to an opted-in pod, as a pure function from the pod to a JSON patch.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{DECISION_ANNOTATION, VIRTUAL_NODE_LABEL};
use crate::vocab::{TAINT_KEY, node_taint, tolerates};

/// Weight of the preference for in-cluster nodes: the maximum (1-100, "Assigning Pods to Nodes:
/// node affinity weight" in the Kubernetes docs), so it outweighs the scheduler's
/// resource-balancing scores, which favour the virtual node's huge capacity.
pub const PREFER_IN_CLUSTER_WEIGHT: i32 = 100;

/// The webhook's decision for one pod.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// May overflow: the JSON patch (RFC 6902) adding the toleration and the preference.
    Offload(Vec<Value>),
    /// May not run on the virtual node; the patch only records why (the pod stays in-cluster).
    Refuse { why: String, patch: Vec<Value> },
}

/// Decides for `pod` (as admitted, before defaults that the API server adds later).
pub fn decide(pod: &Pod) -> Decision {
    let mut patch = Vec::new();
    // JSON pointer escaping of the annotation key: `/` becomes `~1`.
    let key = DECISION_ANNOTATION.replace('~', "~0").replace('/', "~1");
    let annotate = |patch: &mut Vec<Value>, value: String| {
        if pod.metadata.annotations.is_none() {
            patch.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
        }
        patch.push(
            json!({"op": "add", "path": format!("/metadata/annotations/{key}"), "value": value}),
        );
    };
    // A pod the virtual kubelet would refuse must not go there to fail: it waits in-cluster.
    if let Err(e) = crate::pods::spec::request(pod) {
        let why = e.to_string();
        annotate(&mut patch, format!("refused: {why}"));
        return Decision::Refuse { why, patch };
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Decision::Refuse {
            why: "pod has no spec".into(),
            patch,
        };
    };
    annotate(&mut patch, "offload".into());

    // Any virtual node's taint: an `Exists` toleration of the key (or of everything).
    let taint = node_taint("");
    let tolerated = spec.tolerations.as_ref().is_some_and(|ts| {
        ts.iter()
            .any(|t| t.operator.as_deref() == Some("Exists") && tolerates(t, &taint))
    });
    if !tolerated {
        let t = json!({"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"});
        if spec.tolerations.is_none() {
            patch.push(json!({"op": "add", "path": "/spec/tolerations", "value": [t]}));
        } else {
            patch.push(json!({"op": "add", "path": "/spec/tolerations/-", "value": t}));
        }
    }

    let term = json!({
        "weight": PREFER_IN_CLUSTER_WEIGHT,
        "preference": {"matchExpressions": [
            {"key": VIRTUAL_NODE_LABEL.0, "operator": "NotIn", "values": [VIRTUAL_NODE_LABEL.1]}
        ]}
    });
    let affinity = spec.affinity.as_ref();
    let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
    let preferred = node_affinity.and_then(|n| {
        n.preferred_during_scheduling_ignored_during_execution
            .as_ref()
    });
    match (affinity, node_affinity, preferred) {
        (None, _, _) => patch.push(json!({"op": "add", "path": "/spec/affinity", "value":
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}})),
        (Some(_), None, _) => patch.push(json!({"op": "add", "path": "/spec/affinity/nodeAffinity", "value":
            {"preferredDuringSchedulingIgnoredDuringExecution": [term]}})),
        (Some(_), Some(_), None) => patch.push(json!({"op": "add",
            "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution", "value": [term]})),
        (Some(_), Some(_), Some(_)) => patch.push(json!({"op": "add",
            "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-", "value": term})),
    }
    Decision::Offload(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "serve-1", "labels": {"gpu-vk.io/overflow": "true"}},
            "spec": {"containers": [{"name": "m", "image": "vllm/vllm-openai",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        });
        merge(&mut base, extra);
        serde_json::from_value(base).unwrap()
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    /// Applies an RFC 6902 patch of `add` operations, as the API server would.
    fn apply(p: &Pod, ops: &[Value]) -> Pod {
        let mut doc = serde_json::to_value(p).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec())).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        serde_json::from_value(doc).unwrap()
    }

    fn offload(p: &Pod) -> Pod {
        match decide(p) {
            Decision::Offload(ops) => apply(p, &ops),
            other => panic!("expected offload, got {other:?}"),
        }
    }

    #[test]
    fn a_bare_pod_gets_the_toleration_the_preference_and_the_decision() {
        let out = offload(&pod(json!({})));
        let spec = out.spec.unwrap();
        let t = &spec.tolerations.unwrap()[0];
        assert_eq!(
            (t.key.as_deref(), t.effect.as_deref()),
            (Some(TAINT_KEY), Some("NoSchedule"))
        );
        let pref = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(pref.len(), 1);
        assert_eq!(pref[0].weight, 100);
        let e = &pref[0].preference.match_expressions.as_ref().unwrap()[0];
        assert_eq!((e.key.as_str(), e.operator.as_str()), ("type", "NotIn"));
        assert_eq!(
            e.values.as_deref(),
            Some(&["virtual-kubelet".to_owned()][..])
        );
        assert_eq!(
            out.metadata.annotations.unwrap()[DECISION_ANNOTATION],
            "offload"
        );
    }

    #[test]
    fn what_the_pod_already_has_is_kept_and_appended_to() {
        let p = pod(json!({
            "metadata": {"annotations": {"team": "serving"}},
            "spec": {
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
                ]}}
            }
        }));
        let out = offload(&p);
        let spec = out.spec.unwrap();
        let keys: Vec<_> = spec
            .tolerations
            .unwrap()
            .into_iter()
            .map(|t| t.key.unwrap())
            .collect();
        assert_eq!(keys, ["dedicated", TAINT_KEY]);
        let pref = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(pref.iter().map(|t| t.weight).collect::<Vec<_>>(), [5, 100]);
        let ann = out.metadata.annotations.unwrap();
        assert_eq!(ann["team"], "serving");
        assert_eq!(ann[DECISION_ANNOTATION], "offload");
    }

    #[test]
    fn an_existing_toleration_of_the_taint_is_not_doubled() {
        let p = pod(json!({"spec": {"tolerations": [{"key": TAINT_KEY, "operator": "Exists"}]}}));
        let out = offload(&p);
        assert_eq!(out.spec.unwrap().tolerations.unwrap().len(), 1);
    }

    #[test]
    fn a_pod_the_virtual_kubelet_would_refuse_stays_in_cluster_and_says_why() {
        let p = pod(json!({"spec": {"hostNetwork": true}}));
        match decide(&p) {
            Decision::Refuse { why, patch } => {
                let out = apply(&p, &patch);
                let spec = out.spec.unwrap();
                assert!(
                    spec.tolerations.is_none(),
                    "a refused pod must not tolerate the virtual node"
                );
                assert!(spec.affinity.is_none());
                let d = &out.metadata.annotations.unwrap()[DECISION_ANNOTATION];
                assert!(d.starts_with("refused: ") && d.contains(&why), "{d}");
                assert!(why.to_lowercase().contains("host"), "{why}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
