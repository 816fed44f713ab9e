//! Where a step looks at the provider side: an emulator's admin API, a real Slurm's job list or
//! another cluster's pods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

#[allow(unused_imports)]
use super::*;

/// Where a test looks at the provider's workloads. Both give the same view of a workload:
/// `{"id": <provider id>, "name": <workload id>, "state": <provider state>, ...}`.
pub enum Observer {
    /// An in-process emulator: its `/_admin` API (workloads, counters, fault injection).
    Emulator(Emulator),
    /// A real Slurm: slurmrestd's job list, with no admin API.
    Slurm(RealSlurm),
    /// Another Kubernetes cluster: the remote pods, a counting proxy in front of the remote
    /// API server, faults through the remote cluster's own API ([`kubernetes`]).
    Kubernetes(kubernetes::RemoteView),
}

impl Observer {
    /// The emulator behind this observer, when there is one (admin API, fault injection).
    pub fn emulator(&self) -> Option<&Emulator> {
        match self {
            Self::Emulator(e) => Some(e),
            Self::Slurm(_) | Self::Kubernetes(_) => None,
        }
    }

    /// This provider as one entry of the VK's `providers:` list.
    pub fn provider_yaml(&self, name: &str) -> String {
        match self {
            Self::Emulator(e) => e.provider_yaml(name),
            Self::Slurm(s) => s.provider_yaml(name),
            Self::Kubernetes(k) => k.provider_yaml(name),
        }
    }

    /// Every workload the provider knows (for a real Slurm: every job slurmctld still lists,
    /// finished ones for `MinJobAge`, whoever submitted them).
    pub async fn workloads(&self) -> Vec<Value> {
        match self {
            Self::Emulator(e) => e.workloads().await,
            Self::Slurm(s) => s.workloads().await,
            Self::Kubernetes(k) => k.workloads().await,
        }
    }

    /// Live workloads (not terminated) whose name carries this pod UID.
    pub async fn workloads_of(&self, uid: &str) -> Vec<Value> {
        self.live()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.ends_with(uid)))
            .collect()
    }

    /// Live (not terminated) workloads.
    pub async fn live(&self) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| !is_terminated(w))
            .collect()
    }

    /// Live workloads whose name starts with `prefix` (e.g. [`Vk::owner_prefix`]).
    pub async fn live_with_prefix(&self, prefix: &str) -> Vec<Value> {
        self.live()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .collect()
    }

    /// How many workloads were created for names starting with `prefix`: the emulator's
    /// `created` counter (accepted create calls; a Vast offer rented by someone else meanwhile is
    /// refused and creates nothing), or for a real Slurm the jobs with such names it still lists
    /// (finished ones included, for `MinJobAge`).
    pub async fn creates(&self, prefix: &str) -> usize {
        match self {
            // Accepted creates: a refused call (a Vast offer taken meanwhile) created nothing.
            Self::Emulator(e) => e.counter("created").await as usize,
            Self::Kubernetes(k) => k.counter("created") as usize,
            Self::Slurm(s) => s
                .workloads()
                .await
                .iter()
                .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .count(),
        }
    }

    /// Creates a running workload named `name` outside any VK (the emulator's admin API, or a
    /// plain `sleep` job submitted to the real Slurm); returns its provider id.
    pub async fn inject(&self, name: &str) -> String {
        match self {
            Self::Emulator(e) => e.inject(name).await,
            Self::Slurm(s) => s.submit(name, "sleep 600").await,
            Self::Kubernetes(k) => k.inject(name).await,
        }
    }

    /// The provider's count of API calls of a kind (`create`, `delete`, `list`; `created`:
    /// accepted creates). Needs fault injection (an emulator or the remote cluster's proxy).
    pub async fn counter(&self, name: &str) -> u64 {
        match self {
            Self::Emulator(e) => e.counter(name).await,
            Self::Kubernetes(k) => k.counter(name),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// An admin action on workload `id`: `exit` / `fail` / `preempt` it, add `logs` lines,
    /// set its `usage` (an emulator's `/_admin/workloads/{id}/<action>`; on the remote
    /// cluster, `preempt` is an eviction and the others go to the remote node's emulator).
    pub async fn act(&self, id: &str, action: &str, body: Value) {
        match self {
            Self::Emulator(e) => {
                e.admin_post(&format!("/workloads/{id}/{action}"), body)
                    .await;
            }
            Self::Kubernetes(k) if action == "preempt" => k.preempt(id).await,
            Self::Kubernetes(k) => k.act(id, action, body).await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The workload vanishes without the VK's doing (the provider lost it).
    pub async fn vanish(&self, id: &str) {
        match self {
            Self::Emulator(e) => e.vanish(id).await,
            Self::Kubernetes(k) => k.lose(id).await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// An image the provider's registry knows (`{"repository", "username"?, "password"?,
    /// "size_gb"?}`, an emulator's `/_admin/images`): private ones pull only with their login,
    /// sized ones need that much container disk.
    pub async fn image(&self, spec: Value) {
        match self {
            Self::Emulator(e) => e.admin_post("/images", spec).await,
            Self::Kubernetes(_) | Self::Slurm(_) => no_admin_api(),
        }
    }

    /// Leaves the provider without capacity for new GPU workloads.
    pub async fn no_capacity(&self) {
        match self {
            Self::Emulator(e) => e.no_capacity().await,
            Self::Kubernetes(k) => k.no_capacity().await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The next `lists` lists leave out the workloads with these provider ids (every
    /// workload when `ids` is empty).
    pub async fn hide_lists(&self, lists: u32, ids: &[String]) {
        match self {
            Self::Emulator(e) => {
                let body = if ids.is_empty() {
                    json!({ "lists": lists })
                } else {
                    json!({ "lists": lists, "ids": ids })
                };
                e.admin_post("/hide", body).await;
            }
            Self::Kubernetes(k) => k.hide_lists(lists, ids),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The next `calls` list calls fail with 503.
    pub async fn fail_lists(&self, calls: u32) {
        match self {
            Self::Emulator(e) => {
                e.admin_post(
                    "/faults",
                    json!({ "route": "list", "fail_next": calls, "status": 503 }),
                )
                .await;
            }
            Self::Kubernetes(k) => k.fail_lists(calls),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// Ends the live workloads with these exact names (a real Slurm only, as
    /// [`Observer::cancel_owned`]).
    pub async fn cancel_named(&self, names: &[String]) {
        if let Self::Slurm(s) = self {
            for w in s.workloads().await {
                if !is_terminated(&w)
                    && w["name"]
                        .as_str()
                        .is_some_and(|n| names.iter().any(|x| x == n))
                    && let Some(id) = w["id"].as_str()
                {
                    s.cancel(id).await;
                }
            }
        }
    }

    /// Ends every live workload whose name starts with `prefix` and waits until none is left
    /// (a real Slurm; an emulator is simply dropped; the remote cluster's scenario namespaces
    /// are deleted). Test clean-up, so the next test
    /// finds the small real cluster free.
    pub async fn cancel_owned(&self, prefix: &str) {
        match self {
            Self::Slurm(s) => s.cancel_owned(prefix).await,
            // The scenario's remote namespaces go, with every remote pod in them.
            Self::Kubernetes(k) => k.cleanup().await,
            Self::Emulator(_) => {}
        }
    }
}

/// A step needed fault injection on a provider without an admin API.
pub(crate) fn no_admin_api() -> ! {
    panic!(
        "a real Slurm has no admin API (no call counts, no faults): gate the scenario with \
         `Given the provider supports fault injection`"
    )
}
