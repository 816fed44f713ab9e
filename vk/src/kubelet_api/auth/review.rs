//! The API server's answers about a request's identity: `TokenReview` and
//! `SubjectAccessReview`, behind a trait tests replace.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::User;
use crate::provider::BoxFuture;

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
