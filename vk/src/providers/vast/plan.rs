//! What to rent for one workload: the offer search, the rent request and the price bounds,
//! resolved from the workload, its pod options and the configuration.

use super::Vast;
use super::wire::{CreateInstanceRequest, Filter, OfferSearch};
use crate::provider::{ProviderError, Workload};
use crate::providers::options::{Options, shell_join};
use crate::providers::rest;

/// What to rent for one workload, resolved from the workload and the configuration.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) search: OfferSearch,
    pub(super) request: CreateInstanceRequest,
    /// `Some` for an interruptible rent: the explicit bid, if the pod gave one.
    pub(super) bid: Option<Option<f64>>,
    pub(super) max_price: Option<f64>,
}

impl Vast {
    /// Resolves the search and the rent request; pure, checked before any network call.
    pub(super) fn plan(&self, w: &Workload) -> Result<Plan, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        let gpu = w.gpu.as_ref().filter(|g| g.count > 0).ok_or_else(|| {
            invalid("Vast runs GPU workloads only: the pod requests no GPU".to_owned())
        })?;
        if gpu.count > self.cfg.max_gpus_per_workload {
            return Err(invalid(format!(
                "the pod requests {} GPUs, more than the {} allowed on {}",
                gpu.count, self.cfg.max_gpus_per_workload, self.name
            )));
        }
        let gpu_name = gpu
            .gpu_type
            .as_ref()
            .or(self.cfg.default_gpu_type.as_ref())
            .map(|t| {
                self.cfg
                    .gpu_names
                    .get(t)
                    .cloned()
                    .unwrap_or_else(|| t.clone())
            });
        let options = Options::of(w);
        let interruptible = options
            .bool("interruptible")?
            .unwrap_or(self.cfg.interruptible);
        // The operator's maxPricePerHour is a ceiling: a pod may lower it, never raise it.
        let bid_price = options.positive_at_most("bid_price", self.cfg.max_price_per_hour)?;
        let max_price = options
            .positive_at_most("max_price_per_hour", self.cfg.max_price_per_hour)?
            .or(self.cfg.max_price_per_hour);
        if let (Some(bid), Some(max)) = (bid_price, max_price)
            && interruptible
            && bid > max
        {
            return Err(invalid(format!(
                "bid_price {bid} is above the maximum of {max} $/h"
            )));
        }
        let disk = options
            .positive_at_most("disk_gb", self.cfg.max_disk_gb.map(f64::from))?
            .unwrap_or(self.cfg.disk_gb);
        let geolocation = options
            .list(&["region", "geolocation"])
            .map(|v| {
                v.into_iter()
                    .map(|s| s.to_ascii_uppercase())
                    .collect::<Vec<_>>()
            })
            .filter(|v| !v.is_empty());

        let search = OfferSearch {
            verified: self.cfg.verified_only.then_some(Filter::eq(true)),
            rentable: Filter::eq(true),
            rented: Filter::eq(false),
            gpu_name: gpu_name.map(|n| Filter::one_of(vec![n])),
            num_gpus: Filter::eq(gpu.count),
            dph_total: max_price.map(Filter::lte),
            disk_space: Filter::gte(disk),
            geolocation: geolocation.map(Filter::one_of),
            kind: if interruptible { "bid" } else { "ondemand" },
            order: vec![["dph_total".to_owned(), "asc".to_owned()]],
            limit: self.cfg.search_limit,
            allocated_storage: disk,
        };

        let mut env = rest::env_map(&w.env);
        for port in &w.ports {
            env.insert(format!("-p {port}:{port}"), "1".to_owned());
        }
        let words = w.command.iter().chain(&w.args).map(String::as_str);
        let request = CreateInstanceRequest {
            image: w.image.clone(),
            label: w.id.as_str().to_owned(),
            disk,
            runtype: "args",
            target_state: "running",
            args_str: (!w.command.is_empty() || !w.args.is_empty()).then(|| shell_join(words)),
            env,
            price: None,
        };
        Ok(Plan {
            search,
            request,
            bid: interruptible.then_some(bid_price),
            max_price,
        })
    }
}
