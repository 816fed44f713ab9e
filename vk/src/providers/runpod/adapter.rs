//! The [`Provider`] implementation of [`RunPod`]: idempotent create, delete and list.

use std::time::Instant;

use reqwest::Method;
use tracing::{debug, info};

use super::RunPod;
use super::state::observe;
use super::wire::{GpuCatalog, Pod};
use crate::provider::{
    Capabilities, Inventory, LogOptions, LogStream, Observed, Provider, ProviderError, Vanished,
    Workload, WorkloadState,
};
use crate::providers::rest;

impl Provider for RunPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logs: true,
            // The v2 log stream follows (Server-Sent Events).
            follow_logs: true,
            metrics: true,
            gpu_only: self.cfg.cpu_flavor_id.is_none(),
            delete_finished: true,
            max_disk_gb: self.cfg.max_disk_gb,
            max_cuda: self.cfg.max_cuda_version.clone(),
            // Registry credentials (`registries.rs`).
            registry_logins: true,
            ..Capabilities::gpus(self.cfg.gpu_ids.keys(), self.cfg.max_gpus_per_workload)
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        crate::providers::ensure_owned(&self.owner, w)?;
        let mut body = self.create_request(w)?;
        body.registry = self.registry_for(w).await?;
        // No lookup by name first: the framework only creates when no list begun after its
        // previous attempt showed this workload (see `Provider::create`).
        let body = serde_json::to_value(&body).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the request: {e}"),
        })?;
        let resp = self
            .api
            .send(Method::POST, self.api.url(&["pods"], false), Some(&body))
            .await?;
        self.note_balance(resp.status.as_u16());
        if resp.is_success() {
            let created: Option<Pod> = serde_json::from_slice(&resp.body).ok();
            info!(provider = %self.name, workload = %w.id, pod_id = ?created.and_then(|p| p.id), "created RunPod pod");
            return Ok(());
        }
        let err = match self.error_from(&resp) {
            // On create, 403 means "your account cannot access the requested pool: skip this
            // candidate, keep going" (v2 `POST /v2/pods` description). The same 403 ("access
            // denied", the only documented body) answers a key scoped Read Only or Restricted
            // (the spec's security scheme), and nothing in it tells the two apart: the next
            // candidate is tried, and the refusal says both, so no failover is silent.
            ProviderError::Auth { message } if resp.status.as_u16() == 403 => {
                ProviderError::Capacity {
                    message: format!(
                        "{message} (RunPod 403: this account cannot use the pool, or the API \
                         key may not create pods: a Read Only or Restricted key)"
                    ),
                }
            }
            other => other,
        };
        debug!(provider = %self.name, workload = %w.id, error = %err, "RunPod create failed");
        Err(err)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        if provider_id.is_empty() {
            return Err(ProviderError::Invalid {
                message: "empty RunPod pod id".into(),
            });
        }
        let resp = self
            .api
            .send(
                Method::DELETE,
                self.api.url(&["pods", provider_id], false),
                None,
            )
            .await?;
        if resp.is_success() {
            info!(provider = %self.name, pod_id = provider_id, "terminated RunPod pod");
            return Ok(());
        }
        Err(self.error_from(&resp))
    }

    async fn logs(&self, provider_id: &str, opts: &LogOptions) -> Result<LogStream, ProviderError> {
        self.open_logs(provider_id, opts).await
    }

    /// RunPod's v2 API reports no balance; at $0 it terminates pods without a network volume
    /// (runpod/docs `accounts-billing/billing.mdx`), and a create answers 402. A 402 since
    /// the last successful create says the balance ran out; otherwise the causes are named.
    fn vanished_cause(&self) -> Option<Vanished> {
        let unpaid = *self.unpaid_since.lock().unwrap_or_else(|e| e.into_inner());
        Some(match unpaid {
            Some(at) => Vanished::BalanceExhausted(format!(
                "RunPod refused a create for insufficient balance {} s ago, and at a $0 balance \
                 RunPod terminates pods that have no network volume",
                at.elapsed().as_secs()
            )),
            None => Vanished::Hint(
                "RunPod terminated it without the virtual kubelet asking: a user, or an account \
                 balance at $0 (RunPod then terminates pods that have no network volume)"
                    .to_owned(),
            ),
        })
    }

    /// One `GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&cloud=<cloud>`: list prices
    /// per GPU and whether any is free (availability is a level, not a count).
    async fn inventory(&self) -> Result<Inventory, ProviderError> {
        let mut url = self.api.url(&["catalog", "gpus"], false);
        url.query_pairs_mut()
            .append_pair("include", "AVAILABILITY")
            .append_pair("product", "POD")
            .append_pair("cloud", self.cfg.cloud.as_str());
        let resp = self.api.send(Method::GET, url, None).await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let catalog: GpuCatalog = resp.json("GPU catalog")?;
        Ok(super::catalog::inventory(&self.cfg, catalog))
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let sent = Instant::now();
        let pods = self.list_pods().await?;
        self.sweep_registries(&pods).await;
        let has_id = |p: &Pod| p.id.as_deref().is_some_and(|id| !id.is_empty());
        rest::whole_list(
            &self.name,
            "Pod.id",
            pods.iter().map(|p| (p.name.as_deref(), has_id(p))),
        )?;
        let now = Instant::now();
        let mut exits = self.exits.lock().unwrap_or_else(|e| e.into_inner());
        let ids: Vec<&str> = pods.iter().filter_map(|p| p.id.as_deref()).collect();
        exits.retain(&ids);
        let exited: Vec<bool> = pods
            .iter()
            .map(|p| {
                let running = p.status.as_ref().and_then(|s| s.as_str()) == Some("RUNNING");
                match p.id.as_deref() {
                    Some(id) if running => exits.note(
                        id,
                        p.runtime.as_ref().and_then(|r| r.uptime),
                        p.started_at.as_deref(),
                        sent,
                        now,
                    ),
                    _ => false,
                }
            })
            .collect();
        drop(exits);
        let uptimes: Vec<(Option<String>, f64)> = pods
            .iter()
            .map(|p| {
                let uptime = p.runtime.as_ref().and_then(|r| r.uptime).unwrap_or(0.0);
                (p.id.clone(), uptime)
            })
            .collect();
        self.pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(&ids);
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        cpu.retain(ids.iter().copied());
        let observed: Vec<Observed> = pods
            .into_iter()
            .zip(exited)
            .zip(uptimes)
            .filter_map(|((p, exited), (id, uptime))| {
                let mut o = observe(&self.name, p, exited, &self.cfg)?;
                if let (Some(u), Some(id)) = (o.usage.as_mut(), id) {
                    u.cpu_usage_nanos = cpu.advance(&id, u.cpu_millis, uptime);
                }
                Some(o)
            })
            .collect();
        drop(cpu);
        Ok(self.with_pull_failures(observed))
    }
}

impl RunPod {
    /// Adds what the system logs say of the pulls of pods still starting, and starts the
    /// looks that are due (`pulls`).
    fn with_pull_failures(&self, mut observed: Vec<Observed>) -> Vec<Observed> {
        let starting = |o: &Observed| {
            matches!(
                o.state,
                WorkloadState::Queued { .. } | WorkloadState::Starting
            )
        };
        let due = {
            let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
            let now = jiff::Timestamp::now();
            let ids: Vec<(String, std::time::Duration)> = observed
                .iter()
                .filter(|o| starting(o))
                .map(|o| {
                    let age = o
                        .created_at
                        .map(|c| now.duration_since(c))
                        .and_then(|d| std::time::Duration::try_from(d).ok())
                        .unwrap_or_default();
                    (o.provider_id.clone(), age)
                })
                .collect();
            for o in observed.iter_mut().filter(|o| starting(o)) {
                o.pull_failure = pulls.failure(&o.provider_id);
            }
            pulls.due(&ids, std::time::Instant::now())
        };
        let timeout = std::time::Duration::from_secs(self.cfg.request_timeout_secs.max(1));
        for id in due {
            tokio::spawn(super::pulls::check(
                self.api.clone(),
                self.pulls.clone(),
                id,
                timeout,
            ));
        }
        observed
    }

    /// Remembers a create refused for insufficient balance (402) until a create succeeds.
    fn note_balance(&self, status: u16) {
        let mut unpaid = self.unpaid_since.lock().unwrap_or_else(|e| e.into_inner());
        match status {
            402 => {
                unpaid.get_or_insert_with(Instant::now);
            }
            200..=299 => *unpaid = None,
            _ => {}
        }
    }
}
