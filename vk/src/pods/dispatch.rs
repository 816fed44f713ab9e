//! Dispatch: which providers may run a pod, in which order, as one pure function over a
//! snapshot of the providers ([`Standing`]: health, inventory, recent capacity refusals), so
//! its cost per pod is O(providers x GPU types asked), never O(pods).
//!
//! - A pinned provider (`gpu-vk.io/provider`) is the only candidate.
//! - Otherwise every configured provider whose capabilities fit, for each GPU type the pod
//!   accepts (`gpu-vk.io/gpu-type: H100,A100-80GB` is a set, in the pod's order of
//!   preference), ordered by the policy: `preference` (configuration order) or `cheapest`
//!   (price per hour for the pod's type and count, from each provider's inventory; unpriced
//!   candidates after the priced ones). The provider already recorded on the pod comes first
//!   under either policy, so a choice survives restarts and restarts of the container.
//! - Passed over, with the reason kept for the pod's status: providers whose circuit breaker
//!   is open, that refused this GPU type for capacity moments ago, or whose price is above the
//!   pod's `gpu-vk.io/max-price-per-hour`.
//! - Tried last: candidates whose inventory shows too few GPUs free. An inventory is up to an
//!   interval old, so it orders but never excludes: the provider's own answer decides.
//!
//! A capacity error at create time moves on to the next candidate (`super::create`).

use std::time::Duration;

use crate::config::{DispatchPolicy, SecretEnv};
use crate::pods::spec::Request;
use crate::provider::health::Health;
use crate::provider::{Capabilities, Inventory, Price};

/// A provider as dispatch sees it: its name, what it can run, and whether it may receive
/// Secret-sourced environment values (see [`super::secrets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    pub name: String,
    pub capabilities: Capabilities,
    pub secret_env: SecretEnv,
    /// Whether the pod's pull Secrets (registry logins) may be sent to it.
    pub pull_secrets: SecretEnv,
}

/// What dispatch knows of one provider at this moment.
#[derive(Clone, Debug)]
pub struct Standing<'a> {
    pub health: Health,
    /// The last inventory, if the provider has one.
    pub inventory: Option<&'a Inventory>,
    /// GPU types (`None`: CPU-only / any) the provider refused for capacity moments ago,
    /// and how long the memory lasts.
    pub refused: Vec<(Option<String>, Duration)>,
}

impl Default for Standing<'_> {
    fn default() -> Self {
        Self {
            health: Health::Healthy,
            inventory: None,
            refused: Vec::new(),
        }
    }
}

/// One way to run the pod: a provider, the GPU type to ask it for, and its price per hour
/// for the pod's count (where known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub provider: usize,
    pub gpu_type: Option<String>,
    pub price: Option<Price>,
}

/// The candidates, best first, and what was passed over (for the pod's status when nothing is
/// left, and for the decision Event).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub policy: Option<DispatchPolicy>,
    pub candidates: Vec<Candidate>,
    pub passed_over: Vec<PassedOver>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassedOver {
    pub provider: usize,
    pub why: Skip,
}

/// Why a fitting provider was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    Unhealthy {
        reason: String,
        retry_in: Duration,
    },
    RecentlyRefused {
        gpu_type: Option<String>,
        for_: Duration,
    },
    OverPrice {
        price: Price,
        max: Price,
    },
}

impl Plan {
    /// The candidates' providers, best first, each once.
    pub fn providers(&self) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for c in &self.candidates {
            if !out.contains(&c.provider) {
                out.push(c.provider);
            }
        }
        out
    }

    /// How long until a passed-over provider may be tried again (the shortest wait).
    pub fn retry_in(&self) -> Option<Duration> {
        self.passed_over
            .iter()
            .filter_map(|p| match &p.why {
                Skip::Unhealthy { retry_in, .. } => Some(*retry_in),
                Skip::RecentlyRefused { for_, .. } => Some(*for_),
                Skip::OverPrice { .. } => None,
            })
            .min()
    }

    /// True when every provider passed over was for capacity (recent refusals).
    pub fn only_capacity(&self) -> bool {
        self.passed_over
            .iter()
            .all(|p| matches!(p.why, Skip::RecentlyRefused { .. }))
    }

    /// "runpod: unhealthy ...; vast: said it had no capacity ...", naming providers by `names`.
    pub fn describe_passed_over(&self, names: &dyn Fn(usize) -> String) -> String {
        self.passed_over
            .iter()
            .map(|p| {
                let why = match &p.why {
                    Skip::Unhealthy { reason, retry_in } => format!(
                        "unhealthy, not sent new pods for {}s ({reason})",
                        retry_in.as_secs().max(1)
                    ),
                    Skip::RecentlyRefused { gpu_type, for_ } => format!(
                        "said it had no capacity for {} moments ago (retried in {}s)",
                        gpu_type.as_deref().unwrap_or("this request"),
                        for_.as_secs().max(1)
                    ),
                    Skip::OverPrice { price, max } => {
                        format!("{price} is above the pod's maximum of {max}")
                    }
                };
                format!("{}: {why}", names(p.provider))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("pod pins provider {0:?}, which is not configured on this node")]
    UnknownProvider(String),
    #[error("no configured provider offers {0}")]
    NoMatch(String),
}

/// The pod's candidates under `policy`; `standing` is parallel to `providers` (missing
/// entries: healthy, no inventory).
pub fn candidates(
    providers: &[Offer],
    standing: &[Standing<'_>],
    req: &Request,
    assigned: Option<&str>,
    policy: DispatchPolicy,
) -> Result<Plan, Error> {
    let allowed = allowed(providers, req)?;
    let mut plan = Plan {
        policy: Some(policy),
        ..Plan::default()
    };
    let mut fitting = false;
    let ask = Ask::of(req);
    let default = Standing::default();
    // Candidates whose inventory shows too few free: tried after all the others.
    let mut short = Vec::new();
    for &i in &allowed {
        let st = standing.get(i).unwrap_or(&default);
        let offered = offered(i, &providers[i], st, req, &ask);
        fitting |= offered.fits;
        plan.candidates.extend(offered.candidates);
        short.extend(offered.short);
        if let Some(why) = offered.passed_over {
            plan.passed_over.push(PassedOver { provider: i, why });
        }
    }
    if !fitting {
        return Err(Error::NoMatch(describe(req)));
    }
    if policy == DispatchPolicy::Cheapest {
        // Stable: equal prices (and the unpriced) keep configuration and type order.
        let by_price = |c: &Candidate| c.price.map_or((1, Price(0)), |p| (0, p));
        plan.candidates.sort_by_key(by_price);
        short.sort_by_key(by_price);
    }
    plan.candidates.extend(short);
    if let Some(a) = assigned
        && let Some(ai) = providers.iter().position(|p| p.name == a)
    {
        // Stable partition: the recorded provider's candidates first.
        plan.candidates.sort_by_key(|c| c.provider != ai);
    }
    Ok(plan)
}

/// The providers the pod may go to: the one it pins (if it can run the pod), else all.
fn allowed(providers: &[Offer], req: &Request) -> Result<Vec<usize>, Error> {
    let Some(pin) = &req.pinned_provider else {
        return Ok((0..providers.len()).collect());
    };
    let i = providers
        .iter()
        .position(|p| &p.name == pin)
        .ok_or_else(|| Error::UnknownProvider(pin.clone()))?;
    if types(req).into_iter().all(|t| !fits(&providers[i], req, t)) {
        return Err(Error::NoMatch(format!(
            "{} (pinned provider {pin})",
            describe(req)
        )));
    }
    Ok(vec![i])
}

/// What a candidate's price and room are judged against.
struct Ask {
    /// The pod's GPU count, at least one.
    count: u32,
    /// The pod's `gpu-vk.io/max-price-per-hour`, if it sets one.
    max_price: Option<Price>,
}

impl Ask {
    /// The pod's count and maximum price, from its request.
    fn of(req: &Request) -> Self {
        Self {
            count: req.gpu.as_ref().map_or(1, |g| g.count.max(1)),
            max_price: req
                .options
                .get("max_price_per_hour")
                .and_then(|v| v.parse::<f64>().ok())
                .and_then(Price::from_dollars),
        }
    }
}

/// What one provider offers the pod, per GPU type the pod accepts.
struct Offered {
    /// The provider can run the pod for at least one of the types.
    fits: bool,
    /// Its candidates, in the pod's type order.
    candidates: Vec<Candidate>,
    /// Its candidates whose inventory shows too few GPUs free.
    short: Vec<Candidate>,
    /// Why it has no candidate at all, though it fits.
    passed_over: Option<Skip>,
}

/// What provider `i` (`offer`, standing as `st`) offers the pod: a candidate for each type it
/// fits, unless unhealthy, recently refused for the type or over the pod's price.
fn offered(i: usize, offer: &Offer, st: &Standing<'_>, req: &Request, ask: &Ask) -> Offered {
    let mut out = Offered {
        fits: false,
        candidates: Vec::new(),
        short: Vec::new(),
        passed_over: None,
    };
    let mut skip: Option<Skip> = None;
    for t in types(req) {
        if !fits(offer, req, t) {
            continue;
        }
        out.fits = true;
        if let Health::Unhealthy { reason, retry_in } = &st.health {
            skip = Some(Skip::Unhealthy {
                reason: reason.clone(),
                retry_in: *retry_in,
            });
            break;
        }
        let gpu_type = t.map(str::to_owned);
        if let Some((_, left)) = st.refused.iter().find(|(rt, _)| same_type(rt, t)) {
            skip.get_or_insert(Skip::RecentlyRefused {
                gpu_type,
                for_: *left,
            });
            continue;
        }
        let quote = st.inventory.and_then(|inv| inv.quote(t));
        // Free GPUs in all, or on the largest single offer, short of the pod's count.
        let is_short = quote.is_some_and(|q| {
            q.available_gpus.is_some_and(|n| n < ask.count)
                || q.max_per_workload.is_some_and(|n| n < ask.count)
        });
        let price = quote.map(|q| q.price_per_gpu.times(ask.count));
        if let (Some(price), Some(max)) = (price, ask.max_price)
            && price > max
        {
            skip.get_or_insert(Skip::OverPrice { price, max });
            continue;
        }
        let c = Candidate {
            provider: i,
            // "Any GPU" stays any: the adapter picks (its default type, or the cheapest
            // offer); the price is then the cheapest quote with room.
            gpu_type,
            price,
        };
        if is_short {
            out.short.push(c);
        } else {
            out.candidates.push(c);
        }
    }
    if out.candidates.is_empty() && out.short.is_empty() {
        out.passed_over = skip;
    }
    out
}

/// The GPU types the pod accepts, in its order; one `None` for "any" or CPU-only.
fn types(req: &Request) -> Vec<Option<&str>> {
    match &req.gpu {
        None => vec![None],
        Some(_) if !req.gpu_types.is_empty() => {
            req.gpu_types.iter().map(|t| Some(t.as_str())).collect()
        }
        Some(g) => vec![g.gpu_type.as_deref()],
    }
}

fn same_type(a: &Option<String>, b: Option<&str>) -> bool {
    match (a.as_deref(), b) {
        (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
        (None, None) => true,
        _ => false,
    }
}

fn fits(p: &Offer, req: &Request, gpu_type: Option<&str>) -> bool {
    let caps = &p.capabilities;
    if req.steps_only.is_some() && !caps.containers {
        return false;
    }
    if !req.udp_ports.is_empty() && !caps.udp {
        return false;
    }
    if let (Some((_, asked)), Some(max)) = (req.disk_asked(), caps.max_disk_gb)
        && asked > f64::from(max)
    {
        return false;
    }
    if let (Some(floor), Some(max)) = (
        req.min_cuda(),
        caps.max_cuda.as_deref().and_then(super::spec::cuda_version),
    ) && floor > max
    {
        return false;
    }
    let Some(gpu) = &req.gpu else {
        return !caps.gpu_only;
    };
    if caps.max_gpus_per_workload > 0 && gpu.count > caps.max_gpus_per_workload {
        return false;
    }
    match gpu_type {
        Some(t) if !caps.gpu_types.is_empty() => {
            caps.gpu_types.iter().any(|c| c.eq_ignore_ascii_case(t))
        }
        _ => true,
    }
}

fn describe(req: &Request) -> String {
    match &req.gpu {
        Some(g) => {
            let t = if req.gpu_types.len() > 1 {
                format!("any of {}", req.gpu_types.join(", "))
            } else {
                g.gpu_type.clone().unwrap_or_else(|| "any GPU".into())
            };
            format!("{} x {t}", g.count)
        }
        None => "a CPU-only workload".into(),
    }
}

#[cfg(test)]
#[path = "dispatch/tests.rs"]
mod tests;
