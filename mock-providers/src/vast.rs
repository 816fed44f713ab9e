//! Vast.ai emulator (`https://console.vast.ai`): offer search, renting an offer, instance
//! show/list/manage/destroy, bids and preemption, and logs through a `result_url`, as in
//! vast-ai/docs `api-reference/openapi.yaml`.

mod query;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use rand::Rng;
use serde_json::{Map, Value, json};

use crate::config::EmulatorConfig;
use crate::engine::gate::{Credential, Denied, EndpointLimit, RouteKind, bearer};
use crate::engine::logs::LogSource;
use crate::engine::{Engine, Extra, Flavor, NewWorkload, Phase, Run, StopReason, Workload};
use crate::inventory::{MACHINE_GPUS, gpu_memory_mb};
pub use query::{ParsedEnv, parse_env};

/// Offer sizes listed per machine.
const OFFER_SIZES: [u32; 4] = [1, 2, 4, 8];
/// Log snapshots kept for `result_url`s.
const MAX_SNAPSHOTS: usize = 256;

/// Vast's documented per-endpoint limits, enforced when the emulator is configured with an
/// endpoint-limit scale. Vast rate-limits "per endpoint and per identity ... as a minimum
/// interval between requests for a given endpoint and identity", answers 429 and "does not
/// currently set standard rate-limit headers (for example `Retry-After`)" (vast-ai/docs
/// `api-reference/rate-limits-and-errors.mdx`). The figures are each endpoint's
/// `x-rate-limit` in `api-reference/openapi/yaml/`: `search_offers.yaml` "requests: 10, per:
/// minute"; `create_instance.yaml` threshold 4.5 (its "penalty: 12" is not explained there and
/// is not modelled); `show_instances.yaml` threshold 1.0; `destroy_instance.yaml` threshold
/// 3.0. The 429 examples of `api-reference/openapi.yaml` give the others: show instance
/// (`GET /api/v0/instances/{id}/`) 2.0, manage instance (`PUT` of the same path) 1.0, change
/// bid (`PUT /api/v0/instances/bid_price/{id}/`) 5.5. `request_logs` and the deprecated v0
/// list document none. The identity is one API key here (the emulator accepts only one).
pub const ENDPOINT_LIMITS: &[(&str, EndpointLimit)] = &[
    (
        "search_offers",
        EndpointLimit::Burst {
            n: 10,
            per: Duration::from_secs(60),
        },
    ),
    (
        "create_instance",
        EndpointLimit::Interval(Duration::from_millis(4_500)),
    ),
    (
        "show_instances",
        EndpointLimit::Interval(Duration::from_millis(1_000)),
    ),
    (
        "show_instance",
        EndpointLimit::Interval(Duration::from_millis(2_000)),
    ),
    (
        "manage_instance",
        EndpointLimit::Interval(Duration::from_millis(1_000)),
    ),
    (
        "destroy_instance",
        EndpointLimit::Interval(Duration::from_millis(3_000)),
    ),
    (
        "change_bid",
        EndpointLimit::Interval(Duration::from_millis(5_500)),
    ),
];

/// Shared state of the Vast emulator.
#[derive(Clone, Debug)]
pub struct State {
    engine: Arc<Engine>,
}

impl State {
    /// A fresh emulator.
    pub fn new(config: EmulatorConfig) -> Self {
        Self {
            engine: Engine::new(Flavor::Vast, config),
        }
    }

    /// The engine (for direct inspection in tests).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

/// Instance fields kept for rendering.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct InstanceExtra {
    /// Launch mode (`ssh`, `jupyter`, `args`, ...).
    pub runtype: String,
    /// Disk GB.
    pub disk: f64,
    /// `onstart` script.
    pub onstart: Option<String>,
    /// Entrypoint arguments.
    pub args: Vec<String>,
    /// Environment in request order (`extra_env`).
    pub env_pairs: Vec<(String, String)>,
    /// `-p` mappings.
    pub ports: Vec<String>,
    /// The offer rented.
    pub offer_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct OfferKey {
    machine_id: u64,
    epoch: u64,
    num_gpus: u32,
}

/// Offer ids and log snapshots.
#[derive(Debug)]
pub struct Book {
    offers: HashMap<u64, OfferKey>,
    by_key: HashMap<OfferKey, u64>,
    next_offer_id: u64,
    snapshots: HashMap<String, String>,
    snapshot_order: VecDeque<String>,
    /// `label_counts` of the unfiltered instance list.
    label_counts: LabelCounts,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            offers: HashMap::new(),
            by_key: HashMap::new(),
            next_offer_id: 20_000_001,
            snapshots: HashMap::new(),
            snapshot_order: VecDeque::new(),
            label_counts: LabelCounts::default(),
        }
    }
}

impl Book {
    /// Forget all offer ids (after an inventory change).
    pub fn clear_offers(&mut self) {
        self.offers.clear();
        self.by_key.clear();
    }

    fn offer_id(&mut self, key: OfferKey) -> u64 {
        if let Some(id) = self.by_key.get(&key) {
            return *id;
        }
        let id = self.next_offer_id;
        self.next_offer_id += 1;
        self.by_key.insert(key, id);
        self.offers.insert(id, key);
        id
    }

    fn store_snapshot(&mut self, text: String) -> String {
        let token: String = {
            let mut rng = rand::rng();
            (0..32)
                .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
                .collect()
        };
        self.snapshots.insert(token.clone(), text);
        self.snapshot_order.push_back(token.clone());
        while self.snapshot_order.len() > MAX_SNAPSHOTS {
            if let Some(old) = self.snapshot_order.pop_front() {
                self.snapshots.remove(&old);
            }
        }
        token
    }
}

/// `label_counts` of the unfiltered instance list, kept up to date from one call to the next:
/// every page of a 10,000-instance listing (400 calls) reports the labels of all instances.
#[derive(Debug, Default)]
struct LabelCounts {
    /// `(seq, label)` of every instance counted, in ascending `seq` order.
    rows: Vec<(u64, String)>,
    counts: BTreeMap<String, u64>,
    /// `counts` as a JSON object.
    json: String,
}

impl LabelCounts {
    /// The counts of `current` (`(seq, label)` in ascending `seq` order) as a JSON object.
    fn sync(&mut self, current: &[(u64, &str)]) -> Cow<'_, str> {
        if !current.windows(2).all(|w| w[0].0 < w[1].0) {
            // Not in seq order (never, from a BTreeMap): count from scratch, keep nothing.
            *self = Self::default();
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for (_, name) in current {
                *counts.entry(name).or_default() += 1;
            }
            return Cow::Owned(serde_json::to_string(&counts).unwrap_or_else(|_| "{}".to_owned()));
        }
        let unchanged = self.rows.len() == current.len()
            && self
                .rows
                .iter()
                .zip(current)
                .all(|((seq, name), (s, n))| seq == s && name == n);
        if unchanged && !self.json.is_empty() {
            return Cow::Borrowed(&self.json);
        }
        // Merge the two seq-ordered lists, counting what was removed, added or relabelled.
        let mut old = std::mem::take(&mut self.rows).into_iter().peekable();
        let mut rows = Vec::with_capacity(current.len());
        for &(seq, name) in current {
            while let Some((_, gone)) = old.next_if(|(s, _)| *s < seq) {
                self.remove(&gone);
            }
            match old.next_if(|(s, _)| *s == seq) {
                Some((_, same)) if same == name => rows.push((seq, same)),
                other => {
                    if let Some((_, relabelled)) = other {
                        self.remove(&relabelled);
                    }
                    self.add(name);
                    rows.push((seq, name.to_owned()));
                }
            }
        }
        for (_, gone) in old {
            self.remove(&gone);
        }
        self.rows = rows;
        self.json = serde_json::to_string(&self.counts).unwrap_or_else(|_| "{}".to_owned());
        Cow::Borrowed(&self.json)
    }

    fn add(&mut self, name: &str) {
        match self.counts.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(name.to_owned(), 1);
            }
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(n) = self.counts.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(name);
            }
        }
    }
}

/// Vast `actual_status` for a phase (`None` is JSON null: scheduled, nothing on the host yet).
pub fn actual_status(phase: Phase) -> Option<&'static str> {
    match phase {
        Phase::Provisioning => None,
        Phase::Starting => Some("loading"),
        Phase::Running => Some("running"),
        Phase::Exited => Some("exited"),
        Phase::Stopped | Phase::Preempted => Some("stopped"),
        Phase::Failed => Some("unknown"),
    }
}

/// The emulator's routes plus the shared `/_admin` routes. Paths work with and without the
/// trailing slash.
pub fn router(state: State) -> Router {
    let admin = crate::admin::router(state.engine.clone());
    let mut r = Router::new();
    for p in ["/api/v0/bundles", "/api/v0/bundles/"] {
        r = r.route(p, post(search_offers).get(search_offers_get));
    }
    for p in ["/api/v0/asks/{id}", "/api/v0/asks/{id}/"] {
        r = r.route(p, put(create_instance));
    }
    for p in ["/api/v0/instances", "/api/v0/instances/"] {
        r = r.route(p, get(list_instances_v0));
    }
    for p in ["/api/v1/instances", "/api/v1/instances/"] {
        r = r.route(p, get(list_instances));
    }
    for p in ["/api/v0/instances/{id}", "/api/v0/instances/{id}/"] {
        r = r.route(
            p,
            get(show_instance)
                .put(manage_instance)
                .delete(destroy_instance),
        );
    }
    for p in [
        "/api/v0/instances/request_logs/{id}",
        "/api/v0/instances/request_logs/{id}/",
    ] {
        r = r.route(p, put(request_logs));
    }
    for p in [
        "/api/v0/instances/bid_price/{id}",
        "/api/v0/instances/bid_price/{id}/",
    ] {
        r = r.route(p, put(change_bid));
    }
    r.route("/_s3/instance_logs/{file}", get(fetch_log_snapshot))
        .fallback(not_found_route)
        .with_state(state)
        .merge(admin)
}

// ---- responses ----------------------------------------------------------------------------

fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn error(status: StatusCode, error: &str, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"success": false, "error": error, "msg": msg.into()})),
    )
        .into_response()
}

fn denied(d: Denied) -> Response {
    match d {
        Denied::Fault {
            status,
            body,
            retry_after_s,
        } => {
            let mut resp = match body {
                Some(body) => (status, axum::Json(body)).into_response(),
                None => error(status, "injected_fault", "injected fault"),
            };
            if let Some(s) = retry_after_s
                && let Ok(v) = HeaderValue::from_str(&s.to_string())
            {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        Denied::Unauthorized { .. } => {
            error(StatusCode::UNAUTHORIZED, "auth_error", "Invalid user key")
        }
        // The generic quota window (not a documented Vast behaviour): answered like an
        // interval limit of one window / quota.
        Denied::RateLimited { windows, .. } => {
            let threshold = windows
                .first()
                .map(|w| w.width_s as f64 / f64::from(w.limit.max(1)));
            too_frequent(threshold)
        }
        Denied::TooFrequent { threshold_s } => too_frequent(threshold_s),
    }
}

/// Vast's 429: `{"detail": "API requests too frequent endpoint threshold=4.5"}` (the 429
/// examples of vast-ai/docs `api-reference/openapi.yaml`, e.g. `PUT /api/v0/asks/{id}/`), or
/// the bare "API requests too frequent" for a limit without a threshold
/// (`rate-limits-and-errors.mdx` lists both messages); never a `Retry-After`.
fn too_frequent(threshold_s: Option<f64>) -> Response {
    let detail = match threshold_s {
        Some(t) => format!(
            "API requests too frequent endpoint threshold={}",
            python_float(t)
        ),
        None => "API requests too frequent".to_owned(),
    };
    (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({ "detail": detail })),
    )
        .into_response()
}

/// A float as Python's `repr` writes it (`1.0`, `4.5`, `0.45`), as the service's messages do.
fn python_float(x: f64) -> String {
    let x = (x * 1e6).round() / 1e6;
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Vast takes the key as a bearer token, or (older clients) as `?api_key=`.
fn presented_key<'a>(headers: &'a HeaderMap, q: &'a HashMap<String, String>) -> Credential<'a> {
    match bearer(headers) {
        Credential::Missing => q
            .get("api_key")
            .map_or(Credential::Missing, |k| Credential::Key(k.as_str())),
        other => other,
    }
}

async fn not_found_route() -> Response {
    error(StatusCode::NOT_FOUND, "not_found", "No such endpoint")
}

fn parse_body(body: &[u8]) -> Result<Map<String, Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "Invalid json body",
        )),
    }
}

// ---- offers -------------------------------------------------------------------------------

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Offer fields that differ between machines offering the same GPU type and size; every other
/// field depends only on the type, the size and the search (see [`OfferGroup`]).
const MACHINE_FIELDS: [&str; 5] = [
    "id",
    "ask_contract_id",
    "bundle_id",
    "machine_id",
    "gpu_frac",
];

/// One rentable offer before it is rendered: its group, id and machine.
#[derive(Clone, Copy, Debug)]
struct Candidate {
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
struct OfferGroup {
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
fn offer_template(gpu_type: &str, price: f64, n: u32, bid: bool, now: f64) -> Map<String, Value> {
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

/// Forget the ids of offers whose machine changed since they were listed.
fn drop_stale_offers(inner: &mut crate::engine::Inner) {
    let current: HashMap<u64, u64> = inner
        .inventory
        .types()
        .iter()
        .flat_map(|t| t.machines.iter().map(|m| (m.id, m.epoch)))
        .collect();
    let book = &mut inner.vast;
    book.offers.retain(|_, k| {
        let live = current.get(&k.machine_id) == Some(&k.epoch);
        if !live {
            book.by_key.remove(k);
        }
        live
    });
}

/// The search's `order`: `(field, descending)` pairs; `dph_total` ascending by default.
fn parse_orders(order: Option<&Value>) -> Vec<(String, bool)> {
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
fn find_offers(
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

async fn search_offers(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::Search,
            "search_offers",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
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
    search(&s.engine, filters)
}

/// Legacy `GET /api/v0/bundles?q={...}`.
async fn search_offers_get(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::Search,
            "search_offers",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
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

fn search(engine: &Engine, mut filters: Map<String, Value>) -> Response {
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

// ---- instances ----------------------------------------------------------------------------

fn number_or_null(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

fn status_msg(w: &Workload, phase: Phase) -> Value {
    let msg = match (&w.run, phase) {
        (_, Phase::Provisioning) => format!("Pulling image {}", w.image),
        (_, Phase::Starting) => "Starting container".to_owned(),
        (_, Phase::Running) => {
            let runtype = match &w.extra {
                Extra::Vast(e) => e.runtype.clone(),
                _ => "ssh".into(),
            };
            format!("success, running {}/{}", w.image, runtype)
        }
        (_, Phase::Exited) => "Container exited".to_owned(),
        (Run::Failed { message, .. }, _) => format!("Error: {message}"),
        (
            Run::Stopped {
                reason: StopReason::Preempted { .. },
                ..
            },
            _,
        ) => "Instance outbid: a higher bid took this machine's GPUs".to_owned(),
        (
            Run::Stopped {
                reason: StopReason::WaitingForGpus,
                ..
            },
            _,
        ) => "Waiting for GPUs on this machine to become free".to_owned(),
        _ => "Instance stopped".to_owned(),
    };
    Value::String(msg)
}

fn render_instance(engine: &Engine, w: &mut Workload, now: Instant) -> Map<String, Value> {
    let phase = engine.observe(w, now);
    let usage = engine.usage(w, phase, now);
    let extra = match &w.extra {
        Extra::Vast(e) => (**e).clone(),
        _ => InstanceExtra {
            runtype: "ssh".into(),
            disk: 8.0,
            env_pairs: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..InstanceExtra::default()
        },
    };
    let user_stopped = matches!(
        w.run,
        Run::Stopped {
            reason: StopReason::User,
            ..
        }
    );
    let intended = if user_stopped { "stopped" } else { "running" };
    let cur_state = match phase {
        Phase::Stopped | Phase::Preempted => "stopped",
        _ => "running",
    };
    let n = w.gpu_count;
    let gpu_ram = gpu_memory_mb(&w.gpu_type);
    let dph_base = round4(w.price_per_gpu_hour * f64::from(n));
    let dph_total = w.bid_price.map_or(dph_base, round4);
    let running = phase == Phase::Running;
    let mut extra_env: Vec<Value> = extra.env_pairs.iter().map(|(k, v)| json!([k, v])).collect();
    extra_env.extend(extra.ports.iter().map(|p| json!([format!("-p {p}"), "1"])));
    // Each open internal port is mapped to a *random* external port of the machine's public
    // IP ("Networking & Ports", docs.vast.ai guides/instances/connect/networking): a real
    // listener answers there (`crate::serve`), nothing on the internal port number.
    let ports = if running {
        let mut m = Map::new();
        let tcp: Vec<u16> = extra
            .ports
            .iter()
            .filter_map(|p| {
                let internal = p.split_once(':').map_or(p.as_str(), |(_, c)| c);
                internal
                    .strip_suffix("/tcp")
                    .unwrap_or(internal)
                    .parse()
                    .ok()
            })
            .collect();
        let host = crate::serve::workload_address(w.seq);
        for (internal, external) in engine.served.open(&w.id, &host, &tcp) {
            m.insert(
                format!("{internal}/tcp"),
                json!([{"HostIp": "0.0.0.0", "HostPort": external.to_string()}]),
            );
        }
        if extra.runtype.starts_with("ssh") {
            m.insert(
                "22/tcp".into(),
                json!([{"HostIp": "0.0.0.0", "HostPort": "22"}]),
            );
        }
        Value::Object(m)
    } else {
        engine.served.close(&w.id);
        Value::Null
    };
    let uptime_mins = if running {
        w.running_since.map(|t| {
            jiff::Timestamp::now()
                .duration_since(t)
                .as_secs_f64()
                .max(0.0)
                / 60.0
        })
    } else {
        None
    };
    let start_date = crate::util::unix_f64(w.created_at);
    let id: Value =
        w.id.parse::<u64>()
            .map_or_else(|_| json!(w.id), |n| json!(n));
    let fields = json!({
        "id": id,
        "machine_id": w.machine_id,
        "host_id": 1,
        "actual_status": actual_status(phase),
        "intended_status": intended,
        "cur_state": cur_state,
        "next_state": intended,
        "status_msg": status_msg(w, phase),
        "label": if w.name.is_empty() { Value::Null } else { json!(w.name) },
        "is_bid": w.interruptible,
        "min_bid": round4(dph_base * 0.5),
        "dph_base": dph_base,
        "dph_total": dph_total,
        "gpu_name": w.gpu_type,
        "gpu_arch": "nvidia",
        "num_gpus": n,
        "gpu_ram": gpu_ram,
        "gpu_totalram": gpu_ram * u64::from(n),
        "gpu_frac": f64::from(n) / f64::from(MACHINE_GPUS),
        "gpu_util": if running { json!(0.0) } else { Value::Null },
        "gpu_temp": if running { json!(40.0) } else { Value::Null },
        "cpu_arch": "amd64",
        "cpu_name": "Emulated CPU",
        "cpu_cores": 8 * MACHINE_GPUS,
        "cpu_cores_effective": f64::from(8 * n),
        "cpu_ram": 32_000 * u64::from(n),
        "cpu_util": usage.cpu_millis as f64 / 10.0,
        "mem_usage": number_or_null(running.then(|| usage.memory_bytes as f64 / 1e9)),
        "mem_limit": number_or_null(Some(32.0 * f64::from(n))),
        "vmem_usage": number_or_null(running.then_some(0.0)),
        "disk_space": extra.disk,
        "disk_usage": 0.0,
        "image_uuid": w.image,
        "image_args": extra.args,
        "image_runtype": extra.runtype,
        "extra_env": extra_env,
        "onstart": extra.onstart,
        "template_id": Value::Null,
        "template_hash_id": Value::Null,
        "template_name": Value::Null,
        "jupyter_token": "emulator",
        "start_date": start_date,
        "end_date": start_date + 30.0 * 86_400.0,
        "duration": 30.0 * 86_400.0,
        "uptime_mins": number_or_null(uptime_mins),
        // Its own address (`serve::workload_address`), never loopback: the VK reports it as
        // the pod IP, which the API server refuses in EndpointSlices when loopback.
        "public_ipaddr": engine.served.listed_address(&crate::serve::workload_address(w.seq)),
        "local_ipaddrs": crate::serve::workload_address(w.seq),
        "ssh_host": "ssh.emulator.invalid",
        "ssh_idx": "1",
        "ssh_port": 22,
        "ports": ports,
        "direct_port_start": 20000,
        "direct_port_end": 20099,
        "geolocation": "Emulator, EM",
        "country_code": "EM",
        "verification": "verified",
        "rentable": true,
        "reliability2": 0.999,
        "cuda_max_good": 12.8,
        "driver_version": "570.86.15",
        "external": false,
        "volume_info": [],
        "time_remaining": "",
        "time_remaining_isbid": "",
    });
    match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn parse_id(id: &str) -> Option<u64> {
    id.parse::<u64>().ok()
}

async fn show_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(RouteKind::Get, "show_instance", presented_key(&headers, &q))
        .await
    {
        return denied(d);
    }
    if parse_id(&id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance id",
        );
    }
    let engine = &s.engine;
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let instance = inner
        .seq_of(&id)
        .and_then(|seq| inner.workloads.get_mut(&seq))
        .map(|w| Value::Object(render_instance(engine, w, now)))
        .unwrap_or(Value::Null);
    ok(json!({ "instances": instance }))
}

/// `GET /api/v0/instances/` is deprecated: accounts created after 2 June 2026 get 410.
async fn list_instances_v0(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(d) = s
        .engine
        .gate(RouteKind::List, presented_key(&headers, &q))
        .await
    {
        return denied(d);
    }
    error(
        StatusCode::GONE,
        "deprecated",
        "Endpoint deprecated: /api/v0/instances/ is deprecated. Use /api/v1/instances/ instead.",
    )
}

const FILTER_COLUMNS: &[&str] = &[
    "id",
    "label",
    "actual_status",
    "intended_status",
    "cur_state",
    "next_state",
    "gpu_name",
    "machine_id",
    "is_bid",
    "image_uuid",
];

fn page_token(id: u64) -> String {
    crate::util::base64_encode(format!("{{\"values\": {{\"id\": {id}}}}}").as_bytes())
}

fn parse_page_token(token: &str) -> Option<u64> {
    let bytes = crate::util::base64_decode(token)?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("values")?.get("id")?.as_u64()
}

async fn list_instances(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::List,
            "show_instances",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
    list_inner(&s.engine, &q)
}

/// The value of instance-list filter column `field` (one of [`FILTER_COLUMNS`]) for `w`.
fn filter_column(w: &Workload, num: u64, phase: Phase, field: &str) -> Option<Value> {
    let intended = || {
        let user_stopped = matches!(
            w.run,
            Run::Stopped {
                reason: StopReason::User,
                ..
            }
        );
        json!(if user_stopped { "stopped" } else { "running" })
    };
    Some(match field {
        "id" => json!(num),
        "label" if w.name.is_empty() => Value::Null,
        "label" => json!(w.name),
        "actual_status" => json!(actual_status(phase)),
        "intended_status" | "next_state" => intended(),
        "cur_state" => json!(if matches!(phase, Phase::Stopped | Phase::Preempted) {
            "stopped"
        } else {
            "running"
        }),
        "gpu_name" => json!(w.gpu_type),
        "machine_id" => json!(w.machine_id),
        "is_bid" => json!(w.interruptible),
        "image_uuid" => json!(w.image),
        _ => return None,
    })
}

/// `query::record_matches` (strict) on the instance's filter columns, computing only the
/// columns filtered on.
fn instance_matches(
    w: &Workload,
    num: u64,
    phase: Phase,
    filters: &Map<String, Value>,
) -> Result<bool, String> {
    for (field, cond) in filters {
        let Some(actual) = filter_column(w, num, phase, field) else {
            return Err(format!("{field} is not a valid search key"));
        };
        if !query::matches(field, &actual, cond)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The wanted label when the only filter is an equality on `label` (`{"label": {"eq": v}}` or
/// `{"label": v}`), which is answered without building filter columns.
fn label_equality(filters: &Map<String, Value>) -> Option<&Value> {
    if filters.len() != 1 {
        return None;
    }
    match filters.get("label")? {
        Value::Object(ops) if ops.len() == 1 => ops.get("eq"),
        Value::Object(_) => None,
        bare => Some(bare),
    }
}

/// Whether a label (null when empty) equals `want` as `query::matches` compares them.
fn label_is(name: &str, want: &Value) -> bool {
    match want {
        Value::String(s) => !name.is_empty() && name == s,
        Value::Null => name.is_empty(),
        _ => false,
    }
}

fn list_inner(engine: &Engine, q: &HashMap<String, String>) -> Response {
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, "invalid_request", msg);
    let limit = match q.get("limit").map(|l| l.parse::<i64>()) {
        None => 25,
        Some(Ok(n)) if n <= 0 => 5,
        Some(Ok(n)) => n.min(25) as usize,
        Some(Err(_)) => return bad("Error in query parameters: limit must be an integer".into()),
    };
    let after = match q.get("after_token") {
        None => None,
        Some(t) => match parse_page_token(t) {
            Some(id) => Some(id),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_token",
                    "Invalid pagination token",
                );
            }
        },
    };
    let filters: Map<String, Value> = match q.get("select_filters").map(|f| serde_json::from_str(f))
    {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return bad("Error in query parameters: select_filters must be a JSON object".into());
        }
    };
    if let Some(col) = filters
        .keys()
        .find(|k| !FILTER_COLUMNS.contains(&k.as_str()))
    {
        return bad(format!(
            "Error in query parameters: {col} is not a valid search key"
        ));
    }
    let descending = match q.get("order_by").map(|o| serde_json::from_str::<Value>(o)) {
        None => false,
        Some(Ok(Value::Array(items))) => {
            let mut desc = false;
            for item in &items {
                let col = item.get("col").and_then(Value::as_str).unwrap_or("");
                if col != "id" && col != "start_date" {
                    return bad(format!(
                        "Error in query parameters: order_by column {col} is not supported"
                    ));
                }
                desc = item.get("dir").and_then(Value::as_str) == Some("desc");
            }
            desc
        }
        Some(_) => return bad("Error in query parameters: order_by must be a JSON array".into()),
    };
    let select_cols: Option<Vec<String>> = match q
        .get("select_cols")
        .map(|c| serde_json::from_str::<Vec<String>>(c))
    {
        None => None,
        Some(Ok(cols)) if cols.iter().any(|c| c == "*") => None,
        Some(Ok(cols)) => Some(cols),
        Some(Err(_)) => {
            return bad("Error in query parameters: select_cols must be a JSON array".into());
        }
    };

    let now = Instant::now();
    let mut guard = engine.lock();
    engine.settle(&mut guard, now);
    let inner = &mut *guard;
    let crate::engine::Inner {
        workloads,
        vast: book,
        gate,
        ..
    } = inner;
    let mask = gate.list_mask();
    // Matching instances in id order, and their labels counted (as JSON).
    let mut matching: Vec<(u64, u64)> = Vec::new(); // (numeric id, seq)
    let label_counts: Cow<'_, str> = if filters.is_empty() {
        let mut current: Vec<(u64, &str)> = Vec::with_capacity(workloads.len());
        for w in workloads.values().filter(|w| !mask.hides(&w.id)) {
            if let Some(num) = parse_id(&w.id) {
                matching.push((num, w.seq));
                current.push((w.seq, w.name.as_str()));
            }
        }
        book.label_counts.sync(&current)
    } else {
        let label_eq = label_equality(&filters);
        for w in workloads.values_mut().filter(|w| !mask.hides(&w.id)) {
            let Some(num) = parse_id(&w.id) else {
                continue;
            };
            let phase = engine.observe(w, now);
            let keep = match label_eq {
                Some(want) => Ok(label_is(&w.name, want)),
                None => instance_matches(w, num, phase, &filters),
            };
            match keep {
                Ok(true) => matching.push((num, w.seq)),
                Ok(false) => {}
                Err(msg) => return bad(format!("Error in query parameters: {msg}")),
            }
        }
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, seq) in &matching {
            if let Some(w) = workloads.get(seq) {
                *counts.entry(w.name.as_str()).or_default() += 1;
            }
        }
        Cow::Owned(serde_json::to_string(&counts).unwrap_or_else(|_| "{}".to_owned()))
    };
    if descending {
        matching.reverse();
    }
    let total = matching.len();
    let start = match after {
        None => 0,
        Some(a) => matching
            .iter()
            .position(|(num, _)| if descending { *num < a } else { *num > a })
            .unwrap_or(total),
    };
    let page = &matching[start.min(total)..(start + limit).min(total)];
    let next_token = if start + page.len() < total {
        page.last().map(|(num, _)| page_token(*num))
    } else {
        None
    };
    let mut instances = Vec::with_capacity(page.len());
    for (_, seq) in page {
        if let Some(w) = workloads.get_mut(seq) {
            let mut obj = render_instance(engine, w, now);
            if let Some(cols) = &select_cols {
                obj = cols
                    .iter()
                    .map(|c| (c.clone(), obj.get(c).cloned().unwrap_or(Value::Null)))
                    .collect();
            }
            instances.push(Value::Object(obj));
        }
    }
    instance_page(&instances, total, &label_counts, next_token.as_deref())
}

/// One instance-list page, byte for byte what `axum::Json` writes for the JSON object (keys in
/// order), around `label_counts` already rendered.
fn instance_page(
    instances: &[Value],
    total: usize,
    label_counts: &str,
    next_token: Option<&str>,
) -> Response {
    let mut body: Vec<u8> = Vec::with_capacity(label_counts.len() + 2048 * instances.len() + 256);
    body.extend_from_slice(br#"{"instances":"#);
    let rendered = serde_json::to_writer(&mut body, instances);
    body.extend_from_slice(br#","instances_found":"#);
    body.extend_from_slice(instances.len().to_string().as_bytes());
    body.extend_from_slice(br#","label_counts":"#);
    body.extend_from_slice(label_counts.as_bytes());
    body.extend_from_slice(br#","next_token":"#);
    let token = serde_json::to_writer(&mut body, &next_token);
    body.extend_from_slice(br#","success":true,"total_instances":"#);
    body.extend_from_slice(total.to_string().as_bytes());
    body.push(b'}');
    if let Err(e) = rendered.and(token) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn manage_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::Action,
            "manage_instance",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
    manage_inner(&s.engine, &id, &body)
}

fn manage_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    if parse_id(id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance id",
        );
    }
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let state = match m.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "running" || s == "stopped" => Some(s.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "state must be 'running' or 'stopped'",
            );
        }
    };
    let label = match m.get("label") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= 1024 => Some(s.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "label must be a string of at most 1024 characters",
            );
        }
    };
    if state.is_none() && label.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "Provide state and/or label",
        );
    }
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let Some(seq) = inner.seq_of(id) else {
        return error(
            StatusCode::NOT_FOUND,
            "no_such_instance",
            "Instance with that ID does not exist.",
        );
    };
    if let Some(label) = label
        && let Some(w) = inner.workloads.get_mut(&seq)
    {
        w.name = label;
    }
    let phase = match inner.workloads.get_mut(&seq) {
        Some(w) => engine.observe(w, now),
        None => return ok(json!({"success": true})),
    };
    match state.as_deref() {
        Some("stopped") => {
            if phase.is_active() || phase == Phase::Preempted {
                engine.stop_locked(&mut inner, seq, StopReason::User);
            } else if let Some(w) = inner.workloads.get_mut(&seq)
                && let Run::Stopped { reason, .. } = &mut w.run
            {
                *reason = StopReason::User;
            }
        }
        Some("running") => match phase {
            // Still outbid: the instance stays stopped until its bid wins again.
            Phase::Preempted => {}
            p if p.is_active() => {}
            _ => {
                if engine.start_locked(&mut inner, seq, now).is_err() {
                    engine.stop_locked(&mut inner, seq, StopReason::WaitingForGpus);
                }
            }
        },
        _ => {}
    }
    ok(json!({"success": true}))
}

async fn destroy_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::Delete,
            "destroy_instance",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
    if parse_id(&id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance_id",
        );
    }
    let removed = {
        let mut inner = s.engine.lock();
        inner
            .seq_of(&id)
            .and_then(|seq| s.engine.remove_locked(&mut inner, seq))
    };
    match removed {
        Some(_) => ok(json!({"success": true, "msg": "Instance destroyed successfully"})),
        None => error(StatusCode::NOT_FOUND, "not_found", "Instance not found"),
    }
}

async fn change_bid(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(RouteKind::Action, "change_bid", presented_key(&headers, &q))
        .await
    {
        return denied(d);
    }
    let m = match parse_body(&body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let price = match m.get("price").and_then(Value::as_f64) {
        Some(p) if (0.001..=32.0).contains(&p) => p,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_args",
                "Please set a bid price >= 0.001.",
            );
        }
    };
    let engine = &s.engine;
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let Some(seq) = inner.seq_of(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "no_such_instance",
            "Instance with that ID does not exist.",
        );
    };
    let resume = match inner.workloads.get_mut(&seq) {
        Some(w) => {
            w.bid_price = Some(price);
            w.interruptible = true;
            matches!(
                &w.run,
                Run::Stopped { reason: StopReason::Preempted { outbid_price }, .. }
                    if outbid_price.is_none_or(|p| price > p)
            )
        }
        None => false,
    };
    if resume && engine.start_locked(&mut inner, seq, now).is_err() {
        engine.stop_locked(&mut inner, seq, StopReason::WaitingForGpus);
    }
    ok(json!({"success": true}))
}

// ---- create -------------------------------------------------------------------------------

const RUNTYPES: &[&str] = &[
    "ssh",
    "jupyter",
    "args",
    "ssh_proxy",
    "ssh_direct",
    "jupyter_proxy",
    "jupyter_direct",
];

async fn create_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(d) = s
        .engine
        .gate_at(
            RouteKind::Create,
            "create_instance",
            presented_key(&headers, &q),
        )
        .await
    {
        return denied(d);
    }
    create_inner(&s.engine, &id, &body)
}

fn invalid_args(msg: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_args", msg)
}

fn create_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    let Some(ask_id) = parse_id(id) else {
        return invalid_args(
            "error 400/3467: Invalid args: 'id' is required and must be a valid offer ID",
        );
    };
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let string = |key: &str| -> Result<Option<String>, Response> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid_args(format!(
                "Invalid args: '{key}' must be a string"
            ))),
        }
    };
    let image = match string("image") {
        Ok(Some(i)) if !i.trim().is_empty() => i,
        Ok(_) => return invalid_args("Invalid args: 'image' is required"),
        Err(r) => return r,
    };
    let label = match string("label") {
        Ok(l) => l.unwrap_or_default(),
        Err(r) => return r,
    };
    let onstart = match string("onstart") {
        Ok(o) => o,
        Err(r) => return r,
    };
    let args_str = match string("args_str") {
        Ok(a) => a,
        Err(r) => return r,
    };
    let disk = match m.get("disk") {
        None | Some(Value::Null) => 8.0,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(d) if d > 0.0 => d,
            _ => return invalid_args("Invalid args: 'disk' must be a positive number"),
        },
        Some(_) => return invalid_args("Invalid args: 'disk' must be a number"),
    };
    let args: Option<Vec<String>> = match m.get("args") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    _ => return invalid_args("Invalid args: 'args' must be a list of strings"),
                }
            }
            Some(out)
        }
        Some(_) => return invalid_args("Invalid args: 'args' must be a list of strings"),
    };
    let runtype = match string("runtype") {
        Ok(Some(r)) if RUNTYPES.contains(&r.as_str()) => r,
        Ok(Some(r)) => return invalid_args(format!("Invalid args: unknown runtype '{r}'")),
        Ok(None) if args.is_some() || args_str.is_some() => "args".to_owned(),
        Ok(None) => "ssh".to_owned(),
        Err(r) => return r,
    };
    let target_state = match string("target_state") {
        Ok(None) => "running".to_owned(),
        Ok(Some(t)) if t == "running" || t == "stopped" => t,
        Ok(Some(_)) => {
            return invalid_args("Invalid args: 'target_state' must be 'running' or 'stopped'");
        }
        Err(r) => return r,
    };
    let price = match m.get("price") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(p) if (0.001..=128.0).contains(&p) => Some(p),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_price",
                    "Bid price must be between 0.001 and 128 $/hour",
                );
            }
        },
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_price",
                "Bid price must be a number",
            );
        }
    };
    for flag in [
        "cancel_unavail",
        "vm",
        "use_jupyter_lab",
        "python_utf8",
        "lang_utf8",
        "force",
    ] {
        if let Some(v) = m.get(flag)
            && !v.is_boolean()
            && !v.is_null()
        {
            return invalid_args(format!("Invalid args: '{flag}' must be a boolean"));
        }
    }
    let env = match parse_env(m.get("env").unwrap_or(&Value::Null)) {
        Ok(e) => e,
        Err(msg) => return invalid_args(format!("Invalid args: {msg}")),
    };
    // Input limits: `x-input-validation` of vast-ai/docs
    // `api-reference/openapi/yaml/create_instance.yaml` (image 1024, label 256, args + args_str
    // + onstart 4096, each env entry 256 and 32768 in all, disk >= 8). The spec gives no message
    // text: the documented 400 `invalid_args` shape is used, naming the limit.
    let chars = |s: &str| s.chars().count();
    if chars(&image) > 1024 {
        return invalid_args("Invalid args: 'image' is limited to 1024 characters");
    }
    if chars(&label) > 256 {
        return invalid_args("Invalid args: 'label' is limited to 256 characters");
    }
    let args_len = onstart.as_deref().map_or(0, chars)
        + args_str.as_deref().map_or(0, chars)
        + args.iter().flatten().map(|a| chars(a)).sum::<usize>();
    if args_len > 4096 {
        return invalid_args(
            "Invalid args: args, args_str and onstart are limited to 4096 characters together",
        );
    }
    let mut env_total = 0;
    for (k, v) in env.vars.iter().map(|(k, v)| (k.clone(), v.clone())).chain(
        env.ports
            .iter()
            .map(|p| (format!("-p {p}"), "1".to_owned())),
    ) {
        let entry = chars(&k) + 1 + chars(&v);
        if entry > 256 {
            return invalid_args(format!(
                "Invalid args: env entry '{k}' is limited to 256 characters"
            ));
        }
        env_total += entry;
    }
    if env_total > 32768 {
        return invalid_args("Invalid args: env is limited to 32768 characters in total");
    }
    if disk < 8.0 {
        return invalid_args("Invalid args: 'disk' must be at least 8 GB");
    }
    let args_vec: Vec<String> = match (&args, &args_str) {
        (Some(a), _) => a.clone(),
        (None, Some(s)) => query::split_words(s),
        (None, None) => Vec::new(),
    };
    let (command, keep_alive) = if runtype == "args" {
        let cmd = match (&args, &args_str) {
            (Some(a), _) if !a.is_empty() => Some(crate::util::shell_join(a)),
            (_, Some(s)) if !s.trim().is_empty() => Some(s.clone()),
            _ => None,
        };
        // With runtype `args`, `onstart` is the entrypoint override (vast-ai/vast-cli
        // `vast.py` sends `--entrypoint` as `onstart`: "override the entrypoint to bash ...
        // --onstart-cmd 'bash' --args -c '...'"); the args follow it.
        let cmd = match onstart.as_deref().map(str::trim).filter(|o| !o.is_empty()) {
            Some(entry) => Some(match cmd {
                Some(rest) => format!("{} {rest}", crate::util::shell_join(&[entry])),
                None => crate::util::shell_join(&[entry]),
            }),
            None => cmd,
        };
        (cmd, false)
    } else {
        (onstart.clone().filter(|o| !o.trim().is_empty()), true)
    };

    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    // An offer rented by someone else (or whose machine changed) is refused with 404/410
    // `no_such_ask`, and the client tries the next offer (vast-ai/docs api-reference/openapi.yaml,
    // `PUT /api/v0/asks/{id}/`): a refused call, counted under `create` but not `created`.
    let no_such_ask = |status: StatusCode| {
        (
            status,
            axum::Json(json!({
                "success": false,
                "error": if status == StatusCode::GONE { "no_such_ask" } else { "invalid_args" },
                "msg": if status == StatusCode::GONE {
                    format!("error 410/3907: no_such_ask Instance type {ask_id} is no longer available.")
                } else {
                    format!("error 404/3603: no_such_ask Instance type by id {ask_id} is not available.")
                },
                "ask_id": ask_id,
            })),
        )
            .into_response()
    };
    let Some(key) = inner.vast.offers.get(&ask_id).copied() else {
        return no_such_ask(StatusCode::NOT_FOUND);
    };
    let Some((stock, machine)) = inner.inventory.machine(key.machine_id) else {
        return no_such_ask(StatusCode::NOT_FOUND);
    };
    if machine.epoch != key.epoch || machine.free() < key.num_gpus {
        return no_such_ask(StatusCode::NOT_FOUND);
    }
    let gpu_type = stock.gpu_type.clone();
    let dph = stock.price_per_hour * f64::from(key.num_gpus);
    if let Some(p) = price
        && p < round4(dph * 0.5)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_price",
            format!(
                "Bid price ${p:.4}/hr is below this offer's minimum bid ${:.4}/hr",
                round4(dph * 0.5)
            ),
        );
    }
    let extra = InstanceExtra {
        runtype,
        disk,
        onstart,
        args: args_vec,
        env_pairs: env.vars.clone(),
        ports: env.ports.clone(),
        offer_id: ask_id,
    };
    let new = NewWorkload {
        name: label,
        image,
        env: env.vars.into_iter().collect(),
        gpu_type,
        gpu_count: key.num_gpus,
        command,
        keep_alive,
        interruptible: price.is_some(),
        bid_price: price,
        machine_id: Some(key.machine_id),
        start_stopped: target_state == "stopped",
        extra: Extra::Vast(Box::new(extra)),
        ..NewWorkload::default()
    };
    match engine.create_locked(&mut inner, new, now) {
        Ok(seq) => {
            inner.gate.note_created();
            let id = inner
                .workloads
                .get(&seq)
                .and_then(|w| parse_id(&w.id))
                .unwrap_or(0);
            ok(json!({"success": true, "new_contract": id}))
        }
        Err(_) => no_such_ask(StatusCode::NOT_FOUND),
    }
}

// ---- logs ---------------------------------------------------------------------------------

async fn request_logs(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(d) = s
        .engine
        .gate(RouteKind::Logs, presented_key(&headers, &q))
        .await
    {
        return denied(d);
    }
    let m = match parse_body(&body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let tail = match m.get("tail") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => match t.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return invalid_args("Invalid args: 'tail' must be a number"),
        },
        Some(Value::Number(n)) => n.as_u64().map(|n| n as usize),
        Some(_) => return invalid_args("Invalid args: 'tail' must be a number"),
    };
    let filter = match m.get("filter") {
        None | Some(Value::Null) => None,
        Some(Value::String(f)) if !f.is_empty() => Some(f.clone()),
        Some(Value::String(_)) => None,
        Some(_) => return invalid_args("Invalid args: 'filter' must be a string"),
    };
    let daemon = matches!(m.get("daemon_logs"), Some(Value::String(d)) if d == "true")
        || matches!(m.get("daemon_logs"), Some(Value::Bool(true)));
    let source = if daemon {
        LogSource::System
    } else {
        LogSource::Container
    };
    let Some((lines, _)) = s.engine.logs(&id, 0, Some(source), None) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "invalid_id", "msg": "Invalid instance id."})),
        )
            .into_response();
    };
    let mut text: Vec<String> = lines
        .into_iter()
        .map(|l| l.line)
        .filter(|l| filter.as_ref().is_none_or(|f| l.contains(f.as_str())))
        .collect();
    if let Some(t) = tail {
        let skip = text.len().saturating_sub(t);
        text.drain(..skip);
    }
    let mut body_text = text.join("\n");
    if !body_text.is_empty() {
        body_text.push('\n');
    }
    let token = s.engine.lock().vast.store_snapshot(body_text);
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    ok(json!({
        "success": true,
        "result_url": format!("http://{host}/_s3/instance_logs/{token}.log"),
        "msg": "Logs will be uploaded to the result_url shortly.",
    }))
}

/// The presigned "S3" object behind a `result_url` (no authentication, like a presigned URL).
async fn fetch_log_snapshot(AxState(s): AxState<State>, Path(file): Path<String>) -> Response {
    let token = file.trim_end_matches(".log");
    let text = s.engine.lock().vast.snapshots.get(token).cloned();
    match text {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/xml")],
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::GpuStock;
    use proptest::prelude::*;

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
        let one =
            (op, scalar(), prop::collection::vec(scalar(), 0..3)).prop_map(|(op, v, list)| {
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
}
