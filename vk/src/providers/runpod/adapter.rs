//! The [`Provider`] implementation of [`RunPod`]: idempotent create, delete and list.

use reqwest::Method;
use tracing::{debug, info};

use super::RunPod;
use super::state::observe;
use super::wire::Pod;
use crate::provider::{Capabilities, Observed, Provider, ProviderError, Workload};

impl Provider for RunPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            gpu_types: self.cfg.gpu_ids.keys().cloned().collect(),
            max_gpus_per_workload: self.cfg.max_gpus_per_workload,
            logs: false,
            exec: false,
            metrics: true,
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        crate::providers::ensure_owned(&self.owner, w)?;
        let body = self.create_request(w)?;
        // No lookup by name first: the framework only creates when no list begun after its
        // previous attempt showed this workload (see `Provider::create`).
        let body = serde_json::to_value(&body).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the request: {e}"),
        })?;
        let resp = self
            .api
            .send(Method::POST, self.api.url(&["pods"], false), Some(&body))
            .await?;
        if resp.is_success() {
            let created: Option<Pod> = serde_json::from_slice(&resp.body).ok();
            info!(provider = %self.name, workload = %w.id, pod_id = ?created.and_then(|p| p.id), "created RunPod pod");
            return Ok(());
        }
        let err = self.error_from(&resp);
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

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let pods = self.list_pods().await?;
        Ok(pods
            .into_iter()
            .filter_map(|p| observe(&self.name, p))
            .collect())
    }
}
