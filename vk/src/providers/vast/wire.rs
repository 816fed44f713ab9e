//! Vast wire types: the offer search and rent request bodies, and the answers decoded
//! leniently (a field of an unexpected type reads as absent).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::providers::rest::{NumOrString, lenient};

/// One search condition, `{"eq": ..}`, `{"in": [..]}`, ...
#[derive(Clone, Debug, Serialize)]
pub(super) struct Filter<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) eq: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gte: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lte: Option<T>,
    #[serde(rename = "in", skip_serializing_if = "Option::is_none")]
    pub(super) one_of: Option<Vec<T>>,
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
    pub(super) fn eq(v: T) -> Self {
        Self {
            eq: Some(v),
            ..Self::empty()
        }
    }
    pub(super) fn gte(v: T) -> Self {
        Self {
            gte: Some(v),
            ..Self::empty()
        }
    }
    pub(super) fn lte(v: T) -> Self {
        Self {
            lte: Some(v),
            ..Self::empty()
        }
    }
    pub(super) fn one_of(v: Vec<T>) -> Self {
        Self {
            one_of: Some(v),
            ..Self::empty()
        }
    }
}

/// Body of `POST /api/v0/bundles/`.
#[derive(Debug, Serialize)]
pub(super) struct OfferSearch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) verified: Option<Filter<bool>>,
    pub(super) rentable: Filter<bool>,
    pub(super) rented: Filter<bool>,
    /// Always `{eq: false}`, vast-cli's default (`vast.py` search offers sends `"external":
    /// {"eq": false}` beside `verified`, `rentable` and `rented`; the spec's `external`: "Show
    /// external offers in addition to datacenter offers").
    pub(super) external: Filter<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gpu_name: Option<Filter<String>>,
    /// Per GPU, MB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gpu_ram: Option<Filter<u32>>,
    pub(super) num_gpus: Filter<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dph_total: Option<Filter<f64>>,
    pub(super) disk_space: Filter<f64>,
    /// The highest CUDA version the host's driver runs (vast-cli's `cuda_vers`: `offers_alias`
    /// in vast.py maps it to `cuda_max_good`):
    /// the pod's CUDA floor (`gpu-vk.io/min-cuda`) as `{gte: 12.8}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cuda_max_good: Option<Filter<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) geolocation: Option<Filter<String>>,
    /// The machine's reliability floor (`minReliability`), `{gte: 0.9}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reliability: Option<Filter<f64>>,
    /// "Number of direct ports available" ("open ports on host's router", vast-cli): at least
    /// one per port the pod publishes, so each is reachable directly rather than not at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) direct_port_count: Option<Filter<u32>>,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) order: Vec<[String; 2]>,
    pub(super) limit: u32,
    pub(super) allocated_storage: f64,
}

/// `{"offers": [...]}`; the spec's example shows a single object, which is accepted too.
#[derive(Debug, Deserialize)]
pub(super) struct OfferList {
    pub(super) offers: serde_json::Value,
}

#[derive(Debug, Deserialize)]
pub(super) struct Offer {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) id: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) dph_total: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) min_bid: Option<f64>,
    /// Vast's exact GPU model name (`RTX 4090`) and the GPUs the offer rents together.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) gpu_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) num_gpus: Option<u32>,
}

/// Body of `PUT /api/v0/asks/{offer_id}/`.
#[derive(Clone, Debug, Serialize)]
pub(super) struct CreateInstanceRequest {
    pub(super) image: String,
    pub(super) label: String,
    pub(super) disk: f64,
    pub(super) runtype: &'static str,
    pub(super) target_state: &'static str,
    /// With runtype `args`, the container's ENTRYPOINT (see [`super::plan`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) onstart: Option<String>,
    /// With runtype `args`, the arguments given to the ENTRYPOINT (they replace the CMD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) price: Option<f64>,
    /// Always `true`: an offer that cannot start is refused (410 `no_such_ask`) instead of
    /// becoming a stopped instance. The spec's default is false for bids ("Defaults to false
    /// for interruptibles", `PUT /api/v0/asks/{id}/`; vast-cli `--cancel-unavail`: "Return
    /// error if scheduling fails (rather than creating a stopped instance)").
    pub(super) cancel_unavail: bool,
    /// The registry login of a private image (`-u USER -p PASSWORD REGISTRY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) image_login: Option<ImageLogin>,
}

/// An `image_login` value: it holds a password, so its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(super) struct ImageLogin(pub(super) String);

impl std::fmt::Debug for ImageLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<image login redacted>")
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateInstanceAnswer {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) new_contract: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) error: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct InstancePage {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) success: Option<bool>,
    /// Required: a page without it is a malformed answer, not an empty account.
    pub(super) instances: Vec<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) next_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Instance {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) id: Option<NumOrString>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) label: Option<String>,
    /// Kept raw: a non-string status must surface as `Unknown`, not as "no status yet".
    #[serde(default)]
    pub(super) actual_status: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) intended_status: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) status_msg: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) is_bid: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) start_date: Option<f64>,
    /// The rental contract's end (epoch seconds): Vast stops the instance then.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) end_date: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) public_ipaddr: Option<String>,
    /// CPU use in percent of one core (see [`super::state`] for the units).
    #[serde(default, deserialize_with = "lenient")]
    pub(super) cpu_util: Option<f64>,
    /// Memory in use, GB.
    #[serde(default, deserialize_with = "lenient")]
    pub(super) mem_usage: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) uptime_mins: Option<f64>,
    /// Total $/hour of the instance (show-instances `dph_total`).
    #[serde(default, deserialize_with = "lenient")]
    pub(super) dph_total: Option<f64>,
    /// Docker's port map of a running instance: `{"8080/tcp": [{"HostIp": "0.0.0.0",
    /// "HostPort": "33526"}]}`, each internal port at a random external port of
    /// `public_ipaddr` (docs.vast.ai, "Networking & Ports").
    #[serde(default, deserialize_with = "lenient")]
    pub(super) ports: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// `{success: false, error, msg}`, or `{detail}` on 429.
#[derive(Debug, Deserialize)]
pub(super) struct VastError {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) error: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) msg: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) detail: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct LogRequestAnswer {
    #[serde(default, deserialize_with = "lenient")]
    pub(super) success: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub(super) result_url: Option<String>,
}
