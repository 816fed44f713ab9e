//! Private images: repositories the emulated registry serves only to the right login, and
//! what a pull without it looks like. A real host's docker daemon refuses such a pull with
//! `Error response from daemon: pull access denied for REPO, repository does not exist or may
//! require 'docker login': denied: requested access to the resource is denied` (RunPod's system
//! log, runpod/runpod-python#165; Vast's `status_msg`, vast-ai/vast-cli
//! `tests/cli/test_runtime_diagnostics.py`) and retries the pull: RunPod "retries infinitely",
//! about every 15 s (same thread), so the pod never leaves its start and keeps its GPUs.

use std::time::Duration;

use jiff::Timestamp;
use serde::Deserialize;

use super::logs::LogSource;
use super::ts_add;
use super::{Engine, Workload};

/// How often a host's daemon tries the pull again (RunPod: about every 15 s,
/// runpod/runpod-python#165).
pub const RETRY: Duration = Duration::from_secs(15);

/// One private repository and the login it pulls with.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrivateRepo {
    /// `host/path` without tag or digest (`registry.example.com/acme/model-server`).
    pub repository: String,
    pub username: String,
    pub password: String,
}

/// The login a workload pulls with: Vast's `image_login` names its registry; a RunPod
/// registry credential has none and serves whatever registry the image names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Login {
    pub registry: Option<String>,
    pub username: String,
    pub password: String,
}

/// The private repositories of the emulated registries.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    repos: Vec<PrivateRepo>,
}

/// `image` without its tag or digest.
pub fn repository(image: &str) -> &str {
    let name = image.split('@').next().unwrap_or(image);
    match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    }
}

impl Registry {
    /// Adds (or replaces) a private repository.
    pub fn add(&mut self, repo: PrivateRepo) {
        self.repos.retain(|r| r.repository != repo.repository);
        self.repos.push(repo);
    }

    pub fn clear(&mut self) {
        self.repos.clear();
    }

    /// Why pulling `image` with `login` fails (`None`: it pulls).
    pub fn pull(&self, image: &str, login: Option<&Login>) -> Option<String> {
        let repo = repository(image);
        let private = self.repos.iter().find(|r| r.repository == repo)?;
        let host = repo.split('/').next().unwrap_or_default();
        let accepted = login.is_some_and(|l| {
            l.registry.as_deref().is_none_or(|r| r == host)
                && l.username == private.username
                && l.password == private.password
        });
        (!accepted).then(|| {
            format!(
                "Error response from daemon: pull access denied for {repo}, repository does not \
                 exist or may require 'docker login': denied: requested access to the resource \
                 is denied"
            )
        })
    }
}

impl Engine {
    /// The system log lines of a pull that fails: one per try, the first once the workload
    /// is placed, then every [`RETRY`].
    pub(super) fn announce_pull_failures(
        &self,
        w: &mut Workload,
        since: Timestamp,
        elapsed: Duration,
    ) {
        let Some(why) = w.pull_error.clone() else {
            return;
        };
        let provision = self.mode.provision();
        if elapsed < provision {
            return;
        }
        let tries = 1 + (elapsed - provision).as_millis() / RETRY.as_millis();
        let tries = u8::try_from(tries.min(200)).unwrap_or(200);
        while w.announced.saturating_sub(1) < tries {
            let k = u32::from(w.announced.saturating_sub(1));
            w.logs.push(
                ts_add(since, provision + RETRY * k),
                LogSource::System,
                format!("error pulling image: {why}"),
            );
            w.announced += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_image_pulls_only_with_its_login_for_its_registry() {
        let mut reg = Registry::default();
        reg.add(PrivateRepo {
            repository: "registry.example.com/acme/app".into(),
            username: "robot".into(),
            password: "pw".into(),
        });
        let good = Login {
            registry: Some("registry.example.com".into()),
            username: "robot".into(),
            password: "pw".into(),
        };
        assert_eq!(
            reg.pull("registry.example.com/acme/app:1", Some(&good)),
            None
        );
        let any_registry = Login {
            registry: None,
            ..good.clone()
        };
        assert_eq!(
            reg.pull("registry.example.com/acme/app", Some(&any_registry)),
            None
        );
        let other_host = Login {
            registry: Some("ghcr.io".into()),
            ..good.clone()
        };
        let wrong = Login {
            password: "nope".into(),
            ..good.clone()
        };
        for login in [None, Some(&other_host), Some(&wrong)] {
            let why = reg.pull("registry.example.com/acme/app:1", login).unwrap();
            assert!(why.contains("pull access denied for registry.example.com/acme/app"));
        }
        // Public images pull with anything.
        assert_eq!(reg.pull("busybox:1.36", None), None);
    }
}
