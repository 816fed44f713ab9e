//! The webhook's registration: a ValidatingWebhookConfiguration `gpu-vk-<node>`, owned by the
//! Node (deleting the node deletes it), written at every start with this process's certificate
//! as `caBundle` ("Dynamic Admission Control" in the Kubernetes docs: `failurePolicy`,
//! `matchConditions`, `namespaceSelector`, `sideEffects`).

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::target::match_condition;
use crate::config::Config;
use crate::vocab::names::{NODE_LABEL, WEBHOOK_NAME};

/// The configuration's name for `node`.
pub fn name(node: &str) -> String {
    format!("gpu-vk-{node}")
}

/// The configuration as the API server should hold it.
pub fn configuration(cfg: &Config, node_uid: &str, ca_pem: &str) -> ValidatingWebhookConfiguration {
    let node = &cfg.node_name;
    let client_config = match (&cfg.admission.service, &cfg.admission.url) {
        (Some(s), _) => {
            let (namespace, name) = s.split_once('/').unwrap_or(("default", s));
            json!({"service": {"namespace": namespace, "name": name, "path": "/validate", "port": 443}})
        }
        (None, url) => json!({"url": url}),
    };
    let mut client_config = client_config;
    client_config["caBundle"] = json!(ByteString(ca_pem.as_bytes().to_vec()));
    let labels = std::collections::BTreeMap::from([
        ("app.kubernetes.io/managed-by", "gpu-vk"),
        (NODE_LABEL, node),
    ]);
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": name(node),
            "labels": labels,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
        },
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            // A webhook that is down or slow never blocks a pod: the VK holds what it refuses.
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            // Never the control plane's own pods.
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "NotIn", "values": ["kube-system", "kube-node-lease"]}]},
            "matchConditions": [{"name": "targets-this-node", "expression": match_condition(node)}],
            "clientConfig": client_config,
        }],
    }))
    .expect("a well-formed ValidatingWebhookConfiguration")
}

/// Creates or replaces the configuration (server-side apply, owned by gpu-vk).
pub async fn publish(
    client: &Client,
    cfg: &Config,
    node_uid: &str,
    ca_pem: &str,
) -> Result<(), kube::Error> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let c = configuration(cfg, node_uid, ca_pem);
    api.patch(
        &name(&cfg.node_name),
        &PatchParams::apply("gpu-vk").force(),
        &Patch::Apply(&c),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_fails_open_matches_this_node_and_is_owned_by_it() {
        let mut cfg: Config = serde_saphyr::from_str(
            "nodeName: vk-a\nclusterId: c\nproviders: []\n\
             admission: {enabled: true, service: gpu-vk/vk-admission}",
        )
        .unwrap();
        let c = configuration(&cfg, "uid-1", "PEM");
        let v = serde_json::to_value(&c).unwrap();
        let w = &v["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Ignore");
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(w["clientConfig"]["service"]["name"], "vk-admission");
        assert_eq!(w["clientConfig"]["service"]["path"], "/validate");
        let cel = w["matchConditions"][0]["expression"].as_str().unwrap();
        assert!(cel.contains(&format!("'{}'", cfg.node_name)), "{cel}");
        cfg.admission.service = None;
        cfg.admission.url = Some("https://127.0.0.1:9443/validate".into());
        let v = serde_json::to_value(configuration(&cfg, "u", "PEM")).unwrap();
        assert_eq!(
            v["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate"
        );
    }
}
