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
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DispatchConfig {
    #[serde(default)]
    pub policy: DispatchPolicy,
    /// Pods may choose the policy with `gpu-vk.io/dispatch-policy`.
    #[serde(default = "yes")]
    pub pod_policy: bool,
    /// After a provider said "no capacity" for a GPU type, new pods skip it for that type
    /// this long, so a burst does not hammer a provider that just said no.
    #[serde(default = "default_capacity_memory_ms")]
    pub capacity_memory_ms: u64,
    /// Interval between two inventory (price and free capacity) calls to each provider.
    #[serde(default = "default_inventory_interval_ms")]
    pub inventory_interval_ms: u64,
    #[serde(default)]
    pub breaker: BreakerConfig,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            policy: DispatchPolicy::default(),
            pod_policy: true,
            capacity_memory_ms: default_capacity_memory_ms(),
            inventory_interval_ms: default_inventory_interval_ms(),
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
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BreakerConfig {
    /// Consecutive failed calls that open the breaker.
    #[serde(default = "default_breaker_failures")]
    pub failures: u32,
    /// How long an open breaker keeps new pods away before the next call probes.
    #[serde(default = "default_breaker_open_ms")]
    pub open_ms: u64,
    /// A call slower than this counts as failed.
    #[serde(default = "default_breaker_slow_ms")]
    pub slow_call_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: default_breaker_failures(),
            open_ms: default_breaker_open_ms(),
            slow_call_ms: default_breaker_slow_ms(),
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
