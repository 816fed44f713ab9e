//! How a request authenticates: the [`Auth`] trait the provider [`Client`](super::Client) asks
//! for the headers of every request, the bearer key of the REST APIs ([`Bearer`]), and the
//! [`Secret`] a request carried, which every message built from its answer is redacted with.

use std::fmt;

use reqwest::header::{AUTHORIZATION, HeaderMap};

use super::InitError;
use crate::provider::ProviderError;

/// A source of credentials. Asked once per request, so a source that changes (a renewed token
/// file) is picked up without restarting anything.
pub(crate) trait Auth: fmt::Debug + Send + Sync {
    /// The headers of one request, and the secret among them.
    fn credentials(&self) -> Result<Credentials, ProviderError>;
}

/// What one request carries to authenticate.
#[derive(Debug)]
pub(crate) struct Credentials {
    /// Headers added to the request; the secret's header is marked sensitive.
    pub headers: HeaderMap,
    pub secret: Secret,
}

pub(crate) use crate::config::Secret;

/// `Authorization: Bearer <key>`, as RunPod and Vast.ai take it.
#[derive(Debug)]
pub(crate) struct Bearer(Secret);

impl Bearer {
    /// An empty key is refused: every request would fail authentication.
    pub fn new(provider: &str, api_key: &str) -> Result<Self, InitError> {
        if api_key.trim().is_empty() {
            return Err(InitError::MissingApiKey {
                provider: provider.to_owned(),
            });
        }
        Ok(Self(Secret::new(api_key)))
    }
}

impl Auth for Bearer {
    fn credentials(&self) -> Result<Credentials, ProviderError> {
        let value = self
            .0
            .header("Bearer ")
            .ok_or_else(|| ProviderError::Auth {
                message: "the API key contains characters a header cannot carry".into(),
            })?;
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value);
        Ok(Credentials {
            headers,
            secret: self.0.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_never_shown() {
        let s = Secret::new("secret-token");
        assert_eq!(s.redact("a secret-token b"), "a <redacted> b");
        assert_eq!(Secret::new("ab").redact("abc"), "abc");
        assert_eq!(format!("{s:?}"), "<redacted>");
        let bearer = Bearer::new("p", "secret-token").unwrap();
        assert!(!format!("{bearer:?}").contains("secret"));
        let creds = bearer.credentials().unwrap();
        let value = &creds.headers[AUTHORIZATION];
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), "Bearer secret-token");
        assert!(matches!(
            Bearer::new("p", " "),
            Err(InitError::MissingApiKey { .. })
        ));
        assert!(matches!(
            Bearer::new("p", "bad\nkey").unwrap().credentials(),
            Err(ProviderError::Auth { .. })
        ));
    }
}
