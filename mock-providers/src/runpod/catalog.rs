//! `GET /v2/catalog/gpus`: the GPU catalogue with list prices and, on request, availability,
//! as runpod/docs `api-reference-v2/openapi.json` describes it (`ListGpuTypesResponse`).
//!
//! - The answer is `{"gpus": [GpuType]}`, no pagination.
//! - `price.secure` / `price.community`: "List price in USD per hour for a single GPU of this
//!   type"; the emulator's configured price is the secure one, community is 30% lower (the
//!   spec's own example: 0.44 secure, 0.31 community).
//! - `maxCount` is "a ceiling, not a stock level": the largest machine of the type.
//! - `include=AVAILABILITY` adds `availability` (`NONE | LOW | MEDIUM | HIGH`) and
//!   `dataCenters`; `product` is "required with include=AVAILABILITY, and valid only with it
//!   (400 either way)"; `count` and `cloud` are valid only with it too.
//! - Calls count against the account's rate limit like any other.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{State, admitted, denied, json_response, problem};
use crate::engine::gate::{RouteKind, bearer};
use crate::inventory::gpu_memory_mb;

/// Availability level from free GPUs against the asked count and the total.
fn level(free: u32, count: u32, total: u32) -> &'static str {
    if free < count.max(1) {
        "NONE"
    } else if free * 4 < total {
        "LOW"
    } else if free * 2 < total {
        "MEDIUM"
    } else {
        "HIGH"
    }
}

pub(super) async fn list_gpu_types(
    AxState(s): AxState<State>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    // The catalogue is a read like a list: it takes from the same rate limit.
    let admission = match s.engine.gate(RouteKind::Search, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let availability = match q.get("include").map(String::as_str) {
        None => false,
        Some("AVAILABILITY") => true,
        Some(other) => {
            return problem(
                StatusCode::BAD_REQUEST,
                format!("invalid include {other:?}: supported value today: AVAILABILITY"),
                Vec::new(),
            );
        }
    };
    let only_with = ["product", "count", "cloud", "countryCodes"];
    if !availability && let Some(k) = only_with.iter().find(|k| q.contains_key(**k)) {
        return problem(
            StatusCode::BAD_REQUEST,
            format!("{k} is valid only with include=AVAILABILITY"),
            Vec::new(),
        );
    }
    if availability {
        match q.get("product").map(String::as_str) {
            Some("POD" | "CLUSTER" | "SERVERLESS") => {}
            _ => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    "product is required with include=AVAILABILITY (POD, CLUSTER or SERVERLESS)",
                    Vec::new(),
                );
            }
        }
    }
    let count = match q.get("count").map(|c| c.parse::<u32>()) {
        None => 1,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "count must be an integer of at least 1",
                Vec::new(),
            );
        }
    };
    let gpus: Vec<Value> = {
        let engine = &s.engine;
        let mut inner = engine.lock();
        engine.settle(&mut inner, Instant::now());
        inner
            .inventory
            .types()
            .iter()
            .map(|t| {
                let largest = t.machines.iter().map(|m| m.capacity).max().unwrap_or(0);
                let secure = round2(t.price_per_hour);
                let community = round2(t.price_per_hour * 0.7);
                let mut g = json!({
                    "id": t.gpu_type,
                    "name": t.gpu_type,
                    "pool": Value::Null,
                    "manufacturer": "NVIDIA",
                    "memory": gpu_memory_mb(&t.gpu_type) / 1024,
                    "secure": true,
                    "community": true,
                    "price": {"secure": secure, "community": community},
                    "maxCount": {"secure": largest, "community": largest},
                });
                if availability {
                    let lvl = level(t.free(), count, t.count());
                    g["availability"] = json!(lvl);
                    if lvl != "NONE" {
                        g["dataCenters"] =
                            json!([{"id": "EU-EMU-1", "name": "Emulator 1", "availability": lvl}]);
                    }
                }
                g
            })
            .collect()
    };
    admitted(
        json_response(StatusCode::OK, json!({ "gpus": gpus })),
        &admission,
    )
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
