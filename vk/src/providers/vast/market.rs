//! Vast's offer market as an [`Inventory`]: one on-demand search over every GPU type, folded
//! into the cheapest price per GPU, the GPUs on offer and the largest machine, per type.

use std::collections::BTreeMap;

use super::MAX_SEARCH_LIMIT;
use super::config::VastConfig;
use super::wire::{Filter, Offer, OfferSearch};
use crate::provider::{Inventory, Price, Quote};

/// The search: rentable on-demand offers of any GPU type on machines at least as reliable as
/// `min_reliability` (the floor rents use, so prices are of offers that may be rented),
/// cheapest first.
pub(super) fn search(min_reliability: f64) -> OfferSearch {
    OfferSearch {
        verified: None,
        rentable: Filter::eq(true),
        rented: Filter::eq(false),
        external: Filter::eq(false),
        gpu_name: None,
        gpu_ram: None,
        num_gpus: Filter::gte(1),
        dph_total: None,
        disk_space: Filter::gte(0.0),
        cuda_max_good: None,
        geolocation: None,
        reliability: (min_reliability > 0.0).then_some(Filter::gte(min_reliability)),
        direct_port_count: None,
        kind: "ondemand",
        order: vec![["dph_total".to_owned(), "asc".to_owned()]],
        limit: MAX_SEARCH_LIMIT,
        allocated_storage: 0.0,
    }
}

/// Per exact Vast name: cheapest $/GPU-hour, GPUs offered, largest offer. Types are named as
/// pods name them (the neutral name `gpuNames` maps to the Vast name, else the built-in
/// table's unsized type for it, else the Vast name).
pub(super) fn inventory(cfg: &VastConfig, offers: &[Offer]) -> Inventory {
    let mut by_name: BTreeMap<&str, (Price, u32, u32)> = BTreeMap::new();
    for o in offers {
        let (Some(name), Some(n), Some(dph)) = (o.gpu_name.as_deref(), o.num_gpus, o.dph_total)
        else {
            continue;
        };
        let Some(per_gpu) = (n > 0)
            .then(|| Price::from_dollars(dph / f64::from(n)))
            .flatten()
        else {
            continue;
        };
        let e = by_name.entry(name).or_insert((per_gpu, 0, 0));
        e.0 = e.0.min(per_gpu);
        e.1 = e.1.saturating_add(n);
        e.2 = e.2.max(n);
    }
    let quotes = by_name
        .into_iter()
        .map(|(name, (price, free, largest))| Quote {
            gpu_type: Some(
                cfg.gpu_names
                    .iter()
                    .find(|(_, v)| v.as_str() == name)
                    .map(|(k, _)| k.clone())
                    .or_else(|| super::gpus::built_in_neutral(name).map(str::to_owned))
                    .unwrap_or_else(|| name.to_owned()),
            ),
            price_per_gpu: price,
            available_gpus: Some(free),
            max_per_workload: Some(largest),
        })
        .collect();
    Inventory { quotes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn offers_fold_into_the_cheapest_price_per_gpu_and_the_gpus_on_offer() {
        let cfg: VastConfig =
            serde_json::from_value(json!({"gpuNames": {"RTX4090": "RTX 4090"}})).unwrap();
        let offers: Vec<Offer> = serde_json::from_value(json!([
            {"id": 1, "gpu_name": "RTX 4090", "num_gpus": 2, "dph_total": 0.82},
            {"id": 2, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.45},
            {"id": 3, "gpu_name": "A100 SXM4", "num_gpus": 8, "dph_total": 8.0},
            {"id": 4, "gpu_name": "A100 SXM4", "num_gpus": 0, "dph_total": 1.0},
            {"id": 5, "num_gpus": 1, "dph_total": 0.1},
        ]))
        .unwrap();
        let inv = inventory(&cfg, &offers);
        let rtx = inv.quote(Some("RTX4090")).unwrap();
        assert_eq!(rtx.price_per_gpu, Price(410_000), "0.82 $/h for 2 GPUs");
        assert_eq!(rtx.available_gpus, Some(3));
        assert_eq!(rtx.max_per_workload, Some(2));
        // Unmapped in gpuNames: named by the built-in table's unsized type.
        let a100 = inv.quote(Some("A100")).unwrap();
        assert_eq!(
            (a100.price_per_gpu, a100.available_gpus),
            (Price(1_000_000), Some(8))
        );
        assert_eq!(inv.quotes.len(), 2);
        assert_eq!(inv.available_gpus(), Some(11));
    }
}
