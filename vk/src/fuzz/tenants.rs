//! Fuzz targets for what a tenant writes: the `gpu-vk.io/published-ports` annotation text, the
//! AdmissionReview bodies the API server relays from its pod creates, the kubelet API's log
//! query strings, and the kubernetes provider's translation of a workload it is given.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::AdmissionReview;
use proptest::prelude::*;
use serde_json::json;

use crate::pods::address;
use crate::provider::{EnvVar, parse_published};
use crate::providers::kubernetes::KubernetesConfig;
use crate::providers::kubernetes::spec::remote_pod;

/// Published-ports text as a tenant might write it: mostly well-formed entries, some not.
fn published_text() -> impl Strategy<Value = String> {
    let entry = prop_oneof![
        4 => (any::<u16>(), "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}", any::<u16>())
            .prop_map(|(p, h, q)| format!("{p}={h}:{q}")),
        2 => (any::<u16>(), "[0-9a-f:]{2,20}", any::<u16>())
            .prop_map(|(p, h, q)| format!("{p}=[{h}]:{q}")),
        1 => ".{0,30}",
    ];
    proptest::collection::vec(entry, 0..6).prop_map(|v| v.join(","))
}

/// An AdmissionReview of a pod create, as the API server sends it.
fn review() -> serde_json::Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "team-a",
                    "annotations": {"gpu-vk.io/provider": "runpod", "gpu-vk.io/gpu-type": "A100-80GB"}},
                "spec": {"nodeName": "vk", "containers": [{"name": "c", "image": "i",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
            "dryRun": false
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::cases()))]

    /// Any annotation text: entries that parse, each with a non-zero port on both sides, and
    /// what the VK would write back from them reads back the same.
    #[test]
    fn published_ports_text_parses_to_what_it_says_or_to_nothing(text in published_text()) {
        let parsed = parse_published(&text);
        prop_assert!(parsed.iter().all(|(p, e)| *p != 0 && e.port != 0));
        let usable = address::parse_published(&text);
        prop_assert!(usable.len() <= parsed.len());
        if let Some(again) = address::published_text(&usable) {
            prop_assert_eq!(address::parse_published(&again), usable);
        }
    }

    /// Any AdmissionReview body (a valid one with leaves replaced): a request the webhook
    /// judges, or a refusal of the body; never a panic, and a verdict names the node.
    #[test]
    fn admission_reviews_are_judged_or_refused(edits in super::edits()) {
        let body = super::mutate(&review(), &edits);
        let Ok(review) = serde_json::from_value::<AdmissionReview<Pod>>(body) else {
            return Ok(());
        };
        if let Ok(req) = crate::tls::review::pod_request(review)
            && let Some(pod) = req.object.as_ref()
        {
            let refusal = |p: &Pod| crate::pods::spec::request(p).err().map(|e| ("InvalidSpec", e.to_string()));
            if let Some(message) = crate::admission::verdict("vk", pod, refusal) {
                prop_assert!(message.contains("virtual node vk"), "{}", message);
            }
        }
    }

    /// Any log query: options or a client error; a tail or byte limit is what was asked.
    #[test]
    fn log_queries_parse_or_are_refused(
        pairs in proptest::collection::vec(
            (prop_oneof![Just("tailLines"), Just("tail"), Just("limitBytes"), Just("sinceSeconds"),
                         Just("sinceTime"), Just("follow"), Just("timestamps"), Just("previous")],
             prop_oneof![".{0,12}", "-?[0-9]{1,22}", Just("true".to_owned())]),
            0..6),
    ) {
        let pairs: Vec<(String, String)> =
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let first = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if let Ok(o) = crate::kubelet_api::logs::parse_query(&pairs, Timestamp::now()) {
            // The tail asked for (the legacy `tail` first), exactly; a byte limit of at least 1.
            let tail = first("tail").filter(|v| *v != "all").or(first("tail").map_or(first("tailLines"), |_| None));
            // As Go's strconv.ParseInt reads it, as the kubelet does: "-0" is 0.
            let asked = tail.and_then(|v| v.parse::<i64>().ok()).and_then(|n| u64::try_from(n).ok());
            prop_assert_eq!(o.tail_lines, asked);
            prop_assert!(o.limit_bytes.is_none_or(|n| n >= 1));
        }
    }

    /// Any image, command, env and options a workload carries: a remote pod in the mapped
    /// namespace with exactly the env given, or a refusal; never a panic.
    #[test]
    fn the_kubernetes_translation_keeps_a_workload_in_its_place(
        image in ".{0,40}",
        command in proptest::collection::vec(".{0,20}", 0..3),
        env in proptest::collection::vec(("[A-Z_]{1,8}", ".{0,20}"), 0..4),
        namespace in "[a-z]{1,8}",
    ) {
        let cfg = KubernetesConfig {
            namespace: "gpu-offload".into(),
            namespace_mapping: BTreeMap::from([("team-a".to_owned(), "remote-a".to_owned())]),
            ..KubernetesConfig::default()
        };
        let mut w = crate::test_support::workload();
        w.image = image;
        w.command = command;
        w.namespace = namespace.clone();
        w.env = env.into_iter().map(|(name, value)| EnvVar { name, value }).collect();
        if let Ok(p) = remote_pod(&cfg, &crate::test_support::owner(), &w) {
            let want = if namespace == "team-a" { "remote-a" } else { "gpu-offload" };
            prop_assert_eq!(p.metadata.namespace.as_deref(), Some(want));
            let spec = p.spec.as_ref().expect("a spec");
            prop_assert_eq!(spec.containers.len(), 1);
            prop_assert!(spec.node_name.is_none(), "the remote scheduler places it");
        }
    }
}
