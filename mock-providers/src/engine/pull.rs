//! Images the emulated registry knows: private ones it serves only to the right login, and
//! sizes that take disk and pull time; what a pull that fails looks like. A real host's docker daemon refuses such a pull with
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

/// One repository the registry knows: the login it pulls with (none: public), its size.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// `host/path` without tag or digest (`registry.example.com/acme/model-server`).
    pub repository: String,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// Unpacked size, GB: a container disk smaller than this fails the pull ("no space left
    /// on device", as docker's daemon says it), and each GB takes the profile's pull time.
    #[serde(default)]
    pub size_gb: Option<f64>,
    /// The CUDA version its runtime needs (`"12.9"`): on a host whose driver runs less, the
    /// container dies as it starts, saying what the CUDA runtime says.
    #[serde(default)]
    pub min_cuda: Option<String>,
}

/// The CUDA version every emulated host's driver runs (RunPod's `cudaVersion`, Vast's
/// `cuda_max_good` in the emulators' answers).
pub const HOST_CUDA: (u32, u32) = (12, 8);

/// The login a workload pulls with: Vast's `image_login` names its registry; a RunPod
/// registry credential has none and serves whatever registry the image names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Login {
    pub registry: Option<String>,
    pub username: String,
    pub password: String,
}

/// The repositories the emulated registries know.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    repos: Vec<ImageSpec>,
    pull_ms_per_gb: u64,
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
    /// A registry whose images pull at `pull_ms_per_gb`.
    pub fn new(pull_ms_per_gb: u64) -> Self {
        Self {
            repos: Vec::new(),
            pull_ms_per_gb,
        }
    }

    /// How long `image` takes to pull beyond the placing time.
    pub fn pull_time(&self, image: &str) -> Duration {
        let repo = repository(image);
        let gb = self
            .repos
            .iter()
            .find(|r| r.repository == repo)
            .and_then(|r| r.size_gb)
            .unwrap_or(0.0);
        Duration::from_millis((gb.max(0.0) * self.pull_ms_per_gb as f64) as u64)
    }

    /// Why a container of `image` dies as it starts on an emulated host (`None`: it runs):
    /// the CUDA runtime's `cudaErrorInsufficientDriver`.
    pub fn crash(&self, image: &str) -> Option<String> {
        let repo = repository(image);
        let needs = self
            .repos
            .iter()
            .find(|r| r.repository == repo)?
            .min_cuda
            .as_deref()?;
        let (a, b) = needs.split_once('.')?;
        let needs: (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        (needs > HOST_CUDA).then(|| {
            format!(
                "CUDA error: CUDA driver version is insufficient for CUDA runtime version (the \
                 image needs CUDA {needs_a}.{needs_b}, this host's driver runs {}.{})",
                HOST_CUDA.0,
                HOST_CUDA.1,
                needs_a = needs.0,
                needs_b = needs.1
            )
        })
    }

    /// Adds (or replaces) a repository.
    pub fn add(&mut self, repo: ImageSpec) {
        self.repos.retain(|r| r.repository != repo.repository);
        self.repos.push(repo);
    }

    pub fn clear(&mut self) {
        self.repos.clear();
    }

    /// Why pulling `image` with `login` onto a container disk of `disk_gb` fails (`None`: it
    /// pulls).
    pub fn pull(&self, image: &str, login: Option<&Login>, disk_gb: Option<f64>) -> Option<String> {
        let repo = repository(image);
        let known = self.repos.iter().find(|r| r.repository == repo)?;
        let host = repo.split('/').next().unwrap_or_default();
        if let (Some(user), Some(password)) = (&known.username, &known.password) {
            let accepted = login.is_some_and(|l| {
                l.registry.as_deref().is_none_or(|r| r == host)
                    && &l.username == user
                    && &l.password == password
            });
            if !accepted {
                return Some(format!(
                    "Error response from daemon: pull access denied for {repo}, repository does \
                     not exist or may require 'docker login': denied: requested access to the \
                     resource is denied"
                ));
            }
        }
        match (known.size_gb, disk_gb) {
            (Some(size), Some(disk)) if size > disk => Some(format!(
                "failed to register layer: write /var/lib/docker/overlay2: no space left on device \
                 (image {repo} needs {size} GB, the container disk has {disk} GB)"
            )),
            _ => None,
        }
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
        reg.add(ImageSpec {
            repository: "registry.example.com/acme/app".into(),
            username: Some("robot".into()),
            password: Some("pw".into()),
            size_gb: None,
            min_cuda: None,
        });
        let good = Login {
            registry: Some("registry.example.com".into()),
            username: "robot".into(),
            password: "pw".into(),
        };
        assert_eq!(
            reg.pull("registry.example.com/acme/app:1", Some(&good), None),
            None
        );
        let any_registry = Login {
            registry: None,
            ..good.clone()
        };
        assert_eq!(
            reg.pull("registry.example.com/acme/app", Some(&any_registry), None),
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
            let why = reg
                .pull("registry.example.com/acme/app:1", login, None)
                .unwrap();
            assert!(why.contains("pull access denied for registry.example.com/acme/app"));
        }
        // Public images pull with anything.
        assert_eq!(reg.pull("busybox:1.36", None, Some(1.0)), None);
    }

    #[test]
    fn a_sized_image_needs_the_disk_and_takes_time_to_pull() {
        let mut reg = Registry::new(8000);
        reg.add(ImageSpec {
            repository: "vllm/vllm-openai".into(),
            size_gb: Some(30.0),
            ..ImageSpec::default()
        });
        let why = reg
            .pull("vllm/vllm-openai:v0.9.0", None, Some(20.0))
            .unwrap();
        assert!(
            why.contains("no space left on device") && why.contains("30 GB"),
            "{why}"
        );
        assert_eq!(reg.pull("vllm/vllm-openai:v0.9.0", None, Some(40.0)), None);
        assert_eq!(
            reg.pull_time("vllm/vllm-openai:v0.9.0"),
            Duration::from_secs(240)
        );
        assert_eq!(reg.pull_time("busybox"), Duration::ZERO);
        reg.add(ImageSpec {
            repository: "acme/cuda13".into(),
            min_cuda: Some("13.0".into()),
            ..ImageSpec::default()
        });
        reg.add(ImageSpec {
            repository: "acme/cuda12".into(),
            min_cuda: Some("12.4".into()),
            ..ImageSpec::default()
        });
        assert!(reg.crash("acme/cuda13:1").unwrap().contains("insufficient"));
        assert_eq!(reg.crash("acme/cuda12:1"), None);
        assert_eq!(reg.crash("busybox"), None);
    }
}
