//! Slurm adapter (slurmrestd): one batch job per workload, named with the workload id.
//!
//! Contract, verified in SchedMD's `src/plugins/openapi/v0.0.38/openapi.json`, the generated
//! v0.0.41 specification (Slinky's `slurm-client` vendors it), and against a real Slurm
//! 22.05.8 (`scripts/slurm/up`):
//! - Auth: headers `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN` (a JWT from
//!   `scontrol token`). Without them slurmrestd answers 401 `Authentication failure` in plain
//!   text; 22.05 answers an invalid or expired token with HTTP 500 and error number -1
//!   ("Unspecified error"), because slurmctld drops the RPC.
//! - `POST /slurm/<v>/job/submit`: v0.0.38 takes `{script, job: {name, environment{} (must be
//!   non-empty, error 2127), current_working_directory, gpus_per_node (string), time_limit
//!   (minutes), standard_output, comment, partition, account, qos, ...}}`; v0.0.41 takes
//!   `{job: {script, environment ["K=V"], tres_per_node "gres/gpu:N", time_limit {set,
//!   infinite, number}, ...}}`. Both answer `{job_id, errors[]}`.
//! - `GET /slurm/<v>/jobs/` lists every job slurmctld still knows (finished ones for
//!   `MinJobAge`, 300 s by default, without slurmdbd): one call per poll for all pods.
//!   `job_state` is a string (v0.0.38, a flag such as COMPLETING replaces the base state
//!   while set) or an array of base state and flags (v0.0.41); `exit_code` the raw wait
//!   status (v0.0.38: code << 8, or the signal in the low 7 bits) or `{status[],
//!   return_code, signal}` (v0.0.41); `restart_cnt` counts requeues.
//! - `DELETE /slurm/<v>/job/{id}` cancels (SIGKILL, which Slurm delivers as SIGCONT, SIGTERM
//!   and, after `KillWait`, SIGKILL). A finished job answers 200.
//! - Errors are `errors[]` entries with a Slurm error number (`error_number`, or
//!   `error_code` in 22.05's submission answers): 2017 unknown job (HTTP 500), 2014
//!   "Requested node configuration is not available" (HTTP 500; 22.05 still records a FAILED
//!   job with reason BadConstraints), 9000-9009 REST parse errors; a body that is not JSON
//!   answers 400 `Unable to parse query.`.
//!
//! Decisions:
//! - Job name = workload id; the comment carries the owner marker (cluster, node), the pod
//!   and the id, so jobs are recoverable after a restart. `list()` keeps only jobs whose name
//!   parses as a workload id of this VK.
//! - The pod's container becomes a `#!/bin/bash` script ([`script`]): env exported from the
//!   job's `environment` (no value is written into the script), `cd` to workingDir, the
//!   command run through the configured runtime. The job's `environment` holds `PATH`
//!   (slurmrestd needs one) and the pod's values under transport names.
//! - State mapping: see [`wire::workload_state`] and `docs/slurm.md`. CANCELLED is Evicted:
//!   we only cancel jobs of pods being deleted, which the framework no longer reports.
//! - Error numbers: 2017 NotFound; 2021 (already done) on delete is success; -1, 1007,
//!   2002, 6000-6011, 9008 Auth; 2007, 2016, 2040, 2050, 2074, 2101, 2105 Capacity; request
//!   errors (2000-2015 and the other job-specification errors, 8000, 9000-9009, 9200+)
//!   Invalid; anything else by HTTP status (5xx Transient). A 404 without a Slurm error is
//!   Transient: the URL is not served, most likely the wrong `dialect`.
//! - After a submission refused as Invalid, jobs named with the workload id that are still
//!   active are cancelled (22.05 creates a record for a 2014 refusal; it is already FAILED).
//! - Logs are read from `<outputDir>/slurm-<job id>.log` (stdout and stderr together) when
//!   the VK can read `outputDir`; `follow` polls the file and ends when the job has ended.
//! - A pod of several containers (init containers, native sidecars, more than one container)
//!   is one job whose script runs each container as a job step ([`steps`]); each container's
//!   log is `<outputDir>/slurm-<job id>.<container>.log`.
//! - Exec (`exec: srun`, off by default) runs `srun --jobid=<job> --overlap -- <command>` as a
//!   child process of the VK ([`exec`]): slurmrestd has no way to run a command in a job.

mod adapter;
mod client;
mod config;
pub mod exec;
#[cfg(test)]
mod fuzz;
mod logs;
mod nodes;
mod pull;
pub mod script;
pub mod steps;
mod tenancy;
#[cfg(test)]
mod tests;
mod token;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tracing::{debug, info, warn};

use super::http::{self, InitError};
use super::options::Options;
use super::rest;
use crate::naming::{Owner, WorkloadId};
use crate::provider::{
    LogOptions, LogStream, Observed, Price, ProviderError, Workload, WorkloadState,
};
use client::Client;
pub use config::SlurmConfig;
pub use exec::ExecMode;
pub use script::Runtime;
use token::{SlurmAuth, TokenSource};
pub use wire::Dialect;
use wire::{JobRecord, JobRequest};

/// slurmrestd's conventional address.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:6820";

/// In the comment of a job running each container as a step: the containers' names,
/// comma-separated, after this marker.
const CONTAINERS_MARKER: &str = "containers=";

/// The containers a job runs as steps, from its comment's marker; empty for a job of one
/// container (or one submitted before the marker existed). Only DNS labels count: the comment
/// is the job's to change (`scontrol update comment=`), and a name becomes a file name.
fn step_containers(job: &JobRecord) -> Vec<String> {
    let Some(list) = job
        .comment
        .as_deref()
        .into_iter()
        .flat_map(str::split_whitespace)
        .find_map(|t| t.strip_prefix(CONTAINERS_MARKER))
    else {
        return Vec::new();
    };
    let label = |n: &&str| {
        (1..=63).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    list.split(',').filter(label).map(str::to_owned).collect()
}

/// The Slurm adapter.
#[derive(Debug)]
pub struct Slurm {
    name: String,
    cfg: SlurmConfig,
    owner: Owner,
    client: Arc<Client>,
    nodes: nodes::NodeAddresses,
}

impl Slurm {
    /// Builds the adapter. The process must have installed a rustls crypto provider.
    pub fn new(name: String, cfg: SlurmConfig, owner: Owner) -> Result<Self, InitError> {
        let bad = |reason: String| InitError::InvalidSetting {
            provider: name.clone(),
            reason,
        };
        if cfg.user_name.trim().is_empty() {
            return Err(bad(
                "userName is required (the Slurm user the token belongs to)".into(),
            ));
        }
        if cfg.work_dir.trim().is_empty() {
            return Err(bad("workDir must not be empty".into()));
        }
        if cfg.default_time_limit_minutes == Some(0) {
            return Err(bad("defaultTimeLimitMinutes must be positive".into()));
        }
        if cfg.exec == ExecMode::Srun {
            if cfg.runtime != Runtime::Bare {
                // A step started by srun runs on the job's node, outside the job's container:
                // that would not be `kubectl exec` into the pod (docs/slurm.md, "Exec").
                return Err(bad(format!(
                    "exec: srun needs runtime: bare (with {:?} the command would run outside the \
                     job's container)",
                    cfg.runtime
                )));
            }
            if cfg.srun_path.trim().is_empty() {
                return Err(bad("srunPath must not be empty".into()));
            }
            if cfg.exec_wrapper.iter().any(|w| w.is_empty()) {
                return Err(bad("execWrapper entries must not be empty".into()));
            }
        }
        let token = match &cfg.token_file {
            Some(path) => TokenSource::file(path.clone()),
            None if !cfg.api_key.is_blank() => {
                TokenSource::Fixed(crate::config::Secret::new(cfg.api_key.expose().trim()))
            }
            None => {
                return Err(InitError::MissingApiKey {
                    provider: name.clone(),
                });
            }
        };
        let auth = SlurmAuth::new(cfg.user_name.trim(), token);
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        let client = Client::new(
            &name,
            &cfg.base_url,
            cfg.dialect,
            auth,
            timeout,
            cfg.allow_insecure_http,
        )?;
        let client = Arc::new(client);
        Ok(Self {
            name,
            cfg,
            owner,
            client,
            nodes: Default::default(),
        })
    }

    /// The job submission for `w`; pure, checked before any network call.
    pub fn job_request(&self, w: &Workload) -> Result<JobRequestView, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        tenancy::check(w, self.cfg.runtime).map_err(invalid)?;
        let options = Options::of(w);
        let gpus_per_node = match w.gpu.as_ref().filter(|g| g.count > 0) {
            None => None,
            Some(g) if g.count > self.cfg.max_gpus_per_workload => {
                return Err(invalid(format!(
                    "the pod requests {} GPUs, more than the {} allowed on {}",
                    g.count, self.cfg.max_gpus_per_workload, self.name
                )));
            }
            Some(g) => Some(match &g.gpu_type {
                None => g.count.to_string(),
                Some(t) => match self.cfg.gpu_types.get(t) {
                    Some(gres) => format!("{gres}:{}", g.count),
                    None if self.cfg.gpu_types.is_empty() => g.count.to_string(),
                    None => {
                        return Err(invalid(format!(
                            "GPU type {t} is not offered by {} (configured: {})",
                            self.name,
                            self.cfg
                                .gpu_types
                                .keys()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                },
            }),
        };
        let time_limit_minutes = options
            .minutes("time_limit")?
            .or(self.cfg.default_time_limit_minutes);
        // Several containers: each its own job step (one container keeps the one-step script).
        let job = if w.containers.len() > 1 {
            let dir = self.cfg.output_dir.as_deref().map(|d| d.to_string_lossy());
            steps::steps_job(w, self.cfg.runtime, dir.as_deref())?
        } else {
            script::batch_job(w, self.cfg.runtime)?
        };
        // PATH is the batch shell's own (the transport names never collide with it).
        let mut environment = job.environment;
        environment.insert("PATH".to_owned(), self.cfg.path.clone());
        let mut comment = format!(
            "gpu-vk owner={} cluster={} node={} pod={}/{} workload={}",
            self.owner.tag(),
            self.owner.cluster_id(),
            self.owner.node(),
            w.namespace,
            w.pod_name,
            w.id
        );
        if w.containers.len() > 1 {
            // Names the steps' `.exit` files `list()` reads (names are DNS labels: checked
            // by `steps_job` above).
            let names: Vec<&str> = w.containers.iter().map(|c| c.name.as_str()).collect();
            comment.push_str(&format!(" {CONTAINERS_MARKER}{}", names.join(",")));
        }
        const MIB: u64 = 1024 * 1024;
        Ok(JobRequestView(JobRequest {
            name: w.id.as_str().to_owned(),
            comment,
            script: job.script,
            environment: wire::Environment(environment),
            working_directory: self.cfg.work_dir.clone(),
            standard_output: self.cfg.output_dir.as_deref().map(logs::output_pattern),
            partition: options.within(
                "partition",
                self.cfg.partition.as_deref(),
                &self.cfg.allowed_partitions,
            )?,
            account: options.within(
                "account",
                self.cfg.account.as_deref(),
                &self.cfg.allowed_accounts,
            )?,
            qos: options.within("qos", self.cfg.qos.as_deref(), &self.cfg.allowed_qos)?,
            time_limit_minutes,
            gpus_per_node,
            cpus_per_task: w
                .cpu_millis
                .map(|m| u32::try_from(m.div_ceil(1000).max(1)).unwrap_or(u32::MAX)),
            memory_per_node_mb: w.memory_bytes.map(|b| b.div_ceil(MIB).max(1)),
            requeue: self.cfg.requeue,
        }))
    }

    /// The dialect requests use: the configured one, or (`auto`) the newest one slurmrestd
    /// serves, detected from its `/openapi/v3` on first use.
    pub async fn dialect(&self) -> Result<Dialect, ProviderError> {
        self.client.dialect().await
    }

    /// The JSON body `create` would submit for `w` (for tests and dry runs; with `auto`, the
    /// data_parser body every dialect from v0.0.41 on takes).
    pub fn submit_body(&self, w: &Workload) -> Result<serde_json::Value, ProviderError> {
        let req = self.job_request(w)?;
        Ok(wire::submit_body(self.cfg.dialect, &req.0))
    }

    fn job_id(provider_id: &str) -> Result<u64, ProviderError> {
        provider_id
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| ProviderError::Invalid {
                message: format!("{provider_id:?} is not a Slurm job id"),
            })
    }

    /// After a refused submission: cancel any still-active job carrying the workload's name
    /// (22.05 records a job even when it refuses it with 2014).
    async fn cancel_leftovers(&self, id: &WorkloadId) {
        let jobs = match self.client.jobs().await {
            Ok(j) => j,
            Err(e) => {
                warn!(provider = %self.name, workload = %id, error = %e, "could not look for a leftover job of a refused submission");
                return;
            }
        };
        for job in jobs
            .iter()
            .filter(|j| j.name.as_deref() == Some(id.as_str()))
        {
            let Some(job_id) = job.job_id else { continue };
            if wire::workload_state(job).is_terminal() {
                debug!(provider = %self.name, workload = %id, job_id, "refused submission left a finished job record");
                continue;
            }
            match self.client.cancel(job_id).await {
                Ok(()) | Err(ProviderError::NotFound) => {
                    info!(provider = %self.name, workload = %id, job_id, "cancelled the job left by a refused submission")
                }
                Err(e) => {
                    warn!(provider = %self.name, workload = %id, job_id, error = %e, "could not cancel the job left by a refused submission")
                }
            }
        }
    }

    async fn follow_logs(
        &self,
        job_id: u64,
        path: PathBuf,
        opts: &LogOptions,
    ) -> Result<LogStream, ProviderError> {
        let content = logs::read_tail(&path, logs::MAX_READ).await?;
        let first = logs::tail(&content, opts.tail_lines).to_vec();
        let limit = opts.limit_bytes;
        struct Follow {
            client: Arc<Client>,
            job_id: u64,
            path: PathBuf,
            offset: u64,
            sent: u64,
            limit: Option<u64>,
            polls: u32,
            first: Option<Bytes>,
            finishing: bool,
            done: bool,
        }
        let state = Follow {
            client: self.client.clone(),
            job_id,
            path,
            offset: content.len() as u64,
            sent: 0,
            limit,
            polls: 0,
            first: Some(Bytes::from(first)),
            finishing: false,
            done: false,
        };
        fn cap(s: &mut Follow, mut b: Bytes) -> Bytes {
            if let Some(limit) = s.limit {
                let left = limit.saturating_sub(s.sent);
                if (b.len() as u64) >= left {
                    b.truncate(usize::try_from(left).unwrap_or(usize::MAX));
                    s.done = true;
                }
            }
            s.sent += b.len() as u64;
            b
        }
        let stream = futures::stream::unfold(state, |mut s| async move {
            if let Some(first) = s.first.take() {
                let b = cap(&mut s, first);
                if !b.is_empty() {
                    return Some((Ok(b), s));
                }
            }
            loop {
                if s.done {
                    return None;
                }
                match logs::read_from(&s.path, s.offset).await {
                    Ok(b) if !b.is_empty() => {
                        s.offset += b.len() as u64;
                        let b = cap(&mut s, b);
                        return Some((Ok(b), s));
                    }
                    Ok(_) if s.finishing => return None,
                    Ok(_) => {}
                    Err(e) => {
                        s.done = true;
                        return Some((Err(e), s));
                    }
                }
                s.polls += 1;
                if s.polls % logs::STATE_CHECK_EVERY == 0 {
                    match s.client.job(s.job_id).await {
                        // Gone or finished: one last read, then the stream ends.
                        Ok(None) => s.finishing = true,
                        Ok(Some(j)) if wire::workload_state(&j).is_terminal() => s.finishing = true,
                        Ok(Some(_)) => {}
                        Err(e) => {
                            debug!(job_id = s.job_id, error = %e, "could not check the followed job's state")
                        }
                    }
                    if s.finishing {
                        continue;
                    }
                }
                tokio::time::sleep(logs::FOLLOW_POLL).await;
            }
        });
        Ok(Box::pin(stream))
    }
}

/// A resolved job submission (opaque; see [`Slurm::submit_body`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRequestView(JobRequest);

impl JobRequestView {
    /// The generated batch script.
    pub fn script(&self) -> &str {
        &self.0.script
    }
}

/// Translates one listed job; `None` when it is not one of this VK's workloads.
fn observe(owner: &Owner, job: &JobRecord, price_per_gpu: Option<Price>) -> Option<Observed> {
    let id = WorkloadId::parse(job.name.as_deref()?.trim())?;
    if !owner.owns(&id) {
        return None;
    }
    let job_id = job.job_id.filter(|j| *j > 0)?;
    let state = wire::workload_state(job);
    let now = jiff::Timestamp::now().as_second();
    let ts = |s: Option<i64>| s.and_then(|s| rest::timestamp_from_epoch(s as f64));
    let ran = job.nodes.as_deref().is_some_and(|n| !n.trim().is_empty())
        && !matches!(
            state,
            WorkloadState::Queued { .. } | WorkloadState::Unknown { .. }
        );
    let started_at = if ran {
        ts(job.start_time().filter(|s| *s <= now + 60))
    } else {
        None
    };
    let finished_at = if state.is_terminal() {
        ts(job.end_time().filter(|s| *s <= now + 60))
    } else {
        None
    };
    Some(Observed {
        id,
        provider_id: job_id.to_string(),
        state,
        message: job.message().map(|m| http::truncate(&m)),
        created_at: ts(job.submit_time()),
        started_at,
        finished_at,
        ip: None,
        provider_restarts: job.restart_cnt.unwrap_or(0),
        ports: Default::default(),
        usage: None,
        price: price_per_gpu.map(|p| p.times(job.gpus())),
        container_exits: Default::default(),
        pull_failure: None,
    })
}
