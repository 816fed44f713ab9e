//! `refusals:`: how the VK refuses pods that a controller would only replace (held, looked at
//! again) and the backstop against a refusal storm (docs/status.md, "Refused pods").

use std::time::Duration;

use serde::Deserialize;

/// How refused pods are held, and when a stream of refusals of one owner counts as a storm.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Refusals {
    /// A held pod is judged again this often (a configuration change restarts the VK, which
    /// judges every pod again at once).
    #[serde(default = "default_hold_retry_ms")]
    pub hold_retry_ms: u64,
    /// More than this many pods of one controller failed within `stormWindowMs` is a storm:
    /// the next ones are held instead (reason `RefusalStorm`), with one Event on the owner.
    #[serde(default = "default_storm_threshold")]
    pub storm_threshold: u32,
    #[serde(default = "default_storm_window_ms")]
    pub storm_window_ms: u64,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            hold_retry_ms: default_hold_retry_ms(),
            storm_threshold: default_storm_threshold(),
            storm_window_ms: default_storm_window_ms(),
        }
    }
}

impl Refusals {
    pub fn hold_retry(&self) -> Duration {
        Duration::from_millis(self.hold_retry_ms)
    }
    pub fn storm_window(&self) -> Duration {
        Duration::from_millis(self.storm_window_ms)
    }
    /// `Err` names the field that makes no sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.hold_retry_ms < 100 {
            return Err("refusals.holdRetryMs must be at least 100".into());
        }
        if self.storm_threshold == 0 || self.storm_window_ms == 0 {
            return Err("refusals.stormThreshold and stormWindowMs must be above 0".into());
        }
        Ok(())
    }
}

fn default_hold_retry_ms() -> u64 {
    60_000
}
fn default_storm_threshold() -> u32 {
    5
}
fn default_storm_window_ms() -> u64 {
    60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let r: Refusals = serde_saphyr::from_str("stormThreshold: 3").unwrap();
        assert_eq!(r.storm_threshold, 3);
        assert_eq!(r.hold_retry(), Duration::from_secs(60));
        assert_eq!(r.storm_window(), Duration::from_secs(60));
        assert!(r.validate().is_ok());
        let zero: Refusals = serde_saphyr::from_str("stormThreshold: 0").unwrap();
        assert!(zero.validate().unwrap_err().contains("stormThreshold"));
        let fast: Refusals = serde_saphyr::from_str("holdRetryMs: 5").unwrap();
        assert!(fast.validate().unwrap_err().contains("holdRetryMs"));
        assert!(serde_saphyr::from_str::<Refusals>("holdRetry: 5").is_err());
    }
}
