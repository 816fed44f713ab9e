//! Which providers may receive a pod's Secret-sourced environment: a pure filter over the
//! dispatch candidates (see `secretEnv` and `secretFailover` in `docs/configuration.md`).
//!
//! A pod "uses Secrets" when the `env[].valueFrom.secretKeyRef` or `envFrom[].secretRef` of a
//! container that runs names one (any of them: a provider running every container receives
//! each one's environment, [`super::env::resolve`]; an optional
//! Secret that is missing still counts: it may appear before the next attempt). Providers whose
//! `secretEnv` is `deny` are skipped; with none left the pod fails `SecretsNotAllowed`, naming
//! them, before anything is created. Unless `secretFailover` is on, only the first remaining
//! candidate is kept: a capacity error then leaves the pod Pending on that provider instead of
//! sending its Secrets to every provider in turn.

use k8s_openapi::api::core::v1::Pod;

use super::dispatch::Offer;
use crate::config::SecretEnv;

/// The Secrets the pod's environment reads, sorted, each once.
pub fn referenced(pod: &Pod) -> Vec<String> {
    let running = crate::pods::spec::running_containers(pod);
    let from_env = running
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
        .map(|r| r.name.clone());
    let from_env_from = running
        .iter()
        .flat_map(|c| c.env_from.iter().flatten())
        .filter_map(|f| f.secret_ref.as_ref())
        .map(|r| r.name.clone());
    let mut names: Vec<String> = from_env.chain(from_env_from).collect();
    names.sort();
    names.dedup();
    names
}

/// Narrows `candidates` (indexes into `offers`, best first) for a pod reading `secrets`.
/// `Err` is the message of a pod no candidate may run, naming the providers that refuse.
pub fn restrict(
    offers: &[Offer],
    candidates: Vec<usize>,
    secrets: &[String],
    failover: bool,
) -> Result<Vec<usize>, String> {
    if secrets.is_empty() {
        return Ok(candidates);
    }
    let (mut allowed, denied): (Vec<usize>, Vec<usize>) = candidates
        .into_iter()
        .partition(|&i| offers[i].secret_env == SecretEnv::Allow);
    if allowed.is_empty() {
        let names: Vec<&str> = denied.iter().map(|&i| offers[i].name.as_str()).collect();
        let (noun, verb) = if names.len() == 1 {
            ("provider", "is")
        } else {
            ("providers", "are")
        };
        return Err(format!(
            "the pod's environment comes from Secret {}, and {noun} {} {verb} not allowed to \
             receive Secret values (secretEnv: deny in the virtual kubelet's configuration)",
            secrets
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            names.join(", "),
        ));
    }
    if !failover {
        allowed.truncate(1);
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Capabilities;
    use crate::test_support::PodBuilder;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, EnvFromSource, EnvVar, EnvVarSource, SecretEnvSource, SecretKeySelector,
    };

    fn offers(policies: &[(&str, SecretEnv)]) -> Vec<Offer> {
        policies
            .iter()
            .map(|(name, secret_env)| Offer {
                name: (*name).into(),
                capabilities: Capabilities::default(),
                secret_env: *secret_env,
            })
            .collect()
    }

    fn secret_key(var: &str, secret: &str) -> EnvVar {
        EnvVar {
            name: var.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.into(),
                    key: "k".into(),
                    optional: Some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn finds_secrets_in_env_and_env_from_only() {
        let plain = EnvVar {
            name: "MODE".into(),
            value: Some("fast".into()),
            ..Default::default()
        };
        let pod = PodBuilder::new()
            .env(vec![
                plain.clone(),
                secret_key("B", "zeta"),
                secret_key("A", "alpha"),
            ])
            .env_from(vec![
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: "zeta".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "cfg".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ])
            .build();
        assert_eq!(referenced(&pod), ["alpha", "zeta"]);
        let no_secrets = PodBuilder::new().env(vec![plain]).build();
        assert!(referenced(&no_secrets).is_empty());
    }

    #[test]
    fn a_pod_without_secrets_keeps_every_candidate() {
        use SecretEnv::Deny;
        let os = offers(&[("runpod", Deny), ("vast", Deny)]);
        assert_eq!(restrict(&os, vec![1, 0], &[], false), Ok(vec![1, 0]));
    }

    #[test]
    fn denying_providers_are_skipped_and_only_the_first_is_kept() {
        use SecretEnv::{Allow, Deny};
        let os = offers(&[("runpod", Deny), ("vast", Allow), ("slurm", Allow)]);
        let s = ["creds".to_owned()];
        // Without failover: the first provider that allows, alone.
        assert_eq!(restrict(&os, vec![0, 1, 2], &s, false), Ok(vec![1]));
        assert_eq!(restrict(&os, vec![2, 0, 1], &s, false), Ok(vec![2]));
        // With failover: every provider that allows, in order.
        assert_eq!(restrict(&os, vec![0, 2, 1], &s, true), Ok(vec![2, 1]));
    }

    #[test]
    fn no_allowing_candidate_fails_naming_the_providers() {
        use SecretEnv::{Allow, Deny};
        let os = offers(&[("runpod", Deny), ("vast", Deny), ("slurm", Allow)]);
        let s = ["api-keys".to_owned(), "creds".to_owned()];
        let e = restrict(&os, vec![0, 1], &s, true).unwrap_err();
        assert!(
            e.contains("providers runpod, vast are not allowed")
                && e.contains("\"api-keys\", \"creds\"")
                && e.contains("secretEnv: deny")
                && !e.contains("slurm"),
            "{e}"
        );
        let one = restrict(&os, vec![1], &s[1..], false).unwrap_err();
        assert!(one.contains("provider vast is not allowed"), "{one}");
    }
}
