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
//! allowed and 30 seconds when denied; errors are not cached. Concurrent requests with the same
//! uncached token share one TokenReview (`cache`, on `moka`), as the API server's cached
//! token authenticator does, so a burst of requests with a new token is one API call. Tokens are cached by their
//! SHA-256, never kept or logged in clear.
//!
//! The pieces: `authn` (who is calling), `authz` (what the request is authorized as and the
//! decision), `review` (TokenReview and SubjectAccessReview through the API server) and
//! `cache` (the caches of both answers, one TokenReview per token at a time).

mod authn;
mod authz;
mod cache;
mod review;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::debug;

pub use authn::User;
pub use authz::{Attributes, request_attributes};
pub use review::{Access, KubeReviewer, ReviewError, Reviewer};

use super::{ApiError, AppState};
use crate::tls::Peer;
use cache::{TtlCache, ttl_cache};

pub const TOKEN_TTL: Duration = Duration::from_secs(120);
pub const TOKEN_FAILURE_TTL: Duration = Duration::from_secs(10);
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);
pub const DENIED_TTL: Duration = Duration::from_secs(30);

pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const AUTHENTICATED: &str = "system:authenticated";

/// The request filter: authenticator, authorizer and their caches.
pub struct Auth {
    reviewer: Arc<dyn Reviewer>,
    anonymous: bool,
    /// TokenReview answers by token hash; concurrent requests with one token make one review.
    tokens: TtlCache<[u8; 32], Option<User>>,
    decisions: TtlCache<String, bool>,
}

impl Auth {
    pub fn new(reviewer: Arc<dyn Reviewer>, anonymous: bool) -> Self {
        Self {
            reviewer,
            anonymous,
            tokens: ttl_cache(),
            decisions: ttl_cache(),
        }
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

/// The axum middleware in front of every route.
pub(crate) async fn middleware(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let cert_user = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .and_then(|c| c.0.cert_subject.clone())
        .and_then(|s| User::from_certificate(s.common_name, s.organizations));
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
