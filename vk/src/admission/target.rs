//! Which pods target this virtual node: the admission webhook judges only those. The rule is
//! written twice on purpose, once here (the webhook checks it again, so an API server without
//! match conditions still never gets a pod of another node refused) and once as the CEL of the
//! webhook's match conditions ([`match_condition`]), which keep the API server from calling the
//! webhook for any other pod; the tests hold the two to the same cases.
//!
//! A pod targets the node when it names it (`spec.nodeName`, `nodeSelector`
//! `kubernetes.io/hostname`, or a required node affinity term on `metadata.name` or the
//! hostname label), or selects virtual nodes (`nodeSelector` `type: virtual-kubelet`) and
//! tolerates the node's taint by its key. A toleration of every taint (`operator: Exists`
//! without a key, as DaemonSets carry) is no sign of intent, and a pod opted in to overflow
//! (`gpu-vk.io/overflow=true`) may run in-cluster: neither counts.

use k8s_openapi::api::core::v1::Pod;

use crate::vocab::{TAINT_KEY, TYPE_LABEL};

const HOSTNAME: &str = "kubernetes.io/hostname";
use crate::vocab::names::OVERFLOW_LABEL;

/// Whether `pod` targets the virtual node `node`.
pub fn targets(pod: &Pod, node: &str) -> bool {
    let overflow = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OVERFLOW_LABEL))
        .is_some_and(|v| v == "true");
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if overflow {
        return false;
    }
    if spec.node_name.as_deref() == Some(node) {
        return true;
    }
    let selector = spec.node_selector.as_ref();
    if selector.and_then(|s| s.get(HOSTNAME)).map(String::as_str) == Some(node) {
        return true;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let names = |key: &str, exprs: Option<&Vec<_>>| {
        exprs.into_iter().flatten().any(
            |e: &k8s_openapi::api::core::v1::NodeSelectorRequirement| {
                e.key == key && e.operator == "In" && e.values.iter().flatten().any(|v| v == node)
            },
        )
    };
    if terms.iter().any(|t| {
        names("metadata.name", t.match_fields.as_ref())
            || names(HOSTNAME, t.match_expressions.as_ref())
    }) {
        return true;
    }
    let virtual_nodes = selector
        .and_then(|s| s.get(TYPE_LABEL.0))
        .map(String::as_str)
        == Some(TYPE_LABEL.1);
    let tolerates = spec.tolerations.iter().flatten().any(|t| {
        t.key.as_deref() == Some(TAINT_KEY)
            && (t.operator.as_deref() == Some("Exists") || t.value.as_deref() == Some(node))
    });
    virtual_nodes && tolerates
}

/// The same rule in CEL, for the webhook's `matchConditions` (`object` is the pod).
pub fn match_condition(node: &str) -> String {
    let n = format!("'{}'", node.replace('\'', ""));
    let (type_key, type_value) = TYPE_LABEL;
    format!(
        "!(has(object.metadata.labels) && '{OVERFLOW_LABEL}' in object.metadata.labels && \
         object.metadata.labels['{OVERFLOW_LABEL}'] == 'true') && (\
         (has(object.spec.nodeName) && object.spec.nodeName == {n}) || \
         (has(object.spec.nodeSelector) && '{HOSTNAME}' in object.spec.nodeSelector && \
         object.spec.nodeSelector['{HOSTNAME}'] == {n}) || \
         (has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && \
         has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) && \
         object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(t, \
         (has(t.matchFields) && t.matchFields.exists(e, e.key == 'metadata.name' && e.operator == 'In' && has(e.values) && {n} in e.values)) || \
         (has(t.matchExpressions) && t.matchExpressions.exists(e, e.key == '{HOSTNAME}' && e.operator == 'In' && has(e.values) && {n} in e.values)))) || \
         (has(object.spec.nodeSelector) && '{type_key}' in object.spec.nodeSelector && \
         object.spec.nodeSelector['{type_key}'] == '{type_value}' && has(object.spec.tolerations) && \
         object.spec.tolerations.exists(t, has(t.key) && t.key == '{TAINT_KEY}' && \
         ((has(t.operator) && t.operator == 'Exists') || (has(t.value) && t.value == {n})))))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value, labels: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "main", "image": "x"}]);
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
            .unwrap()
    }

    fn tol(key: Option<&str>, op: &str) -> serde_json::Value {
        json!([{"key": key, "operator": op, "effect": "NoSchedule"}])
    }

    #[test]
    fn pods_that_name_the_node_or_select_virtual_nodes_with_the_toleration_target_it() {
        let yes = [
            json!({"nodeName": "vk-a"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "vk-a"}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["vk-a"]}]}]}}}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["x", "vk-a"]}]}]}}}}),
            json!({"nodeSelector": {"type": "virtual-kubelet"}, "tolerations": tol(Some(TAINT_KEY), "Exists")}),
        ];
        for s in yes {
            assert!(targets(&pod(s.clone(), json!({})), "vk-a"), "{s}");
            // An opted-in overflow pod may run in-cluster: never judged.
            assert!(
                !targets(&pod(s.clone(), json!({OVERFLOW_LABEL: "true"})), "vk-a"),
                "{s}"
            );
        }
        let no = [
            json!({}),
            json!({"nodeName": "vk-b"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "vk-b"}}),
            // A DaemonSet's tolerate-everything is no sign of intent.
            json!({"nodeSelector": {"type": "virtual-kubelet"}, "tolerations": tol(None, "Exists")}),
            json!({"nodeSelector": {"type": "virtual-kubelet"}}),
            json!({"tolerations": tol(Some(TAINT_KEY), "Exists")}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["vk-a"]}]}]}}}}),
        ];
        for s in no {
            assert!(!targets(&pod(s.clone(), json!({})), "vk-a"), "{s}");
        }
    }

    #[test]
    fn the_cel_names_the_node_and_the_same_keys() {
        let cel = match_condition("vk-a");
        for needle in [
            "'vk-a'",
            "metadata.name",
            "kubernetes.io/hostname",
            "virtual-kubelet.io/provider",
            "gpu-vk.io/overflow",
            "'type' in object.spec.nodeSelector",
        ] {
            assert!(cel.contains(needle), "{needle} missing from {cel}");
        }
        assert_eq!(cel.matches('(').count(), cel.matches(')').count());
    }
}
