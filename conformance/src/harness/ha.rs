//! Replicas of one VK electing a leader: as processes (each with its own identity, metrics and
//! kubelet port, all logging to the VK's one log file) or as pods of one Helm release with
//! `replicas: 2`. The leader is whoever holds the Lease `kube-node-lease/gpu-vk-leader-<node>`;
//! killing it is a SIGKILL of its process (the supervisor, here the test, starts a replacement
//! under a new identity, as a Deployment starts a new pod) or a forced delete of its pod.

use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

use super::{API_KEY, Vk, free_port, vk_binary};

/// Election timings of the tests: a standby takes over 4 s after the leader's last renewal.
pub const LEADER_TIMINGS: &str =
    "{enabled: true, leaseDurationMs: 4000, renewDeadlineMs: 3000, retryPeriodMs: 500}";
/// The lease duration of [`LEADER_TIMINGS`] plus one retry period: the longest a takeover may
/// take once the leader is dead.
pub const TAKEOVER_BOUND: Duration = Duration::from_millis(4500);
/// The timings as chart values (`leaderElection:`), for a VK as pods.
pub const LEADER_VALUES: &str =
    "leaderElection: {leaseDurationMs: 4000, renewDeadlineMs: 3000, retryPeriodMs: 500}\n";

/// The running replica processes, and how many were ever started (for fresh identities).
#[derive(Default)]
pub struct Replicas {
    started: u32,
    running: Vec<(String, tokio::process::Child)>,
}

impl Vk {
    /// Starts one more replica process under a new identity.
    pub(super) fn spawn_replica(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("vk.log"))
            .unwrap();
        let reps = self.ha.as_mut().expect("replicas");
        reps.started += 1;
        let identity = format!("{}-r{}", self.node, reps.started);
        let child = tokio::process::Command::new(vk_binary())
            .args(["run", "--config"])
            .arg(self.dir.join("config.yaml"))
            .env("TEST_PROVIDER_KEY", API_KEY)
            .env("RUST_LOG", &self.rust_log)
            .env("VK_IDENTITY", &identity)
            .env("VK_METRICS_ADDR", format!("127.0.0.1:{}", free_port()))
            .env("VK_KUBELET_PORT", free_port().to_string())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("vk binary starts");
        reps.running.push((identity, child));
    }

    /// SIGKILLs every replica process (no-op without replicas).
    pub(super) async fn kill_replicas(&mut self) {
        if let Some(reps) = self.ha.as_mut() {
            for (_, mut c) in reps.running.drain(..) {
                let _ = c.start_kill();
                let _ = c.wait().await;
            }
        }
    }

    fn lease_name(&self) -> String {
        format!("gpu-vk-leader-{}", self.node)
    }

    /// The identity holding the leader Lease now (none while it is free or released).
    pub async fn leader(&self, c: &Client) -> Option<String> {
        self.lease_times(c).await?.holder
    }

    /// The identities of the replicas running now (process identities, or pod names).
    fn identities(&self) -> Vec<String> {
        match (&self.pod, &self.ha) {
            (Some(p), _) => tokio::task::block_in_place(|| p.pods()),
            (None, Some(r)) => r.running.iter().map(|(id, _)| id.clone()).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// Waits until a replica leads and every other running replica (at least one) has said it
    /// stands by, so a kill of the leader is met by a standby that is already up. A replica
    /// process that exited meanwhile (its kubelet or metrics port, free when chosen, taken by
    /// another scenario before it bound it) is replaced under a new identity, as its
    /// Deployment would replace it. A timeout says what was seen last.
    pub async fn wait_standbys(&mut self, c: &Client) {
        let timeout = Duration::from_secs(90);
        let start = Instant::now();
        loop {
            self.replace_exited();
            let seen = match self.standbys(c).await {
                Ok(()) => return,
                Err(seen) => seen,
            };
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for a leader and a standby; last seen: {seen}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `Ok` when a replica leads and every other running one has said it stands by; else what
    /// is seen: the leader, the replicas, and those that stood by.
    async fn standbys(&self, c: &Client) -> Result<(), String> {
        let leader = self.leader(c).await;
        let ids = self.identities();
        let log = self.log();
        let standing_by = |id: &str| {
            let me = format!("me={id}");
            log.lines()
                .any(|l| l.contains("standing by") && l.split_whitespace().any(|t| t == me))
        };
        let others: Vec<&String> = ids.iter().filter(|i| Some(*i) != leader.as_ref()).collect();
        if leader.is_some() && !others.is_empty() && others.iter().all(|i| standing_by(i)) {
            return Ok(());
        }
        let stood: Vec<&&String> = others.iter().filter(|i| standing_by(i)).collect();
        Err(format!(
            "leader {leader:?}, replicas running {ids:?}, standing by {stood:?}"
        ))
    }

    /// Replaces each replica process that has exited with a new one, saying so.
    fn replace_exited(&mut self) {
        let Some(reps) = self.ha.as_mut() else {
            return;
        };
        let mut exited = Vec::new();
        reps.running.retain_mut(|(id, c)| match c.try_wait() {
            Ok(Some(status)) => {
                exited.push(format!("{id} ({status})"));
                false
            }
            _ => true,
        });
        for who in exited {
            println!("    replica {who} exited: a new one replaces it");
            self.spawn_replica();
        }
    }

    /// Number of replicas running now (processes), or `None` for pods (Kubernetes keeps them).
    pub fn replicas_running(&mut self) -> Option<usize> {
        let reps = self.ha.as_mut()?;
        reps.running
            .retain_mut(|(_, c)| c.try_wait().ok().flatten().is_none());
        Some(reps.running.len())
    }

    /// Kills the leader with no clean-up (SIGKILL, or a pod deleted without grace), starts a
    /// replacement replica the way its supervisor would, and returns the old leader and how
    /// long the Lease went without a leader: from the old leader's last renewal (or its
    /// release) to the new holder's acquire time, both as the replicas wrote them. Not from the
    /// kill: a pod deleted without grace keeps running, and renewing, until its kubelet stops
    /// the container, which takes seconds on a loaded node.
    pub async fn kill_leader(&mut self, c: &Client) -> (String, Duration) {
        let old = super::wait_for(Duration::from_secs(30), "a leader", || self.leader(c)).await;
        let mut last_word = self.lease_times(c).await.and_then(|t| t.renewed);
        if let Some(p) = self.pod.as_mut() {
            let name = old.clone();
            tokio::task::block_in_place(|| p.kill(&name));
        } else {
            let reps = self.ha.as_mut().expect("replicas");
            let at = reps
                .running
                .iter()
                .position(|(id, _)| *id == old)
                .unwrap_or_else(|| panic!("the leader {old} is not a running replica"));
            let (_, mut child) = reps.running.remove(at);
            child.start_kill().unwrap();
            let _ = child.wait().await;
        }
        let killed = Instant::now();
        if self.pod.is_none() {
            self.spawn_replica();
        }
        loop {
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "timed out after 60 s waiting for another replica to lead (the old one: {old})"
            );
            if let Some(t) = self.lease_times(c).await {
                match t.holder {
                    Some(h) if h != old => {
                        let gap = match (last_word, t.acquired) {
                            (Some(said), Some(acquired)) => acquired.saturating_sub(said),
                            _ => killed.elapsed().as_millis() as i64,
                        };
                        let gap = Duration::from_millis(u64::try_from(gap).unwrap_or(0));
                        return (old, gap);
                    }
                    // The old leader renewing until its process is gone, or releasing it.
                    _ => last_word = t.renewed.or(last_word),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Lease's holder, renew time and acquire time (milliseconds since the epoch).
    async fn lease_times(&self, c: &Client) -> Option<LeaseTimes> {
        let api: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
        let spec = api.get_opt(&self.lease_name()).await.ok()??.spec?;
        Some(LeaseTimes {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renewed: spec.renew_time.map(|t| t.0.as_millisecond()),
            acquired: spec.acquire_time.map(|t| t.0.as_millisecond()),
        })
    }
}

/// What the Lease says of its holder and times (milliseconds since the epoch).
struct LeaseTimes {
    holder: Option<String>,
    renewed: Option<i64>,
    acquired: Option<i64>,
}
