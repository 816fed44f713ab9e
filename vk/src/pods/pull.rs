//! Image pull credentials: a pod's `imagePullSecrets` read as the kubelet reads them, and the
//! one login each image of the pod pulls with.
//!
//! The pod's own list is the whole list: the ServiceAccount admission plugin copies the
//! ServiceAccount's `imagePullSecrets` into a pod that names none when the pod is created, as
//! on any cluster. Secrets of type `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`,
//! `{"auths": {KEY: {...}}}`) and `kubernetes.io/dockercfg` (`.dockercfg`, `{KEY: {...}}`) are
//! read; an entry's `username`/`password`, or its base64 `auth` of `user:password`. A missing
//! Secret is not an error (the kubelet warns `FailedToRetrieveImagePullSecret` and pulls
//! without it); the pull that then fails says so.
//!
//! Which key serves an image follows the kubelet's keyring (`pkg/credentialprovider/keyring.go`
//! in kubernetes/kubernetes): a key is a URL without its scheme; its host must match the
//! image's registry host label by label (a label may be a glob, `*.example.com`), the port must
//! be equal, and the key's path must be a (string) prefix of the image's repository path. Docker Hub is
//! `index.docker.io` (the key `https://index.docker.io/v1/` and `docker.io` are the same), and
//! an image with no registry host is on it. The kubelet tries every key that serves the image,
//! the more specific first (keys sorted in reverse), until a pull succeeds; a provider takes
//! one login per image, so the most specific one is sent (longest host, then longest path).

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use super::env::{Error, Source};
use crate::provider::RegistryLogin;
use crate::vocab::image::{self, Location};

/// The pod's `imagePullSecrets`, in its order, each once.
pub fn referenced(pod: &Pod) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
    {
        if !r.name.is_empty() && !names.contains(&r.name) {
            names.push(r.name.clone());
        }
    }
    names
}

/// One entry of a docker config: the key it serves and its login.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} as {} (password <redacted>)", self.key, self.username)
    }
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

/// The entries of a pull Secret's data; `Err` names what is wrong with it (never a value).
pub fn parse(data: &BTreeMap<String, String>) -> Result<Vec<Entry>, String> {
    let auths: BTreeMap<String, AuthEntry> = if let Some(json) = data.get(".dockerconfigjson") {
        serde_json::from_str::<DockerConfigJson>(json)
            .map_err(|e| {
                format!(
                    ".dockerconfigjson is not a docker config: {}",
                    e.classify_name()
                )
            })?
            .auths
    } else if let Some(json) = data.get(".dockercfg") {
        serde_json::from_str(json)
            .map_err(|e| format!(".dockercfg is not a docker config: {}", e.classify_name()))?
    } else {
        return Err("it has neither .dockerconfigjson nor .dockercfg".into());
    };
    let mut out = Vec::new();
    for (key, a) in auths {
        let (username, password) = match (a.username, a.password, a.auth) {
            (Some(u), Some(p), _) if !u.is_empty() => (u, p),
            (_, _, Some(auth)) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|_| format!("the auth of {key:?} is not base64"))?;
                let text = String::from_utf8(raw)
                    .map_err(|_| format!("the auth of {key:?} is not UTF-8"))?;
                let (u, p) = text
                    .split_once(':')
                    .ok_or_else(|| format!("the auth of {key:?} is not user:password"))?;
                (u.to_owned(), p.to_owned())
            }
            _ => continue,
        };
        out.push(Entry {
            key,
            username,
            password,
        });
    }
    Ok(out)
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    /// What kind of error, without serde's excerpt of the input (the input is a Secret).
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}

/// The login `image` pulls with from `entries`: the most specific key that serves it; ties
/// go to the first Secret the pod names.
pub fn login_for(image: &str, entries: &[Entry]) -> Option<RegistryLogin> {
    let target = image::reference(image);
    let best = entries
        .iter()
        .filter(|e| Location::key(&e.key).serves(&target))
        .rev()
        .max_by_key(|e| {
            let l = Location::key(&e.key);
            (l.host.len(), l.path.len())
        })?;
    Some(RegistryLogin {
        registry: target.registry(),
        username: best.username.clone(),
        password: best.password.clone(),
    })
}

/// The pod's pull credentials: one login per registry its running containers pull from, and
/// what could not be read (Secrets missing or not docker configs, named with why).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub logins: Vec<RegistryLogin>,
    pub unreadable: Vec<String>,
}

/// Reads the pod's pull Secrets and picks each image's login.
pub async fn resolve(pod: &Pod, src: &impl Source) -> Result<Resolved, Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut entries = Vec::new();
    let mut out = Resolved::default();
    for name in referenced(pod) {
        match src.secret(ns, &name).await? {
            None => out.unreadable.push(format!("{name} (not found)")),
            Some(data) => match parse(&data) {
                Ok(e) => entries.extend(e),
                Err(why) => out.unreadable.push(format!("{name} ({why})")),
            },
        }
    }
    for c in crate::pods::spec::running_containers(pod) {
        let Some(login) = login_for(c.image.as_deref().unwrap_or_default(), &entries) else {
            continue;
        };
        if !out.logins.iter().any(|l| l.registry == login.registry) {
            out.logins.push(login);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
