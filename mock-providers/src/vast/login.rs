//! `image_login` of `PUT /api/v0/asks/{id}/`: "Docker registry credentials for private images
//! (eg., `-u username -p access_token docker.io`)" (vast-ai/docs
//! `api-reference/creating-instances-with-api.mdx`), `docker login` arguments that vast-cli's
//! `--login` passes through as written. The registry may be left out for Docker Hub
//! (`guides/templates/template-settings.mdx`). Vast refuses one it cannot read with
//! `invalid_args` "invalid or suspect image login" (vast-ai/vast-cli#116).

use crate::engine::pull::Login;

/// The login an `image_login` value gives; `Err` when Vast would refuse it.
pub fn parse(value: Option<&serde_json::Value>) -> Result<Option<Login>, String> {
    let text = match value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err("Invalid args: invalid or suspect image login".into()),
    };
    let words = super::query::split_words(text);
    let (mut user, mut pass, mut registry) = (None, None, None);
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "-u" | "--username" => user = it.next(),
            "-p" | "--password" => pass = it.next(),
            _ if !w.starts_with('-') && registry.is_none() => registry = Some(w),
            _ => return Err("Invalid args: invalid or suspect image login".into()),
        }
    }
    match (user, pass) {
        (Some(username), Some(password)) if !username.is_empty() && !password.is_empty() => {
            Ok(Some(Login {
                registry: Some(
                    registry
                        .filter(|r| r != "docker.io")
                        .unwrap_or_else(|| "docker.io".into()),
                ),
                username,
                password,
            }))
        }
        _ => Err("Invalid args: invalid or suspect image login".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_docker_login_arguments() {
        let l = parse(Some(&json!("-u bob -p 'p w!' registry.example.com")))
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                l.registry.as_deref(),
                l.username.as_str(),
                l.password.as_str()
            ),
            (Some("registry.example.com"), "bob", "p w!")
        );
        let hub = parse(Some(&json!("-u bob -p x"))).unwrap().unwrap();
        assert_eq!(hub.registry.as_deref(), Some("docker.io"));
        assert_eq!(parse(None).unwrap(), None);
        for bad in [json!("-u bob"), json!("--rm -u a -p b r"), json!(3)] {
            assert!(
                parse(Some(&bad))
                    .unwrap_err()
                    .contains("suspect image login")
            );
        }
    }
}
