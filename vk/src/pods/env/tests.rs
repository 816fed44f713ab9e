//! Unit tests of environment resolution against a fake ConfigMap/Secret source.

use super::*;
use crate::test_support::PodBuilder;
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, EnvFromSource, EnvVar as KEnv, EnvVarSource, ObjectFieldSelector,
    SecretEnvSource, SecretKeySelector,
};

struct Fake;
impl Source for Fake {
    async fn config_map(
        &self,
        _: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok(match name {
            "cfg" => Some([("mode".to_owned(), "fast".to_owned())].into()),
            "odd-keys" => Some(
                [
                    ("GOOD", "1"),
                    ("a;rm -rf /", "x"),
                    ("1ST", "y"),
                    ("dotted.name", "z"),
                    ("", "e"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            _ => None,
        })
    }
    async fn secret(&self, _: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok((name == "creds").then(|| [("token".to_owned(), "s3cr3t".to_owned())].into()))
    }
}

fn pod(env: Vec<KEnv>, env_from: Vec<EnvFromSource>) -> Pod {
    PodBuilder::new()
        .name("ns", "p")
        .container_name("c")
        .env(env)
        .env_from(env_from)
        .build()
}

fn cm_ref(name: &str, key: &str, optional: bool) -> KEnv {
    KEnv {
        name: format!("CM_{key}"),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.into(),
                key: key.into(),
                optional: Some(optional),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn resolves_literals_refs_downward_and_expansion() {
    let env = vec![
        KEnv {
            name: "A".into(),
            value: Some("1".into()),
            ..Default::default()
        },
        KEnv {
            name: "B".into(),
            value: Some("$(A)-$$(A)-$(NOPE)".into()),
            ..Default::default()
        },
        cm_ref("cfg", "mode", false),
        KEnv {
            name: "TOKEN".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "creds".into(),
                    key: "token".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        KEnv {
            name: "POD".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let from = vec![EnvFromSource {
        prefix: Some("S_".into()),
        secret_ref: Some(SecretEnvSource {
            name: "creds".into(),
            optional: None,
        }),
        ..Default::default()
    }];
    let got = resolve(&pod(env, from), &Fake, "10.0.0.1")
        .await
        .unwrap()
        .vars;
    let map: BTreeMap<_, _> = got
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(map["A"], "1");
    assert_eq!(map["B"], "1-$(A)-$(NOPE)");
    assert_eq!(map["CM_mode"], "fast");
    assert_eq!(map["TOKEN"], "s3cr3t");
    assert_eq!(map["S_token"], "s3cr3t");
    assert_eq!(map["POD"], "p");
    assert!(
        !format!("{got:?}").contains("s3cr3t"),
        "env Debug must not show values"
    );
}

#[tokio::test]
async fn env_from_keys_that_are_not_variable_names_are_skipped_and_reported() {
    let from = vec![EnvFromSource {
        config_map_ref: Some(k8s_openapi::api::core::v1::ConfigMapEnvSource {
            name: "odd-keys".into(),
            optional: None,
        }),
        ..Default::default()
    }];
    let got = resolve(&pod(vec![], from), &Fake, "").await.unwrap();
    let names: Vec<&str> = got.vars.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["GOOD"]);
    let mut skipped = got.skipped.clone();
    skipped.sort();
    assert_eq!(skipped, ["", "1ST", "a;rm -rf /", "dotted.name"]);
    // A prefix can make a key valid, as in the kubelet.
    let prefixed = vec![EnvFromSource {
        prefix: Some("X_".into()),
        config_map_ref: Some(k8s_openapi::api::core::v1::ConfigMapEnvSource {
            name: "odd-keys".into(),
            optional: None,
        }),
        ..Default::default()
    }];
    let got = resolve(&pod(vec![], prefixed), &Fake, "").await.unwrap();
    let names: Vec<&str> = got.vars.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["X_", "X_1ST", "X_GOOD"]);
}

#[test]
fn env_names() {
    for ok in ["A", "_x", "PATH_2", "a1"] {
        assert!(is_env_name(ok), "{ok}");
    }
    for bad in ["", "1A", "a-b", "a.b", "a b", "a=b", "é", "$(X)"] {
        assert!(!is_env_name(bad), "{bad}");
    }
}

#[tokio::test]
async fn optional_missing_is_skipped_mandatory_missing_is_an_error() {
    let got = resolve(
        &pod(
            vec![cm_ref("nope", "k", true), cm_ref("cfg", "absent", true)],
            vec![],
        ),
        &Fake,
        "",
    )
    .await
    .unwrap();
    assert_eq!(got, Resolved::default());
    let err = resolve(
        &pod(vec![cm_ref("cfg", "absent", false)], vec![]),
        &Fake,
        "",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::Missing(ref m) if m.contains("absent")),
        "{err}"
    );
    let err = resolve(&pod(vec![cm_ref("nope", "k", false)], vec![]), &Fake, "")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Missing(ref m) if m.contains("nope")),
        "{err}"
    );
}
