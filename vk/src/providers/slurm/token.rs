//! How the adapter authenticates to slurmrestd ([`SlurmAuth`], the [`Auth`] of its HTTP
//! client): headers `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`, the JWT from a token file,
//! re-read whenever the file changes (so a renewed token is picked up without restarting the
//! VK), or a fixed key given through the provider's `apiKeyEnv` / `apiKeyFile`. Tokens never
//! appear in messages.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::provider::ProviderError;
use crate::providers::http::{Auth, Credentials, Secret};

const USER_NAME: HeaderName = HeaderName::from_static("x-slurm-user-name");
const USER_TOKEN: HeaderName = HeaderName::from_static("x-slurm-user-token");

/// The Slurm user and the source of its token.
#[derive(Debug)]
pub(crate) struct SlurmAuth {
    user: String,
    token: TokenSource,
}

impl SlurmAuth {
    pub fn new(user: impl Into<String>, token: TokenSource) -> Self {
        Self {
            user: user.into(),
            token,
        }
    }

    /// Adds to an authentication failure why it probably happened: the `token` the request
    /// carried has expired, or where it comes from.
    pub fn hint(&self, message: String, token: &Secret) -> String {
        let now = jiff::Timestamp::now().as_second();
        match jwt_expiry(token.expose()) {
            Some(exp) if exp <= now => {
                let at = jiff::Timestamp::from_second(exp)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| exp.to_string());
                format!(
                    "{message}; the token from {} expired at {at} (mint one with `scontrol token \
                     username={} lifespan=...`)",
                    self.token.describe(),
                    self.user
                )
            }
            _ => format!(
                "{message}; check the token from {} and user {:?}",
                self.token.describe(),
                self.user
            ),
        }
    }
}

impl Auth for SlurmAuth {
    fn credentials(&self) -> Result<Credentials, ProviderError> {
        let secret = self.token.current()?;
        let user = HeaderValue::from_str(&self.user).map_err(|_| ProviderError::Auth {
            message: format!(
                "Slurm user name {:?} is not a valid header value",
                self.user
            ),
        })?;
        let token = secret.header("").ok_or_else(|| ProviderError::Auth {
            message: format!(
                "the Slurm token from {} contains characters a header cannot carry",
                self.token.describe()
            ),
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(USER_NAME, user);
        headers.insert(USER_TOKEN, token);
        Ok(Credentials { headers, secret })
    }
}

/// Where the token comes from.
#[derive(Debug)]
pub(crate) enum TokenSource {
    /// Read from `path`; cached until the file's modification time or length changes.
    File {
        path: PathBuf,
        cache: Mutex<Option<Cached>>,
    },
    Fixed(Secret),
}

#[derive(Clone, Debug)]
pub(crate) struct Cached {
    stamp: (Option<SystemTime>, u64),
    token: Secret,
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
    pub fn current(&self) -> Result<Secret, ProviderError> {
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
                let token = Secret::new(read_token(path).map_err(auth)?);
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
        assert_eq!(src.current().unwrap().expose(), "abc.def.ghi");
        std::fs::write(&path, "other-token-longer\n").unwrap();
        assert_eq!(src.current().unwrap().expose(), "other-token-longer");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(src.current(), Err(ProviderError::Auth { .. })));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(src.current(), Err(ProviderError::Auth { .. })));
        assert!(!format!("{src:?}").contains("other"));
    }

    #[test]
    fn headers_carry_the_user_and_a_sensitive_token() {
        let auth = SlurmAuth::new("vkslurm", TokenSource::Fixed(Secret::new("jwt-secret")));
        let creds = auth.credentials().unwrap();
        assert_eq!(creds.headers[&USER_NAME], "vkslurm");
        assert!(creds.headers[&USER_TOKEN].is_sensitive());
        assert_eq!(creds.secret.expose(), "jwt-secret");
        assert!(!format!("{auth:?} {creds:?}").contains("jwt-secret"));
        let bad = SlurmAuth::new("vk\nslurm", TokenSource::Fixed(Secret::new("jwt")));
        assert!(matches!(bad.credentials(), Err(ProviderError::Auth { .. })));
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
