//! RunPod's GPU catalogue (`GET /v2/catalog/gpus`) as an [`Inventory`]: list price per GPU of
//! the configured cloud, the largest count per pod, and "none free" where availability says so.

use super::config::{Cloud, RunPodConfig};
use super::wire::{GpuCatalog, GpuType};
use crate::provider::{Inventory, Price, Quote};

/// Quotes for every catalogue entry offered on the configured cloud. Types are named as pods
/// name them: the neutral name that `gpuIds` maps to the entry's id, else the id itself
/// (unmapped types are passed to RunPod verbatim, so pods may name them so).
pub(super) fn inventory(cfg: &RunPodConfig, catalog: GpuCatalog) -> Inventory {
    let quotes = catalog
        .gpus
        .into_iter()
        .filter_map(|v| serde_json::from_value::<GpuType>(v).ok())
        .filter_map(|g| quote(cfg, g))
        .collect();
    Inventory { quotes }
}

fn quote(cfg: &RunPodConfig, g: GpuType) -> Option<Quote> {
    let id = g.id.filter(|s| !s.is_empty())?;
    let (offered, price, max) = match cfg.cloud {
        Cloud::Secure => (
            g.secure,
            g.price.and_then(|p| p.secure),
            g.max_count.and_then(|m| m.secure),
        ),
        Cloud::Community => (
            g.community,
            g.price.and_then(|p| p.community),
            g.max_count.and_then(|m| m.community),
        ),
    };
    if offered == Some(false) {
        return None;
    }
    let neutral = cfg
        .gpu_ids
        .iter()
        .find(|(_, v)| **v == id)
        .map_or(id, |(k, _)| k.clone());
    Some(Quote {
        gpu_type: Some(neutral),
        price_per_gpu: price.and_then(Price::from_dollars)?,
        // `AvailabilityLevel` NONE: nothing of this configuration is free anywhere; the other
        // levels give no count.
        available_gpus: (g.availability.as_deref() == Some("NONE")).then_some(0),
        max_per_workload: max.filter(|m| *m > 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(cloud: Cloud) -> RunPodConfig {
        let mut c: RunPodConfig = serde_json::from_value(json!({
            "gpuIds": {"RTX4090": "NVIDIA GeForce RTX 4090"}
        }))
        .unwrap();
        c.cloud = cloud;
        c
    }

    fn catalog() -> GpuCatalog {
        // The spec's own example entry, and one sold out on the community cloud only.
        serde_json::from_value(json!({"gpus": [
            {"id": "NVIDIA GeForce RTX 4090", "name": "RTX 4090", "pool": "ADA_24",
             "manufacturer": "NVIDIA", "memory": 24, "secure": true, "community": true,
             "price": {"secure": 0.44, "community": 0.31, "serverless": 1.1},
             "maxCount": {"secure": 8, "community": 4}, "availability": "HIGH",
             "dataCenters": [{"id": "US-KS-2", "name": "US Kansas 2", "availability": "HIGH"}]},
            {"id": "NVIDIA H100 80GB HBM3", "secure": true, "community": false,
             "price": {"secure": 2.69, "community": 0.0}, "maxCount": {"secure": 8, "community": 0},
             "availability": "NONE"},
            "not an object",
        ]}))
        .unwrap()
    }

    #[test]
    fn prices_follow_the_configured_cloud_and_types_are_named_as_pods_name_them() {
        let inv = inventory(&cfg(Cloud::Secure), catalog());
        let rtx = inv.quote(Some("rtx4090")).unwrap();
        assert_eq!(rtx.price_per_gpu, Price(440_000));
        assert_eq!(rtx.max_per_workload, Some(8));
        assert_eq!(rtx.available_gpus, None);
        let h100 = inv.quote(Some("NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!(
            h100.available_gpus,
            Some(0),
            "availability NONE is nothing free"
        );

        let community = inventory(&cfg(Cloud::Community), catalog());
        assert_eq!(
            community.quote(Some("RTX4090")).unwrap().price_per_gpu,
            Price(310_000)
        );
        assert!(
            community.quote(Some("NVIDIA H100 80GB HBM3")).is_none(),
            "not offered on the community cloud"
        );
    }
}
