//! Authentication of kubelet API requests: the client certificate's user, a bearer token
//! reviewed by the API server (cached), or anonymous.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::cache::Timed;
use super::{ANONYMOUS, AUTHENTICATED, Auth, TOKEN_FAILURE_TTL, TOKEN_TTL, UNAUTHENTICATED};
use crate::kubelet_api::ApiError;
use crate::telemetry::ErrorChain;

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

impl Auth {
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
            let reviewed = self
                .tokens
                .try_get_with(key, self.review_token(token))
                .await
                .map_err(|_| unauthorized())?;
            return reviewed
                .value
                .map(User::authenticated)
                .ok_or_else(unauthorized);
        }
        if self.anonymous {
            return Ok(User::anonymous());
        }
        Err(unauthorized())
    }
}

impl Auth {
    /// One TokenReview, shared by the concurrent requests carrying the same token (see
    /// `super::cache`); its answer is cached, an error only shared with the requests already
    /// waiting.
    async fn review_token(&self, token: &str) -> Result<Timed<Option<User>>, ReviewFailed> {
        match self.reviewer.review_token(token).await {
            Ok(user) => {
                let ttl = if user.is_some() {
                    TOKEN_TTL
                } else {
                    TOKEN_FAILURE_TTL
                };
                Ok(Timed { value: user, ttl })
            }
            Err(e) => {
                warn!(error = %ErrorChain(&e), "cannot authenticate a kubelet API request");
                Err(ReviewFailed)
            }
        }
    }
}

/// The TokenReview could not be made (already logged); the request is 401.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReviewFailed;

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
