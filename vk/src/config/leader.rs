//! The `leaderElection` block.

use super::*;

/// The `leaderElection` block: replicas of the VK for one node elect a leader through a Lease
/// (`crate::leader`). Defaults are client-go's (15 s, 10 s, 2 s), as the controller-manager uses.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElection {
    pub enabled: bool,
    /// Namespace of the Lease (default `kube-node-lease`, beside the node's heartbeat Lease).
    pub namespace: String,
    /// Name of the Lease (default `gpu-vk-leader-<nodeName>`).
    pub lease_name: Option<String>,
    /// A standby takes over once the Lease went unrenewed this long (whole seconds, as the
    /// Lease records it).
    pub lease_duration_ms: u64,
    /// The leader stops leading once it could not renew for this long (less than the duration).
    pub renew_deadline_ms: u64,
    /// Interval between renewals, and between a standby's attempts.
    pub retry_period_ms: u64,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: "kube-node-lease".into(),
            lease_name: None,
            lease_duration_ms: 15_000,
            renew_deadline_ms: 10_000,
            retry_period_ms: 2_000,
        }
    }
}

impl LeaderElection {
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_duration_seconds().unsigned_abs()))
    }
    /// The duration as the Lease records it: whole seconds, rounded up.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration_ms.div_ceil(1000)).unwrap_or(i32::MAX)
    }
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_millis(self.renew_deadline_ms)
    }
    pub fn retry_period(&self) -> Duration {
        Duration::from_millis(self.retry_period_ms)
    }
    pub(super) fn validate(&self) -> Result<(), Error> {
        let (d, r, p) = (
            self.lease_duration().as_millis(),
            u128::from(self.renew_deadline_ms),
            u128::from(self.retry_period_ms),
        );
        if !(p > 0 && p < r && r < d) {
            return Err(Error::Invalid(format!(
                "leaderElection: need 0 < retryPeriodMs ({p}) < renewDeadlineMs ({r}) < \
                 leaseDurationMs ({d}, whole seconds), so a leader stops before a standby takes over"
            )));
        }
        Ok(())
    }
}
