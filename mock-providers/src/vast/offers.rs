//! Offer search (`/api/v0/bundles`): offers grouped by GPU type and size, filtered, ordered and rendered as the service lists them.

use std::collections::HashMap;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Query, State as AxState};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::book::*;
use super::reply::*;
use super::{OFFER_SIZES, State, query};
use crate::engine::Engine;
use crate::inventory::{MACHINE_GPUS, gpu_memory_mb};

// ---- offers -------------------------------------------------------------------------------

pub(super) fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Offer fields that differ between machines offering the same GPU type and size; every other
/// field depends only on the type, the size and the search (see [`OfferGroup`]).
pub(super) const MACHINE_FIELDS: [&str; 5] = [
    "id",
    "ask_contract_id",
    "bundle_id",
    "machine_id",
    "gpu_frac",
];

/// One rentable offer before it is rendered: its group, id and machine.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    group: usize,
    num_gpus: u32,
    id: u64,
    machine_id: u64,
    capacity: u32,
}

impl Candidate {
    /// The value of a field in [`MACHINE_FIELDS`]; `None` for any other field.
    fn field(&self, field: &str) -> Option<Value> {
        match field {
            "id" | "ask_contract_id" | "bundle_id" => Some(json!(self.id)),
            "machine_id" => Some(json!(self.machine_id)),
            "gpu_frac" => Some(json!(
                f64::from(self.num_gpus) / f64::from(self.capacity.max(1))
            )),
            _ => None,
        }
    }
}

/// The offers of one GPU type and size: the fields they share, and what the search's filters
/// and order make of them.
pub(super) struct OfferGroup {
    /// Every offer field except [`MACHINE_FIELDS`].
    template: Map<String, Value>,
    /// Per filter (in the filters' order): its verdict on the shared fields (`Ok(true)` for a
    /// field offers lack, which the lenient matcher ignores), `None` for a machine field.
    verdicts: Vec<Option<Result<bool, String>>>,
    /// The whole group's outcome when it does not depend on the machine.
    fixed: Option<Result<bool, String>>,
    /// Per sort field: its numeric value when shared by the group.
    order_keys: Vec<Option<f64>>,
}

impl OfferGroup {
    fn new(
        template: Map<String, Value>,
        filters: &Map<String, Value>,
        orders: &[(String, bool)],
    ) -> Self {
        let verdicts: Vec<Option<Result<bool, String>>> = filters
            .iter()
            .map(|(field, cond)| {
                if MACHINE_FIELDS.contains(&field.as_str()) {
                    return None;
                }
                Some(match template.get(field) {
                    Some(actual) => query::matches(field, actual, cond),
                    None => Ok(true),
                })
            })
            .collect();
        // The filters are applied in order and stop at the first that fails (or errs): the
        // outcome is the group's own unless a machine field comes first.
        let mut fixed = Some(Ok(true));
        for v in &verdicts {
            match v {
                Some(Ok(true)) => {}
                Some(other) => {
                    fixed = Some(other.clone());
                    break;
                }
                None => {
                    fixed = None;
                    break;
                }
            }
        }
        let order_keys = orders
            .iter()
            .map(|(field, _)| template.get(field).and_then(Value::as_f64))
            .collect();
        Self {
            template,
            verdicts,
            fixed,
            order_keys,
        }
    }

    /// `query::record_matches(render(c), filters, lenient)`, without rendering.
    fn matches(&self, c: &Candidate, filters: &Map<String, Value>) -> Result<bool, String> {
        if let Some(fixed) = &self.fixed {
            return fixed.clone();
        }
        for ((field, cond), verdict) in filters.iter().zip(&self.verdicts) {
            let ok = match verdict {
                Some(v) => v.clone()?,
                None => match c.field(field) {
                    Some(actual) => query::matches(field, &actual, cond)?,
                    None => true,
                },
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The numeric value of sort field number `i` (`field`), as the rendered offer has it.
    fn order_key(&self, c: &Candidate, i: usize, field: &str) -> Option<f64> {
        match c.field(field) {
            Some(v) => v.as_f64(),
            None => self.order_keys.get(i).copied().flatten(),
        }
    }

    /// The full offer.
    fn render(&self, c: &Candidate) -> Map<String, Value> {
        let mut o = self.template.clone();
        for field in MACHINE_FIELDS {
            if let Some(v) = c.field(field) {
                o.insert(field.to_owned(), v);
            }
        }
        o
    }
}

/// The fields every offer of `gpu_type` x `n` shares (all but [`MACHINE_FIELDS`]).
pub(super) fn offer_template(
    gpu_type: &str,
    price: f64,
    n: u32,
    bid: bool,
    now: f64,
) -> Map<String, Value> {
    let gpu_ram = gpu_memory_mb(gpu_type);
    let dph = round4(price * f64::from(n));
    let min_bid = round4(dph * 0.5);
    let shown = if bid { min_bid } else { dph };
    let fields = json!({
        "bundled_results": Value::Null,
        "host_id": 1,
        "hostname": Value::Null,
        "gpu_name": gpu_type,
        "gpu_arch": "nvidia",
        "num_gpus": n,
        "gpu_ram": gpu_ram,
        "gpu_total_ram": gpu_ram * u64::from(n),
        "gpu_display_active": false,
        "compute_cap": 900,
        "cuda_max_good": 12.8,
        "driver_version": "570.86.15",
        "cpu_arch": "amd64",
        "cpu_name": "Emulated CPU",
        "cpu_cores": 8 * MACHINE_GPUS,
        "cpu_cores_effective": 8 * n,
        "cpu_ram": 32_000 * u64::from(n),
        "disk_space": 500.0,
        "disk_bw": 2000.0,
        "inet_up": 1000.0,
        "inet_down": 1000.0,
        "inet_up_cost": 0.0,
        "inet_down_cost": 0.0,
        "dph_base": dph,
        "dph_total": shown,
        "min_bid": min_bid,
        "is_bid": bid,
        "storage_cost": 0.1,
        "storage_total_cost": 0.0,
        "reliability": 0.999,
        "reliability2": 0.999,
        "score": 100.0,
        "rentable": true,
        "rented": false,
        "verified": true,
        "verification": "verified",
        "external": false,
        "hosting_type": 1,
        "static_ip": true,
        "public_ipaddr": crate::serve::host(),
        "direct_port_count": 100,
        "geolocation": "Emulator, EM",
        "vms_enabled": false,
        "start_date": now,
        "end_date": now + 30.0 * 86_400.0,
        "duration": 30.0 * 86_400.0,
        "search": {
            "gpuCostPerHour": shown,
            "diskHour": 0.0,
            "totalHour": shown,
            "discountTotalHour": 0.0,
            "discountedTotalPerHour": shown,
        },
    });
    match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The search's `order`: `(field, descending)` pairs; `dph_total` ascending by default.
pub(super) fn parse_orders(order: Option<&Value>) -> Vec<(String, bool)> {
    match order {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| match i {
                Value::Array(pair) => {
                    let field = pair.first()?.as_str()?.to_owned();
                    let desc = pair.get(1).and_then(Value::as_str) == Some("desc");
                    Some((field, desc))
                }
                _ => None,
            })
            .collect(),
        _ => vec![("dph_total".to_owned(), false)],
    }
}

/// The offers matching `filters` (search keys `type`, `order`, `limit` and
/// `allocated_storage` already removed), sorted, at most `limit`; `Err` for an invalid filter.
/// Every rentable offer gets an id, listed or not (ids are handed out in inventory order).
///
/// Equivalent to rendering every offer, keeping those `query::record_matches` (lenient)
/// accepts, stable-sorting them by `orders` and truncating, but renders only what is returned.
pub(super) fn find_offers(
    engine: &Engine,
    filters: &Map<String, Value>,
    bid: bool,
    orders: &[(String, bool)],
    limit: usize,
    now_unix: f64,
) -> Result<Vec<Map<String, Value>>, String> {
    let now = Instant::now();
    let mut guard = engine.lock();
    engine.settle(&mut guard, now);
    let inner = &mut *guard;
    drop_stale_offers(inner);
    let (inventory, book) = (&inner.inventory, &mut inner.vast);
    let mut groups: Vec<OfferGroup> = Vec::new();
    let mut candidates: Vec<Candidate> = Vec::new();
    for t in inventory.types() {
        let mut group_of_size = [None::<usize>; OFFER_SIZES.len()];
        for m in &t.machines {
            for (size, n) in OFFER_SIZES.into_iter().enumerate() {
                if n > m.capacity || n > m.free() {
                    continue;
                }
                let id = book.offer_id(OfferKey {
                    machine_id: m.id,
                    epoch: m.epoch,
                    num_gpus: n,
                });
                let group = *group_of_size[size].get_or_insert_with(|| {
                    let template = offer_template(&t.gpu_type, t.price_per_hour, n, bid, now_unix);
                    groups.push(OfferGroup::new(template, filters, orders));
                    groups.len() - 1
                });
                candidates.push(Candidate {
                    group,
                    num_gpus: n,
                    id,
                    machine_id: m.id,
                    capacity: m.capacity,
                });
            }
        }
    }
    let mut kept = Vec::new();
    for c in candidates {
        if groups[c.group].matches(&c, filters)? {
            kept.push(c);
        }
    }
    // Sort keys, `orders.len()` per kept offer.
    let width = orders.len();
    let keys: Vec<Option<f64>> = kept
        .iter()
        .flat_map(|c| {
            let g = &groups[c.group];
            orders
                .iter()
                .enumerate()
                .map(move |(i, (field, _))| g.order_key(c, i, field))
        })
        .collect();
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by(|&a, &b| {
        for (i, (_, desc)) in orders.iter().enumerate() {
            if let (Some(x), Some(y)) = (keys[a * width + i], keys[b * width + i]) {
                let ord = x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal);
                let ord = if *desc { ord.reverse() } else { ord };
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
        }
        std::cmp::Ordering::Equal
    });
    Ok(order
        .into_iter()
        .take(limit)
        .map(|i| groups[kept[i].group].render(&kept[i]))
        .collect())
}

pub(super) async fn search_offers(AxState(s): AxState<State>, body: Bytes) -> Response {
    let filters = match parse_body(&body) {
        Ok(m) => m,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "Invalid json body",
            );
        }
    };
    if let Some(refused) = schema_refusal("POST /api/v0/bundles", "invalid_request", &body) {
        return refused;
    }
    search(&s.engine, filters)
}

/// Legacy `GET /api/v0/bundles?q={...}`.
pub(super) async fn search_offers_get(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let filters = match q.get("q").map(|s| serde_json::from_str::<Value>(s)) {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "Invalid json body",
            );
        }
    };
    search(&s.engine, filters)
}

pub(super) fn search(engine: &Engine, mut filters: Map<String, Value>) -> Response {
    // Older clients wrap the query in {"q": {...}}.
    if let Some(Value::Object(inner)) = filters.remove("q") {
        filters.extend(inner);
    }
    let limit = match filters.remove("limit") {
        None | Some(Value::Null) => 64,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(64).max(1) as usize,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "limit must be an integer",
            );
        }
    };
    let bid = matches!(
        filters.remove("type"),
        Some(Value::String(t)) if t == "bid" || t == "interruptible"
    );
    let orders = parse_orders(filters.remove("order").as_ref());
    filters.remove("allocated_storage");
    let now_unix = crate::util::unix_f64(jiff::Timestamp::now());
    match find_offers(engine, &filters, bid, &orders, limit, now_unix) {
        Ok(offers) => ok(json!({ "offers": offers })),
        Err(msg) => error(StatusCode::BAD_REQUEST, "invalid_request", msg),
    }
}
