//! Authentication and authorization of kubelet API requests, as the kubelet does them
//! (`pkg/kubelet/server/auth.go`, `InstallAuthFilter` in `server.go`):
//!
//! 1. **Authenticate.** A client certificate verified against the client CA during the TLS
//!    handshake makes the user its subject's CN, with its O values as groups. Otherwise an
//!    `Authorization: Bearer` token goes to the API server as a `TokenReview`. Otherwise the
//!    request is anonymous: `system:anonymous` in `system:unauthenticated` if `anonymousAuth`
//!    is on, else 401. A token that does not authenticate is 401 even with anonymous access on
//!    (the API server's delegating authenticator fails on a bad token). Authenticated users get
//!    the `system:authenticated` group.
//! 2. **Authorize** with a `SubjectAccessReview`: verb from the HTTP method (GET get, POST
//!    create, PUT update, PATCH patch, DELETE delete), resource `nodes`, name the node,
//!    subresource by path: `/stats/*` stats, `/metrics/*` metrics, `/logs/*` log,
//!    `/checkpoint/*` checkpoint, anything else (logs of containers, exec, attach) proxy. With
//!    fine-grained kubelet authorization (GA in 1.36), `/pods` is checked as `pods`, `/healthz` as
//!    `healthz`, `/configz` as `configz` and `/statusz` as `statusz`, each falling back to
//!    `proxy`: any allowed subresource admits the request. One deliberate difference: the
//!    streaming paths (`/exec`, `/attach`, `/portForward`, `/run`) are always checked with the
//!    verb `create`, whatever the method, because a WebSocket upgrade is a `GET` and must not let
//!    a holder of read-only `get nodes/proxy` run commands (the kubelet itself still maps such
//!    a `GET` to `get`; kubernetes/kubernetes#136550 proposed the same change there). The API
//!    server's kubelet client needs `create` on `nodes/proxy`, which `system:kubelet-api-admin`
//!    grants. Denied is 403
//!    `Forbidden (user=..., verb=..., resource=nodes, subresource(s)=[...])`; an authorizer
//!    error is 500.
//!
//! Every path is authenticated, `/healthz` included, as on the kubelet (its health handler sits
//! behind the same filter). Results are cached like the kubelet's webhook caches: token
//! reviews 2 minutes when authenticated and 10 seconds when not, access reviews 5 minutes when
//! allowed and 30 seconds when denied; errors are not cached. Tokens are cached by their
//! SHA-256, never kept or logged in clear.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::tls::Peer;
use super::{ApiError, AppState};
use crate::provider::BoxFuture;
use crate::telemetry::ErrorChain;

pub const TOKEN_TTL: Duration = Duration::from_secs(120);
pub const TOKEN_FAILURE_TTL: Duration = Duration::from_secs(10);
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);
pub const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries per cache; beyond it expired entries are dropped, then everything.
const CACHE_CAPACITY: usize = 10_000;

pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const AUTHENTICATED: &str = "system:authenticated";

/// An authenticated identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The identity a client certificate carries: CN is the user, each O a group.
    pub fn from_certificate(common_name: String, organizations: Vec<String>) -> Option<Self> {
        if common_name.is_empty() {
            return None;
        }
        Some(Self {
            name: common_name,
            groups: organizations,
            ..Self::default()
        })
    }

    fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Self::default()
        }
    }

    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

/// What a request is authorized as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    /// Checked in order; any allowed admits the request.
    pub subresources: Vec<&'static str>,
}

fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// The kubelet's mapping of a request to authorization attributes.
pub fn request_attributes(method: &Method, path: &str) -> Attributes {
    let streaming = ["/exec", "/attach", "/portForward", "/run"]
        .iter()
        .any(|p| is_subpath(path, p));
    let verb = match *method {
        _ if streaming => "create",
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut subresources = Vec::new();
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods/") {
        subresources.push("pods");
    } else if is_subpath(path, "/healthz") {
        subresources.push("healthz");
    } else if is_subpath(path, "/configz") {
        subresources.push("configz");
    } else if is_subpath(path, "/statusz") {
        subresources.push("statusz");
    }
    subresources.push(if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/checkpoint") {
        "checkpoint"
    } else {
        "proxy"
    });
    Attributes { verb, subresources }
}

/// Errors talking to the API server about a request's identity.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("failed to create a TokenReview")]
    TokenReview(#[source] kube::Error),
    #[error("failed to create a SubjectAccessReview")]
    AccessReview(#[source] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// Asks the API server who a token is and what a user may do.
pub trait Reviewer: Send + Sync + 'static {
    /// `None` when the token does not authenticate.
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>>;
    /// Whether `user` may `verb` `nodes/<subresource>` named `node`.
    fn review_access<'a>(
        &'a self,
        user: &'a User,
        node: &'a str,
        verb: &'a str,
        subresource: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// The real reviewer: `TokenReview` and `SubjectAccessReview` through the VK's client.
pub struct KubeReviewer {
    client: Client,
}

impl KubeReviewer {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl Reviewer for KubeReviewer {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                metadata: Default::default(),
                spec: TokenReviewSpec {
                    audiences: None,
                    token: token.to_owned(),
                },
                status: None,
            };
            let api: Api<TokenReview> = Api::all(self.client.clone());
            let done = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::TokenReview)?;
            let status = done.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let u = status.user.unwrap_or_default();
            Ok(Some(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }))
        })
    }

    fn review_access<'a>(
        &'a self,
        user: &'a User,
        node: &'a str,
        verb: &'a str,
        subresource: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                metadata: Default::default(),
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                    groups: Some(user.groups.clone()),
                    extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.to_owned()),
                        group: Some(String::new()),
                        version: Some("v1".into()),
                        resource: Some("nodes".into()),
                        subresource: Some(subresource.to_owned()),
                        name: Some(node.to_owned()),
                        ..Default::default()
                    }),
                    non_resource_attributes: None,
                },
                status: None,
            };
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let done = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::AccessReview)?;
            let status = done
                .status
                .ok_or_else(|| ReviewError::Other("SubjectAccessReview without status".into()))?;
            Ok(status.allowed && status.denied != Some(true))
        })
    }
}

/// A small map whose entries expire.
struct TtlCache<K, V> {
    map: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(k)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(v, _)| v.clone())
    }

    fn put(&self, k: K, v: V, ttl: Duration) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CACHE_CAPACITY {
            let now = Instant::now();
            map.retain(|_, (_, until)| *until > now);
            if map.len() >= CACHE_CAPACITY {
                map.clear();
            }
        }
        map.insert(k, (v, Instant::now() + ttl));
    }
}

/// The request filter: authenticator, authorizer and their caches.
pub struct Auth {
    reviewer: Arc<dyn Reviewer>,
    anonymous: bool,
    tokens: TtlCache<[u8; 32], Option<User>>,
    decisions: TtlCache<String, bool>,
}

impl Auth {
    pub fn new(reviewer: Arc<dyn Reviewer>, anonymous: bool) -> Self {
        Self {
            reviewer,
            anonymous,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        }
    }

    /// Who is calling: the certificate's user, the token's, or anonymous; 401 otherwise.
    pub async fn authenticate(
        &self,
        cert_user: Option<&User>,
        authorization: Option<&str>,
    ) -> Result<User, ApiError> {
        if let Some(u) = cert_user {
            return Ok(u.clone().authenticated());
        }
        if let Some(token) = authorization.and_then(bearer) {
            let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let reviewed = match self.tokens.get(&key) {
                Some(cached) => cached,
                None => match self.reviewer.review_token(token).await {
                    Ok(user) => {
                        let ttl = if user.is_some() {
                            TOKEN_TTL
                        } else {
                            TOKEN_FAILURE_TTL
                        };
                        self.tokens.put(key, user.clone(), ttl);
                        user
                    }
                    Err(e) => {
                        warn!(error = %ErrorChain(&e), "cannot authenticate a kubelet API request");
                        return Err(unauthorized());
                    }
                },
            };
            return reviewed.map(User::authenticated).ok_or_else(unauthorized);
        }
        if self.anonymous {
            return Ok(User::anonymous());
        }
        Err(unauthorized())
    }

    /// Whether `user` may make this request to node `node`: 403 or 500 otherwise.
    pub async fn authorize(
        &self,
        user: &User,
        node: &str,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        for sub in &attrs.subresources {
            let key = decision_key(user, node, attrs.verb, sub);
            let allowed = match self.decisions.get(&key) {
                Some(a) => a,
                None => match self
                    .reviewer
                    .review_access(user, node, attrs.verb, sub)
                    .await
                {
                    Ok(a) => {
                        self.decisions
                            .put(key, a, if a { ALLOWED_TTL } else { DENIED_TTL });
                        a
                    }
                    Err(e) => {
                        warn!(user = %user.name, verb = attrs.verb, subresource = sub, error = %ErrorChain(&e), "authorization error");
                        return Err(ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!(
                                "Authorization error (user={}, verb={}, resource=nodes, subresource={sub})",
                                user.name, attrs.verb
                            ),
                        ));
                    }
                },
            };
            if allowed {
                return Ok(());
            }
        }
        debug!(user = %user.name, verb = attrs.verb, subresources = ?attrs.subresources, "forbidden");
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
                user.name,
                attrs.verb,
                attrs.subresources.join(",")
            ),
        ))
    }

    /// Authenticates and authorizes one request.
    pub async fn check(
        &self,
        cert_user: Option<&User>,
        authorization: Option<&str>,
        method: &Method,
        path: &str,
        node: &str,
    ) -> Result<User, ApiError> {
        let user = self.authenticate(cert_user, authorization).await?;
        self.authorize(&user, node, &request_attributes(method, path))
            .await?;
        Ok(user)
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized")
}

/// The token of an `Authorization: Bearer <token>` header; `None` for other schemes or an
/// empty token.
fn bearer(value: &str) -> Option<&str> {
    let mut parts = value.split_whitespace();
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn decision_key(user: &User, node: &str, verb: &str, subresource: &str) -> String {
    let mut groups = user.groups.clone();
    groups.sort();
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{node}\u{0}{verb}\u{0}{subresource}",
        user.name,
        user.uid,
        groups.join("\u{1}"),
        user.extra
    )
}

/// The axum middleware in front of every route.
pub(crate) async fn middleware(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let cert_user = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .and_then(|c| c.0.cert_user.clone());
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match s
        .auth
        .check(
            cert_user.as_ref(),
            authorization,
            req.method(),
            req.uri().path(),
            &s.node_name,
        )
        .await
    {
        Ok(user) => {
            debug!(user = %user.name, method = %req.method(), path = req.uri().path(), "kubelet API request");
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens `good-<user>` authenticate as `<user>`; `<user>` may do what `rules` lists as
    /// `user:verb:subresource`; the token `boom` fails.
    #[derive(Default)]
    struct Fake {
        rules: Vec<&'static str>,
        token_calls: AtomicUsize,
        access_calls: AtomicUsize,
    }

    impl Reviewer for Fake {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
            self.token_calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
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
        fn review_access<'a>(
            &'a self,
            user: &'a User,
            node: &'a str,
            verb: &'a str,
            sub: &'a str,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            self.access_calls.fetch_add(1, Ordering::SeqCst);
            let rule = format!("{}:{verb}:{sub}", user.name);
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
}
