//! Pull Secrets read as the kubelet reads them, and the login each image gets.

use super::*;
use crate::test_support::PodBuilder;

fn config(json: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(".dockerconfigjson".to_owned(), json.to_owned())])
}

#[test]
fn reads_username_and_password_or_the_base64_auth() {
    // "robot:pa:ss" in base64: the password may hold a colon.
    let data = config(
        r#"{"auths": {"registry.example.com": {"username": "u1", "password": "p1"},
                      "https://index.docker.io/v1/": {"auth": "cm9ib3Q6cGE6c3M="}}}"#,
    );
    let entries = parse(&data).unwrap();
    let hub = login_for("acme/private:1", &entries).unwrap();
    assert_eq!(
        (hub.username.as_str(), hub.password.as_str()),
        ("robot", "pa:ss")
    );
    assert_eq!(hub.registry, "index.docker.io");
    let own = login_for("registry.example.com/team/app:2", &entries).unwrap();
    assert_eq!((own.username.as_str(), own.password.as_str()), ("u1", "p1"));
    assert_eq!(login_for("ghcr.io/acme/app", &entries), None);
}

#[test]
fn the_legacy_dockercfg_is_read_too() {
    let data = BTreeMap::from([(
        ".dockercfg".to_owned(),
        r#"{"quay.io": {"username": "q", "password": "w"}}"#.to_owned(),
    )]);
    assert_eq!(
        login_for("quay.io/acme/x", &parse(&data).unwrap()).map(|l| l.username),
        Some("q".into())
    );
}

#[test]
fn the_most_specific_key_wins() {
    let data = config(
        r#"{"auths": {"registry.example.com": {"username": "any", "password": "a"},
                      "registry.example.com/team": {"username": "team", "password": "t"},
                      "*.example.com": {"username": "glob", "password": "g"}}}"#,
    );
    let entries = parse(&data).unwrap();
    let l = |i: &str| login_for(i, &entries).map(|l| l.username);
    assert_eq!(l("registry.example.com/team/app"), Some("team".into()));
    assert_eq!(l("registry.example.com/other/app"), Some("any".into()));
    assert_eq!(l("cache.example.com/app"), Some("glob".into()));
}

#[test]
fn a_malformed_secret_is_named_without_its_content() {
    let bad = config(r#"{"auths": {"r.example.com": {"auth": "secret-value"#);
    let why = parse(&bad).unwrap_err();
    assert!(!why.contains("secret-value"), "{why}");
    let not_base64 = config(r#"{"auths": {"r.example.com": {"auth": "!!secret!!"}}}"#);
    let why = parse(&not_base64).unwrap_err();
    assert!(
        why.contains("r.example.com") && !why.contains("secret"),
        "{why}"
    );
    assert!(parse(&BTreeMap::from([("token".to_owned(), "x".to_owned())])).is_err());
}

#[test]
fn a_login_never_shows_its_password() {
    let entries = parse(&config(
        r#"{"auths": {"r.example.com": {"username": "u", "password": "hunter2-long"}}}"#,
    ))
    .unwrap();
    let login = login_for("r.example.com/a", &entries).unwrap();
    assert!(!format!("{login:?} {entries:?}").contains("hunter2"));
    assert!(!serde_json::to_string(&login).unwrap().contains("hunter2"));
}

struct Secrets(BTreeMap<String, BTreeMap<String, String>>);

impl Source for Secrets {
    async fn config_map(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok(None)
    }
    async fn secret(&self, _: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok(self.0.get(name).cloned())
    }
}

#[tokio::test]
async fn resolving_names_the_secrets_it_could_not_use_and_keeps_the_rest() {
    let pod = PodBuilder::new()
        .image("registry.example.com/team/app:1")
        .pull_secrets(&["gone", "good", "opaque", "good"])
        .build();
    assert_eq!(referenced(&pod), ["gone", "good", "opaque"]);
    let src = Secrets(BTreeMap::from([
        (
            "good".to_owned(),
            config(r#"{"auths": {"registry.example.com": {"username": "u", "password": "p"}}}"#),
        ),
        (
            "opaque".to_owned(),
            BTreeMap::from([("k".into(), "v".into())]),
        ),
    ]));
    let r = resolve(&pod, &src).await.unwrap();
    assert_eq!(r.logins.len(), 1);
    assert_eq!(r.logins[0].registry, "registry.example.com");
    assert_eq!(r.unreadable.len(), 2);
    assert!(
        r.unreadable[0].starts_with("gone (not found)"),
        "{:?}",
        r.unreadable
    );
    assert!(
        r.unreadable[1].starts_with("opaque ("),
        "{:?}",
        r.unreadable
    );
}
