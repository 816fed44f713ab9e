//! The [`Provider`] implementation of [`Slurm`]: submit (with leftovers cancelled after a
//! refusal), cancel, list, logs and exec.

use bytes::Bytes;
use tracing::{info, warn};

use super::wire::{self, SubmitAnswer};
use super::{ExecMode, Slurm, exec, logs, observe};
use crate::provider::{
    Capabilities, ExecRequest, ExecSession, Inventory, LogOptions, LogStream, Observed, Price,
    Provider, ProviderError, Quote, Workload, WorkloadState,
};
use crate::providers::http;

impl Provider for Slurm {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            gpu_types: self.cfg.gpu_types.keys().cloned().collect(),
            max_gpus_per_workload: self.cfg.max_gpus_per_workload,
            logs: self.cfg.output_dir.is_some(),
            follow_logs: self.cfg.output_dir.is_some(),
            exec: self.cfg.exec == ExecMode::Srun,
            metrics: false,
            containers: true,
            ..Capabilities::default()
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
        let Some(price) = self.cfg.price_per_gpu_hour.and_then(Price::from_dollars) else {
            return Ok(Inventory::default());
        };
        Ok(Inventory {
            quotes: vec![Quote {
                gpu_type: None,
                price_per_gpu: price,
                available_gpus: None,
                max_per_workload: Some(self.cfg.max_gpus_per_workload),
            }],
        })
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let jobs = self.client.jobs().await?;
        // Every job of ours, even two carrying one workload id (a finished job and its
        // restart, or a create that was lost and retried): the pipeline picks one and deletes
        // live extras (`pods::duplicates`).
        let mut out: Vec<Observed> = Vec::with_capacity(jobs.len());
        for job in &jobs {
            let price = self.cfg.price_per_gpu_hour.and_then(Price::from_dollars);
            let Some(obs) = observe(&self.owner, job, price) else {
                continue;
            };
            if let WorkloadState::Unknown { raw } = &obs.state {
                warn!(provider = %self.name, workload = %obs.id, job_state = %raw, "unknown Slurm job state");
            }
            out.push(obs);
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
