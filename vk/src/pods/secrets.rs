//! Which providers may receive a pod's Secret-sourced environment: a pure filter over the
//! dispatch candidates (see `secretEnv` and `secretFailover` in `docs/configuration.md`).
//!
//! A pod "uses Secrets" when it names `imagePullSecrets` (each provider's `pullSecrets`
//! decides), or when the `env[].valueFrom.secretKeyRef` or `envFrom[].secretRef` of a
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

/// The Secrets a pod sends to its provider: the ones its environment reads, and its pull
/// Secrets (the registry logins its images pull with, [`super::pull`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uses {
    pub env: Vec<String>,
    pub pull: Vec<String>,
}

impl Uses {
    pub fn of(pod: &Pod) -> Self {
        Self {
            env: referenced(pod),
            pull: super::pull::referenced(pod),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.pull.is_empty()
    }

    /// Whether `offer` may receive every Secret the pod sends.
    fn allowed_by(&self, offer: &Offer) -> bool {
        (self.env.is_empty() || offer.secret_env == SecretEnv::Allow)
            && (self.pull.is_empty()
                || (offer.pull_secrets == SecretEnv::Allow && offer.capabilities.registry_logins))
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Narrows `candidates` (indexes into `offers`, best first) for a pod sending `uses`.
/// `Err` is the message of a pod no candidate may run, naming the providers that refuse.
pub fn restrict(
    offers: &[Offer],
    candidates: Vec<usize>,
    uses: &Uses,
    failover: bool,
) -> Result<Vec<usize>, String> {
    if uses.is_empty() {
        return Ok(candidates);
    }
    let (mut allowed, denied): (Vec<usize>, Vec<usize>) = candidates
        .into_iter()
        .partition(|&i| uses.allowed_by(&offers[i]));
    if allowed.is_empty() {
        let names = |refuses: &dyn Fn(&Offer) -> bool| -> (Vec<&str>, &str, &str) {
            let names: Vec<&str> = denied
                .iter()
                .map(|&i| &offers[i])
                .filter(|o| refuses(o))
                .map(|o| o.name.as_str())
                .collect();
            let (noun, verb) = if names.len() == 1 {
                ("provider", "is")
            } else {
                ("providers", "are")
            };
            (names, noun, verb)
        };
        let mut why = Vec::new();
        let (env, noun, verb) = names(&|o| o.secret_env == SecretEnv::Deny);
        if !uses.env.is_empty() && !env.is_empty() {
            why.push(format!(
                "the pod's environment comes from Secret {}, and {noun} {} {verb} not allowed to \
                 receive Secret values (secretEnv: deny in the virtual kubelet's configuration)",
                quoted(&uses.env),
                env.join(", "),
            ));
        }
        let (pull, noun, verb) = names(&|o| o.pull_secrets == SecretEnv::Deny);
        if !uses.pull.is_empty() && !pull.is_empty() {
            why.push(format!(
                "the pod pulls its images with Secret {}, and {noun} {} {verb} not allowed to \
                 receive registry credentials (pullSecrets: deny in the virtual kubelet's \
                 configuration)",
                quoted(&uses.pull),
                pull.join(", "),
            ));
        }
        let (unable, noun, verb) = names(&|o| !o.capabilities.registry_logins);
        if !uses.pull.is_empty() && !unable.is_empty() {
            why.push(format!(
                "the pod pulls its images with Secret {}, and {noun} {} {verb} unable to pull \
                 with a registry login (its adapter declares no registry_logins)",
                quoted(&uses.pull),
                unable.join(", "),
            ));
        }
        return Err(why.join("; "));
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
                capabilities: Capabilities {
                    registry_logins: true,
                    ..Capabilities::default()
                },
                secret_env: *secret_env,
                pull_secrets: SecretEnv::Allow,
            })
            .collect()
    }

    fn env(names: &[&str]) -> Uses {
        Uses {
            env: names.iter().map(|s| (*s).to_owned()).collect(),
            pull: Vec::new(),
        }
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
        assert_eq!(
            restrict(&os, vec![1, 0], &Uses::default(), false),
            Ok(vec![1, 0])
        );
    }

    #[test]
    fn denying_providers_are_skipped_and_only_the_first_is_kept() {
        use SecretEnv::{Allow, Deny};
        let os = offers(&[("runpod", Deny), ("vast", Allow), ("slurm", Allow)]);
        let s = env(&["creds"]);
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
        let s = env(&["api-keys", "creds"]);
        let e = restrict(&os, vec![0, 1], &s, true).unwrap_err();
        assert!(
            e.contains("providers runpod, vast are not allowed")
                && e.contains("\"api-keys\", \"creds\"")
                && e.contains("secretEnv: deny")
                && !e.contains("slurm"),
            "{e}"
        );
        let one = restrict(&os, vec![1], &env(&["creds"]), false).unwrap_err();
        assert!(one.contains("provider vast is not allowed"), "{one}");
    }

    #[test]
    fn pull_secrets_follow_their_own_setting() {
        use SecretEnv::{Allow, Deny};
        let mut os = offers(&[("runpod", Allow), ("vast", Allow)]);
        os[0].pull_secrets = Deny;
        let pull = Uses {
            env: Vec::new(),
            pull: vec!["regcred".into()],
        };
        assert_eq!(restrict(&os, vec![0, 1], &pull, true), Ok(vec![1]));
        os[1].pull_secrets = Deny;
        let e = restrict(&os, vec![0, 1], &pull, true).unwrap_err();
        assert!(
            e.contains("Secret \"regcred\"")
                && e.contains("providers runpod, vast are not allowed to receive registry")
                && e.contains("pullSecrets: deny")
                && !e.contains("secretEnv"),
            "{e}"
        );
        // Env Secrets still need secretEnv on the same provider.
        os[1].pull_secrets = Allow;
        os[1].secret_env = Deny;
        let both = Uses {
            env: vec!["hf".into()],
            pull: vec!["regcred".into()],
        };
        let e = restrict(&os, vec![0, 1], &both, true).unwrap_err();
        assert!(
            e.contains("secretEnv: deny") && e.contains("pullSecrets: deny"),
            "{e}"
        );
        // A provider that cannot pull with a login is skipped too, saying so.
        let mut os = offers(&[("runpod", Allow), ("hpc", Allow)]);
        os[1].capabilities.registry_logins = false;
        assert_eq!(restrict(&os, vec![1, 0], &pull, true), Ok(vec![0]));
        let e = restrict(&os, vec![1], &pull, true).unwrap_err();
        assert!(e.contains("provider hpc is unable to pull"), "{e}");
    }
}
