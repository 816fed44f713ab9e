//! At start, a warning for each `allowedNamespaces` entry that names no namespace: a typo there
//! leaves that team's pods unserved without a word. A warning, never an error: namespaces come
//! and go, and one may be created after the VK starts.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// What the API server said of one allowed namespace.
#[derive(Debug, PartialEq)]
pub enum Seen {
    Exists,
    Missing,
    /// Not answered (no right to read it, an error): nothing is said of it.
    Unknown(String),
}

/// The warning for each allowed namespace that does not exist, in the configured order.
pub fn warnings(seen: &[(String, Seen)]) -> Vec<String> {
    seen.iter()
        .filter(|(_, s)| *s == Seen::Missing)
        .map(|(name, _)| {
            format!(
                "allowedNamespaces names {name:?}, which does not exist (yet): pods there run on the virtual node once it does; check the name if it should exist"
            )
        })
        .collect()
}

/// Looks each allowed namespace up once and logs a warning for each one that does not exist.
pub async fn warn_missing(client: Client, allowed: Vec<String>) {
    let api: Api<Namespace> = Api::all(client);
    let mut seen = Vec::with_capacity(allowed.len());
    for name in allowed {
        let s = match api.get_opt(&name).await {
            Ok(Some(_)) => Seen::Exists,
            Ok(None) => Seen::Missing,
            Err(e) => Seen::Unknown(e.to_string()),
        };
        if let Seen::Unknown(e) = &s {
            tracing::debug!(namespace = %name, error = %e, "could not check that an allowed namespace exists");
        }
        seen.push((name, s));
    }
    for w in warnings(&seen) {
        tracing::warn!("{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_namespace_the_api_server_says_is_missing_gets_a_warning() {
        let seen = vec![
            ("serving".to_owned(), Seen::Exists),
            ("reserch".to_owned(), Seen::Missing),
            ("research".to_owned(), Seen::Unknown("403 Forbidden".into())),
        ];
        let w = warnings(&seen);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("\"reserch\"") && w[0].contains("does not exist"),
            "{w:?}"
        );
        assert!(warnings(&[("a".into(), Seen::Exists)]).is_empty());
    }
}
