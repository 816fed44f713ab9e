//! Vast.ai emulator (`https://console.vast.ai`): offer search, renting an offer, instance
//! show/list/manage/destroy, bids and preemption, and logs through a `result_url`, as in
//! vast-ai/docs `api-reference/openapi.yaml`.

mod book;
mod create;
mod instances;
mod list;
mod login;
mod logs;
mod manage;
mod offers;
mod query;
mod reply;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::handler::Handler;
use axum::routing::{get, post, put};

use crate::config::EmulatorConfig;
use crate::engine::gate::{EndpointLimit, RouteKind};
use crate::engine::{Engine, Flavor, Phase};
pub use book::Book;
use create::create_instance;
use instances::show_instance;
use list::{list_instances, list_instances_v0};
use logs::{fetch_log_snapshot, request_logs};
use manage::{change_bid, destroy_instance, manage_instance};
use offers::{search_offers, search_offers_get};
pub use query::{ParsedEnv, parse_env};
use reply::{Gate, gate, not_found_route};

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

/// Vast `actual_status` for a phase (`None` is JSON null: scheduled, nothing on the host yet).
pub fn actual_status(phase: Phase) -> Option<&'static str> {
    match phase {
        Phase::Provisioning => None,
        Phase::Starting => Some("loading"),
        Phase::Running => Some("running"),
        // "Instance offline" (vast-ai/docs `guides/reference/notifications.mdx`).
        Phase::Offline => Some("offline"),
        Phase::Exited => Some("exited"),
        Phase::Stopped | Phase::Preempted => Some("stopped"),
        Phase::Failed => Some("unknown"),
    }
}

/// The emulator's routes plus the shared `/_admin` routes. Paths work with and without the
/// trailing slash. Every real-API route passes the gate first (counters, faults, the key, the
/// quota, its endpoint's limit), as a layer of its own, so a handler starts admitted.
pub fn router(state: State) -> Router {
    let admin = crate::admin::router(state.engine.clone());
    let gate = |kind, endpoint| {
        axum::middleware::from_fn_with_state(Gate::new(state.engine.clone(), kind, endpoint), gate)
    };
    let mut r = Router::new();
    for p in ["/api/v0/bundles", "/api/v0/bundles/"] {
        let search = gate(RouteKind::Search, "search_offers");
        r = r.route(
            p,
            post(search_offers.layer(search.clone())).get(search_offers_get.layer(search)),
        );
    }
    for p in ["/api/v0/asks/{id}", "/api/v0/asks/{id}/"] {
        r = r.route(
            p,
            put(create_instance.layer(gate(RouteKind::Create, "create_instance"))),
        );
    }
    for p in ["/api/v0/instances", "/api/v0/instances/"] {
        r = r.route(p, get(list_instances_v0.layer(gate(RouteKind::List, ""))));
    }
    for p in ["/api/v1/instances", "/api/v1/instances/"] {
        r = r.route(
            p,
            get(list_instances.layer(gate(RouteKind::List, "show_instances"))),
        );
    }
    for p in ["/api/v0/instances/{id}", "/api/v0/instances/{id}/"] {
        r = r.route(
            p,
            get(show_instance.layer(gate(RouteKind::Get, "show_instance")))
                .put(manage_instance.layer(gate(RouteKind::Action, "manage_instance")))
                .delete(destroy_instance.layer(gate(RouteKind::Delete, "destroy_instance"))),
        );
    }
    for p in [
        "/api/v0/instances/request_logs/{id}",
        "/api/v0/instances/request_logs/{id}/",
    ] {
        r = r.route(p, put(request_logs.layer(gate(RouteKind::Logs, ""))));
    }
    for p in [
        "/api/v0/instances/bid_price/{id}",
        "/api/v0/instances/bid_price/{id}/",
    ] {
        r = r.route(
            p,
            put(change_bid.layer(gate(RouteKind::Action, "change_bid"))),
        );
    }
    r.route("/_s3/instance_logs/{file}", get(fetch_log_snapshot))
        .fallback(not_found_route)
        .with_state(state)
        .merge(admin)
}

#[cfg(test)]
mod tests;
