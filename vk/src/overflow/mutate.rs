//! What the webhook does to an opted-in pod, as a pure function from the pod to a JSON patch:
//! the pod is changed as a copy (typed), and the patch is the diff of the two (`json-patch`), so
//! no JSON pointer is written by hand.

use k8s_openapi::api::core::v1::{
    Affinity, LifecycleHandler, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PreferredSchedulingTerm, SleepAction, Toleration,
};

use super::{DECISION_ANNOTATION, VIRTUAL_NODE_LABEL};
use crate::vocab::{TAINT_KEY, node_taint, tolerates};

/// Weight of the preference for in-cluster nodes: the maximum (1-100, "Assigning Pods to Nodes:
/// node affinity weight" in the Kubernetes docs), so it outweighs the scheduler's
/// resource-balancing scores, which favour the virtual node's huge capacity.
pub const PREFER_IN_CLUSTER_WEIGHT: i32 = 100;
/// A pod's `terminationGracePeriodSeconds` when it sets none (the API server's default).
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The webhook's decision for one pod.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// May overflow: the JSON patch (RFC 6902) adding the toleration, the preference and the
    /// drain.
    Offload(json_patch::Patch),
    /// May not run on the virtual node; the patch only records why (the pod stays in-cluster).
    Refuse {
        why: String,
        patch: json_patch::Patch,
    },
}

/// Decides for `pod` (as admitted, before defaults that the API server adds later). `drain`:
/// seconds each container without a `preStop` hook waits (a `sleep` hook) when the pod is
/// deleted, so its Service stops sending to it before it stops: a hand-off or a reclaim then
/// fails no request of a Deployment written without a hook. 0: none added.
pub fn decide(pod: &Pod, drain: u32) -> Decision {
    let mut out = pod.clone();
    let annotate = |out: &mut Pod, value: String| {
        out.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(DECISION_ANNOTATION.to_owned(), value);
    };
    // A pod the virtual kubelet would refuse must not go there to fail: it waits in-cluster.
    if let Err(e) = crate::pods::spec::request(pod) {
        let why = e.to_string();
        annotate(&mut out, format!("refused: {why}"));
        return Decision::Refuse {
            why,
            patch: diff(pod, &out),
        };
    }
    if pod.spec.is_none() {
        return Decision::Refuse {
            why: "pod has no spec".into(),
            patch: diff(pod, &out),
        };
    }
    annotate(&mut out, "offload".into());
    let spec = out.spec.get_or_insert_with(Default::default);
    tolerate_virtual_nodes(spec.tolerations.get_or_insert_with(Vec::new));
    prefer_in_cluster(spec.affinity.get_or_insert_with(Affinity::default));
    drain_before_stop(spec, drain);
    Decision::Offload(diff(pod, &out))
}

/// The patch from `before` to `after`.
fn diff(before: &Pod, after: &Pod) -> json_patch::Patch {
    match (serde_json::to_value(before), serde_json::to_value(after)) {
        (Ok(b), Ok(a)) => json_patch::diff(&b, &a),
        _ => json_patch::Patch(Vec::new()),
    }
}

/// Any virtual node's taint: an `Exists` toleration of the key (or of everything), added once.
fn tolerate_virtual_nodes(tolerations: &mut Vec<Toleration>) {
    let taint = node_taint("");
    let tolerated = tolerations
        .iter()
        .any(|t| t.operator.as_deref() == Some("Exists") && tolerates(t, &taint));
    if !tolerated {
        tolerations.push(Toleration {
            key: Some(TAINT_KEY.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Toleration::default()
        });
    }
}

/// The strongest preference for nodes that are not virtual, after the pod's own preferences.
fn prefer_in_cluster(affinity: &mut Affinity) {
    let node = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let preferred = node
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    preferred.push(PreferredSchedulingTerm {
        weight: PREFER_IN_CLUSTER_WEIGHT,
        preference: NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: VIRTUAL_NODE_LABEL.0.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(vec![VIRTUAL_NODE_LABEL.1.to_owned()]),
            }]),
            ..NodeSelectorTerm::default()
        },
    });
}

/// A `preStop` sleep of `drain` seconds (at most the grace period less one) on each container
/// that has no `preStop` hook: while it sleeps, the pod is `terminating` in its EndpointSlices
/// and kube-proxy stops sending to it, and the container still answers what was already sent
/// ("Pod Lifecycle: Termination of Pods" and the `sleep` hook, Kubernetes 1.30+). A virtual
/// kubelet keeps a deleted pod's workload for the hook's sleep the same way.
fn drain_before_stop(spec: &mut k8s_openapi::api::core::v1::PodSpec, drain: u32) {
    let grace = spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    let seconds = i64::from(drain).min(grace - 1);
    if seconds < 1 {
        return;
    }
    for c in &mut spec.containers {
        let lifecycle = c.lifecycle.get_or_insert_with(Default::default);
        if lifecycle.pre_stop.is_none() {
            lifecycle.pre_stop = Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds }),
                ..LifecycleHandler::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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

    /// Applies an RFC 6902 patch, as the API server would.
    fn apply(p: &Pod, patch: &json_patch::Patch) -> Pod {
        let mut doc = serde_json::to_value(p).unwrap();
        json_patch::patch(&mut doc, patch).unwrap();
        serde_json::from_value(doc).unwrap()
    }

    fn offload_draining(p: &Pod, drain: u32) -> Pod {
        match decide(p, drain) {
            Decision::Offload(patch) => apply(p, &patch),
            other => panic!("expected offload, got {other:?}"),
        }
    }

    fn offload(p: &Pod) -> Pod {
        offload_draining(p, 0)
    }

    fn pre_stop_sleeps(p: &Pod) -> Vec<Option<i64>> {
        p.spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .map(|c| {
                let hook = c.lifecycle.as_ref()?.pre_stop.as_ref()?;
                Some(hook.sleep.as_ref().map_or(-1, |s| s.seconds))
            })
            .collect()
    }

    /// Each container without a preStop hook sleeps `drain` seconds before it stops (within
    /// the grace period); a hook the pod has is kept; 0 adds nothing.
    #[test]
    fn containers_without_a_pre_stop_hook_drain_before_they_stop() {
        let p = pod(json!({"spec": {"containers": [
            {"name": "m", "image": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {"name": "hooked", "image": "h", "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}}}
        ]}}));
        assert_eq!(
            pre_stop_sleeps(&offload_draining(&p, 5)),
            [Some(5), Some(-1)]
        );
        assert_eq!(pre_stop_sleeps(&offload(&p)), [None, Some(-1)]);
        let short = pod(json!({"spec": {"terminationGracePeriodSeconds": 3}}));
        assert_eq!(pre_stop_sleeps(&offload_draining(&short, 5)), [Some(2)]);
        let none = pod(json!({"spec": {"terminationGracePeriodSeconds": 1}}));
        assert_eq!(pre_stop_sleeps(&offload_draining(&none, 5)), [None]);
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
        match decide(&p, 5) {
            Decision::Refuse { why, patch } => {
                let out = apply(&p, &patch);
                let spec = out.spec.unwrap();
                assert!(
                    spec.tolerations.is_none(),
                    "a refused pod must not tolerate the virtual node"
                );
                assert!(spec.affinity.is_none());
                assert!(
                    spec.containers[0].lifecycle.is_none(),
                    "a refused pod is not changed"
                );
                let d = &out.metadata.annotations.unwrap()[DECISION_ANNOTATION];
                assert!(d.starts_with("refused: ") && d.contains(&why), "{d}");
                assert!(why.to_lowercase().contains("host"), "{why}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
