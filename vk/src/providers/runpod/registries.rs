//! Registry credentials for private images (runpod/docs `api-reference-v2/openapi.json`,
//! `/v2/registries`): a pod names one by id in its create body's `registry` ("Container
//! registry credential ID (for private images)"). One credential is created per distinct login
//! and reused by every pod pulling with it; its name is the only state: `gpu-vk-<owner
//! tag>-<digest>`, the digest a SHA-256 over the owner, the registry, the user name and the
//! password, cut to 16 hex digits. A restarted VK finds its credentials again by name; a
//! changed password is a new credential (v2 has no update, and never returns a password to
//! compare); the name holds no secret and, salted with the owner, no digest of a bare password.
//!
//! Credentials of this owner that no listed pod names are deleted by the sweep, at most every
//! `registrySweepSeconds` (300; the first one interval after start), except those this process created or used in the last [`FRESH`] (a create
//! may still be on its way). RunPod refuses to delete a credential "in use by a pod" (400),
//! which the sweep leaves for the next one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::RunPod;
use super::wire::Pod;
use crate::provider::{ProviderError, RegistryLogin, Workload};
use crate::providers::rest::lenient;

/// A credential created or used this recently is never swept.
pub const FRESH: Duration = Duration::from_secs(600);

/// What this process knows of its credentials: id and last use, by name.
#[derive(Debug)]
pub struct Known {
    by_name: HashMap<String, (String, Instant)>,
    last_sweep: Instant,
}

impl Default for Known {
    fn default() -> Self {
        Self {
            by_name: HashMap::new(),
            last_sweep: Instant::now(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Listed {
    #[serde(default)]
    registries: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    name: Option<String>,
}

/// The credential's name for `login` under owner tag `owner`.
pub fn credential_name(owner: &str, login: &RegistryLogin) -> String {
    let mut h = Sha256::new();
    for part in [
        "gpu-vk registry credential",
        owner,
        &login.registry,
        &login.username,
        &login.password,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}{digest}", prefix(owner))
}

fn prefix(owner: &str) -> String {
    format!("gpu-vk-{owner}-")
}

impl RunPod {
    /// The id of the credential the workload's image pulls with (`None`: no login for its
    /// registry), created when the account has none of that name.
    pub(super) async fn registry_for(&self, w: &Workload) -> Result<Option<String>, ProviderError> {
        let Some(login) = w.login_for(&w.image) else {
            return Ok(None);
        };
        let name = credential_name(self.owner.tag(), login);
        if let Some(id) = self.touch(&name) {
            return Ok(Some(id));
        }
        let id = match self.find_registry(&name).await? {
            Some(id) => id,
            None => self.create_registry(&name, login).await?,
        };
        self.remember(&name, &id);
        Ok(Some(id))
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.registries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self, name: &str) -> Option<String> {
        let mut k = self.known();
        let (id, used) = k.by_name.get_mut(name)?;
        *used = Instant::now();
        Some(id.clone())
    }

    fn remember(&self, name: &str, id: &str) {
        self.known()
            .by_name
            .insert(name.to_owned(), (id.to_owned(), Instant::now()));
    }

    async fn list_registries(&self) -> Result<Vec<(String, String)>, ProviderError> {
        let resp = self
            .api
            .send(Method::GET, self.api.url(&["registries"], false), None)
            .await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let listed: Listed = resp.json("registry list")?;
        Ok(listed
            .registries
            .into_iter()
            .filter_map(|e| Some((e.id?, e.name?)))
            .collect())
    }

    async fn find_registry(&self, name: &str) -> Result<Option<String>, ProviderError> {
        Ok(self
            .list_registries()
            .await?
            .into_iter()
            .find(|(_, n)| n == name)
            .map(|(id, _)| id))
    }

    async fn create_registry(
        &self,
        name: &str,
        login: &RegistryLogin,
    ) -> Result<String, ProviderError> {
        let body = serde_json::json!({
            "name": name,
            "username": login.username,
            "password": login.password,
        });
        let resp = self
            .api
            .send(
                Method::POST,
                self.api.url(&["registries"], false),
                Some(&body),
            )
            .await?;
        if resp.is_success() {
            let created: Entry = resp.json("registry credential")?;
            info!(provider = %self.name, credential = name, registry = %login.registry, "created a RunPod registry credential");
            return created.id.ok_or_else(|| {
                ProviderError::transient("RunPod created a registry credential without an id")
            });
        }
        // Another replica may have created it meanwhile (v1: "The name must be unique").
        if resp.status.as_u16() == 400
            && let Some(id) = self.find_registry(name).await?
        {
            return Ok(id);
        }
        Err(self.error_from(&resp))
    }

    /// Deletes this owner's credentials that no pod of `pods` names, at most every
    /// `registrySweepSeconds`; failures are logged and left for the next sweep.
    pub(super) async fn sweep_registries(&self, pods: &[Pod]) {
        {
            let mut k = self.known();
            let every = Duration::from_secs(self.cfg.registry_sweep_seconds);
            if k.last_sweep.elapsed() < every {
                return;
            }
            k.last_sweep = Instant::now();
        }
        let listed = match self.list_registries().await {
            Ok(l) => l,
            Err(e) => {
                warn!(provider = %self.name, error = %e, "cannot list registry credentials to sweep them");
                return;
            }
        };
        let prefix = prefix(self.owner.tag());
        for (id, name) in listed {
            let fresh = self
                .known()
                .by_name
                .get(&name)
                .is_some_and(|(_, used)| used.elapsed() < FRESH);
            let used = pods
                .iter()
                .any(|p| p.registry.as_deref() == Some(id.as_str()));
            if !name.starts_with(&prefix) || fresh || used {
                continue;
            }
            let resp = self
                .api
                .send(
                    Method::DELETE,
                    self.api.url(&["registries", &id], false),
                    None,
                )
                .await;
            match resp {
                Ok(r) if r.is_success() || r.status.as_u16() == 404 => {
                    self.known().by_name.remove(&name);
                    info!(provider = %self.name, credential = %name, "deleted an unused RunPod registry credential");
                }
                Ok(r) => {
                    warn!(provider = %self.name, credential = %name, error = %self.error_from(&r), "unused registry credential not deleted")
                }
                Err(e) => {
                    warn!(provider = %self.name, credential = %name, error = %e, "unused registry credential not deleted")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(password: &str) -> RegistryLogin {
        RegistryLogin {
            registry: "registry.example.com".into(),
            username: "robot".into(),
            password: password.into(),
        }
    }

    #[test]
    fn a_name_is_stable_per_login_and_holds_no_secret() {
        let a = credential_name("c1-vk", &login("hunter2-secret"));
        assert_eq!(a, credential_name("c1-vk", &login("hunter2-secret")));
        assert!(
            a.starts_with("gpu-vk-c1-vk-") && a.len() == "gpu-vk-c1-vk-".len() + 16,
            "{a}"
        );
        assert!(!a.contains("hunter2") && !a.contains("robot"), "{a}");
        // A new password, another owner: another credential.
        assert_ne!(a, credential_name("c1-vk", &login("rotated")));
        assert_ne!(a, credential_name("c2-vk", &login("hunter2-secret")));
    }
}
