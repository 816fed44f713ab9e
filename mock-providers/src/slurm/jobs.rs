//! The emulated slurmctld: a job table with Slurm's lifecycle (PENDING, CONFIGURING, RUNNING,
//! and the terminal states), GPU accounting over a few identical nodes, lazy time-driven
//! transitions (10,000 jobs cost no timers or tasks in simulated mode), and the operations the
//! REST and admin routes need. Error numbers are Slurm's (slurm/slurm_errno.h).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;

use crate::config::ExecutionMode;

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

/// Where a job's stdout and stderr go: its `standard_output` pattern, or Slurm's default
/// `<cwd>/slurm-%j.out`.
pub fn output_path(job: &Job) -> String {
    match &job.spec.standard_output {
        Some(p) if !p.is_empty() => expand_pattern(p, job),
        _ => format!(
            "{}/slurm-{}.out",
            job.spec.cwd.trim_end_matches('/'),
            job.id
        ),
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

    /// Submit; an impossible GPU count records a FAILED (BadConstraints) job and answers
    /// 2014, as a real 22.05 does.
    pub fn submit(&mut self, user: &str, spec: NewJob, now: Instant) -> Result<u32, SlurmErr> {
        let partition = match &spec.partition {
            Some(p) if !self.cluster.partitions.contains(p) => {
                return Err(SlurmErr::new(
                    E_INVALID_PARTITION,
                    "Invalid partition name specified",
                    format!("partition {p} does not exist"),
                ));
            }
            Some(p) => p.clone(),
            None => self.cluster.partitions.first().cloned().unwrap_or_default(),
        };
        let impossible = spec.gpus > self.cluster.gpus_per_node;
        let id = self.next_id;
        self.next_id += 1;
        let already_running = spec.already_running;
        let job = Job {
            id,
            partition,
            user: user.to_owned(),
            state: if impossible {
                JobState::Failed
            } else {
                JobState::Pending
            },
            reason: if impossible { "BadConstraints" } else { "None" }.to_owned(),
            exit_raw: i64::from(impossible),
            restart_cnt: 0,
            submit_time: Timestamp::now(),
            start_time: None,
            end_time: impossible.then(Timestamp::now),
            node: None,
            eligible_at: if already_running {
                now
            } else {
                now + self.mode.provision()
            },
            phase_since: now,
            generation: 0,
            kill: None,
            pid: None,
            finished_at: impossible.then_some(now),
            spec,
        };
        self.jobs.insert(id, job);
        if impossible {
            return Err(SlurmErr::new(
                E_NODE_CONFIG_UNAVAILABLE,
                "Requested node configuration is not available",
                "",
            ));
        }
        self.pending.insert(id);
        Ok(id)
    }

    /// Advances time: expires runs and time limits, starts what fits, forgets old records.
    /// Returns the processes to launch (process mode).
    pub fn settle(&mut self, now: Instant) -> Vec<Launch> {
        let mut launches = Vec::new();
        // Running and configuring jobs.
        let active: Vec<u32> = self.active.iter().copied().collect();
        for id in active {
            let Some(j) = self.jobs.get_mut(&id) else {
                self.active.remove(&id);
                continue;
            };
            let elapsed = now.saturating_duration_since(j.phase_since);
            match j.state {
                JobState::Configuring if elapsed >= self.mode.start() => {
                    j.state = JobState::Running;
                    j.phase_since += self.mode.start();
                    j.start_time = Some(ts_ago(now, j.phase_since));
                    if self.mode.is_process() {
                        launches.push(Launch {
                            job_id: id,
                            generation: j.generation,
                            script: j.spec.script.clone(),
                            env: j.spec.environment.clone(),
                            cwd: j.spec.cwd.clone(),
                            output: output_path(j),
                        });
                    }
                }
                JobState::Running => {
                    let limit = j
                        .spec
                        .time_limit_minutes
                        .map(|m| Duration::from_secs(u64::from(m) * 60));
                    if limit.is_some_and(|l| elapsed >= l) {
                        self.finish(id, JobState::Timeout, "TimeLimit", 15, now);
                    } else if let Some(run) = self.mode.run()
                        && elapsed >= run
                    {
                        self.finish(id, JobState::Completed, "None", 0, now);
                    }
                }
                _ => {}
            }
        }
        // Pending jobs, in submission order, while GPUs last.
        let pending: Vec<u32> = self.pending.iter().copied().collect();
        for id in pending {
            let Some(j) = self.jobs.get(&id) else {
                self.pending.remove(&id);
                continue;
            };
            if now < j.eligible_at {
                continue;
            }
            let gpus = j.spec.gpus;
            let Some(node) = self.node_free.iter().position(|f| *f >= gpus) else {
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.reason = "Resources".into();
                }
                continue;
            };
            self.node_free[node] -= gpus;
            self.pending.remove(&id);
            self.active.insert(id);
            let skip_configuring = self.mode.start().is_zero();
            let Some(j) = self.jobs.get_mut(&id) else {
                continue;
            };
            j.node = Some(node);
            j.reason = "None".into();
            j.generation += 1;
            j.phase_since = now;
            j.end_time = None;
            if skip_configuring || j.spec.already_running {
                j.state = JobState::Running;
                j.start_time = Some(Timestamp::now());
                if self.mode.is_process() {
                    launches.push(Launch {
                        job_id: id,
                        generation: j.generation,
                        script: j.spec.script.clone(),
                        env: j.spec.environment.clone(),
                        cwd: j.spec.cwd.clone(),
                        output: output_path(j),
                    });
                }
            } else {
                j.state = JobState::Configuring;
            }
        }
        // Forget finished jobs older than MinJobAge.
        let old: Vec<u32> = self
            .jobs
            .values()
            .filter(|j| {
                j.finished_at
                    .is_some_and(|f| now.saturating_duration_since(f) >= self.min_job_age)
            })
            .map(|j| j.id)
            .collect();
        for id in old {
            self.jobs.remove(&id);
        }
        launches
    }

    /// Ends a job in `state` with the raw wait status `exit_raw`; frees its GPUs.
    pub fn finish(&mut self, id: u32, state: JobState, reason: &str, exit_raw: i64, now: Instant) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        j.stop_process();
        if j.state.holds_node()
            && let Some(n) = j.node
            && let Some(free) = self.node_free.get_mut(n)
        {
            *free += j.spec.gpus;
        }
        j.state = state;
        j.reason = reason.to_owned();
        j.exit_raw = exit_raw;
        j.end_time = Some(Timestamp::now());
        j.finished_at = Some(now);
        self.pending.remove(&id);
        self.active.remove(&id);
    }

    /// `scancel` / `DELETE`: a finished job is left as it is (200, as 22.05 answers).
    pub fn cancel(&mut self, id: u32, now: Instant) -> Result<(), SlurmErr> {
        let j = self
            .jobs
            .get(&id)
            .ok_or_else(|| SlurmErr::invalid_job(&id.to_string(), "unable to kill "))?;
        if j.state.is_terminal() {
            return Ok(());
        }
        let raw = if j.state.holds_node() { 15 } else { 0 };
        self.finish(id, JobState::Cancelled, "None", raw, now);
        Ok(())
    }

    /// `scontrol requeue`: back to PENDING (reason BeginTime), restart count + 1.
    pub fn requeue(&mut self, id: u32, now: Instant) -> Result<(), String> {
        let state = self.jobs.get(&id).map(|j| j.state).ok_or("no such job")?;
        if state == JobState::Pending {
            return Err("job is pending".into());
        }
        if state.holds_node() {
            self.finish(id, JobState::Pending, "BeginTime", 0, now);
        }
        let delay = self.requeue_delay;
        if let Some(j) = self.jobs.get_mut(&id) {
            j.stop_process();
            j.state = JobState::Pending;
            j.reason = "BeginTime".into();
            j.restart_cnt += 1;
            j.exit_raw = 0;
            j.start_time = None;
            j.end_time = None;
            j.finished_at = None;
            j.node = None;
            j.eligible_at = now + delay;
            j.spec.already_running = false;
        }
        self.active.remove(&id);
        self.pending.insert(id);
        Ok(())
    }

    /// Suspend or resume a running job.
    pub fn suspend(&mut self, id: u32, suspend: bool) -> Result<(), String> {
        let j = self.jobs.get_mut(&id).ok_or("no such job")?;
        match (j.state, suspend) {
            (JobState::Running, true) => j.state = JobState::Suspended,
            (JobState::Suspended, false) => j.state = JobState::Running,
            (s, _) => return Err(format!("job is {}", s.name())),
        }
        Ok(())
    }

    /// Drop a record without a trace.
    pub fn vanish(&mut self, id: u32, now: Instant) -> bool {
        if !self.jobs.contains_key(&id) {
            return false;
        }
        self.finish(id, JobState::Cancelled, "None", 0, now);
        self.jobs.remove(&id);
        true
    }

    /// A process started (process mode); false when the job moved on meanwhile.
    pub fn proc_started(
        &mut self,
        id: u32,
        generation: u64,
        pid: Option<u32>,
        kill: tokio::sync::oneshot::Sender<()>,
    ) -> bool {
        match self.jobs.get_mut(&id) {
            Some(j) if j.generation == generation && j.state.holds_node() => {
                j.pid = pid;
                j.kill = Some(kill);
                true
            }
            _ => false,
        }
    }

    /// A process ended with `raw` wait status (process mode).
    pub fn proc_exited(&mut self, id: u32, generation: u64, raw: i64, now: Instant) {
        let current = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.generation == generation && j.state.holds_node());
        if !current {
            return;
        }
        if raw == 0 {
            self.finish(id, JobState::Completed, "None", 0, now);
        } else {
            self.finish(id, JobState::Failed, "NonZeroExitCode", raw, now);
        }
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

/// Replaces `%j`, `%x`, `%u` and `%%` in an output path pattern.
pub fn expand_pattern(pattern: &str, job: &Job) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') | Some('A') => out.push_str(&job.id.to_string()),
            Some('x') => out.push_str(&job.spec.name),
            Some('u') => out.push_str(&job.user),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs() -> Jobs {
        Jobs::new(
            Cluster {
                nodes: 1,
                gpus_per_node: 2,
                partitions: vec!["debug".into()],
            },
            ExecutionMode::simulated(0, 0, None),
        )
    }

    #[test]
    fn lifecycle_and_gpu_accounting() {
        let mut j = jobs();
        let now = Instant::now();
        let a = j
            .submit(
                "u",
                NewJob {
                    gpus: 2,
                    ..NewJob::default()
                },
                now,
            )
            .unwrap();
        let b = j
            .submit(
                "u",
                NewJob {
                    gpus: 1,
                    ..NewJob::default()
                },
                now,
            )
            .unwrap();
        j.settle(now);
        assert_eq!(j.jobs[&a].state, JobState::Running);
        assert_eq!(j.jobs[&b].state, JobState::Pending);
        assert_eq!(j.jobs[&b].reason, "Resources");
        j.cancel(a, now).unwrap();
        assert_eq!(j.jobs[&a].exit_raw, 15);
        j.settle(now);
        assert_eq!(j.jobs[&b].state, JobState::Running);
        j.requeue(b, now).unwrap();
        assert_eq!(j.jobs[&b].restart_cnt, 1);
        assert_eq!(j.free_gpus(), 2);
        let err = j
            .submit(
                "u",
                NewJob {
                    gpus: 3,
                    ..NewJob::default()
                },
                now,
            )
            .unwrap_err();
        assert_eq!(err.number, E_NODE_CONFIG_UNAVAILABLE);
        let failed = j.jobs.values().last().unwrap();
        assert_eq!(failed.state, JobState::Failed);
        assert_eq!(failed.reason, "BadConstraints");
        assert_eq!(j.cancel(999, now).unwrap_err().number, E_INVALID_JOB_ID);
    }

    #[test]
    fn patterns_expand() {
        let mut j = jobs();
        let id = j
            .submit(
                "alice",
                NewJob {
                    name: "n".into(),
                    ..NewJob::default()
                },
                Instant::now(),
            )
            .unwrap();
        assert_eq!(
            expand_pattern("/o/%x-%j-%u.%%.log", &j.jobs[&id]),
            format!("/o/n-{id}-alice.%.log")
        );
    }
}
