//! Dispatch as a pure function over a snapshot of provider offers, health and refusals.

use std::time::Duration;

use super::*;
use crate::provider::{GpuRequest, Quote};

fn offer(name: &str, types: &[&str], max: u32) -> Offer {
    Offer {
        name: name.into(),
        capabilities: Capabilities {
            gpu_types: types.iter().map(|s| s.to_string()).collect(),
            max_gpus_per_workload: max,
            ..Default::default()
        },
        secret_env: SecretEnv::Allow,
        pull_secrets: SecretEnv::Allow,
    }
}

fn providers() -> Vec<Offer> {
    vec![
        offer("runpod", &["A100-80GB", "H100", "RTX4090"], 8),
        offer("vast", &["RTX4090", "H100"], 4),
        offer("slurm", &[], 2),
    ]
}

fn req(t: Option<&str>, n: u32, pin: Option<&str>) -> Request {
    Request {
        pinned_provider: pin.map(str::to_owned),
        gpu: Some(GpuRequest {
            gpu_type: t.map(str::to_owned),
            count: n,
        }),
        gpu_types: Vec::new(),
        policy: None,
        cpu_millis: None,
        memory_bytes: None,
        options: Default::default(),
        steps_only: None,
        udp_ports: Vec::new(),
    }
}

fn set(types: &[&str], n: u32) -> Request {
    Request {
        gpu_types: types.iter().map(|s| s.to_string()).collect(),
        ..req(types.first().copied(), n, None)
    }
}

fn quote(t: &str, dollars: f64, free: Option<u32>) -> Quote {
    Quote {
        gpu_type: Some(t.into()),
        price_per_gpu: Price::from_dollars(dollars).unwrap(),
        available_gpus: free,
        max_per_workload: None,
    }
}

fn inv(quotes: Vec<Quote>) -> Inventory {
    Inventory { quotes }
}

fn order(plan: &Plan) -> Vec<(usize, Option<&str>)> {
    plan.candidates
        .iter()
        .map(|c| (c.provider, c.gpu_type.as_deref()))
        .collect()
}

fn pref(ps: &[Offer], r: &Request, assigned: Option<&str>) -> Result<Vec<usize>, Error> {
    candidates(ps, &[], r, assigned, DispatchPolicy::Preference)
        .map(|p| p.candidates.iter().map(|c| c.provider).collect())
}

#[test]
fn filters_by_type_and_count_in_config_order() {
    let ps = providers();
    assert_eq!(
        pref(&ps, &req(Some("h100"), 1, None), None).unwrap(),
        vec![0, 1, 2]
    );
    assert_eq!(
        pref(&ps, &req(Some("RTX4090"), 4, None), None).unwrap(),
        vec![0, 1]
    );
    assert_eq!(
        pref(&ps, &req(Some("A100-80GB"), 1, None), None).unwrap(),
        vec![0, 2]
    );
    assert_eq!(pref(&ps, &req(None, 1, None), None).unwrap(), vec![0, 1, 2]);
    assert!(matches!(
        pref(&ps, &req(Some("RTX4090"), 9, None), None),
        Err(Error::NoMatch(_))
    ));
}

#[test]
fn assigned_first_and_pins_exclusive() {
    let ps = providers();
    assert_eq!(
        pref(&ps, &req(None, 1, None), Some("slurm")).unwrap(),
        vec![2, 0, 1]
    );
    assert_eq!(
        pref(&ps, &req(None, 1, Some("vast")), Some("runpod")).unwrap(),
        vec![1]
    );
    assert_eq!(
        pref(&ps, &req(None, 1, Some("nope")), None),
        Err(Error::UnknownProvider("nope".into()))
    );
}

#[test]
fn cpu_only_pods_skip_gpu_only_providers() {
    let mut ps = providers();
    ps[0].capabilities.gpu_only = true;
    let cpu = |pin: Option<&str>| Request {
        gpu: None,
        ..req(None, 1, pin)
    };
    assert_eq!(pref(&ps, &cpu(None), None).unwrap(), vec![1, 2]);
    assert_eq!(pref(&ps, &cpu(None), Some("runpod")).unwrap(), vec![1, 2]);
    assert!(matches!(
        pref(&ps, &cpu(Some("runpod")), None),
        Err(Error::NoMatch(m)) if m.contains("CPU-only")
    ));
}

#[test]
fn cheapest_orders_by_price_for_the_count_with_unpriced_last() {
    let ps = providers();
    let rp = inv(vec![quote("RTX4090", 0.69, None)]);
    let vast = inv(vec![quote("RTX4090", 0.41, Some(10))]);
    let st = [
        Standing {
            inventory: Some(&rp),
            ..Default::default()
        },
        Standing {
            inventory: Some(&vast),
            ..Default::default()
        },
        Standing::default(),
    ];
    let r = req(Some("RTX4090"), 2, None);
    let plan = candidates(&ps, &st, &r, None, DispatchPolicy::Cheapest).unwrap();
    assert_eq!(
        order(&plan),
        vec![
            (1, Some("RTX4090")),
            (0, Some("RTX4090")),
            (2, Some("RTX4090"))
        ]
    );
    assert_eq!(
        plan.candidates[0].price,
        Price::from_dollars(0.82),
        "2 x 0.41"
    );
    assert_eq!(plan.candidates[2].price, None);
    // Preference ignores prices; the recorded provider still comes first under cheapest.
    let plan = candidates(&ps, &st, &r, None, DispatchPolicy::Preference).unwrap();
    assert_eq!(plan.candidates[0].provider, 0);
    let plan = candidates(&ps, &st, &r, Some("slurm"), DispatchPolicy::Cheapest).unwrap();
    assert_eq!(plan.candidates[0].provider, 2);
}

#[test]
fn a_gpu_type_set_takes_the_cheapest_type_that_fits_anywhere() {
    let ps = providers();
    let rp = inv(vec![
        quote("H100", 2.99, None),
        quote("A100-80GB", 1.64, None),
    ]);
    let vast = inv(vec![quote("H100", 2.10, Some(1))]);
    let st = [
        Standing {
            inventory: Some(&rp),
            ..Default::default()
        },
        Standing {
            inventory: Some(&vast),
            ..Default::default()
        },
        Standing::default(),
    ];
    let plan = candidates(
        &ps,
        &st,
        &set(&["H100", "A100-80GB"], 1),
        None,
        DispatchPolicy::Cheapest,
    )
    .unwrap();
    assert_eq!(
        order(&plan),
        vec![
            (0, Some("A100-80GB")),
            (1, Some("H100")),
            (0, Some("H100")),
            (2, Some("H100")),
            (2, Some("A100-80GB")),
        ]
    );
    // Vast shows one H100 free: a pod asking two tries it last (the inventory may be an
    // interval old; Vast's own answer decides), though it is the cheapest.
    let plan = candidates(&ps, &st, &set(&["H100"], 2), None, DispatchPolicy::Cheapest).unwrap();
    assert_eq!(
        order(&plan),
        vec![(0, Some("H100")), (2, Some("H100")), (1, Some("H100"))]
    );
    assert!(plan.passed_over.is_empty());
}

#[test]
fn an_open_breaker_and_a_recent_refusal_pass_a_provider_over_with_a_reason_and_a_retry_time() {
    let ps = providers();
    let st = [
        Standing {
            health: Health::Unhealthy {
                reason: "5 consecutive failed calls".into(),
                retry_in: Duration::from_secs(20),
            },
            ..Default::default()
        },
        Standing {
            refused: vec![(Some("rtx4090".into()), Duration::from_secs(7))],
            ..Default::default()
        },
        Standing::default(),
    ];
    let r = req(Some("RTX4090"), 1, None);
    let plan = candidates(&ps, &st, &r, None, DispatchPolicy::Preference).unwrap();
    assert_eq!(order(&plan), vec![(2, Some("RTX4090"))]);
    assert_eq!(plan.retry_in(), Some(Duration::from_secs(7)));
    let text = plan.describe_passed_over(&|i| ps[i].name.clone());
    assert!(
        text.contains("runpod: unhealthy")
            && text.contains("vast: said it had no capacity for RTX4090"),
        "{text}"
    );
    assert!(!plan.only_capacity());
    // A probing (half-open) provider takes pods again.
    let st = [Standing {
        health: Health::Probing { reason: "x".into() },
        ..Default::default()
    }];
    let plan = candidates(&ps, &st, &r, None, DispatchPolicy::Preference).unwrap();
    assert_eq!(plan.candidates[0].provider, 0);
    // Pinned to an unhealthy provider: nothing to try, and the plan says why.
    let st = [Standing {
        health: Health::Unhealthy {
            reason: "down".into(),
            retry_in: Duration::from_secs(3),
        },
        ..Default::default()
    }];
    let plan = candidates(
        &ps,
        &st,
        &req(None, 1, Some("runpod")),
        None,
        DispatchPolicy::Preference,
    )
    .unwrap();
    assert!(plan.candidates.is_empty());
    assert_eq!(plan.retry_in(), Some(Duration::from_secs(3)));
}

#[test]
fn a_price_above_the_pods_maximum_is_passed_over() {
    let ps = providers();
    let rp = inv(vec![quote("H100", 2.99, None)]);
    let st = [Standing {
        inventory: Some(&rp),
        ..Default::default()
    }];
    let mut r = req(Some("H100"), 1, None);
    r.options.insert("max_price_per_hour".into(), "2.5".into());
    let plan = candidates(&ps, &st, &r, None, DispatchPolicy::Cheapest).unwrap();
    assert_eq!(order(&plan), vec![(1, Some("H100")), (2, Some("H100"))]);
    assert!(matches!(plan.passed_over[0].why, Skip::OverPrice { .. }));
}

#[test]
fn the_cost_per_pod_does_not_grow_with_the_number_of_pods() {
    // The snapshot is all dispatch reads: nothing in it is per pod. A large inventory and many
    // providers still answer the same plan for the same inputs.
    let ps: Vec<Offer> = (0..8).map(|i| offer(&format!("p{i}"), &[], 8)).collect();
    let invs: Vec<Inventory> = (0..8)
        .map(|i| inv(vec![quote("H100", 3.0 - f64::from(i) * 0.1, None)]))
        .collect();
    let st: Vec<Standing<'_>> = invs
        .iter()
        .map(|i| Standing {
            inventory: Some(i),
            ..Default::default()
        })
        .collect();
    let plan = candidates(
        &ps,
        &st,
        &req(Some("H100"), 1, None),
        None,
        DispatchPolicy::Cheapest,
    )
    .unwrap();
    let got: Vec<usize> = plan.candidates.iter().map(|c| c.provider).collect();
    assert_eq!(got, vec![7, 6, 5, 4, 3, 2, 1, 0]);
}
