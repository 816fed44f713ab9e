//! [`super::decide`] with the Secret policy: providers that deny are skipped, a pod with no
//! provider left fails `SecretsNotAllowed` before anything is created, and without
//! `secretFailover` only one provider is ever tried.

use super::*;
use crate::config::SecretEnv::{self, Allow, Deny};
use crate::pods::spec::ANN_PROVIDER;
use crate::provider::Capabilities;
use crate::test_support::{PodBuilder, owner, ts};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};

fn decide_with(pod: &Pod, policies: &[(&str, SecretEnv)], secret_failover: bool) -> Step {
    let offers: Vec<Offer> = policies
        .iter()
        .map(|(name, secret_env)| Offer {
            name: (*name).into(),
            capabilities: Capabilities::default(),
            secret_env: *secret_env,
            pull_secrets: *secret_env,
        })
        .collect();
    let owner = owner();
    let timings = Timings::default();
    let admission = Admission::default();
    let rules = Rules {
        owner: &owner,
        offers: &offers,
        timings: &timings,
        admission: &admission,
        secret_failover,
        standing: &[],
        dispatch: &crate::config::DispatchConfig::default(),
        start_deadlines: &[],
        hold_retry: Duration::from_secs(60),
    };
    decide(
        &rules,
        Some(pod),
        None,
        &Memory::fresh(),
        ts("2026-11-29T10:00:05Z"),
    )
}

fn with_secret() -> PodBuilder {
    PodBuilder::new().gpus("1").env(vec![EnvVar {
        name: "HF_TOKEN".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: "hf".into(),
                key: "token".into(),
                optional: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }])
}

fn candidates(step: &Step) -> Vec<usize> {
    match step {
        Step::Create { plan, .. } => plan.providers(),
        other => panic!("expected a create, got {other:?}"),
    }
}

#[test]
fn a_pod_reading_secrets_goes_to_the_first_provider_that_allows_them_only() {
    let providers = [("runpod", Deny), ("vast", Allow), ("slurm", Allow)];
    let pod = with_secret().build();
    assert_eq!(candidates(&decide_with(&pod, &providers, false)), [1]);
    assert_eq!(candidates(&decide_with(&pod, &providers, true)), [1, 2]);
    // A pod without Secrets keeps every provider, whatever their policy.
    let plain = PodBuilder::new().gpus("1").build();
    assert_eq!(
        candidates(&decide_with(&plain, &providers, false)),
        [0, 1, 2]
    );
}

#[test]
fn a_pod_whose_candidates_all_deny_secrets_fails_naming_them() {
    let pod = with_secret().build();
    let step = decide_with(&pod, &[("runpod", Deny), ("vast", Deny)], true);
    assert!(
        matches!(&step, Step::Fail { reason: "SecretsNotAllowed", message, .. }
            if message.contains("runpod, vast") && message.contains("\"hf\"")),
        "{step:?}"
    );
    // Pinned to a provider that denies: no other provider is tried instead.
    let pinned = with_secret().annotation(ANN_PROVIDER, "runpod").build();
    let step = decide_with(&pinned, &[("runpod", Deny), ("slurm", Allow)], true);
    assert!(
        matches!(&step, Step::Fail { reason: "SecretsNotAllowed", message, .. }
            if message.contains("provider runpod") && !message.contains("slurm")),
        "{step:?}"
    );
}
