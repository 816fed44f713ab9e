//! Who may have workloads created at the providers: the namespaces allowed to spend provider
//! money and the node's taint a pod must tolerate.

use k8s_openapi::api::core::v1::Pod;

/// Who may have workloads created at the providers: checked before every create, because a
/// pod that sets `spec.nodeName` itself bypasses the scheduler (and its taint check).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// The node's taint (key, value) a pod must tolerate; `None` when the node is not tainted.
    pub taint: Option<(String, String)>,
    /// Namespaces allowed to spend provider money; empty: every namespace.
    pub namespaces: Vec<String>,
}

impl Admission {
    /// `Err` says why the pod may not run on the providers.
    pub fn check(&self, pod: &Pod) -> Result<(), String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == ns) {
            return Err(format!(
                "namespace {ns:?} may not run pods on this virtual node (allowedNamespaces)"
            ));
        }
        if let Some((key, value)) = &self.taint {
            let taint = k8s_openapi::api::core::v1::Taint {
                key: key.clone(),
                value: Some(value.clone()),
                effect: "NoSchedule".into(),
                time_added: None,
            };
            let tolerated = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| crate::vocab::tolerates(t, &taint)));
            if !tolerated {
                return Err(format!(
                    "the pod does not tolerate the node's taint {key}={value}:NoSchedule; only \
                     pods that tolerate it may run on the providers"
                ));
            }
        }
        Ok(())
    }
}
