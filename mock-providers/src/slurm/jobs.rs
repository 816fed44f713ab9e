//! The emulated slurmctld: a job table with Slurm's lifecycle (PENDING, CONFIGURING, RUNNING,
//! and the terminal states), GPU accounting over a few identical nodes, lazy time-driven
//! transitions (10,000 jobs cost no timers or tasks in simulated mode), and the operations the
//! REST and admin routes need. Error numbers are Slurm's (slurm/slurm_errno.h).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;

use crate::config::ExecutionMode;

mod lifecycle;
mod output;
#[cfg(test)]
mod tests;

pub use output::{expand_pattern, output_path};

/// `ESLURM_INVALID_PARTITION_NAME`.
pub const E_INVALID_PARTITION: i64 = 2000;
/// `ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE`.
pub const E_NODE_CONFIG_UNAVAILABLE: i64 = 2014;
/// `ESLURM_INVALID_JOB_ID`.
pub const E_INVALID_JOB_ID: i64 = 2017;
/// `ESLURM_INVALID_GRES`.
pub const E_INVALID_GRES: i64 = 2072;
/// `ESLURM_ENVIRONMENT_MISSING`.
pub const E_ENVIRONMENT_MISSING: i64 = 2127;

/// A job's base state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Configuring,
    Running,
    Suspended,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    OutOfMemory,
    Preempted,
    NodeFail,
}

impl JobState {
    /// Slurm's name (`job_state`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Configuring => "CONFIGURING",
            Self::Running => "RUNNING",
            Self::Suspended => "SUSPENDED",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
            Self::Timeout => "TIMEOUT",
            Self::OutOfMemory => "OUT_OF_MEMORY",
            Self::Preempted => "PREEMPTED",
            Self::NodeFail => "NODE_FAIL",
        }
    }

    /// Holds resources (configuring, running or suspended).
    pub fn holds_node(self) -> bool {
        matches!(self, Self::Configuring | Self::Running | Self::Suspended)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            Self::Pending | Self::Configuring | Self::Running | Self::Suspended
        )
    }
}

/// A job as submitted, validated.
#[derive(Clone, Debug, Default)]
pub struct NewJob {
    pub name: String,
    pub comment: String,
    pub script: String,
    pub environment: BTreeMap<String, String>,
    pub cwd: String,
    pub standard_output: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub gpus: u32,
    pub cpus: u32,
    pub time_limit_minutes: Option<u32>,
    pub requeue: bool,
    /// Skip PENDING and CONFIGURING (admin injection).
    pub already_running: bool,
}

/// One job.
#[derive(Debug)]
pub struct Job {
    pub id: u32,
    pub spec: NewJob,
    pub partition: String,
    pub user: String,
    pub state: JobState,
    pub reason: String,
    /// Raw wait status, as v0.0.38 reports it (`code << 8`, or the signal number).
    pub exit_raw: i64,
    pub restart_cnt: u32,
    pub submit_time: Timestamp,
    pub start_time: Option<Timestamp>,
    pub end_time: Option<Timestamp>,
    pub node: Option<usize>,
    /// When a pending job may start (submission + provisioning, or a requeue's delay).
    eligible_at: Instant,
    /// When the current phase (configuring, running) began.
    phase_since: Instant,
    /// Bumped on every (re)start; stale process callbacks check it.
    pub generation: u64,
    /// Dropping or sending kills the job's process group (process mode).
    pub kill: Option<tokio::sync::oneshot::Sender<()>>,
    pub pid: Option<u32>,
    finished_at: Option<Instant>,
}

impl Job {
    fn stop_process(&mut self) {
        if let Some(tx) = self.kill.take() {
            let _ = tx.send(());
        }
        self.pid = None;
    }
}

/// Errors with Slurm's numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (Slurm error {number})")]
pub struct SlurmErr {
    pub number: i64,
    pub message: String,
    pub description: String,
}

impl SlurmErr {
    pub fn new(number: i64, message: &str, description: impl Into<String>) -> Self {
        Self {
            number,
            message: message.to_owned(),
            description: description.into(),
        }
    }

    pub fn invalid_job(id: &str, what: &str) -> Self {
        Self::new(
            E_INVALID_JOB_ID,
            "Invalid job id specified",
            format!("{what}JobId={id}"),
        )
    }
}

/// A process to start for a job that reached RUNNING (process mode).
#[derive(Debug)]
pub struct Launch {
    pub job_id: u32,
    pub generation: u64,
    pub script: String,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// The expanded stdout/stderr path.
    pub output: String,
}

impl Launch {
    /// The process of `job`'s current run.
    fn of(job: &Job) -> Self {
        Self {
            job_id: job.id,
            generation: job.generation,
            script: job.spec.script.clone(),
            env: job.spec.environment.clone(),
            cwd: job.spec.cwd.clone(),
            output: output_path(job),
        }
    }
}

/// Cluster shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cluster {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub partitions: Vec<String>,
}

/// The job table.
#[derive(Debug)]
pub struct Jobs {
    pub jobs: BTreeMap<u32, Job>,
    pub cluster: Cluster,
    pub node_free: Vec<u32>,
    pending: BTreeSet<u32>,
    active: BTreeSet<u32>,
    next_id: u32,
    pub mode: ExecutionMode,
    /// Finished jobs are forgotten after this long (slurmctld's `MinJobAge`).
    pub min_job_age: Duration,
    /// A requeued job waits this long before it may start again (`BeginTime`).
    pub requeue_delay: Duration,
}

fn ts_ago(now: Instant, at: Instant) -> Timestamp {
    Timestamp::now()
        .checked_sub(now.saturating_duration_since(at))
        .unwrap_or_else(|_| Timestamp::now())
}

impl Jobs {
    pub fn new(cluster: Cluster, mode: ExecutionMode) -> Self {
        Self {
            jobs: BTreeMap::new(),
            node_free: vec![cluster.gpus_per_node; cluster.nodes as usize],
            cluster,
            pending: BTreeSet::new(),
            active: BTreeSet::new(),
            next_id: 1,
            mode,
            min_job_age: Duration::from_secs(300),
            requeue_delay: Duration::from_secs(2),
        }
    }

    /// Forget every job (their processes are killed).
    pub fn reset(&mut self) {
        for j in self.jobs.values_mut() {
            j.stop_process();
        }
        self.jobs.clear();
        self.pending.clear();
        self.active.clear();
        self.node_free = vec![self.cluster.gpus_per_node; self.cluster.nodes as usize];
    }

    /// Reshape the cluster (running jobs keep their GPUs, possibly over-committing).
    pub fn set_cluster(&mut self, nodes: u32, gpus_per_node: u32) {
        self.cluster.nodes = nodes;
        self.cluster.gpus_per_node = gpus_per_node;
        self.node_free = vec![gpus_per_node; nodes as usize];
        for j in self.jobs.values() {
            if let Some(n) = j.node
                && j.state.holds_node()
                && let Some(free) = self.node_free.get_mut(n)
            {
                *free = free.saturating_sub(j.spec.gpus);
            }
        }
    }

    pub fn free_gpus(&self) -> u32 {
        self.node_free.iter().sum()
    }

    /// Resolves an admin id: a job id, or a job name (the newest job of that name).
    pub fn resolve(&self, id: &str) -> Option<u32> {
        if let Ok(n) = id.parse::<u32>() {
            return self.jobs.contains_key(&n).then_some(n);
        }
        self.jobs
            .values()
            .rev()
            .find(|j| j.spec.name == id)
            .map(|j| j.id)
    }
}
