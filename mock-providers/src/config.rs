//! Emulator configuration: API key, GPU stock, execution mode, rate limits, and the two
//! profiles (`fast` for tests of the VK's logic, `realistic` for what users of the services
//! report).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::engine::gate::RateWindows;

/// One GPU type the emulated provider offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuStock {
    /// Provider-side GPU type id (RunPod `gpu.id`, Vast `gpu_name`), e.g. `A100-80GB`.
    pub gpu_type: String,
    /// Total number of GPUs of this type.
    pub count: u32,
    /// Price of one GPU of this type, in USD per hour.
    pub price_per_hour: f64,
}

impl GpuStock {
    /// A stock line: `count` GPUs of `gpu_type` at `price_per_hour` USD each.
    pub fn new(gpu_type: impl Into<String>, count: u32, price_per_hour: f64) -> Self {
        Self {
            gpu_type: gpu_type.into(),
            count,
            price_per_hour,
        }
    }
}

/// A named set of timings and failures (`mock-providers --profile`). `Realistic` is what users
/// of the real services report:
/// - minutes from create to running: RunPod "The first deployment may take a few minutes as
///   Runpod downloads your image" (runpod/docs `pods/templates/create-custom-template.mdx`);
///   Vast "takes 1-3 minutes to pull the Docker image and start" (vast-ai/docs
///   `examples/ai-ml-frameworks/unsloth-studio.mdx`), "Normal for 30 seconds with cached
///   images, can take hours with slow internet/large images" (`guides/instances/
///   manage-instances.mdx`). Modelled: 15 s placing, then 150 s pulling and starting;
/// - starts that never run: the same pages' "Instance Stuck on Loading" and RunPod's "Pod
///   stuck initializing" (`pods/manage-pods.mdx`). Neither publishes a share; one create in
///   [`REALISTIC_STUCK_EVERY`] staying in its start phase is our assumption;
/// - RunPod's quota windows of 60 requests a minute, 3,000 an hour and 50,000 a day, and Vast's
///   per-endpoint intervals at their real figures;
/// - Vast hosts that go offline under a running instance: Vast notifies "Instance offline" and
///   "Instance back online: your instance recovered after an outage" (vast-ai/docs
///   `guides/reference/notifications.mdx`), and says an `offline` or `unknown` instance "will
///   never reach running: destroy the instance and retry". Vast publishes no rate; one rental
///   in [`REALISTIC_OFFLINE_EVERY`] losing its host [`REALISTIC_OFFLINE_AFTER`] after it runs,
///   and not coming back, is our assumption (the case that costs money if nobody acts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Seconds to start, every start succeeds, no quota (tests of the VK's logic, demos,
    /// benchmarks).
    Fast,
    /// What users of the services report (the binary's default): minutes to start, one create
    /// in 20 that never starts, RunPod's quota windows.
    Realistic,
}

/// One create in this many never leaves its start phase under [`Profile::Realistic`].
pub const REALISTIC_STUCK_EVERY: u32 = 20;

/// One Vast rental in this many loses its host under [`Profile::Realistic`] ...
pub const REALISTIC_OFFLINE_EVERY: u32 = 50;
/// ... this long after it began running.
pub const REALISTIC_OFFLINE_AFTER: Duration = Duration::from_secs(600);

/// Hosts that go offline under running Vast instances (simulated mode): the rental whose
/// number is one short of each multiple of `every` is listed `offline` once it has run `after`,
/// and stays so (still holding its GPUs) until destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostOutage {
    pub every: u32,
    pub after: Duration,
}

impl Profile {
    /// Milliseconds placing (PROVISIONING, Vast `actual_status` null) and then pulling and
    /// starting (STARTING, `loading`).
    pub fn timings_ms(self) -> (u64, u64) {
        match self {
            Self::Fast => (2000, 1000),
            Self::Realistic => (15_000, 150_000),
        }
    }

    /// Every how many creates one stays starting forever (`None`: never).
    pub fn stuck_every(self) -> Option<u32> {
        match self {
            Self::Fast => None,
            Self::Realistic => Some(REALISTIC_STUCK_EVERY),
        }
    }

    /// The Vast host outages under the profile.
    pub fn host_outage(self) -> Option<HostOutage> {
        match self {
            Self::Fast => None,
            Self::Realistic => Some(HostOutage {
                every: REALISTIC_OFFLINE_EVERY,
                after: REALISTIC_OFFLINE_AFTER,
            }),
        }
    }

    /// Milliseconds to pull a GB of image: none on `fast`; on `realistic` 8 s, a host's
    /// 1 Gbit/s link (our assumption: neither service publishes a figure; Vast says a pull is
    /// "Normal for 30 seconds with cached images, can take hours with slow internet/large
    /// images", vast-ai/docs `guides/instances/manage-instances.mdx`), so a 30 GB inference
    /// image adds 4 minutes.
    pub fn pull_ms_per_gb(self) -> u64 {
        match self {
            Self::Fast => 0,
            Self::Realistic => 8000,
        }
    }

    /// RunPod's quota windows under the profile.
    pub fn rate_windows(self) -> RateWindows {
        match self {
            Self::Fast => RateWindows::default(),
            Self::Realistic => RateWindows {
                per_minute: Some(60),
                per_hour: Some(3000),
                per_day: Some(50_000),
            },
        }
    }
}

/// How workloads run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutionMode {
    /// Nothing runs; the lifecycle is computed from timestamps (cheap: 10,000 live workloads
    /// cost no tasks or timers).
    Simulated {
        /// Time spent in PROVISIONING (Vast: `actual_status` null).
        provision_ms: u64,
        /// Time spent in STARTING (Vast: `loading`).
        start_ms: u64,
        /// Time spent RUNNING before exiting with code 0; `None` runs forever.
        run_ms: Option<u64>,
    },
    /// The workload's command runs as a local child process (`sh -c`), so exit codes, output
    /// and CPU/memory use are real. Only safe on a loopback address: the API then executes
    /// whatever its callers send.
    Process {
        /// Time spent in PROVISIONING before the process is started.
        provision_ms: u64,
        /// Time spent in STARTING before the process is started.
        start_ms: u64,
    },
}

impl ExecutionMode {
    /// Simulated mode with the given timings.
    pub fn simulated(provision_ms: u64, start_ms: u64, run_ms: Option<u64>) -> Self {
        Self::Simulated {
            provision_ms,
            start_ms,
            run_ms,
        }
    }

    /// Process mode with no provisioning delay.
    pub fn process() -> Self {
        Self::Process {
            provision_ms: 0,
            start_ms: 0,
        }
    }

    pub(crate) fn provision(&self) -> Duration {
        match self {
            Self::Simulated { provision_ms, .. } | Self::Process { provision_ms, .. } => {
                Duration::from_millis(*provision_ms)
            }
        }
    }

    pub(crate) fn start(&self) -> Duration {
        match self {
            Self::Simulated { start_ms, .. } | Self::Process { start_ms, .. } => {
                Duration::from_millis(*start_ms)
            }
        }
    }

    pub(crate) fn run(&self) -> Option<Duration> {
        match self {
            Self::Simulated { run_ms, .. } => run_ms.map(Duration::from_millis),
            Self::Process { .. } => None,
        }
    }

    pub(crate) fn is_process(&self) -> bool {
        matches!(self, Self::Process { .. })
    }
}

impl Default for ExecutionMode {
    fn default() -> Self {
        Self::simulated(1_000, 1_000, None)
    }
}

/// Everything an emulator needs to start.
#[derive(Clone)]
pub struct EmulatorConfig {
    /// The only API key the emulator accepts (`Authorization: Bearer <key>`).
    pub api_key: String,
    /// GPU types, counts and prices.
    pub inventory: Vec<GpuStock>,
    /// Simulated or real child processes.
    pub mode: ExecutionMode,
    /// Requests allowed per minute, hour and day on the real-API routes (RunPod's quota
    /// windows); all `None` is unlimited.
    pub rate_windows: RateWindows,
    /// Enforce the provider's documented per-endpoint limits (Vast's minimum intervals), with
    /// every interval multiplied by this scale (1.0: the real figures; 0.1: ten times
    /// shorter, for runs on shortened timings); `None` enforces none.
    pub endpoint_limit_scale: Option<f64>,
    /// Simulated mode: every how many creates one never leaves its start phase (RunPod
    /// STARTING, Vast `loading`, Slurm CONFIGURING); `None`: every start succeeds.
    pub stuck_every: Option<u32>,
    /// Which create is the first of those that never start (1 to `stuck_every`; 0 and
    /// `stuck_every`: the `stuck_every`th), so a run of several emulators meets them at
    /// different places.
    pub first_stuck: u32,
    /// Simulated mode, Vast: hosts that go offline under running instances; `None`: never.
    pub host_outage: Option<HostOutage>,
    /// Milliseconds a host spends pulling each GB of an image whose size the emulated
    /// registry knows (`/_admin/images`), added to the workload's placing time.
    pub pull_ms_per_gb: u64,
}

impl EmulatorConfig {
    /// A config with the given key and inventory, simulated mode with 1 s provisioning and
    /// 1 s start, no rate limits.
    pub fn new(api_key: impl Into<String>, inventory: Vec<GpuStock>) -> Self {
        Self {
            api_key: api_key.into(),
            inventory,
            mode: ExecutionMode::default(),
            rate_windows: RateWindows::default(),
            endpoint_limit_scale: None,
            stuck_every: None,
            first_stuck: 0,
            host_outage: None,
            pull_ms_per_gb: 0,
        }
    }

    /// Vast hosts go offline under running instances as `outage` says (`None`: never).
    pub fn with_host_outage(mut self, outage: Option<HostOutage>) -> Self {
        self.host_outage = outage.filter(|o| o.every > 0);
        self
    }

    /// Every `n`th create stays starting forever (`None` or 0: never).
    pub fn with_stuck_every(mut self, n: Option<u32>) -> Self {
        self.stuck_every = n.filter(|n| *n > 0);
        self
    }

    /// The `first`th create is the first that stays starting (then every `stuck_every`th).
    pub fn with_first_stuck(mut self, first: u32) -> Self {
        self.first_stuck = first;
        self
    }

    /// Replace the execution mode.
    pub fn with_mode(mut self, mode: ExecutionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Set a requests-per-minute limit.
    pub fn with_rate_limit(mut self, per_minute: u32) -> Self {
        self.rate_windows.per_minute = Some(per_minute);
        self
    }

    /// Set the minute, hour and day quotas.
    pub fn with_rate_windows(mut self, windows: RateWindows) -> Self {
        self.rate_windows = windows;
        self
    }

    /// Enforce the provider's documented per-endpoint limits at this time scale.
    pub fn with_endpoint_limits(mut self, scale: f64) -> Self {
        self.endpoint_limit_scale = Some(scale);
        self
    }
}

impl fmt::Debug for EmulatorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the API key.
        f.debug_struct("EmulatorConfig")
            .field("api_key", &"<redacted>")
            .field("inventory", &self.inventory)
            .field("mode", &self.mode)
            .field("rate_windows", &self.rate_windows)
            .field("endpoint_limit_scale", &self.endpoint_limit_scale)
            .field("stuck_every", &self.stuck_every)
            .field("host_outage", &self.host_outage)
            .field("pull_ms_per_gb", &self.pull_ms_per_gb)
            .finish()
    }
}

/// Errors parsing a `--gpus` specification.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GpuSpecError {
    /// An entry is not of the form `TYPE=COUNT@PRICE`.
    #[error("invalid GPU entry {0:?}: expected TYPE=COUNT@PRICE, e.g. A100-80GB=8@1.89")]
    Malformed(String),
    /// The count is not a non-negative integer.
    #[error("invalid GPU count in {0:?}")]
    Count(String),
    /// The price is not a non-negative number.
    #[error("invalid GPU price in {0:?}")]
    Price(String),
}

/// Parse `A100-80GB=8@1.89,RTX4090=16@0.69` into stock lines.
pub fn parse_gpus(spec: &str) -> Result<Vec<GpuStock>, GpuSpecError> {
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (gpu_type, rest) = entry
            .split_once('=')
            .ok_or_else(|| GpuSpecError::Malformed(entry.to_owned()))?;
        let (count, price) = rest
            .split_once('@')
            .ok_or_else(|| GpuSpecError::Malformed(entry.to_owned()))?;
        let gpu_type = gpu_type.trim();
        if gpu_type.is_empty() {
            return Err(GpuSpecError::Malformed(entry.to_owned()));
        }
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| GpuSpecError::Count(entry.to_owned()))?;
        let price: f64 = price
            .trim()
            .parse()
            .map_err(|_| GpuSpecError::Price(entry.to_owned()))?;
        if !price.is_finite() || price < 0.0 {
            return Err(GpuSpecError::Price(entry.to_owned()));
        }
        out.push(GpuStock::new(gpu_type, count, price));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gpu_spec() {
        let gpus = parse_gpus("A100-80GB=8@1.89, RTX4090=16@0.69").unwrap();
        assert_eq!(
            gpus,
            vec![
                GpuStock::new("A100-80GB", 8, 1.89),
                GpuStock::new("RTX4090", 16, 0.69)
            ]
        );
    }

    #[test]
    fn rejects_bad_gpu_spec() {
        assert!(matches!(
            parse_gpus("A100"),
            Err(GpuSpecError::Malformed(_))
        ));
        assert!(matches!(
            parse_gpus("A100=x@1"),
            Err(GpuSpecError::Count(_))
        ));
        assert!(matches!(
            parse_gpus("A100=1@-1"),
            Err(GpuSpecError::Price(_))
        ));
        assert!(matches!(
            parse_gpus("=1@1"),
            Err(GpuSpecError::Malformed(_))
        ));
    }

    #[test]
    fn debug_hides_the_key() {
        let c = EmulatorConfig::new("sekrit-key", vec![]);
        assert!(!format!("{c:?}").contains("sekrit"));
        let state = crate::runpod::State::new(c.clone());
        assert!(!format!("{state:?}").contains("sekrit"));
        let state = crate::vast::State::new(c);
        assert!(!format!("{state:?}").contains("sekrit"));
    }
}
