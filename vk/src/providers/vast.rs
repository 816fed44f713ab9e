//! Vast.ai adapter: one Vast instance per workload, labelled with the workload id, rented from
//! the cheapest matching offer (on demand, or as an interruptible bid).
//!
//! Contract, verified in `api-reference/openapi.yaml` and
//! `api-reference/creating-instances-with-api.mdx` of the vast-ai/docs repository:
//! - Base `https://console.vast.ai`, `Authorization: Bearer <key>`. Paths are sent with the
//!   trailing slash the docs' examples use.
//! - `POST /api/v0/bundles/` searches offers with filters `{"field": {"op": value}}` (`eq`,
//!   `gte`, `lte`, `in`, ...), `type` (`ondemand` | `bid`), `order` and `limit`; answers
//!   `{"offers": [{id, gpu_name, num_gpus, dph_total, min_bid, ...}]}`.
//! - `PUT /api/v0/asks/{offer_id}/` rents an offer: `image`, `label`, `disk` (GB), `runtype`,
//!   `target_state`, `args_str`, `env` (an object; ports as `"-p 8080:8080": "1"`), `price`
//!   (the bid, which makes the instance interruptible); answers `{success, new_contract}`;
//!   404 / 410 (`no_such_ask`) when the offer is gone.
//! - `GET /api/v1/instances/` lists instances, keyset-paginated (at most 25 a page,
//!   `next_token`, `after_token`), with `select_filters` (e.g. on `label`). `GET
//!   /api/v0/instances/` is deprecated (410 for newer accounts) and not used.
//! - Instances carry `id`, `label`, `actual_status` (null, loading, created, running, stopped,
//!   frozen, exited, rebooting, unknown, offline), `intended_status`, `cur_state`,
//!   `status_msg`, `is_bid`, `start_date` (epoch seconds), `public_ipaddr`.
//! - `DELETE /api/v0/instances/{id}/` destroys an instance (404 `not_found`).
//! - `PUT /api/v0/instances/request_logs/{id}/` with `{"tail": "N"}` answers `{success,
//!   result_url}`; the log text is then downloaded from `result_url` (S3), which can take a
//!   few seconds to appear.
//! - Errors are `{success: false, error, msg}`; rate limiting is 429 `{detail: "API requests
//!   too frequent ..."}`. An invalid key is reported as 401, 403, or even 404 with
//!   `error: auth_error` / "Invalid user key" (offer search), so the body wins over the status.
//!
//! Decisions and assumptions:
//! - The OpenAPI file types the create `env` as a Docker-flag string while the instance guide
//!   (and the CLI) send an object; the object form is used.
//! - `runtype` is `args`: the image's ENTRYPOINT is kept and `args_str` (command and args,
//!   shell-quoted) replaces its CMD, so the container exits when the workload does. Vast has
//!   no exit code in its API: `exited` is Succeeded unless `status_msg` reads like an error.
//! - State mapping: null -> Queued; loading / created -> Starting; running -> Running;
//!   rebooting / frozen -> NotReady; stopped while intended running -> Preempted for a bid,
//!   NotReady for on-demand; stopped or exited while intended stopped (we never stop
//!   instances) -> Failed(Evicted); exited -> Succeeded / Failed(Error); offline -> Lost (the
//!   docs: it never comes back to running); unknown or anything else -> Unknown{raw}.
//! - Bid price: the pod's `bid_price` option, else the offer's `min_bid` (else its
//!   `dph_total`); offers above `maxPricePerHour` are never rented, and a `bid_price` above it
//!   is an invalid request.
//! - Idempotent create: one `GET /api/v1/instances/` filtered on the label before renting.
//! - A transient failure while renting stops the offer loop (the rent may have happened); the
//!   framework retries and the label lookup prevents a second instance.
//! - Concurrent creates see the same cheapest offers, and an offer rents once. So that they
//!   spread out instead of racing, a create claims the offer it tries (in this process), skips
//!   offers claimed by another create, and keeps the claim for [`CLAIM_TTL`] once the offer is
//!   rented (or may have been) or found gone, as search results may lag behind; a rent that
//!   fails otherwise (or is cancelled) releases its claim. The search `limit` grows by the
//!   number of other creates renting at the time (up to [`MAX_SEARCH_LIMIT`]) so that each
//!   can find an offer of its own. When every matching offer is claimed (being rented by
//!   another create, or rented or found gone by one a moment ago: the search predates the
//!   rent), or every offer tried was gone while others were being rented, the create fails as
//!   transient (a new search shortly finds what is left), not as capacity; no matching offer
//!   at all, or only gone offers, is capacity.
//! - Logs are a snapshot: `follow` ends after the snapshot, `since`/`timestamps` are not
//!   supported by the API, `previous` is unsupported.
//!
//! Pod options read from the workload: `interruptible` (bool), `bid_price` ($/h),
//! `max_price_per_hour`, `region` / `geolocation` (comma-separated country codes), `disk_gb`.

use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::http::{self, Bearer, Client, InitError, RawResponse};
use super::options::{Options, shell_join};
use super::rest::{self, NumOrString, lenient};
use crate::naming::{Owner, WorkloadId};
use crate::provider::{
    Capabilities, FailureReason, LogOptions, LogStream, Observed, Provider, ProviderError,
    Workload, WorkloadState,
};

/// Default API root.
pub const DEFAULT_BASE_URL: &str = "https://console.vast.ai";

/// Exit code reported when Vast says a container exited with an error (it exposes none).
const ERROR_EXIT_CODE: i32 = 1;
/// Page size of `GET /api/v1/instances/` (the API's maximum).
const PAGE_SIZE: u32 = 25;
/// Safety bound on pagination (25 * 4000 = 100 000 instances).
const MAX_PAGES: usize = 4000;
/// How long an offer this process rented, or found gone, is skipped: searches may still list it.
pub const CLAIM_TTL: Duration = Duration::from_secs(30);
/// Ceiling of the search `limit` when it grows for concurrent creates (unless `searchLimit` is
/// higher).
pub const MAX_SEARCH_LIMIT: u32 = 1000;
/// `retry_after` of a create that found every matching offer being rented by another create.
pub const CONTENDED_RETRY: Duration = Duration::from_secs(1);
/// Searches a create makes while every matching offer is held by other creates of this
/// process, before it gives up with a transient error.
pub const CONTENTION_ROUNDS: u32 = 4;
/// Pause before the n-th new search under contention: n times this, ±50 %.
const CONTENTION_PAUSE: Duration = Duration::from_millis(100);

/// How one search-and-rent attempt ended, when it did not fail.
enum Rent {
    Done,
    /// Every matching offer was held by other creates: the error to report if it persists.
    Contended(ProviderError),
}

/// The `settings` of a Vast provider in the VK configuration.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VastConfig {
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The API key, resolved by the caller (never part of the settings file); see
    /// [`VastConfig::with_api_key`].
    #[serde(skip)]
    pub api_key: String,
    /// Neutral GPU type (e.g. `RTX4090`) to Vast `gpu_name` (e.g. `RTX 4090`). Types not
    /// listed are searched verbatim.
    #[serde(default)]
    pub gpu_names: BTreeMap<String, String>,
    /// Neutral GPU type used when a pod asks for "any" GPU; unset searches every type.
    #[serde(default)]
    pub default_gpu_type: Option<String>,
    /// Container disk in GB.
    #[serde(default = "default_disk_gb")]
    pub disk_gb: f64,
    /// Highest total $/hour an instance may cost (on demand) or be bid at.
    #[serde(default)]
    pub max_price_per_hour: Option<f64>,
    /// Rent interruptible (bid) instances unless a pod says otherwise.
    #[serde(default)]
    pub interruptible: bool,
    /// Only rent verified machines.
    #[serde(default = "yes")]
    pub verified_only: bool,
    /// Offers returned by one search.
    #[serde(default = "default_search_limit")]
    pub search_limit: u32,
    /// Offers tried (cheapest first) before giving up with a capacity error.
    #[serde(default = "default_max_offers")]
    pub max_offers_tried: usize,
    #[serde(default = "default_max_gpus")]
    pub max_gpus_per_workload: u32,
    /// Whole-request timeout, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Attempts to download a requested log file before giving up.
    #[serde(default = "default_log_attempts")]
    pub log_fetch_attempts: u32,
    /// Pause between log download attempts, milliseconds.
    #[serde(default = "default_log_interval_ms")]
    pub log_fetch_interval_ms: u64,
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.to_owned()
}
fn default_disk_gb() -> f64 {
    20.0
}
fn yes() -> bool {
    true
}
fn default_search_limit() -> u32 {
    20
}
fn default_max_offers() -> usize {
    5
}
fn default_max_gpus() -> u32 {
    8
}
fn default_timeout_secs() -> u64 {
    30
}
fn default_log_attempts() -> u32 {
    10
}
fn default_log_interval_ms() -> u64 {
    1000
}

impl Default for VastConfig {
    fn default() -> Self {
        Self {
            base_url: default_base_url(),
            api_key: String::new(),
            gpu_names: BTreeMap::new(),
            default_gpu_type: None,
            disk_gb: default_disk_gb(),
            max_price_per_hour: None,
            interruptible: false,
            verified_only: true,
            search_limit: default_search_limit(),
            max_offers_tried: default_max_offers(),
            max_gpus_per_workload: default_max_gpus(),
            request_timeout_secs: default_timeout_secs(),
            log_fetch_attempts: default_log_attempts(),
            log_fetch_interval_ms: default_log_interval_ms(),
        }
    }
}

impl VastConfig {
    /// Parses the provider's `settings` value; an absent (null) value means all defaults.
    pub fn from_settings(settings: &serde_yaml::Value) -> Result<Self, serde_yaml::Error> {
        super::registry::decode_settings(settings)
    }

    /// Sets the API key resolved by the caller.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = api_key.into();
        self
    }
}

impl fmt::Debug for VastConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VastConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("gpu_names", &self.gpu_names)
            .field("default_gpu_type", &self.default_gpu_type)
            .field("disk_gb", &self.disk_gb)
            .field("max_price_per_hour", &self.max_price_per_hour)
            .field("interruptible", &self.interruptible)
            .field("verified_only", &self.verified_only)
            .field("search_limit", &self.search_limit)
            .field("max_offers_tried", &self.max_offers_tried)
            .field("max_gpus_per_workload", &self.max_gpus_per_workload)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("log_fetch_attempts", &self.log_fetch_attempts)
            .field("log_fetch_interval_ms", &self.log_fetch_interval_ms)
            .finish()
    }
}

/// The Vast.ai adapter.
#[derive(Debug)]
pub struct Vast {
    name: String,
    cfg: VastConfig,
    owner: Owner,
    api: Client<Bearer>,
    claims: Claims,
}

/// Offers claimed by this adapter's creates (see the module docs), and how many creates are
/// between their offer search and the end of their rent.
#[derive(Debug, Default)]
struct Claims {
    state: Mutex<ClaimState>,
}

#[derive(Debug, Default)]
struct ClaimState {
    offers: HashMap<u64, Claim>,
    renters: usize,
}

/// Why an offer is claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// A create of this process is renting it.
    Renting,
    /// Rented, or found gone: skipped until `until`.
    Taken { until: Instant },
}

impl Claims {
    fn lock(&self) -> MutexGuard<'_, ClaimState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a create about to search and rent (until the guard drops); returns it with
    /// the number of other creates doing so. Forgets expired claims.
    fn enter(&self, now: Instant) -> (Renter<'_>, usize) {
        let mut state = self.lock();
        state.offers.retain(|_, c| match c {
            Claim::Renting => true,
            Claim::Taken { until } => *until > now,
        });
        let others = state.renters;
        state.renters += 1;
        (Renter { claims: self }, others)
    }

    /// Claims `offer` for a rent, or says who holds it.
    fn claim(&self, offer: u64, now: Instant) -> Result<OfferClaim<'_>, Claim> {
        let mut state = self.lock();
        match state.offers.get(&offer) {
            Some(Claim::Taken { until }) if *until <= now => {}
            Some(held) => return Err(*held),
            None => {}
        }
        state.offers.insert(offer, Claim::Renting);
        Ok(OfferClaim {
            claims: self,
            offer,
            kept: false,
        })
    }
}

/// A create between its offer search and the end of its rent.
struct Renter<'a> {
    claims: &'a Claims,
}

impl Drop for Renter<'_> {
    fn drop(&mut self) {
        let mut state = self.claims.lock();
        state.renters = state.renters.saturating_sub(1);
    }
}

/// The claim of a rent in flight: released when dropped unless kept.
struct OfferClaim<'a> {
    claims: &'a Claims,
    offer: u64,
    kept: bool,
}

impl OfferClaim<'_> {
    /// The offer was rented or is gone: other creates skip it for [`CLAIM_TTL`].
    fn keep(mut self, now: Instant) {
        self.kept = true;
        self.claims.lock().offers.insert(
            self.offer,
            Claim::Taken {
                until: now + CLAIM_TTL,
            },
        );
    }
}

impl Drop for OfferClaim<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut state = self.claims.lock();
        if state.offers.get(&self.offer) == Some(&Claim::Renting) {
            state.offers.remove(&self.offer);
        }
    }
}

/// What to rent for one workload, resolved from the workload and the configuration.
#[derive(Debug)]
struct Plan {
    search: OfferSearch,
    request: CreateInstanceRequest,
    /// `Some` for an interruptible rent: the explicit bid, if the pod gave one.
    bid: Option<Option<f64>>,
    max_price: Option<f64>,
}

impl Vast {
    /// Builds the adapter. The process must have installed a rustls crypto provider.
    pub fn new(name: String, cfg: VastConfig, owner: Owner) -> Result<Self, InitError> {
        let bad = |reason: &str| InitError::InvalidSetting {
            provider: name.clone(),
            reason: reason.into(),
        };
        if !(cfg.disk_gb.is_finite() && cfg.disk_gb > 0.0) {
            return Err(bad("diskGb must be positive"));
        }
        if cfg
            .max_price_per_hour
            .is_some_and(|p| !(p.is_finite() && p > 0.0))
        {
            return Err(bad("maxPricePerHour must be positive"));
        }
        if cfg.max_offers_tried == 0 || cfg.search_limit == 0 {
            return Err(bad("maxOffersTried and searchLimit must be positive"));
        }
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        let auth = Bearer::new(&name, &cfg.api_key)?;
        let api = Client::new(&name, &cfg.base_url, auth, timeout)?;
        Ok(Self {
            name,
            cfg,
            owner,
            api,
            claims: Claims::default(),
        })
    }

    /// Resolves the search and the rent request; pure, checked before any network call.
    fn plan(&self, w: &Workload) -> Result<Plan, ProviderError> {
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
        let bid_price = options.positive("bid_price")?;
        let max_price = options
            .positive("max_price_per_hour")?
            .or(self.cfg.max_price_per_hour);
        if let (Some(bid), Some(max)) = (bid_price, max_price)
            && interruptible
            && bid > max
        {
            return Err(invalid(format!(
                "bid_price {bid} is above the maximum of {max} $/h"
            )));
        }
        let disk = options.positive("disk_gb")?.unwrap_or(self.cfg.disk_gb);
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

    /// Instances whose label matches `select_filters`, following pagination.
    async fn instances(
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
            let resp = self.api.send(Method::GET, url, None).await?;
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

    async fn search_offers(&self, search: &OfferSearch) -> Result<Vec<Offer>, ProviderError> {
        let body = serde_json::to_value(search).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the search: {e}"),
        })?;
        let url = self.api.url(&["api", "v0", "bundles"], true);
        let resp = self.api.send(Method::POST, url, Some(&body)).await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let found: OfferList = resp.json("offer search")?;
        let items = match found.offers {
            serde_json::Value::Array(items) => items,
            one @ serde_json::Value::Object(_) => vec![one],
            serde_json::Value::Null => Vec::new(),
            _ => {
                return Err(ProviderError::transient(
                    "malformed offer search response: offers is not a list",
                ));
            }
        };
        Ok(items
            .into_iter()
            .filter_map(|v| serde_json::from_value::<Offer>(v).ok())
            .filter(|o| o.id.is_some())
            .collect())
    }

    /// Maps an unsuccessful answer (or a 200 with `success: false`) to a [`ProviderError`].
    fn error_from(&self, resp: &RawResponse) -> ProviderError {
        let body: Option<VastError> = serde_json::from_slice(&resp.body).ok();
        let code = body
            .as_ref()
            .and_then(|b| b.error.clone())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let text = body
            .as_ref()
            .and_then(|b| {
                b.msg
                    .clone()
                    .or_else(|| b.detail.clone())
                    .or_else(|| b.error.clone())
            })
            .unwrap_or_else(|| resp.text_snippet());
        let text = resp.detail_or_reason(text);
        let message = resp.message("Vast", &text);
        let lower = text.to_ascii_lowercase();
        if code == "auth_error"
            || lower.contains("invalid user key")
            || lower.contains("api key not provided")
        {
            return ProviderError::Auth { message };
        }
        if code.contains("insufficient")
            || lower.contains("insufficient credit")
            || lower.contains("insufficient balance")
            || lower.contains("insufficient funds")
        {
            return ProviderError::Capacity { message };
        }
        if code == "rate_limit_exceeded" || lower.contains("too frequent") {
            return ProviderError::Transient {
                message,
                retry_after: resp.retry_after,
            };
        }
        if resp.status.is_success() {
            // A 200 that says `success: false`.
            return match code.as_str() {
                "not_found" | "no_such_instance" | "invalid_id" => ProviderError::NotFound,
                _ => ProviderError::Invalid { message },
            };
        }
        http::classify_status(resp.status, resp.retry_after, message)
    }

    fn instance_id(provider_id: &str) -> Result<u64, ProviderError> {
        provider_id
            .trim()
            .parse::<u64>()
            .map_err(|_| ProviderError::Invalid {
                message: format!("{provider_id:?} is not a Vast instance id"),
            })
    }

    /// Requests a log upload and downloads it.
    async fn fetch_logs(&self, id: u64, opts: &LogOptions) -> Result<Bytes, ProviderError> {
        let url = self.api.url(
            &["api", "v0", "instances", "request_logs", &id.to_string()],
            true,
        );
        let body = match opts.tail_lines {
            Some(n) => serde_json::json!({ "tail": n.to_string() }),
            None => serde_json::json!({}),
        };
        let resp = self.api.send(Method::PUT, url, Some(&body)).await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let answer: LogRequestAnswer = resp.json("log request")?;
        if answer.success == Some(false) {
            return Err(self.error_from(&resp));
        }
        let raw_url = answer.result_url.ok_or_else(|| {
            ProviderError::transient("Vast log request answered without result_url")
        })?;
        let base = self.api.url(&[], false);
        let result_url = base
            .join(&raw_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"));
        let result_url = result_url.ok_or_else(|| {
            ProviderError::transient("Vast log request answered with an unusable result_url")
        })?;
        self.download(result_url).await
    }

    /// Downloads an uploaded log file, waiting while it is not there yet.
    async fn download(&self, url: Url) -> Result<Bytes, ProviderError> {
        let attempts = self.cfg.log_fetch_attempts.max(1);
        let pause = Duration::from_millis(self.cfg.log_fetch_interval_ms);
        let mut last = String::new();
        for attempt in 1..=attempts {
            let resp = self.api.fetch_unauthenticated(url.clone()).await?;
            if resp.is_success() {
                return Ok(resp.body);
            }
            // S3 answers 403/404 until the upload has landed.
            if !matches!(resp.status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN) {
                return Err(ProviderError::Transient {
                    message: format!("Vast log download failed: HTTP {}", resp.status.as_u16()),
                    retry_after: resp.retry_after,
                });
            }
            last = format!("HTTP {}", resp.status.as_u16());
            if attempt < attempts {
                tokio::time::sleep(pause).await;
            }
        }
        Err(ProviderError::transient(format!(
            "Vast logs were not uploaded after {attempts} attempts ({last})"
        )))
    }

    /// One search and rent attempt.
    async fn rent(&self, w: &Workload, plan: &mut Plan) -> Result<Rent, ProviderError> {
        // From here until the rent ends, other creates widen their search for this one.
        let (_renter, others) = self.claims.enter(Instant::now());
        plan.search.limit = self
            .cfg
            .search_limit
            .saturating_add(u32::try_from(others).unwrap_or(u32::MAX))
            .min(MAX_SEARCH_LIMIT.max(self.cfg.search_limit));
        let mut offers = self.search_offers(&plan.search).await?;
        offers.retain(|o| {
            let price = if plan.bid.is_some() {
                o.min_bid.or(o.dph_total)
            } else {
                o.dph_total
            };
            let within_max = match (plan.max_price, price) {
                (Some(max), Some(p)) => p <= max,
                _ => true,
            };
            let bid_ok = match (plan.bid, o.min_bid) {
                (Some(Some(bid)), Some(min)) => bid >= min,
                _ => true,
            };
            within_max && bid_ok
        });
        offers.sort_by(|a, b| {
            let pa = a.dph_total.unwrap_or(f64::INFINITY);
            let pb = b.dph_total.unwrap_or(f64::INFINITY);
            pa.total_cmp(&pb)
        });
        if offers.is_empty() {
            return Err(ProviderError::Capacity {
                message: format!(
                    "no Vast offer matches {} x {} ({}){}",
                    plan.search.num_gpus.eq.unwrap_or_default(),
                    plan.search
                        .gpu_name
                        .as_ref()
                        .and_then(|f| f.one_of.as_ref())
                        .map_or("any GPU".to_owned(), |v| v.join("|")),
                    plan.search.kind,
                    plan.max_price
                        .map_or(String::new(), |p| format!(" at or below ${p}/h")),
                ),
            });
        }

        let (mut tried, mut gone, mut renting_elsewhere) = (0usize, 0usize, 0usize);
        for offer in &offers {
            if tried >= self.cfg.max_offers_tried {
                break;
            }
            let Some(offer_id) = offer.id else { continue };
            let claim = match self.claims.claim(offer_id, Instant::now()) {
                Ok(claim) => claim,
                Err(held) => {
                    if held == Claim::Renting {
                        renting_elsewhere += 1;
                    }
                    continue;
                }
            };
            tried += 1;
            let mut request = plan.request.clone();
            request.price = match plan.bid {
                Some(explicit) => explicit.or(offer.min_bid).or(offer.dph_total),
                None => None,
            };
            let body = serde_json::to_value(&request).map_err(|e| ProviderError::Invalid {
                message: format!("cannot encode the request: {e}"),
            })?;
            let url = self
                .api
                .url(&["api", "v0", "asks", &offer_id.to_string()], true);
            let resp = self.api.send(Method::PUT, url, Some(&body)).await?;
            let answer: Option<CreateInstanceAnswer> = serde_json::from_slice(&resp.body).ok();
            if resp.is_success() && answer.as_ref().is_some_and(|a| a.success != Some(false)) {
                claim.keep(Instant::now());
                info!(provider = %self.name, workload = %w.id, offer = offer_id,
                      instance = ?answer.and_then(|a| a.new_contract), "rented Vast instance");
                return Ok(Rent::Done);
            }
            let code = answer
                .as_ref()
                .and_then(|a| a.error.clone())
                .unwrap_or_default();
            let offer_gone = matches!(resp.status.as_u16(), 404 | 410) || code == "no_such_ask";
            let err = self.error_from(&resp);
            if offer_gone && !matches!(err, ProviderError::Auth { .. }) {
                debug!(provider = %self.name, workload = %w.id, offer = offer_id, "offer is gone; trying the next one");
                claim.keep(Instant::now());
                gone += 1;
                continue;
            }
            if resp.is_success() && answer.is_none() {
                // 200 with an unreadable body: the rent may have happened; let the retry's
                // label lookup find out.
                claim.keep(Instant::now());
                return Err(ProviderError::transient(
                    "Vast rent answered 2xx with an unreadable body",
                ));
            }
            return Err(err);
        }
        if tried == 0 || renting_elsewhere > 0 {
            // Offers match, but other creates of this process hold them or just rented them
            // (the search predates the rent): a new search shortly finds what is left.
            return Ok(Rent::Contended(ProviderError::Transient {
                message: format!(
                    "the matching Vast offers are taken by other creates ({renting_elsewhere} \
                     being rented){}",
                    if gone > 0 {
                        format!("; the {gone} tried were gone")
                    } else {
                        String::new()
                    }
                ),
                retry_after: Some(CONTENDED_RETRY),
            }));
        }
        Err(ProviderError::Capacity {
            message: format!("all {gone} Vast offers tried were gone before they could be rented"),
        })
    }
}

impl Provider for Vast {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            gpu_types: self.cfg.gpu_names.keys().cloned().collect(),
            max_gpus_per_workload: self.cfg.max_gpus_per_workload,
            logs: true,
            exec: false,
            metrics: false,
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        super::ensure_owned(&self.owner, w)?;
        let mut plan = self.plan(w)?;

        let filter = serde_json::json!({ "label": { "eq": w.id.as_str() } });
        let existing = self.instances(Some(&filter)).await?;
        if let Some(inst) = existing
            .iter()
            .find(|i| i.label.as_deref() == Some(w.id.as_str()))
        {
            info!(provider = %self.name, workload = %w.id, instance = ?inst.id, "workload already exists; not creating it again");
            return Ok(());
        }

        // Contention with this process's own creates is waited out here, with fresh searches,
        // rather than surfaced: a transient error would cost the pod a status write and an
        // event about something no user can act on.
        let mut round = 0u32;
        loop {
            match self.rent(w, &mut plan).await? {
                Rent::Done => return Ok(()),
                Rent::Contended(e) if round + 1 >= CONTENTION_ROUNDS => return Err(e),
                Rent::Contended(_) => {
                    round += 1;
                    let jitter = rand::rng().random_range(0.5..1.5);
                    tokio::time::sleep(CONTENTION_PAUSE.mul_f64(f64::from(round) * jitter)).await;
                }
            }
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let id = Self::instance_id(provider_id)?;
        let url = self
            .api
            .url(&["api", "v0", "instances", &id.to_string()], true);
        let resp = self.api.send(Method::DELETE, url, None).await?;
        if resp.is_success() {
            let answer: Option<VastError> = serde_json::from_slice(&resp.body).ok();
            if answer.as_ref().and_then(|a| a.success) == Some(false) {
                return Err(self.error_from(&resp));
            }
            info!(provider = %self.name, instance = id, "destroyed Vast instance");
            return Ok(());
        }
        Err(self.error_from(&resp))
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let instances = self.instances(None).await?;
        Ok(instances
            .into_iter()
            .filter_map(|i| observe(&self.name, i))
            .collect())
    }

    async fn logs(&self, provider_id: &str, opts: &LogOptions) -> Result<LogStream, ProviderError> {
        if opts.previous {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "logs of a previous container".into(),
            });
        }
        let id = Self::instance_id(provider_id)?;
        let mut text = self.fetch_logs(id, opts).await?;
        if let Some(limit) = opts.limit_bytes.and_then(|l| usize::try_from(l).ok()) {
            text.truncate(limit);
        }
        let stream: LogStream = Box::pin(futures::stream::iter([Ok(text)]));
        Ok(stream)
    }
}

/// Translates one listed instance; `None` when its label is not a workload id.
fn observe(provider: &str, inst: Instance) -> Option<Observed> {
    let id = WorkloadId::parse(inst.label.as_deref()?)?;
    let Some(provider_id) = inst
        .id
        .as_ref()
        .map(ToString::to_string)
        .filter(|s| !s.is_empty())
    else {
        warn!(provider, workload = %id, "listed instance has no id; ignoring it");
        return None;
    };
    let state = state_of(&inst);
    if let WorkloadState::Unknown { raw } = &state {
        warn!(provider, workload = %id, actual_status = %raw, "unknown Vast instance status");
    }
    let message = inst
        .status_msg
        .clone()
        .map(|m| http::truncate(m.trim()))
        .filter(|m| !m.is_empty());
    Some(Observed {
        id,
        provider_id,
        state,
        message,
        created_at: inst.start_date.and_then(rest::timestamp_from_epoch),
        started_at: None,
        finished_at: None,
        ip: inst
            .public_ipaddr
            .clone()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        provider_restarts: 0,
        usage: None,
    })
}

/// The instance state in the framework's closed set (mapping in the module docs).
fn state_of(inst: &Instance) -> WorkloadState {
    let actual = match &inst.actual_status {
        None | Some(serde_json::Value::Null) => "",
        Some(serde_json::Value::String(s)) => s.trim(),
        Some(other) => {
            return WorkloadState::Unknown {
                raw: other.to_string(),
            };
        }
    };
    let intended_running = inst
        .intended_status
        .as_deref()
        .is_none_or(|s| s == "running");
    let msg = inst
        .status_msg
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    match actual {
        "" | "null" => WorkloadState::Queued {
            reason: inst.status_msg.clone().filter(|s| !s.is_empty()),
        },
        "loading" | "created" => WorkloadState::Starting,
        "running" => WorkloadState::Running,
        "rebooting" | "frozen" => WorkloadState::NotReady {
            reason: actual.to_owned(),
        },
        "stopped" if intended_running && inst.is_bid == Some(true) => WorkloadState::Preempted,
        "stopped" if intended_running => WorkloadState::NotReady {
            reason: "stopped by the host".into(),
        },
        // We never stop instances: someone else did.
        "stopped" | "exited" if !intended_running => WorkloadState::Failed {
            exit_code: ERROR_EXIT_CODE,
            reason: FailureReason::Evicted,
        },
        "exited" if msg.contains("error") || msg.contains("fail") => WorkloadState::Failed {
            exit_code: ERROR_EXIT_CODE,
            reason: FailureReason::Error,
        },
        "exited" => WorkloadState::Succeeded,
        "offline" => WorkloadState::Lost,
        other => WorkloadState::Unknown {
            raw: other.to_owned(),
        },
    }
}

// ---- wire types -------------------------------------------------------------------------

/// One search condition, `{"eq": ..}`, `{"in": [..]}`, ...
#[derive(Clone, Debug, Serialize)]
struct Filter<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    eq: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gte: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lte: Option<T>,
    #[serde(rename = "in", skip_serializing_if = "Option::is_none")]
    one_of: Option<Vec<T>>,
}

impl<T> Filter<T> {
    fn empty() -> Self {
        Self {
            eq: None,
            gte: None,
            lte: None,
            one_of: None,
        }
    }
    fn eq(v: T) -> Self {
        Self {
            eq: Some(v),
            ..Self::empty()
        }
    }
    fn gte(v: T) -> Self {
        Self {
            gte: Some(v),
            ..Self::empty()
        }
    }
    fn lte(v: T) -> Self {
        Self {
            lte: Some(v),
            ..Self::empty()
        }
    }
    fn one_of(v: Vec<T>) -> Self {
        Self {
            one_of: Some(v),
            ..Self::empty()
        }
    }
}

/// Body of `POST /api/v0/bundles/`.
#[derive(Debug, Serialize)]
struct OfferSearch {
    #[serde(skip_serializing_if = "Option::is_none")]
    verified: Option<Filter<bool>>,
    rentable: Filter<bool>,
    rented: Filter<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_name: Option<Filter<String>>,
    num_gpus: Filter<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dph_total: Option<Filter<f64>>,
    disk_space: Filter<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    geolocation: Option<Filter<String>>,
    #[serde(rename = "type")]
    kind: &'static str,
    order: Vec<[String; 2]>,
    limit: u32,
    allocated_storage: f64,
}

/// `{"offers": [...]}`; the spec's example shows a single object, which is accepted too.
#[derive(Debug, Deserialize)]
struct OfferList {
    offers: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct Offer {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    dph_total: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    min_bid: Option<f64>,
}

/// Body of `PUT /api/v0/asks/{offer_id}/`.
#[derive(Clone, Debug, Serialize)]
struct CreateInstanceRequest {
    image: String,
    label: String,
    disk: f64,
    runtype: &'static str,
    target_state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    args_str: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    price: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct CreateInstanceAnswer {
    #[serde(default, deserialize_with = "lenient")]
    success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    new_contract: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InstancePage {
    #[serde(default, deserialize_with = "lenient")]
    success: Option<bool>,
    /// Required: a page without it is a malformed answer, not an empty account.
    instances: Vec<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    next_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Instance {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<NumOrString>,
    #[serde(default, deserialize_with = "lenient")]
    label: Option<String>,
    /// Kept raw: a non-string status must surface as `Unknown`, not as "no status yet".
    #[serde(default)]
    actual_status: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    intended_status: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    status_msg: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    is_bid: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    start_date: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    public_ipaddr: Option<String>,
}

/// `{success: false, error, msg}`, or `{detail}` on 429.
#[derive(Debug, Deserialize)]
struct VastError {
    #[serde(default, deserialize_with = "lenient")]
    success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    error: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    msg: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    detail: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LogRequestAnswer {
    #[serde(default, deserialize_with = "lenient")]
    success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    result_url: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_are_exclusive_released_on_drop_and_expire() {
        let claims = Claims::default();
        let t0 = Instant::now();
        let first = claims.claim(1, t0).unwrap();
        assert_eq!(claims.claim(1, t0).err(), Some(Claim::Renting));
        let other = claims.claim(2, t0).unwrap();
        // A rent that fails (or is cancelled) frees the offer.
        drop(other);
        let again = claims.claim(2, t0).unwrap();
        // Rented (or gone): skipped for the TTL, then claimable again.
        first.keep(t0);
        assert!(matches!(claims.claim(1, t0), Err(Claim::Taken { .. })));
        let almost = t0 + CLAIM_TTL - Duration::from_millis(1);
        assert!(matches!(claims.claim(1, almost), Err(Claim::Taken { .. })));
        let later = t0 + CLAIM_TTL;
        assert!(claims.claim(1, later).is_ok(), "expired claims are free");
        // Expired claims are forgotten; rents in flight are not.
        again.keep(t0);
        drop(claims.claim(3, t0).unwrap());
        let held = claims.claim(4, t0).unwrap();
        let (renter, others) = claims.enter(t0 + CLAIM_TTL * 2);
        assert_eq!(others, 0);
        assert_eq!(
            claims.lock().offers.keys().copied().collect::<Vec<_>>(),
            [4],
            "only the rent in flight is left"
        );
        drop(held);
        assert!(claims.lock().offers.is_empty());
        // Creates between search and rent are counted while their guard lives.
        let (second, others) = claims.enter(t0);
        assert_eq!(others, 1);
        drop(renter);
        drop(second);
        assert_eq!(claims.enter(t0).1, 0);
    }

    fn inst(v: serde_json::Value) -> Instance {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn states_map_to_the_closed_set() {
        let s = |v| state_of(&inst(v));
        assert_eq!(
            s(json!({"actual_status": null})),
            WorkloadState::Queued { reason: None }
        );
        assert_eq!(
            s(json!({"actual_status": "loading"})),
            WorkloadState::Starting
        );
        assert_eq!(
            s(json!({"actual_status": "running"})),
            WorkloadState::Running
        );
        assert_eq!(
            s(json!({"actual_status": "stopped", "intended_status": "running", "is_bid": true})),
            WorkloadState::Preempted
        );
        assert!(matches!(
            s(json!({"actual_status": "stopped", "intended_status": "running", "is_bid": false})),
            WorkloadState::NotReady { .. }
        ));
        assert_eq!(
            s(json!({"actual_status": "stopped", "intended_status": "stopped"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Evicted
            }
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "status_msg": "done"})),
            WorkloadState::Succeeded
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "intended_status": "stopped"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Evicted
            }
        );
        assert_eq!(
            s(json!({"actual_status": "exited", "status_msg": "Error response from daemon"})),
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::Error
            }
        );
        assert_eq!(s(json!({"actual_status": "offline"})), WorkloadState::Lost);
        assert_eq!(
            s(json!({"actual_status": "unknown"})),
            WorkloadState::Unknown {
                raw: "unknown".into()
            }
        );
        assert_eq!(
            s(json!({"actual_status": "melting"})),
            WorkloadState::Unknown {
                raw: "melting".into()
            }
        );
        assert_eq!(
            s(json!({"actual_status": 7})),
            WorkloadState::Unknown { raw: "7".into() }
        );
    }
}
