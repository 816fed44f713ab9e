//! Vast.ai adapter: one Vast instance per workload, labelled with the workload id, rented from
//! the cheapest matching offer (on demand, or as an interruptible bid).
//!
//! Contract, verified in `api-reference/openapi.yaml` and
//! `api-reference/creating-instances-with-api.mdx` of the vast-ai/docs repository:
//! - Base `https://console.vast.ai`, `Authorization: Bearer <key>`. Paths are sent with the
//!   trailing slash the docs' examples use.
//! - `POST /api/v0/bundles/` searches offers with filters `{"field": {"op": value}}` (`eq`,
//!   `gte`, `lte`, `in`, ...), `type` (`ondemand` | `bid`), `order` and `limit`; answers
//!   `{"offers": [{id, gpu_name, num_gpus, dph_total, min_bid, ...}]}`. Like vast-cli, every
//!   search sends `rentable: true`, `rented: false` and `external: false`.
//! - `PUT /api/v0/asks/{offer_id}/` rents an offer: `image`, `label`, `disk` (GB), `runtype`,
//!   `target_state`, `onstart` and `args` (runtype `args`), `env` (an object; ports as
//!   `"-p 8080:8080": "1"`), `price` (the bid, which makes the instance interruptible) and
//!   `cancel_unavail: true` (refused rather than a stopped instance when the offer cannot
//!   start; the default for bids is false); answers `{success, new_contract}`; 404 / 410
//!   (`no_such_ask`) when the offer is gone.
//! - Every body sent is valid against the schema derived from that spec
//!   (mock-providers/schemas/vast.json, with errata where Vast's own guide and CLI contradict
//!   it: `tests/vast_schema.rs`).
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
//! - `runtype` is `args`: the container is the image "as is" and exits when the workload
//!   does; Kubernetes `command[0]` overrides the ENTRYPOINT (sent as `onstart`, as vast-cli
//!   sends `--entrypoint`), the rest of `command` and `args` are the `args` list (see
//!   `plan::entrypoint_and_args`). Input limits are checked first (see `limits`). Vast has
//!   no exit code in its API: `exited` is Succeeded unless `status_msg` reads like an error.
//! - State mapping: null -> Queued; loading / created -> Starting; running -> Running;
//!   rebooting / frozen -> NotReady; stopped while intended running -> Preempted for a bid,
//!   NotReady for on-demand; stopped or exited while intended stopped (we never stop
//!   instances) -> Failed(Evicted); exited -> Succeeded / Failed(Error); offline / unknown
//!   -> NotReady (the host is disconnected or silent and may come back: see `state`), then
//!   Failed(ProviderError) once it has lasted `unreachableDeadlineSeconds` (see
//!   `unreachable`); anything else -> Unknown{raw}.
//! - Bid price: the pod's `bid_price` option, else the offer's `min_bid` (else its
//!   `dph_total`); offers above `maxPricePerHour` are never rented, and a `bid_price` above it
//!   is an invalid request.
//! - Idempotent create without a list per create: the framework creates only workloads the
//!   last full list did not show (and lists every provider before reconciling at startup), so
//!   a create looks the label up (`GET /api/v1/instances/` filtered on it) only when this
//!   process rented, or may have rented, that workload in the last [`RENTED_TTL`] (a list
//!   that started before the rent, or a retry after an ambiguous rent). Every call is paced
//!   per endpoint and 429s are retried (see `pace`).
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
//!   at all, or only gone offers, is capacity. Before that, the create waits for the other
//!   creates' rents to end and searches again (see `adapter`).
//! - Creates share offer searches: one search per body at a time, its answer reused by the
//!   creates that follow for a few seconds (see `searches`), so a burst of creates is bounded
//!   by Vast's rent interval, not by its 10 searches a minute.
//! - Logs are a snapshot: `follow` ends after the snapshot, `since`/`timestamps` are not
//!   supported by the API, `previous` is unsupported.
//!
//! Pod options read from the workload: `interruptible` (bool), `bid_price` ($/h),
//! `max_price_per_hour`, `region` / `geolocation` (comma-separated country codes), `disk_gb`.

mod adapter;
mod claims;
mod config;
#[cfg(test)]
mod fuzz;
pub mod gpus;
mod instances;
mod limits;
mod logs;
mod market;
mod pace;
mod plan;
mod rent;
mod searches;
mod state;
mod unreachable;
mod wire;

use std::time::Duration;

use super::http::{self, Bearer, Client, InitError, RawResponse};
use crate::naming::Owner;
use crate::provider::ProviderError;
use claims::Claims;
pub use config::VastConfig;
use pace::Pacer;
pub use pace::{MAX_429_RETRIES, MinIntervals};
use searches::Searches;
use wire::VastError;

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
/// Rounds in which every matching offer stayed held by other creates of this process and no
/// rent of theirs ended, before a create gives up with a transient error.
pub const CONTENTION_ROUNDS: u32 = 4;
/// How long the n-th such round waits for another create's rent to end: n times this, ±50 %.
const CONTENTION_PAUSE: Duration = Duration::from_millis(100);

/// How long a workload this process rented (or may have) is looked up before a new rent.
pub const RENTED_TTL: Duration = Duration::from_secs(300);

/// The Vast.ai adapter.
#[derive(Debug)]
pub struct Vast {
    name: String,
    cfg: VastConfig,
    owner: Owner,
    api: Client<Bearer>,
    claims: Claims,
    /// Offer search answers shared by concurrent creates (see `searches`).
    searches: Searches,
    pacer: Pacer,
    /// Workloads this process rented, or may have rented (a rent that ended ambiguously),
    /// and when: only their creates look the label up first (see the module docs).
    rented:
        std::sync::Mutex<std::collections::HashMap<crate::naming::WorkloadId, std::time::Instant>>,
    /// Cumulative CPU per instance, integrated from `cpu_util` (Vast reports no counter).
    cpu: std::sync::Mutex<super::cpu::CpuCounters>,
    /// Instances whose host is offline or silent, and since when (see `unreachable`).
    unreachable: std::sync::Mutex<unreachable::Unreachable>,
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
        if !cfg.rate_limits.valid() {
            return Err(bad("rateLimits must be non-negative seconds"));
        }
        if cfg.max_offers_tried == 0 || cfg.search_limit == 0 {
            return Err(bad("maxOffersTried and searchLimit must be positive"));
        }
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        let auth = Bearer::new(&name, cfg.api_key.expose())?;
        let api = Client::new(&name, &cfg.base_url, auth, timeout, cfg.allow_insecure_http)?;
        Ok(Self {
            name,
            cfg,
            owner,
            api,
            claims: Claims::default(),
            searches: Searches::default(),
            pacer: Pacer::default(),
            rented: std::sync::Mutex::default(),
            cpu: std::sync::Mutex::default(),
            unreachable: std::sync::Mutex::default(),
        })
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
}

impl Vast {
    /// Records that a rent of `id` was sent (it may have happened).
    fn note_rented(&self, id: &crate::naming::WorkloadId) {
        let mut rented = self
            .rented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        rented.retain(|_, at| now.saturating_duration_since(*at) < RENTED_TTL);
        rented.insert(id.clone(), now);
    }

    /// True when this process sent a rent of `id` in the last [`RENTED_TTL`].
    fn maybe_rented(&self, id: &crate::naming::WorkloadId) -> bool {
        let rented = self
            .rented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rented.get(id).is_some_and(|at| at.elapsed() < RENTED_TTL)
    }
}
