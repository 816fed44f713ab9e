//! The key a request presents (`Authorization: Bearer`), compared in constant time.

use axum::http::{HeaderMap, header};

/// What a request presented as credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential<'a> {
    /// Nothing.
    Missing,
    /// Something that is not a bearer token.
    Malformed,
    /// A key.
    Key(&'a str),
}

/// The credential of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Credential<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Credential::Missing;
    };
    let Ok(value) = value.to_str() else {
        return Credential::Malformed;
    };
    match value.trim().split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Credential::Key(token.trim())
        }
        _ => Credential::Malformed,
    }
}

/// Compare secrets without an early exit on the first differing byte.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
