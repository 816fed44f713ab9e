//! The JWT the adapter presents to slurmrestd: from a token file, re-read whenever the file
//! changes (so a renewed token is picked up without restarting the VK), or a fixed key given
//! through the provider's `apiKeyEnv` / `apiKeyFile`. Tokens never appear in messages.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::provider::ProviderError;

/// Where the token comes from.
pub(crate) enum TokenSource {
    /// Read from `path`; cached until the file's modification time or length changes.
    File {
        path: PathBuf,
        cache: Mutex<Option<Cached>>,
    },
    Fixed(String),
}

#[derive(Clone)]
pub(crate) struct Cached {
    stamp: (Option<SystemTime>, u64),
    token: String,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path, .. } => write!(f, "TokenSource::File({})", path.display()),
            Self::Fixed(_) => f.write_str("TokenSource::Fixed(<redacted>)"),
        }
    }
}

impl TokenSource {
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::File {
            path: path.into(),
            cache: Mutex::new(None),
        }
    }

    /// The current token. A file that cannot be read or is empty is an authentication
    /// problem (reported as an event, retried), not a crash.
    pub fn current(&self) -> Result<String, ProviderError> {
        match self {
            Self::Fixed(t) => Ok(t.clone()),
            Self::File { path, cache } => {
                let auth = |message: String| ProviderError::Auth { message };
                let meta = std::fs::metadata(path).map_err(|e| {
                    auth(format!(
                        "cannot read the Slurm token file {}: {e}",
                        path.display()
                    ))
                })?;
                let stamp = (meta.modified().ok(), meta.len());
                let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = guard.as_ref()
                    && c.stamp == stamp
                {
                    return Ok(c.token.clone());
                }
                let token = read_token(path).map_err(auth)?;
                *guard = Some(Cached {
                    stamp,
                    token: token.clone(),
                });
                Ok(token)
            }
        }
    }

    /// For messages: where the token comes from.
    pub fn describe(&self) -> String {
        match self {
            Self::File { path, .. } => format!("token file {}", path.display()),
            Self::Fixed(_) => "the provider's API key".to_owned(),
        }
    }
}

/// Reads a token file: `SLURM_JWT=...` (as `scontrol token` prints it) or the bare token.
fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the Slurm token file {}: {e}", path.display()))?;
    let token = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.strip_prefix("SLURM_JWT=").unwrap_or(l).trim().to_owned())
        .unwrap_or_default();
    if token.is_empty() {
        return Err(format!("the Slurm token file {} is empty", path.display()));
    }
    Ok(token)
}

/// The `exp` claim of a JWT (seconds since the epoch), if the token is a readable JWT.
pub(crate) fn jwt_expiry(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64url_decode(payload)?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_i64()
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scontrol_output_and_bare_tokens() {
        let dir = std::env::temp_dir().join(format!("vk-slurm-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, "SLURM_JWT=abc.def.ghi\n").unwrap();
        let src = TokenSource::file(&path);
        assert_eq!(src.current().unwrap(), "abc.def.ghi");
        std::fs::write(&path, "other-token-longer\n").unwrap();
        assert_eq!(src.current().unwrap(), "other-token-longer");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(src.current(), Err(ProviderError::Auth { .. })));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(src.current(), Err(ProviderError::Auth { .. })));
        assert!(!format!("{src:?}").contains("other"));
    }

    #[test]
    fn expiry_of_a_jwt() {
        // {"alg":"HS256","typ":"JWT"} . {"exp":1795969228,"iat":1,"sun":"u"} . sig
        let token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTU5NjkyMjgsImlhdCI6MSwic3VuIjoidSJ9.x";
        assert_eq!(jwt_expiry(token), Some(1_795_969_228));
        assert_eq!(jwt_expiry("not-a-jwt"), None);
        assert_eq!(jwt_expiry("a.!!.c"), None);
    }
}
