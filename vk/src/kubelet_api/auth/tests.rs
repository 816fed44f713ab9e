//! Tests of the auth filter with a fake reviewer: attributes, authentication, authorization
//! and caching.

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;

use super::*;
use crate::provider::BoxFuture;

/// Tokens `good-<user>` authenticate as `<user>`; `<user>` may do what `rules` lists as
/// `user:verb:subresource`; the token `boom` fails.
#[derive(Default)]
struct Fake {
    rules: Vec<&'static str>,
    token_calls: AtomicUsize,
    access_calls: AtomicUsize,
    /// When set, token reviews wait for a permit (so concurrent requests overlap).
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl Reviewer for Fake {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        self.token_calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                let _ = gate.acquire().await;
            }
            if token == "boom" {
                return Err(ReviewError::Other("apiserver down".into()));
            }
            Ok(token.strip_prefix("good-").map(|n| User {
                name: n.into(),
                groups: vec![AUTHENTICATED.into()],
                ..User::default()
            }))
        })
    }
    fn review_access<'a>(&'a self, a: Access<'a>) -> BoxFuture<'a, Result<bool, ReviewError>> {
        self.access_calls.fetch_add(1, Ordering::SeqCst);
        let (user, node) = (a.user, a.node);
        let rule = format!("{}:{}:{}", user.name, a.verb, a.subresource);
        Box::pin(async move {
            assert_eq!(node, "vk-node");
            if user.name == "error" {
                return Err(ReviewError::Other("webhook down".into()));
            }
            Ok(self.rules.iter().any(|r| *r == rule))
        })
    }
}

fn auth(rules: Vec<&'static str>, anonymous: bool) -> (Auth, Arc<Fake>) {
    let fake = Arc::new(Fake {
        rules,
        ..Fake::default()
    });
    (Auth::new(fake.clone(), anonymous), fake)
}

#[test]
fn attributes_match_the_kubelet() {
    let a = |m: Method, p: &str| request_attributes(&m, p);
    assert_eq!(a(Method::GET, "/stats/summary").subresources, ["stats"]);
    assert_eq!(
        a(Method::GET, "/metrics/resource").subresources,
        ["metrics"]
    );
    assert_eq!(a(Method::GET, "/metrics").subresources, ["metrics"]);
    assert_eq!(a(Method::GET, "/metricsfoo").subresources, ["proxy"]);
    assert_eq!(a(Method::GET, "/logs/syslog").subresources, ["log"]);
    assert_eq!(
        a(Method::GET, "/containerLogs/a/b/c").subresources,
        ["proxy"]
    );
    assert_eq!(a(Method::POST, "/exec/a/b/c").subresources, ["proxy"]);
    assert_eq!(a(Method::POST, "/exec/a/b/c").verb, "create");
    // A WebSocket upgrade is a GET; running a command still needs `create`.
    assert_eq!(a(Method::GET, "/exec/a/b/c").verb, "create");
    assert_eq!(a(Method::GET, "/attach/a/b/u/c").verb, "create");
    assert_eq!(a(Method::GET, "/portForward/a/b").verb, "create");
    assert_eq!(a(Method::GET, "/executive").verb, "get");
    assert_eq!(a(Method::GET, "/pods").subresources, ["pods", "proxy"]);
    assert_eq!(a(Method::GET, "/pods/").subresources, ["pods", "proxy"]);
    assert_eq!(
        a(Method::GET, "/healthz").subresources,
        ["healthz", "proxy"]
    );
    assert_eq!(a(Method::PUT, "/x").verb, "update");
    assert_eq!(a(Method::PATCH, "/x").verb, "patch");
    assert_eq!(a(Method::DELETE, "/x").verb, "delete");
    assert_eq!(a(Method::HEAD, "/x").verb, "");
}

#[tokio::test]
async fn no_credentials_is_401_unless_anonymous_is_on() {
    let (a, _) = auth(vec![], false);
    let e = a.authenticate(None, None).await.unwrap_err();
    assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    let (a, _) = auth(vec![], true);
    let u = a.authenticate(None, None).await.unwrap();
    assert_eq!(
        (u.name.as_str(), u.groups.as_slice()),
        (ANONYMOUS, &[UNAUTHENTICATED.to_owned()][..])
    );
    // An anonymous user still needs the authorizer's yes.
    let e = a
        .check(None, None, &Method::GET, "/metrics/resource", "vk-node")
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn certificates_win_and_tokens_are_reviewed_once() {
    let (a, fake) = auth(vec!["alice:get:metrics", "kube-apiserver:get:proxy"], true);
    let cert =
        User::from_certificate("kube-apiserver".into(), vec!["system:masters".into()]).unwrap();
    let u = a
        .check(
            Some(&cert),
            Some("Bearer good-alice"),
            &Method::GET,
            "/containerLogs/a/b/c",
            "vk-node",
        )
        .await
        .unwrap();
    assert_eq!(u.name, "kube-apiserver");
    assert!(u.groups.contains(&AUTHENTICATED.to_owned()));
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 0);

    for _ in 0..3 {
        let u = a
            .check(
                None,
                Some("bearer good-alice"),
                &Method::GET,
                "/metrics/resource",
                "vk-node",
            )
            .await
            .unwrap();
        assert_eq!(u.name, "alice");
    }
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.access_calls.load(Ordering::SeqCst), 2); // the cert user's and alice's
}

#[tokio::test]
async fn bad_tokens_are_401_even_with_anonymous_and_errors_are_not_cached() {
    let (a, fake) = auth(vec![], true);
    let e = a
        .authenticate(None, Some("Bearer nobody"))
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    for _ in 0..2 {
        let e = a.authenticate(None, Some("Bearer boom")).await.unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 3);
    // Another scheme or an empty token is no token: anonymous.
    assert_eq!(
        a.authenticate(None, Some("Basic abc")).await.unwrap().name,
        ANONYMOUS
    );
    assert_eq!(
        a.authenticate(None, Some("Bearer ")).await.unwrap().name,
        ANONYMOUS
    );
}

/// Sends 16 requests carrying `token` at once, all polled (so all miss the cache) before the
/// fake API server answers any TokenReview; their statuses.
async fn concurrent_requests(
    a: &Auth,
    gate: &tokio::sync::Semaphore,
    token: &str,
) -> Vec<Result<String, StatusCode>> {
    let header = format!("Bearer {token}");
    let requests = futures::future::join_all((0..16).map(|_| async {
        a.authenticate(None, Some(&header))
            .await
            .map(|u| u.name)
            .map_err(|e| e.status)
    }));
    let answer = async {
        // `join_all` polled every request once before this runs: all are waiting.
        tokio::task::yield_now().await;
        gate.add_permits(1000);
    };
    let (results, ()) = futures::join!(requests, answer);
    results
}

#[tokio::test]
async fn concurrent_requests_with_one_token_make_one_token_review() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let fake = Arc::new(Fake {
        gate: Some(gate.clone()),
        ..Fake::default()
    });
    let a = Auth::new(fake.clone(), false);
    let results = concurrent_requests(&a, &gate, "good-alice").await;
    assert_eq!(results, vec![Ok("alice".to_owned()); 16]);
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 1);
    // Cached from then on.
    a.authenticate(None, Some("Bearer good-alice"))
        .await
        .unwrap();
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 1);

    // An error is shared by the requests that waited for it, then forgotten: the next request
    // asks again.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let fake = Arc::new(Fake {
        gate: Some(gate.clone()),
        ..Fake::default()
    });
    let a = Auth::new(fake.clone(), false);
    let results = concurrent_requests(&a, &gate, "boom").await;
    assert_eq!(results, vec![Err(StatusCode::UNAUTHORIZED); 16]);
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 1);
    let _ = a.authenticate(None, Some("Bearer boom")).await;
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_review_whose_requests_all_went_away_is_forgotten() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let fake = Arc::new(Fake {
        gate: Some(gate.clone()),
        ..Fake::default()
    });
    let a = Auth::new(fake.clone(), false);
    // The only request gives up while its review is pending.
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(10),
        a.authenticate(None, Some("Bearer good-bob")),
    )
    .await;
    assert!(gave_up.is_err());
    gate.add_permits(1000);
    assert_eq!(
        a.authenticate(None, Some("Bearer good-bob"))
            .await
            .unwrap()
            .name,
        "bob"
    );
    assert_eq!(fake.token_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn forbidden_names_the_attributes_and_fine_grained_paths_fall_back_to_proxy() {
    let (a, fake) = auth(vec!["bob:get:proxy", "carol:get:pods"], false);
    let e = a
        .check(
            None,
            Some("Bearer good-dave"),
            &Method::GET,
            "/pods",
            "vk-node",
        )
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
    assert_eq!(
        e.message,
        "Forbidden (user=dave, verb=get, resource=nodes, subresource(s)=[pods,proxy])"
    );
    a.check(
        None,
        Some("Bearer good-bob"),
        &Method::GET,
        "/pods",
        "vk-node",
    )
    .await
    .unwrap();
    a.check(
        None,
        Some("Bearer good-carol"),
        &Method::GET,
        "/pods",
        "vk-node",
    )
    .await
    .unwrap();
    let e = a
        .check(
            None,
            Some("Bearer good-carol"),
            &Method::GET,
            "/stats/summary",
            "vk-node",
        )
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
    let before = fake.access_calls.load(Ordering::SeqCst);
    // Denials are cached too.
    let _ = a
        .check(
            None,
            Some("Bearer good-carol"),
            &Method::GET,
            "/stats/summary",
            "vk-node",
        )
        .await;
    assert_eq!(fake.access_calls.load(Ordering::SeqCst), before);
    let e = a
        .check(
            None,
            Some("Bearer good-error"),
            &Method::GET,
            "/pods",
            "vk-node",
        )
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[test]
fn certificate_users_need_a_common_name() {
    assert!(User::from_certificate(String::new(), vec!["g".into()]).is_none());
}
