//! The `dispatch`, `breaker` and `limits` blocks: which provider a pod goes to, when one is
//! skipped for its health, and what each may spend.

use super::*;

/// Which order providers are tried in (`dispatch.policy`, or a pod's
/// `gpu-vk.io/dispatch-policy` where `dispatch.podPolicy` allows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DispatchPolicy {
    /// Configuration order (the provider recorded on the pod first).
    #[default]
    Preference,
    /// Lowest price per hour for the pod's GPU type and count first, from each provider's own
    /// price data; unpriced providers after, in configuration order.
    Cheapest,
}

impl DispatchPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preference => "preference",
            Self::Cheapest => "cheapest",
        }
    }
}

/// The `dispatch` block.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DispatchConfig {
    pub policy: DispatchPolicy,
    /// Pods may choose the policy with `gpu-vk.io/dispatch-policy`.
    pub pod_policy: bool,
    /// After a provider said "no capacity" for a GPU type, new pods skip it for that type
    /// this long, so a burst does not hammer a provider that just said no.
    pub capacity_memory_ms: u64,
    /// Interval between two inventory (price and free capacity) calls to each provider.
    pub inventory_interval_ms: u64,
    pub breaker: BreakerConfig,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            policy: DispatchPolicy::default(),
            pod_policy: true,
            capacity_memory_ms: 30_000,
            // Vast allows 10 offer searches a minute and RunPod 60 calls a minute in all: one
            // inventory call a minute each stays far inside both.
            inventory_interval_ms: 60_000,
            breaker: BreakerConfig::default(),
        }
    }
}

impl DispatchConfig {
    pub fn capacity_memory(&self) -> Duration {
        Duration::from_millis(self.capacity_memory_ms)
    }
    pub fn inventory_interval(&self) -> Duration {
        Duration::from_millis(self.inventory_interval_ms)
    }
}

/// The `dispatch.breaker` block: a provider's circuit breaker (`crate::provider::health`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BreakerConfig {
    /// Consecutive failed calls that open the breaker.
    pub failures: u32,
    /// How long an open breaker keeps new pods away before the next call probes.
    pub open_ms: u64,
    /// A call slower than this counts as failed.
    pub slow_call_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            open_ms: 30_000,
            slow_call_ms: 20_000,
        }
    }
}

impl BreakerConfig {
    /// How long an open breaker stays open.
    pub fn open(&self) -> Duration {
        Duration::from_millis(self.open_ms)
    }

    /// A call slower than this counts as a failure.
    pub fn slow(&self) -> Duration {
        Duration::from_millis(self.slow_call_ms)
    }
}

/// Guardrails: the most that may be spent per hour and the most workloads that may exist at
/// once. Spend is what the providers list (price x live workloads), so it holds across
/// restarts; a pod that would go past a limit waits Pending until room appears.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Dollars per hour.
    #[serde(default)]
    pub max_spend_per_hour: Option<f64>,
    #[serde(default)]
    pub max_workloads: Option<u32>,
}

impl Limits {
    pub(super) fn validate(&self, what: &str) -> Result<(), Error> {
        if let Some(s) = self.max_spend_per_hour
            && !(s.is_finite() && s >= 0.0)
        {
            return Err(Error::Invalid(format!(
                "{what}.maxSpendPerHour must be a non-negative number of dollars"
            )));
        }
        Ok(())
    }
}
