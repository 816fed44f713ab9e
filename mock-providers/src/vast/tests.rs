//! Tests of the Vast emulator: offer search against a generic matcher, instances, lists, bids, logs.

#![allow(clippy::unwrap_used)]

use super::book::LabelCounts;
use super::create::create_inner;
use super::offers::find_offers;
use super::*;
use crate::config::GpuStock;
use axum::http::StatusCode;
use axum::response::Response;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

const NOW: f64 = 1_750_000_000.5;

/// The search done the obvious way: render every offer, keep what the generic matcher
/// accepts, stable-sort, truncate.
fn generic_search(
    engine: &Engine,
    filters: &Map<String, Value>,
    bid: bool,
    orders: &[(String, bool)],
    limit: usize,
) -> Result<Vec<Map<String, Value>>, String> {
    let all = find_offers(engine, &Map::new(), bid, &[], usize::MAX, NOW)?;
    let mut kept = Vec::new();
    for o in all {
        if query::record_matches(&o, filters, true)? {
            kept.push(o);
        }
    }
    kept.sort_by(|a, b| {
        for (field, desc) in orders {
            let x = a.get(field).and_then(Value::as_f64);
            let y = b.get(field).and_then(Value::as_f64);
            if let (Some(x), Some(y)) = (x, y) {
                let ord = x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal);
                let ord = if *desc { ord.reverse() } else { ord };
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
        }
        std::cmp::Ordering::Equal
    });
    kept.truncate(limit);
    Ok(kept)
}

fn engine(stock: &[(u32, f64)], rents: &[(u8, u8)]) -> Arc<Engine> {
    let names = ["RTX4090", "A100-80GB", "H100"];
    let stock = stock
        .iter()
        .zip(names)
        .map(|((count, price), name)| GpuStock::new(name, *count, *price))
        .collect();
    let engine = State::new(
        EmulatorConfig::new("k", stock).with_mode(crate::ExecutionMode::simulated(0, 0, None)),
    )
    .engine;
    // Rent a few offers so machines have different free GPUs and epochs.
    for (pick, size) in rents {
        let size = OFFER_SIZES[usize::from(*size) % OFFER_SIZES.len()];
        let filters = json!({"num_gpus": {"eq": size}});
        let Value::Object(filters) = filters else {
            unreachable!()
        };
        let offers =
            find_offers(&engine, &filters, false, &[], usize::MAX, NOW).unwrap_or_default();
        if offers.is_empty() {
            continue;
        }
        let id = &offers[usize::from(*pick) % offers.len()]["id"];
        let resp = create_inner(&engine, &id.to_string(), br#"{"image": "img"}"#);
        assert_eq!(resp.status(), StatusCode::OK);
    }
    engine
}

fn field() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "num_gpus",
        "gpu_name",
        "dph_total",
        "min_bid",
        "verified",
        "rentable",
        "rented",
        "disk_space",
        "geolocation",
        "cpu_ram",
        "search",
        "id",
        "bundle_id",
        "machine_id",
        "gpu_frac",
        "no_such_field",
    ])
    .prop_map(str::to_owned)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![0.0, 0.5, 1.0, 1.38, 2.0, 4.0, 8.0, 20.0, 500.0])
            .prop_map(|x| json!(x)),
        (0u64..12).prop_map(|i| json!(20_000_000 + i)),
        (0u64..6).prop_map(|i| json!(10_000 + i)),
        (0u64..3).prop_map(|i| json!(20_000 + i)),
        prop::sample::select(vec!["RTX 4090", "a100_80gb", "H100", "Emulator, EM", "x"])
            .prop_map(|s| json!(s)),
        any::<bool>().prop_map(|b| json!(b)),
        Just(Value::Null),
    ]
}

fn condition() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec![
        "eq", "neq", "gt", "gte", "lt", "lte", "in", "notin", "bogus",
    ]);
    let one = (op, scalar(), prop::collection::vec(scalar(), 0..3)).prop_map(|(op, v, list)| {
        if op == "in" || op == "notin" {
            json!({ op: list })
        } else {
            json!({ op: v })
        }
    });
    prop_oneof![
        4 => prop::collection::vec(one, 1..3).prop_map(|ops| {
            let mut m = Map::new();
            for o in ops {
                if let Value::Object(o) = o {
                    m.extend(o);
                }
            }
            Value::Object(m)
        }),
        1 => scalar(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The grouped search returns exactly what rendering every offer would.
    #[test]
    fn search_equals_the_generic_search(
        stock in prop::collection::vec(
            (1u32..30, prop::sample::select(vec![0.5, 0.69, 1.89])),
            1..4,
        ),
        rents in prop::collection::vec((any::<u8>(), any::<u8>()), 0..6),
        filters in prop::collection::btree_map(field(), condition(), 0..4),
        orders in prop::collection::vec((field(), any::<bool>()), 0..3),
        bid in any::<bool>(),
        limit in 1usize..40,
    ) {
        let engine = engine(&stock, &rents);
        let filters: Map<String, Value> = filters.into_iter().collect();
        let fast = find_offers(&engine, &filters, bid, &orders, limit, NOW);
        let slow = generic_search(&engine, &filters, bid, &orders, limit);
        prop_assert_eq!(fast, slow);
    }
}

proptest! {
    /// Label counts kept up to date between lists equal counts taken from scratch.
    #[test]
    fn label_counts_follow_the_instances(
        lists in prop::collection::vec(
            prop::collection::btree_map(
                0u64..40,
                prop::sample::select(vec!["", "a", "b", "ns/c", "é\"d"]),
                0..30,
            ),
            1..8,
        ),
    ) {
        let mut counts = LabelCounts::default();
        for list in lists {
            let current: Vec<(u64, &str)> = list.into_iter().collect();
            let mut scratch: BTreeMap<&str, u64> = BTreeMap::new();
            for (_, name) in &current {
                *scratch.entry(name).or_default() += 1;
            }
            let want = serde_json::to_string(&scratch).unwrap();
            prop_assert_eq!(counts.sync(&current).into_owned(), want.clone());
            // Asked again, unchanged.
            prop_assert_eq!(counts.sync(&current).into_owned(), want);
        }
    }
}

#[test]
fn offers_keep_their_ids_between_searches() {
    let engine = engine(&[(12, 0.69), (8, 1.89)], &[]);
    let ids = |engine: &Engine| -> Vec<Value> {
        find_offers(engine, &Map::new(), false, &[], usize::MAX, NOW)
            .unwrap()
            .into_iter()
            .map(|o| o["id"].clone())
            .collect()
    };
    let first = ids(&engine);
    assert_eq!(first.len(), 4 + 3 + 4);
    assert_eq!(first[0], json!(20_000_001));
    assert_eq!(ids(&engine), first);
}

#[tokio::test]
async fn rents_over_the_documented_input_limits_are_refused_naming_the_limit() {
    let engine = engine(&[(2, 0.5)], &[]);
    let body = |v: Value| create_inner(&engine, "1", v.to_string().as_bytes());
    let read = |r: Response| async move {
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (status, serde_json::from_slice::<Value>(&bytes).unwrap())
    };
    let (status, v) = read(body(
        json!({"image": "img", "env": {"PROMPT": "x".repeat(300)}}),
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "invalid_args");
    assert!(v["msg"].as_str().unwrap().contains("256"), "{v}");
    let (status, v) = read(body(json!({"image": "img", "runtype": "args",
        "onstart": "bash", "args": ["a".repeat(4093)]})))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(v["msg"].as_str().unwrap().contains("4096"), "{v}");
    let (status, v) = read(body(json!({"image": "img", "disk": 4}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(v["msg"].as_str().unwrap().contains("8 GB"), "{v}");
}
