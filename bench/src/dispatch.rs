//! The cost of choosing a provider for one pod: `vk::pods::dispatch::candidates` over a
//! snapshot of P providers (each with an inventory of several GPU types, one breaker open, one
//! recent capacity refusal), for a pod accepting two GPU types under the `cheapest` policy.
//! Nothing in its input grows with the number of pods, so the figure is per pod whatever the
//! node holds; it grows with the providers (and the types a pod accepts).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use vk::config::{DispatchPolicy, SecretEnv};
use vk::pods::dispatch::{Offer, Standing, candidates};
use vk::pods::spec::Request;
use vk::provider::health::Health;
use vk::provider::{Capabilities, GpuRequest, Inventory, Price, Quote};

/// One measurement: providers, and nanoseconds per dispatch decision.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchCost {
    pub providers: usize,
    pub ns_per_pod: f64,
    pub iterations: u32,
}

const TYPES: [&str; 4] = ["H100", "A100-80GB", "L40S", "RTX4090"];

fn request() -> Request {
    Request {
        pinned_provider: None,
        gpu: Some(GpuRequest {
            gpu_type: Some("H100".into()),
            count: 1,
        }),
        gpu_types: vec!["H100".into(), "A100-80GB".into()],
        policy: Some(DispatchPolicy::Cheapest),
        cpu_millis: None,
        memory_bytes: None,
        options: BTreeMap::new(),
        steps_only: None,
        udp_ports: Vec::new(),
    }
}

/// Measures P = 2, 8, 32 and 128 providers.
pub fn measure() -> Vec<DispatchCost> {
    [2usize, 8, 32, 128].into_iter().map(measure_one).collect()
}

fn measure_one(p: usize) -> DispatchCost {
    let (offers, inventories) = snapshot(p);
    let standing = standings(&inventories);
    let req = request();
    let iterations: u32 = (200_000 / p as u32).max(500);
    let mut chosen = 0usize;
    let start = Instant::now();
    for _ in 0..iterations {
        let plan = candidates(&offers, &standing, &req, None, DispatchPolicy::Cheapest)
            .unwrap_or_default();
        chosen = chosen.wrapping_add(plan.candidates.first().map_or(0, |c| c.provider));
    }
    let elapsed = start.elapsed();
    std::hint::black_box(chosen);
    DispatchCost {
        providers: p,
        ns_per_pod: elapsed.as_nanos() as f64 / f64::from(iterations),
        iterations,
    }
}

fn snapshot(p: usize) -> (Vec<Offer>, Vec<Inventory>) {
    let offers: Vec<Offer> = (0..p)
        .map(|i| Offer {
            name: format!("p{i}"),
            capabilities: Capabilities {
                gpu_types: TYPES.iter().map(|t| (*t).to_owned()).collect(),
                max_gpus_per_workload: 8,
                ..Capabilities::default()
            },
            secret_env: SecretEnv::Allow,
            pull_secrets: SecretEnv::Allow,
        })
        .collect();
    let inventories: Vec<Inventory> = (0..p)
        .map(|i| Inventory {
            quotes: TYPES
                .iter()
                .enumerate()
                .map(|(k, t)| Quote {
                    gpu_type: Some((*t).to_owned()),
                    price_per_gpu: Price(((i * 7 + k * 13) % 50 + 10) as u64 * 100_000),
                    available_gpus: Some(16),
                    max_per_workload: Some(8),
                })
                .collect(),
        })
        .collect();
    (offers, inventories)
}

/// Provider 0's breaker is open; provider 1 refused H100 moments ago.
fn standings(inventories: &[Inventory]) -> Vec<Standing<'_>> {
    inventories
        .iter()
        .enumerate()
        .map(|(i, inv)| Standing {
            health: if i == 0 {
                Health::Unhealthy {
                    reason: "down".into(),
                    retry_in: Duration::from_secs(10),
                }
            } else {
                Health::Healthy
            },
            inventory: Some(inv),
            refused: if i == 1 {
                vec![(Some("h100".into()), Duration::from_secs(5))]
            } else {
                Vec::new()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_decision_is_a_real_one() {
        // The benchmark's snapshot must exercise the skips and the price order it claims to.
        let (offers, inventories) = snapshot(8);
        let standing = standings(&inventories);
        let plan = candidates(
            &offers,
            &standing,
            &request(),
            None,
            DispatchPolicy::Cheapest,
        )
        .unwrap();
        assert!(
            plan.candidates.iter().all(|c| c.provider != 0),
            "open breaker skipped"
        );
        assert!(
            !plan
                .candidates
                .iter()
                .any(|c| c.provider == 1 && c.gpu_type.as_deref() == Some("H100")),
            "recent refusal skipped"
        );
        let prices: Vec<Price> = plan.candidates.iter().filter_map(|c| c.price).collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
        assert_eq!(plan.candidates.len(), 7 * 2 - 1);
    }
}
