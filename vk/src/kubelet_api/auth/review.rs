//! The API server's answers about a request's identity: `TokenReview` and
//! `SubjectAccessReview`, behind a trait tests replace. Each call is bounded
//! ([`REVIEW_TIMEOUT`]): an API server that accepts the request and never answers would
//! otherwise hold the kubelet API request (and its connection slot) for the client's own
//! read timeout, minutes.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::User;
use crate::provider::BoxFuture;

/// The longest a TokenReview or SubjectAccessReview may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors talking to the API server about a request's identity.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("failed to create a TokenReview")]
    TokenReview(#[source] kube::Error),
    #[error("failed to create a SubjectAccessReview")]
    AccessReview(#[source] kube::Error),
    #[error("the API server did not answer the {0} within {1:?}")]
    Timeout(&'static str, Duration),
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
    /// Whether the user may do what `access` says.
    fn review_access<'a>(&'a self, access: Access<'a>) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// What a SubjectAccessReview asks: whether `user` may `verb` `nodes/<subresource>` named
/// `node`.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub user: &'a User,
    pub node: &'a str,
    pub verb: &'a str,
    pub subresource: &'a str,
}

/// The real reviewer: `TokenReview` and `SubjectAccessReview` through the VK's client.
pub struct KubeReviewer {
    client: Client,
    timeout: Duration,
}

impl KubeReviewer {
    pub fn new(client: Client) -> Self {
        Self::with_timeout(client, REVIEW_TIMEOUT)
    }

    /// Each review bounded by `timeout`.
    pub fn with_timeout(client: Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    /// Creates the review `obj` (a `kind`) within the timeout; `failed` wraps the API's error.
    async fn create<K>(
        &self,
        kind: &'static str,
        obj: &K,
        failed: fn(kube::Error) -> ReviewError,
    ) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        tokio::time::timeout(self.timeout, api.create(&PostParams::default(), obj))
            .await
            .map_err(|_| ReviewError::Timeout(kind, self.timeout))?
            .map_err(failed)
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
            let done = self
                .create("TokenReview", &review, ReviewError::TokenReview)
                .await?;
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

    fn review_access<'a>(&'a self, access: Access<'a>) -> BoxFuture<'a, Result<bool, ReviewError>> {
        let Access {
            user,
            node,
            verb,
            subresource,
        } = access;
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
            let done = self
                .create("SubjectAccessReview", &review, ReviewError::AccessReview)
                .await?;
            let status = done
                .status
                .ok_or_else(|| ReviewError::Other("SubjectAccessReview without status".into()))?;
            Ok(status.allowed && status.denied != Some(true))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that accepts connections and never answers.
    async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = l.accept().await {
                held.push(conn);
            }
        });
        (url, task)
    }

    #[tokio::test]
    async fn reviews_against_a_silent_api_server_end_within_their_timeout() {
        let (url, _server) = silent_server().await;
        let cfg = kube::Config::new(url.parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let r = KubeReviewer::with_timeout(client, Duration::from_millis(300));
        let bound = Duration::from_secs(5);
        let token = tokio::time::timeout(bound, r.review_token("t")).await;
        assert!(
            matches!(token, Ok(Err(ReviewError::Timeout("TokenReview", _)))),
            "{token:?}"
        );
        let user = User {
            name: "u".into(),
            ..User::default()
        };
        let access = tokio::time::timeout(
            bound,
            r.review_access(Access {
                user: &user,
                node: "n",
                verb: "get",
                subresource: "logs",
            }),
        )
        .await;
        assert!(
            matches!(
                access,
                Ok(Err(ReviewError::Timeout("SubjectAccessReview", _)))
            ),
            "{access:?}"
        );
    }
}
