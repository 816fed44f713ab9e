//! The emulators' profile for a conformance run (`CONFORMANCE_PROFILE`): `fast` (the default:
//! 100 ms phases, every start succeeds; for scenarios about the VK's logic) or `realistic`:
//! mock-providers' realistic profile (`Profile::Realistic`, each figure's source cited there)
//! on a clock ten times faster, so a feature's scenarios fit a CI run:
//! - 1.5 s placing, then 15 s pulling and starting (the profile's 15 s + 150 s);
//! - one create in 20 that never starts, the first of them among each emulator's first
//!   [`FIRST_STUCK_WITHIN`] creates (a scenario makes a few, so every scenario meets one where
//!   the profile's share alone would spare most), at a place drawn from the run's seed
//!   (`CONFORMANCE_SEED`, printed at the start of the run; emulators take their places in the
//!   order they are made, which scenarios running side by side vary, so a run with the same
//!   seed meets the same places, not always in the same scenarios);
//! - RunPod's quota windows (60 a minute, 3,000 an hour, 50,000 a day) at their real figures;
//! - one Vast rental in 50 whose host goes offline for good 60 s after it runs (the profile's
//!   10 minutes);
//! - the VK's start deadline at 30 s (`startDeadlineSeconds`; the default 1800 s is eleven
//!   times the profile's start, here two times the scaled one), and the scenarios' waits
//!   stretched ([`patience`]) to hold a stuck start, its deadline and the retry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mock_providers::config::{EmulatorConfig, ExecutionMode, HostOutage, Profile};

/// The realistic profile's clock runs this many times faster in a conformance run.
pub const TIME_SCALE: u32 = 10;

/// An emulator's first start that never runs is among its first this many creates.
pub const FIRST_STUCK_WITHIN: u32 = 4;

/// The VK's start deadline on the realistic profile (seconds).
pub const START_DEADLINE_SECONDS: u64 = 30;

/// Whether this run's emulators follow the realistic profile.
pub fn realistic() -> bool {
    std::env::var("CONFORMANCE_PROFILE").is_ok_and(|p| p == "realistic")
}

/// The run's seed (`CONFORMANCE_SEED`, else from the clock), which places each emulator's
/// stuck starts.
pub fn seed() -> u64 {
    static SEED: AtomicU64 = AtomicU64::new(0);
    let s = SEED.load(Ordering::Relaxed);
    if s != 0 {
        return s;
    }
    let chosen = std::env::var("CONFORMANCE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        .max(1);
    match SEED.compare_exchange(0, chosen, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => chosen,
        Err(earlier) => earlier,
    }
}

/// `cfg` on this run's profile: unchanged on `fast`; on `realistic`, a simulated mode's phases
/// become the profile's scaled ones (a run time the scenario set is kept) and the profile's
/// failures are switched on; `quotas`: RunPod's quota windows too (RunPod only: Vast has its
/// per-endpoint intervals instead, which its emulator enforces on every profile).
pub fn apply(cfg: EmulatorConfig, quotas: bool) -> EmulatorConfig {
    if !realistic() {
        return cfg;
    }
    let p = Profile::Realistic;
    let mode = match &cfg.mode {
        ExecutionMode::Simulated { run_ms, .. } => {
            let (placing, starting) = p.timings_ms();
            let scale = u64::from(TIME_SCALE);
            ExecutionMode::simulated(placing / scale, starting / scale, *run_ms)
        }
        other => other.clone(),
    };
    let cfg_windows = cfg.rate_windows;
    let every = p.stuck_every();
    let first = every.map_or(0, |n| place(n.min(FIRST_STUCK_WITHIN)));
    cfg.with_mode(mode)
        .with_stuck_every(every)
        .with_first_stuck(first)
        .with_rate_windows(if quotas {
            p.rate_windows()
        } else {
            cfg_windows
        })
        .with_host_outage(p.host_outage().map(|o| HostOutage {
            after: o.after / TIME_SCALE,
            ..o
        }))
}

/// Where the next emulator's first stuck start falls (1 to `within`): a step of a generator
/// seeded by [`seed`], so emulators of the run differ and a run can be replayed.
fn place(within: u32) -> u32 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // splitmix64 of (seed, n): well spread even for consecutive inputs.
    let mut z = seed().wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    1 + u32::try_from(z % u64::from(within)).unwrap_or(0)
}

/// The VK's settings for a RunPod or Vast provider on this run's profile (appended to its
/// entry of `providers:`).
pub fn provider_settings() -> String {
    if realistic() {
        format!("  startDeadlineSeconds: {START_DEADLINE_SECONDS}\n")
    } else {
        String::new()
    }
}

/// The VK's poll interval (ms): on `fast` half a second; on `realistic` the VK's default of 2 s,
/// since RunPod's quota of 60 calls a minute is enforced at its real figure (a list every half
/// second alone would be 120 a minute).
pub fn poll_ms() -> u64 {
    if realistic() { 2000 } else { 500 }
}

/// The VK's window before a workload missing from its lists is judged lost (ms): 2 s on `fast`
/// (four lists at its half-second poll); on `realistic` the VK's default of 30 s, which its 2 s
/// poll needs (three lists missing span 4 s and more).
pub fn loss_window_ms() -> u64 {
    if realistic() { 30_000 } else { 2000 }
}

/// The dispatch inventory interval (ms) of the scenarios that compare prices: 1 s on `fast`;
/// 10 s on `realistic`, inside RunPod's quota beside the lists (the VK's default is a minute).
pub fn inventory_interval_ms() -> u64 {
    if realistic() { 10_000 } else { 1000 }
}

/// How long a scenario waits for what takes `fast` runs up to `d`: on `realistic`, long enough
/// for a start (16.5 s), a stuck one's deadline (30 s) and its retry, on a busy host.
pub fn patience(d: Duration) -> Duration {
    if realistic() {
        (d * 5 / 2).max(Duration::from_secs(120))
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn stuck_starts_fall_within_the_period_at_varied_places() {
        let places: Vec<u32> = (0..40).map(|_| place(20)).collect();
        assert!(places.iter().all(|p| (1..=20).contains(p)), "{places:?}");
        let distinct: std::collections::BTreeSet<_> = places.iter().collect();
        assert!(distinct.len() > 5, "{places:?}");
    }
}
