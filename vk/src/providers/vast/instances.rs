//! The instance listing: `GET /api/v1/instances/`, following its keyset pagination.

use reqwest::Method;
use tracing::warn;

use super::pace::Endpoint;
use super::wire::{Instance, InstancePage};
use super::{MAX_PAGES, PAGE_SIZE, Vast};
use crate::provider::ProviderError;

impl Vast {
    /// Instances whose label matches `select_filters`, following pagination.
    pub(super) async fn instances(
        &self,
        filters: Option<&serde_json::Value>,
    ) -> Result<Vec<Instance>, ProviderError> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut url = self.api.url(&["api", "v1", "instances"], true);
            {
                let mut q = url.query_pairs_mut();
                q.append_pair("limit", &PAGE_SIZE.to_string());
                if let Some(f) = filters {
                    q.append_pair("select_filters", &f.to_string());
                }
                if let Some(token) = &after {
                    q.append_pair("after_token", token);
                }
            }
            let resp = self.call(Endpoint::List, Method::GET, url, None).await?;
            if !resp.is_success() {
                return Err(self.error_from(&resp));
            }
            let page: InstancePage = resp.json("instance list")?;
            if page.success == Some(false) {
                return Err(self.error_from(&resp));
            }
            for item in page.instances {
                match serde_json::from_value::<Instance>(item) {
                    Ok(i) => out.push(i),
                    Err(e) => {
                        warn!(provider = %self.name, error = %e, "skipping an instance entry that is not an object")
                    }
                }
            }
            match page.next_token.filter(|t| !t.is_empty()) {
                Some(token) if Some(&token) != after.as_ref() => after = Some(token),
                _ => return Ok(out),
            }
        }
        // A partial list must never pass for a complete one: the framework would take the
        // missing workloads for lost ones (or create them again).
        warn!(provider = %self.name, "instance list exceeded {MAX_PAGES} pages");
        Err(ProviderError::transient(format!(
            "instance list exceeded {MAX_PAGES} pages of {PAGE_SIZE}; refusing a partial list"
        )))
    }
}
