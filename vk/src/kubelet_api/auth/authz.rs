//! Authorization of kubelet API requests: the kubelet's mapping of a request to
//! `nodes/<subresource>` attributes and the SubjectAccessReview decision (cached).

use axum::http::{Method, StatusCode};
use tracing::{debug, warn};

use super::cache::Timed;
use super::{ALLOWED_TTL, Access, Auth, DENIED_TTL, User};
use crate::kubelet_api::ApiError;
use crate::telemetry::ErrorChain;

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

impl Auth {
    /// Whether `user` may make this request to node `node`: 403 or 500 otherwise.
    pub async fn authorize(
        &self,
        user: &User,
        node: &str,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        for sub in &attrs.subresources {
            let key = decision_key(user, node, attrs.verb, sub);
            let allowed = match self.decisions.get(&key).await {
                Some(a) => a.value,
                None => match self
                    .reviewer
                    .review_access(Access {
                        user,
                        node,
                        verb: attrs.verb,
                        subresource: sub,
                    })
                    .await
                {
                    Ok(a) => {
                        let ttl = if a { ALLOWED_TTL } else { DENIED_TTL };
                        self.decisions.insert(key, Timed { value: a, ttl }).await;
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
