//! The [`Provider`] implementation of [`Slurm`]: submit (with leftovers cancelled after a
//! refusal), cancel, list, logs and exec.

use bytes::Bytes;
use tracing::{info, warn};

use super::wire::{self, SubmitAnswer};
use super::{ExecMode, Slurm, exec, logs, nodes, observe, step_containers};
use crate::provider::{
    Capabilities, ContainerExit, ExecRequest, ExecSession, Inventory, LogOptions, LogStream,
    Observed, Price, Provider, ProviderError, Workload, WorkloadState,
};
use crate::providers::http;
use crate::providers::rest;

impl Provider for Slurm {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logs: self.cfg.output_dir.is_some(),
            follow_logs: self.cfg.output_dir.is_some(),
            exec: self.cfg.exec == ExecMode::Srun,
            containers: true,
            // A job's process binds on its node: UDP as much as TCP.
            udp: true,
            // `bare` pulls no image; apptainer and enroot get the login (`pull.rs`).
            registry_logins: true,
            ..Capabilities::gpus(self.cfg.gpu_types.keys(), self.cfg.max_gpus_per_workload)
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        crate::providers::ensure_owned(&self.owner, w)?;
        let req = self.job_request(w)?;
        let body = wire::submit_body(self.client.dialect().await?, &req.0);
        let resp = self.client.submit(&body).await?;
        let answer: Option<SubmitAnswer> = serde_json::from_slice(&resp.body).ok();
        let errors = wire::errors_of(&resp.body);
        let failed = errors.iter().any(|e| e.number.is_some_and(|n| n != 0));
        if resp.is_success()
            && !failed
            && let Some(job_id) = answer.as_ref().and_then(SubmitAnswer::job_id)
        {
            info!(provider = %self.name, workload = %w.id, job_id, "submitted Slurm job");
            let warned = answer
                .as_ref()
                .map(SubmitAnswer::warned_fields)
                .unwrap_or_default();
            if !warned.is_empty() {
                warn!(provider = %self.name, workload = %w.id, job_id, fields = %warned.join(", "),
                    "slurmrestd dropped or converted fields of the submission; a setting may be lost");
            }
            if let Some(msg) = answer
                .and_then(|a| a.job_submit_user_msg)
                .filter(|m| !m.trim().is_empty())
            {
                info!(provider = %self.name, workload = %w.id, job_id, message = %http::truncate(&msg), "job_submit plugin message");
            }
            return Ok(());
        }
        let err = self.client.error_from(&resp);
        if matches!(err, ProviderError::Invalid { .. }) && failed {
            self.cancel_leftovers(&w.id).await;
        }
        Err(err)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let job_id = Self::job_id(provider_id)?;
        self.client.cancel(job_id).await?;
        info!(provider = %self.name, job_id, "cancelled Slurm job");
        Ok(())
    }

    /// Slurm publishes no prices: one configured quote for any GPU type it maps, free
    /// capacity unknown (the scheduler queues what does not fit).
    async fn inventory(&self) -> Result<Inventory, ProviderError> {
        Ok(Inventory::configured(
            self.cfg.price_per_gpu_hour,
            self.cfg.max_gpus_per_workload,
        ))
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let jobs = self.client.jobs().await?;
        rest::whole_list(
            &self.name,
            "job_id",
            jobs.iter()
                .map(|j| (j.name.as_deref(), j.job_id.is_some_and(|id| id > 0))),
        )?;
        // Every job of ours, even two carrying one workload id (a finished job and its
        // restart, or a create that was lost and retried): the pipeline picks one and deletes
        // live extras (`pods::duplicates`).
        let mut out: Vec<Observed> = Vec::with_capacity(jobs.len());
        let mut steps = Vec::new();
        let mut hosts = Vec::new();
        for job in &jobs {
            let price = self.cfg.price_per_gpu_hour.and_then(Price::from_dollars);
            let Some(obs) = observe(&self.owner, job, price) else {
                continue;
            };
            if let WorkloadState::Unknown { raw } = &obs.state {
                warn!(provider = %self.name, workload = %obs.id, job_state = %raw, "unknown Slurm job state");
            }
            steps.push(step_containers(job));
            // The pod's address is its (first) node's, while the job holds one.
            let host = matches!(
                obs.state,
                WorkloadState::Starting | WorkloadState::Running | WorkloadState::NotReady { .. }
            )
            .then(|| job.nodes.as_deref().and_then(nodes::first_host))
            .flatten();
            hosts.push(host);
            out.push(obs);
        }
        let wanted: Vec<String> = hosts.iter().flatten().cloned().collect();
        let addresses = self.nodes.of(&self.name, &self.client, &wanted).await;
        for (obs, host) in out.iter_mut().zip(&hosts) {
            obs.ip = host
                .as_ref()
                .and_then(|h| addresses.get(h))
                .map(ToString::to_string);
        }
        if let Some(dir) = &self.cfg.output_dir {
            let reads = out.iter_mut().zip(steps).filter(|(o, names)| {
                !names.is_empty() && o.started_at.is_some() && o.provider_id.parse::<u64>().is_ok()
            });
            futures::future::join_all(reads.map(|(o, names)| container_exits(dir, o, names))).await;
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn logs(&self, provider_id: &str, opts: &LogOptions) -> Result<LogStream, ProviderError> {
        let unsupported = |what: &str| ProviderError::Unsupported {
            provider: self.name.clone(),
            what: what.into(),
        };
        let Some(dir) = self.cfg.output_dir.clone() else {
            return Err(unsupported("logs (no outputDir is configured)"));
        };
        if opts.previous {
            return Err(unsupported("logs of a previous container"));
        }
        let job_id = Self::job_id(provider_id)?;
        if !tokio::fs::try_exists(&dir).await.unwrap_or(false) {
            return Err(ProviderError::transient(format!(
                "the Slurm output directory {} is not readable from the VK",
                dir.display()
            )));
        }
        let path = match &opts.container {
            // Container names are DNS labels (checked when the script was made).
            Some(name) if !name.contains(['/', '\0']) && name != ".." => {
                logs::container_log_path(&dir, job_id, name)
            }
            Some(name) => {
                return Err(ProviderError::Invalid {
                    message: format!("{name:?} is not a container name"),
                });
            }
            None => logs::log_path(&dir, job_id),
        };
        if opts.follow {
            return self.follow_logs(job_id, path, opts).await;
        }
        let content = logs::read_tail(&path, logs::MAX_READ).await?;
        let mut text = Bytes::copy_from_slice(logs::tail(&content, opts.tail_lines));
        if let Some(limit) = opts.limit_bytes.and_then(|l| usize::try_from(l).ok()) {
            text.truncate(limit);
        }
        let stream: LogStream = Box::pin(futures::stream::iter([Ok(text)]));
        Ok(stream)
    }

    async fn exec(
        &self,
        provider_id: &str,
        req: ExecRequest,
    ) -> Result<ExecSession, ProviderError> {
        if self.cfg.exec != ExecMode::Srun {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "exec (set exec: srun in its settings)".into(),
            });
        }
        let job_id = Self::job_id(provider_id)?;
        let settings = exec::SrunSettings {
            wrapper: self.cfg.exec_wrapper.clone(),
            srun: self.cfg.srun_path.clone(),
            slurm_conf: self.cfg.slurm_conf.clone(),
            work_dir: self.cfg.work_dir.clone(),
            path: self.cfg.path.clone(),
        };
        exec::start(&self.name, &settings, job_id, req)
    }
}

/// Fills `o.container_exits` from the `.exit` files of the containers `names` of its job.
/// A file older than the job's current run (written before a requeue: scontrol(1) `requeue`
/// puts the same job id back to PENDING, and its next run gets a new `start_time`) is the run
/// before's, and is left out; the slack covers `start_time`'s whole seconds.
async fn container_exits(dir: &std::path::Path, o: &mut Observed, names: Vec<String>) {
    let (Ok(job_id), Some(started)) = (o.provider_id.parse::<u64>(), o.started_at) else {
        return;
    };
    let since = started - jiff::SignedDuration::from_secs(1);
    for name in names {
        let path = logs::container_exit_path(dir, job_id, &name);
        let Some((exit_code, written)) = logs::read_exit(&path).await else {
            continue;
        };
        let written = jiff::Timestamp::try_from(written).ok();
        if written.is_some_and(|t| t < since) {
            continue;
        }
        o.container_exits.insert(
            name,
            ContainerExit {
                exit_code,
                finished_at: written,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn job_with_comment(comment: &str) -> super::super::wire::JobRecord {
        serde_json::from_value(serde_json::json!({"job_id": 7, "comment": comment})).unwrap()
    }

    #[test]
    fn the_comment_names_the_steps_and_only_dns_labels_count() {
        let job = job_with_comment("gpu-vk owner=x pod=ml/a containers=fetch,main,Bad,../x,m-2");
        assert_eq!(step_containers(&job), ["fetch", "main", "m-2"]);
        assert!(step_containers(&job_with_comment("gpu-vk owner=x pod=ml/a")).is_empty());
    }

    #[tokio::test]
    async fn exit_files_of_this_run_are_read_and_others_are_not() {
        let dir = std::env::temp_dir().join(format!("vk-exits-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            std::fs::write(logs::container_exit_path(&dir, 7, name), text).unwrap();
        };
        write("main", "4\n");
        write("metrics", "0\n");
        write("junk", "not a number\n");
        // Written before the job's current run (a requeue keeps the job id).
        write("old", "9\n");
        let old = std::fs::File::options()
            .write(true)
            .open(logs::container_exit_path(&dir, 7, "old"))
            .unwrap();
        old.set_modified(SystemTime::now() - Duration::from_secs(600))
            .unwrap();
        // A link the job planted is not followed.
        std::os::unix::fs::symlink(
            logs::container_exit_path(&dir, 7, "main"),
            logs::container_exit_path(&dir, 7, "link"),
        )
        .unwrap();
        let mut o = crate::test_support::observed(WorkloadState::Running);
        o.provider_id = "7".into();
        o.started_at = Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60));
        let names = ["main", "metrics", "junk", "old", "link", "sidecar"];
        container_exits(&dir, &mut o, names.map(String::from).to_vec()).await;
        let got: Vec<(&str, i32)> = o
            .container_exits
            .iter()
            .map(|(n, e)| (n.as_str(), e.exit_code))
            .collect();
        assert_eq!(got, [("main", 4), ("metrics", 0)]);
        assert!(o.container_exits["main"].finished_at > o.started_at);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
