//! What `kubectl gpu-vk` shows, computed from the objects the virtual kubelet writes (its Node
//! with a condition per provider, the pods bound to it with their `gpu-vk.io/assigned-provider`
//! and `gpu-vk.io/dispatch` annotations, their Events) and a clock. Pure: no cluster access, so
//! every row is tested from fixtures.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde::Serialize;
use vk::vocab::names::{ANN_ASSIGNED, ANN_DISPATCH, PROVIDER_PREFIX};

/// What was read from the cluster, and when.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The virtual nodes (label `type=virtual-kubelet`); empty when the user may not read Nodes.
    pub nodes: Vec<Node>,
    /// The pods that a virtual kubelet of ours serves.
    pub pods: Vec<Pod>,
    pub now: Option<Timestamp>,
}

/// Dollars, or unknown (a provider that lists no price): never shown as 0.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Dollars {
    Known(f64),
    Unknown(Unknown),
}

/// The word `unknown` in JSON and YAML.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename = "unknown")]
pub enum Unknown {
    #[serde(rename = "unknown")]
    Unknown,
}

impl Dollars {
    const UNKNOWN: Self = Self::Unknown(Unknown::Unknown);

    fn of(v: Option<f64>) -> Self {
        v.map_or(Self::UNKNOWN, Self::Known)
    }

    /// The sum, unknown if either is.
    fn add(self, o: Self) -> Self {
        match (self, o) {
            (Self::Known(a), Self::Known(b)) => Self::Known(a + b),
            _ => Self::UNKNOWN,
        }
    }

    /// `$1.23` (or `$1.23/h` with `unit`), or `unknown`.
    pub fn text(self, unit: &str) -> String {
        match self {
            Self::Known(v) => format!("${v:.2}{unit}"),
            Self::Unknown(_) => "unknown".to_owned(),
        }
    }
}

/// One provider of one virtual node.
#[derive(Debug, Serialize)]
pub struct ProviderRow {
    pub node: String,
    pub provider: String,
    /// The node condition `gpu-vk.io/provider.<name>`: `True` healthy, `False` circuit open.
    pub healthy: Option<bool>,
    pub reason: String,
    pub message: String,
    /// Live pods (not finished) assigned to it.
    pub pods: usize,
    /// GPUs those pods asked for.
    pub gpus: i64,
    /// What those pods cost per hour now, by the prices their dispatch recorded.
    pub spend_per_hour: Dollars,
}

/// One pod on a virtual node.
#[derive(Debug, Serialize)]
pub struct PodRow {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub provider: Option<String>,
    pub phase: String,
    /// Why it waits or ended, where the status says.
    pub reason: Option<String>,
    pub gpus: i64,
    /// The chosen provider's price for the pod; `None` before it was dispatched.
    pub price_per_hour: Option<Dollars>,
    pub started: Option<String>,
    /// Price x time since it started (a finished pod: nothing more accrues).
    pub cost_so_far: Dollars,
    /// The dispatch decision: the policy, the choice and what else was considered.
    pub chosen: Option<String>,
}

/// Why a pod is where it is.
#[derive(Debug, Serialize)]
pub struct Why {
    pub pod: PodRow,
    /// The message of the reason it waits (every provider considered and why not) or ended.
    pub message: Option<String>,
    /// Held: Pending with a reason of the virtual kubelet's, or Failed.
    pub held: bool,
    /// Its Events, oldest first: `Type Reason: message`.
    pub events: Vec<String>,
}

/// Live spend of one namespace.
#[derive(Debug, Serialize)]
pub struct SpendRow {
    pub namespace: String,
    pub pods: usize,
    pub spend_per_hour: Dollars,
    /// Accrued by its live pods since the period began.
    pub cost_in_period: Dollars,
    /// Dispatched pods whose provider lists no price: their spend is unknown.
    pub unpriced_pods: usize,
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The chosen provider's price per hour in a dispatch decision ("policy cheapest: chose vast
/// A100-80GB $0.95/h; also considered ..."): `None` when it was unpriced.
pub fn chosen_price(decision: &str) -> Option<f64> {
    let chosen = decision.split_once("chose ")?.1;
    let chosen = chosen.split(';').next()?;
    chosen
        .split_whitespace()
        .find_map(|w| w.strip_prefix('$')?.strip_suffix("/h")?.parse().ok())
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".to_owned())
}

fn live(p: &Pod) -> bool {
    !matches!(phase(p).as_str(), "Succeeded" | "Failed")
}

/// The reason and message the status gives: a waiting container's (the virtual kubelet holds
/// pods that way), else the pod's own (a Failed pod's).
fn status_reason(p: &Pod) -> (Option<String>, Option<String>) {
    let s = p.status.as_ref();
    let waiting = s
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.clone());
    match waiting {
        Some(w) => (w.reason, w.message),
        None => (
            s.and_then(|s| s.reason.clone()),
            s.and_then(|s| s.message.clone()),
        ),
    }
}

fn started(p: &Pod) -> Option<Timestamp> {
    p.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

/// How long the pod has run (from its start to `now`, or to its last container's end once it
/// finished), `from` its start or a later instant; zero while Pending; `None` when the status
/// does not say.
fn ran(p: &Pod, from: Option<Timestamp>, now: Timestamp) -> Option<f64> {
    let hours = |a: Timestamp, b: Timestamp| b.duration_since(a).as_secs_f64().max(0.0) / 3600.0;
    let phase = phase(p);
    if !matches!(phase.as_str(), "Running" | "Succeeded" | "Failed") {
        return Some(0.0);
    }
    let start = started(p)?;
    let from = from.map_or(start, |f| f.max(start));
    match phase.as_str() {
        "Running" => Some(hours(from, now)),
        "Succeeded" | "Failed" => {
            let end = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                .map(|t| t.0)
                .max()?;
            Some(hours(from, end))
        }
        _ => Some(0.0),
    }
}

/// Price x hours run; nothing run costs nothing, priced or not.
fn cost(price: Option<f64>, hours: Option<f64>) -> Dollars {
    match (price, hours) {
        (_, Some(h)) if h <= 0.0 => Dollars::Known(0.0),
        (Some(price), Some(h)) => Dollars::Known(price * h),
        _ => Dollars::UNKNOWN,
    }
}

/// The row of one pod at `now`.
pub fn pod_row(p: &Pod, now: Timestamp) -> PodRow {
    let decision = annotation(p, ANN_DISPATCH).map(str::to_owned);
    let price = decision.as_deref().and_then(chosen_price);
    // A pod never dispatched ran nowhere.
    let hours = if decision.is_none() {
        Some(0.0)
    } else {
        ran(p, None, now)
    };
    PodRow {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        provider: annotation(p, ANN_ASSIGNED).map(str::to_owned),
        phase: phase(p),
        reason: status_reason(p).0,
        // GPUs as the overflow companion counts a pod's (its containers' and init containers').
        gpus: vk::overflow::reclaim::gpus(p),
        price_per_hour: decision.as_ref().map(|_| Dollars::of(price)),
        started: started(p).map(|t| t.to_string()),
        cost_so_far: cost(price, hours),
        chosen: decision,
    }
}

/// Every pod's row, by namespace and name.
pub fn pods(s: &Snapshot) -> Vec<PodRow> {
    let now = s.now.unwrap_or_else(Timestamp::now);
    let mut rows: Vec<PodRow> = s.pods.iter().map(|p| pod_row(p, now)).collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

/// Every provider of every virtual node: its health condition and what its live pods use.
pub fn providers(s: &Snapshot) -> Vec<ProviderRow> {
    let rows = pods(s);
    let mut out = Vec::new();
    for node in &s.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
        for c in conditions.into_iter().flatten() {
            let Some(provider) = c.type_.strip_prefix(PROVIDER_PREFIX) else {
                continue;
            };
            let mine: Vec<&PodRow> = rows
                .iter()
                .filter(|r| r.node == name && r.provider.as_deref() == Some(provider))
                .filter(|r| !matches!(r.phase.as_str(), "Succeeded" | "Failed"))
                .collect();
            out.push(ProviderRow {
                node: name.clone(),
                provider: provider.to_owned(),
                healthy: match c.status.as_str() {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => None,
                },
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
                pods: mine.len(),
                gpus: mine.iter().map(|r| r.gpus).sum(),
                spend_per_hour: running_spend(&mine),
            });
        }
    }
    out
}

/// What the running pods among `rows` cost per hour (pending ones are not billed yet).
fn running_spend(rows: &[&PodRow]) -> Dollars {
    rows.iter()
        .filter(|r| r.phase == "Running")
        .fold(Dollars::Known(0.0), |sum, r| {
            sum.add(r.price_per_hour.unwrap_or(Dollars::UNKNOWN))
        })
}

/// Live spend per namespace, and what its live pods accrued since `period_start`.
pub fn spend(s: &Snapshot, period_start: Timestamp) -> Vec<SpendRow> {
    let now = s.now.unwrap_or_else(Timestamp::now);
    let mut by_ns: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in s.pods.iter().filter(|p| live(p)) {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        by_ns.entry(ns).or_default().push(p);
    }
    by_ns
        .into_iter()
        .map(|(namespace, pods)| {
            let rows: Vec<PodRow> = pods.iter().map(|p| pod_row(p, now)).collect();
            let refs: Vec<&PodRow> = rows.iter().collect();
            let in_period = pods
                .iter()
                .zip(&rows)
                .fold(Dollars::Known(0.0), |sum, (p, r)| {
                    let hours = if r.chosen.is_none() {
                        Some(0.0)
                    } else {
                        ran(p, Some(period_start), now)
                    };
                    let price = match r.price_per_hour {
                        Some(Dollars::Known(v)) => Some(v),
                        _ => None,
                    };
                    sum.add(cost(price, hours))
                });
            SpendRow {
                pods: rows.len(),
                spend_per_hour: running_spend(&refs),
                cost_in_period: in_period,
                unpriced_pods: rows
                    .iter()
                    .filter(|r| matches!(r.price_per_hour, Some(Dollars::Unknown(_))))
                    .count(),
                namespace,
            }
        })
        .collect()
}

/// Why `pod` is where it is, with its Events (any order; shown oldest first).
pub fn why(pod: &Pod, events: &[Event], now: Timestamp) -> Why {
    let row = pod_row(pod, now);
    let (reason, message) = status_reason(pod);
    let held = row.phase == "Failed"
        || (row.phase == "Pending"
            && reason
                .as_deref()
                .is_some_and(|r| !matches!(r, "ContainerCreating" | "PodInitializing")));
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    Why {
        pod: row,
        message,
        held,
        events: events
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.type_.as_deref().unwrap_or("Normal"),
                    e.reason.as_deref().unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "model/tests.rs"]
mod tests;
