//! The restrictive part of a pod's security settings ([`Hardening`]), read from the pod's and
//! its main container's `securityContext`: the container's own value wins, as on a kubelet.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::provider::Hardening;

/// What `pod`, running `main`, asks to be narrowed to.
pub fn of(pod: &Pod, main: &Container) -> Hardening {
    let p = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let c = main.security_context.as_ref();
    let run_as_non_root = c
        .and_then(|c| c.run_as_non_root)
        .or_else(|| p.and_then(|p| p.run_as_non_root))
        .unwrap_or(false);
    let seccomp = c
        .and_then(|c| c.seccomp_profile.as_ref())
        .or_else(|| p.and_then(|p| p.seccomp_profile.as_ref()));
    Hardening {
        run_as_non_root,
        run_as_user: c
            .and_then(|c| c.run_as_user)
            .or_else(|| p.and_then(|p| p.run_as_user)),
        run_as_group: c
            .and_then(|c| c.run_as_group)
            .or_else(|| p.and_then(|p| p.run_as_group)),
        read_only_root_filesystem: c.and_then(|c| c.read_only_root_filesystem) == Some(true),
        no_privilege_escalation: c.and_then(|c| c.allow_privilege_escalation) == Some(false),
        drop_capabilities: c
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|caps| caps.drop.clone())
            .unwrap_or_default(),
        seccomp_runtime_default: seccomp.is_some_and(|s| s.type_ == "RuntimeDefault"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_containers_settings_win_over_the_pods_and_only_narrowing_ones_are_kept() {
        let p = pod(json!({"spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {
                "runAsUser": 65532, "readOnlyRootFilesystem": true,
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}}]}}));
        let main = p.spec.as_ref().unwrap().containers[0].clone();
        assert_eq!(
            of(&p, &main),
            Hardening {
                run_as_non_root: true,
                run_as_user: Some(65532),
                run_as_group: Some(1000),
                read_only_root_filesystem: true,
                no_privilege_escalation: true,
                drop_capabilities: vec!["ALL".into()],
                seccomp_runtime_default: true,
            }
        );
        // Widening settings are no hardening.
        let loose = pod(
            json!({"spec": {"containers": [{"name": "c", "securityContext": {
            "allowPrivilegeEscalation": true, "readOnlyRootFilesystem": false,
            "runAsNonRoot": false, "seccompProfile": {"type": "Unconfined"}}}]}}),
        );
        let main = loose.spec.as_ref().unwrap().containers[0].clone();
        assert!(of(&loose, &main).is_empty());
    }
}
