//! The [`Provider`] implementation of [`Vast`]: idempotent create (with contention waited
//! out), delete, list and logs.

use rand::Rng;
use reqwest::Method;
use tracing::info;

use super::pace::Endpoint;
use super::rent::Rent;
use super::state::observe;
use super::unreachable::is_unreachable;
use super::wire::VastError;
use super::{CONTENTION_PAUSE, CONTENTION_ROUNDS, Vast, market};
use crate::provider::{
    Capabilities, FailureReason, Inventory, LogOptions, LogStream, Observed, Provider,
    ProviderError, Workload, WorkloadState,
};
use crate::providers::rest;

impl Provider for Vast {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logs: true,
            // A log is an upload Vast makes on request (`request_logs`): a snapshot, nothing
            // to follow.
            follow_logs: false,
            metrics: true,
            max_disk_gb: self.cfg.max_disk_gb,
            max_cuda: self.cfg.max_cuda_version.clone(),
            // `image_login`.
            registry_logins: true,
            ..Capabilities::gpus(self.cfg.gpu_names.keys(), self.cfg.max_gpus_per_workload)
        }
    }

    /// One on-demand offer search across every GPU type (the search endpoint allows 10 a
    /// minute; the inventory interval keeps this far below it).
    async fn inventory(&self) -> Result<Inventory, ProviderError> {
        let offers = self
            .search_offers(&market::search(self.cfg.min_reliability))
            .await?;
        Ok(market::inventory(&self.cfg, &offers))
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        crate::providers::ensure_owned(&self.owner, w)?;
        let mut plan = self.plan(w)?;

        if self.maybe_rented(&w.id) {
            let filter = serde_json::json!({ "label": { "eq": w.id.as_str() } });
            let existing = self.instances(Some(&filter)).await?;
            if let Some(inst) = existing
                .iter()
                .find(|i| i.label.as_deref() == Some(w.id.as_str()))
            {
                info!(provider = %self.name, workload = %w.id, instance = ?inst.id, "workload already exists; not creating it again");
                return Ok(());
            }
        }

        // Contention with this process's own creates is waited out here, with fresh searches,
        // rather than surfaced: a transient error would cost the pod a status write and an
        // event about something no user can act on. A create waits for another's rent to end
        // (the offer is then rented, and its machine offers anew, or released); only rounds
        // in which none ended count towards giving up.
        let mut idle = 0u32;
        loop {
            let ends = self.claims.ends();
            match self.rent(w, &mut plan).await? {
                Rent::Done => return Ok(()),
                Rent::Contended(e) => {
                    let jitter = rand::rng().random_range(0.5..1.5);
                    let pause = CONTENTION_PAUSE.mul_f64(f64::from(idle + 1) * jitter);
                    if !self.claims.rent_ended_since(ends, pause).await {
                        idle += 1;
                        if idle >= CONTENTION_ROUNDS {
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let id = Self::instance_id(provider_id)?;
        let url = self
            .api
            .url(&["api", "v0", "instances", &id.to_string()], true);
        let resp = self
            .call(Endpoint::Destroy, Method::DELETE, url, None)
            .await?;
        if resp.is_success() {
            let answer: Option<VastError> = serde_json::from_slice(&resp.body).ok();
            if answer.as_ref().and_then(|a| a.success) == Some(false) {
                return Err(self.error_from(&resp));
            }
            info!(provider = %self.name, instance = id, "destroyed Vast instance");
            return Ok(());
        }
        Err(self.error_from(&resp))
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let instances = self.instances(None).await?;
        rest::whole_list(
            &self.name,
            "Instance.id",
            instances.iter().map(|i| {
                let has_id = i.id.as_ref().is_some_and(|id| !id.to_string().is_empty());
                (i.label.as_deref(), has_id)
            }),
        )?;
        let now = std::time::Instant::now();
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        let mut unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        let observed: Vec<Observed> = instances
            .into_iter()
            .filter_map(|i| {
                let uptime = i.uptime_mins.unwrap_or(0.0) * 60.0;
                let silent = is_unreachable(i.actual_status.as_ref());
                let mut o = observe(&self.name, i)?;
                if let Some(u) = o.usage.as_mut() {
                    u.cpu_usage_nanos = cpu.advance(&o.provider_id, u.cpu_millis, uptime);
                }
                let outage = unreachable.note(&o.provider_id, silent, now);
                self.give_up_if_gone(&mut o, outage);
                Some(o)
            })
            .collect();
        cpu.retain(observed.iter().map(|o| o.provider_id.as_str()));
        unreachable.retain(observed.iter().map(|o| o.provider_id.as_str()));
        Ok(observed)
    }

    async fn logs(&self, provider_id: &str, opts: &LogOptions) -> Result<LogStream, ProviderError> {
        if opts.previous {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "logs of a previous container".into(),
            });
        }
        let id = Self::instance_id(provider_id)?;
        let mut text = self.fetch_logs(id, opts).await?;
        if let Some(limit) = opts.limit_bytes.and_then(|l| usize::try_from(l).ok()) {
            text.truncate(limit);
        }
        let stream: LogStream = Box::pin(futures::stream::iter([Ok(text)]));
        Ok(stream)
    }
}

impl Vast {
    /// An instance unreachable for `unreachableDeadlineSeconds` is reported failed: the
    /// framework then destroys it and, by the pod's restart policy, rents another.
    fn give_up_if_gone(&self, o: &mut Observed, outage: Option<std::time::Duration>) {
        let deadline = self.cfg.unreachable_deadline_seconds;
        let Some(outage) = outage.filter(|d| deadline > 0 && d.as_secs() >= deadline) else {
            return;
        };
        o.state = WorkloadState::Failed {
            exit_code: super::ERROR_EXIT_CODE,
            reason: FailureReason::ProviderError,
        };
        o.message = Some(format!(
            "Vast has reported the instance's host offline or silent for {} s (deadline {deadline} \
             s, provider setting unreachableDeadlineSeconds); Vast's docs say such an instance \
             will never reach running: destroy it and retry with another offer",
            outage.as_secs()
        ));
        o.usage = None;
    }
}
