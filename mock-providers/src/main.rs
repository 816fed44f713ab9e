//! `mock-providers`: serve the RunPod v2 and/or Vast.ai emulators (plus `/_admin`) on local
//! addresses, for demos, the testbed and conformance runs. `mock-providers stand-in [ADDR]`
//! serves only what answers on an emulated workload's published ports (`serve::stand_in`, on
//! 0.0.0.0:8080 by default), for in-cluster replicas of a test's Deployment.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use mock_providers::config::{HostOutage, Profile};
use mock_providers::{
    EmulatorConfig, ExecutionMode, GpuStock, parse_gpus, runpod, slurm, spawn_on, vast,
};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Lifecycle computed from timestamps; nothing runs.
    Simulated,
    /// Each workload's command runs as a local child process (`sh -c`).
    Process,
}

/// Emulators of GPU provider APIs with an admin and fault-injection API under /_admin.
#[derive(Parser)]
#[command(name = "mock-providers", version, about)]
struct Args {
    /// Serve the RunPod v2 emulator on this address, e.g. 127.0.0.1:9001.
    #[arg(long, value_name = "ADDR")]
    runpod: Option<SocketAddr>,
    /// Serve the Vast.ai emulator on this address, e.g. 127.0.0.1:9002.
    #[arg(long, value_name = "ADDR")]
    vast: Option<SocketAddr>,
    /// Serve the slurmrestd emulator on this address, e.g. 127.0.0.1:6820 (the API key is the
    /// JWT it accepts in X-SLURM-USER-TOKEN).
    #[arg(long, value_name = "ADDR")]
    slurm: Option<SocketAddr>,
    /// slurmrestd plugin versions the Slurm emulator serves (v0.0.38, v0.0.41).
    #[arg(long, value_name = "LIST", default_value = "v0.0.38,v0.0.41")]
    slurm_dialects: String,
    /// The Slurm user the token belongs to (X-SLURM-USER-NAME).
    #[arg(long, default_value = "vkslurm")]
    slurm_user: String,
    /// Nodes of the emulated Slurm cluster.
    #[arg(long, default_value_t = 4)]
    slurm_nodes: u32,
    /// GPUs per node of the emulated Slurm cluster.
    #[arg(long, default_value_t = 8)]
    slurm_gpus_per_node: u32,
    /// Key the admin API (`/_admin`) requires in `X-Admin-Key`; mandatory when an emulator
    /// binds beyond loopback.
    #[arg(long, env = "MOCK_ADMIN_KEY", hide_env_values = true)]
    admin_key: Option<String>,
    /// The API key the emulators accept (Authorization: Bearer <key>).
    #[arg(long, env = "MOCK_API_KEY", hide_env_values = true)]
    api_key: String,
    /// GPU stock per emulator as TYPE=COUNT@PRICE,... or `nvml` to read the host's GPUs.
    #[arg(long, default_value = "A100-80GB=8@1.89,RTX4090=16@0.69")]
    gpus: String,
    /// Price per GPU-hour of GPUs read through NVML.
    #[arg(long, default_value_t = 1.0)]
    nvml_price: f64,
    /// Timings and failures: the flags below override the profile's figures one by one.
    #[arg(long, value_enum, default_value_t = Profile::Realistic)]
    profile: Profile,
    /// Execution mode.
    #[arg(long, value_enum, default_value_t = Mode::Simulated)]
    mode: Mode,
    /// Time in PROVISIONING (default: the profile's; fast 2000, realistic 15000).
    #[arg(long)]
    provision_ms: Option<u64>,
    /// Time in STARTING (default: the profile's; fast 1000, realistic 150000).
    #[arg(long)]
    start_ms: Option<u64>,
    /// Simulated mode: every Nth create never leaves its start phase (default: the
    /// profile's; fast never, realistic 20); 0: never.
    #[arg(long)]
    stuck_every: Option<u32>,
    /// Simulated mode, Vast: the host of every Nth rental goes offline under it (default: the
    /// profile's; fast never, realistic 50); 0: never.
    #[arg(long)]
    offline_every: Option<u32>,
    /// Simulated mode, Vast: how long such a rental runs before its host goes offline
    /// (default: the profile's; realistic 600000).
    #[arg(long)]
    offline_after_ms: Option<u64>,
    /// Simulated mode: exit with code 0 after running this long (default: run forever).
    #[arg(long)]
    run_ms: Option<u64>,
    /// Requests per minute on the real-API routes (default: the profile's; fast unlimited,
    /// realistic RunPod's documented quota, 60).
    #[arg(long)]
    rate_limit_per_minute: Option<u32>,
    /// Requests per hour on the real-API routes (default: the profile's; RunPod's: 3000).
    #[arg(long)]
    rate_limit_per_hour: Option<u32>,
    /// Requests per day on the real-API routes (default: the profile's; RunPod's: 50000).
    #[arg(long)]
    rate_limit_per_day: Option<u32>,
    /// The Vast emulator enforces Vast's documented per-endpoint minimum intervals (rent
    /// 4.5 s, instance list 1 s, destroy 3 s, search 10 a minute...) multiplied by this
    /// scale: 1 for the real figures, 0.1 for a VK paced at a tenth; 0 turns them off.
    #[arg(long, default_value_t = 1.0)]
    vast_rate_limit_scale: f64,
    /// GPU stock of the Vast emulator, as --gpus, with Vast's exact `gpu_name`s (its search
    /// matches them exactly), e.g. "A100 SXM4=8@1.89,RTX 4090=16@0.69".
    #[arg(long, default_value = "A100 SXM4=8@1.89,RTX 4090=16@0.69")]
    vast_gpus: String,
    /// In process mode, allow binding a non-loopback address (the API then runs commands
    /// sent by anyone who can reach it and knows the key).
    #[arg(long)]
    allow_non_loopback: bool,
}

fn inventory(args: &Args) -> anyhow::Result<Vec<GpuStock>> {
    if args.gpus.trim() != "nvml" {
        return parse_gpus(&args.gpus).context("failed to parse --gpus");
    }
    nvml_inventory(args.nvml_price)
}

#[cfg(feature = "nvml")]
fn nvml_inventory(price: f64) -> anyhow::Result<Vec<GpuStock>> {
    match mock_providers::inventory::nvml::host_inventory(price) {
        Ok(stock) => Ok(stock),
        Err(err) => {
            tracing::warn!(
                error = format!("{:#}", anyhow::Error::new(err)),
                "NVML is not available; falling back to the default inventory A100-80GB=8@1.89,RTX4090=16@0.69"
            );
            parse_gpus("A100-80GB=8@1.89,RTX4090=16@0.69").context("failed to parse default GPUs")
        }
    }
}

#[cfg(not(feature = "nvml"))]
fn nvml_inventory(_price: f64) -> anyhow::Result<Vec<GpuStock>> {
    bail!("--gpus nvml needs a build with `--features nvml`")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("stand-in") {
        let addr: SocketAddr = argv
            .next()
            .unwrap_or_else(|| "0.0.0.0:8080".into())
            .parse()
            .context("stand-in ADDR: an address and port, e.g. 0.0.0.0:8080")?;
        // A pod's name, as a workload's id names it on a provider.
        let name = std::env::var("HOSTNAME").unwrap_or_else(|_| "stand-in".into());
        tracing::info!(%addr, name, "serving the stand-in");
        return Ok(mock_providers::serve::stand_in(addr, name).await?);
    }
    let args = Args::parse();
    if args.runpod.is_none() && args.vast.is_none() && args.slurm.is_none() {
        bail!("nothing to serve: give --runpod ADDR, --vast ADDR and/or --slurm ADDR");
    }
    if args.api_key.is_empty() {
        bail!("the API key must not be empty");
    }
    let profile = args.profile;
    let (provision, start) = profile.timings_ms();
    let provision_ms = args.provision_ms.unwrap_or(provision);
    let start_ms = args.start_ms.unwrap_or(start);
    let mode = match args.mode {
        Mode::Simulated => ExecutionMode::simulated(provision_ms, start_ms, args.run_ms),
        Mode::Process => ExecutionMode::Process {
            provision_ms,
            start_ms,
        },
    };
    // Windows given as flags apply to every emulator; the profile's are RunPod's.
    let flagged = mock_providers::config::RateWindows {
        per_minute: args.rate_limit_per_minute,
        per_hour: args.rate_limit_per_hour,
        per_day: args.rate_limit_per_day,
    };
    let windows = profile.rate_windows();
    if args.mode == Mode::Process && !args.allow_non_loopback {
        for addr in [args.runpod, args.vast, args.slurm].into_iter().flatten() {
            if !addr.ip().is_loopback() {
                bail!(
                    "refusing to bind {addr} in process mode: the API runs commands it is sent; \
                     use a loopback address or pass --allow-non-loopback"
                );
            }
        }
    }
    let addrs: Vec<SocketAddr> = [args.runpod, args.vast, args.slurm]
        .into_iter()
        .flatten()
        .collect();
    mock_providers::admin::check_exposure(&addrs, args.admin_key.as_deref())
        .map_err(anyhow::Error::msg)?;
    let keyed = |router: axum::Router| match args.admin_key.clone().filter(|k| !k.is_empty()) {
        Some(key) => mock_providers::admin::require_key(router, key),
        None => router,
    };
    let gpus = inventory(&args)?;
    let config = EmulatorConfig {
        api_key: args.api_key.clone(),
        inventory: gpus,
        mode,
        rate_windows: mock_providers::config::RateWindows {
            per_minute: flagged.per_minute.or(windows.per_minute),
            per_hour: flagged.per_hour.or(windows.per_hour),
            per_day: flagged.per_day.or(windows.per_day),
        },
        endpoint_limit_scale: None,
        stuck_every: args
            .stuck_every
            .or(profile.stuck_every())
            .filter(|n| *n > 0),
        first_stuck: 0,
        host_outage: host_outage(&args, profile),
        pull_ms_per_gb: profile.pull_ms_per_gb(),
    };
    tracing::info!(?profile, mode = ?config.mode, stuck_every = ?config.stuck_every, host_outage = ?config.host_outage, "emulator profile");
    if !args.vast_rate_limit_scale.is_finite() || args.vast_rate_limit_scale < 0.0 {
        bail!("--vast-rate-limit-scale must be a non-negative number");
    }
    let mut servers = Vec::new();
    let mut engines = Vec::new();
    if let Some(addr) = args.runpod {
        let state = runpod::State::new(config.clone());
        engines.push(state.engine().clone());
        let router = runpod::router(state);
        let (bound, handle) = spawn_on(addr, keyed(router))
            .await
            .with_context(|| format!("failed to bind the RunPod emulator on {addr}"))?;
        tracing::info!(provider = "runpod", %bound, base_url = %format!("http://{bound}/v2"), "emulator listening");
        servers.push(handle);
    }
    if let Some(addr) = args.vast {
        let mut vast_config = config.clone();
        if args.gpus.trim() != "nvml" {
            vast_config.inventory =
                parse_gpus(&args.vast_gpus).context("failed to parse --vast-gpus")?;
        }
        vast_config.endpoint_limit_scale =
            (args.vast_rate_limit_scale > 0.0).then_some(args.vast_rate_limit_scale);
        // Vast limits each endpoint instead of RunPod's windows.
        vast_config.rate_windows = flagged;
        let state = vast::State::new(vast_config);
        engines.push(state.engine().clone());
        let router = vast::router(state);
        let (bound, handle) = spawn_on(addr, keyed(router))
            .await
            .with_context(|| format!("failed to bind the Vast emulator on {addr}"))?;
        tracing::info!(provider = "vast", %bound, base_url = %format!("http://{bound}"), "emulator listening");
        servers.push(handle);
    }
    let mut slurm_emulators = Vec::new();
    if let Some(addr) = args.slurm {
        let dialects = args
            .slurm_dialects
            .split(',')
            .map(|d| {
                slurm::Dialect::parse(d)
                    .with_context(|| format!("unknown Slurm dialect {d:?} (v0.0.38, v0.0.41)"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // A Slurm job's wait is its queue (the cluster's size models it), not an image pull:
        // the profile's start times are the clouds'; explicit flags still apply.
        let slurm_mode = match (&config.mode, args.provision_ms, args.start_ms) {
            (ExecutionMode::Simulated { run_ms, .. }, None, None) => {
                let (provision, start) = Profile::Fast.timings_ms();
                ExecutionMode::simulated(provision, start, *run_ms)
            }
            (mode, _, _) => mode.clone(),
        };
        let cfg = slurm::SlurmConfig {
            dialects,
            ..slurm::SlurmConfig::new(args.api_key.clone(), args.slurm_user.clone())
                .with_mode(slurm_mode)
                .with_cluster(args.slurm_nodes, args.slurm_gpus_per_node)
        };
        let state = slurm::State::new(cfg);
        slurm_emulators.push(state.emulator().clone());
        let (bound, handle) = spawn_on(addr, keyed(slurm::router(state)))
            .await
            .with_context(|| format!("failed to bind the Slurm emulator on {addr}"))?;
        tracing::info!(provider = "slurm", %bound, base_url = %format!("http://{bound}"), "emulator listening");
        servers.push(handle);
    }
    tracing::info!(
        mode = ?args.mode,
        gpus = ?config.inventory,
        rate_windows = ?config.rate_windows,
        vast_rate_limit_scale = args.vast_rate_limit_scale,
        "emulators ready; admin API under /_admin"
    );
    shutdown_signal().await?;
    tracing::info!("shutting down");
    for s in servers {
        s.abort();
    }
    // Kill every child process group before the runtime goes away.
    for engine in engines {
        engine.reset();
    }
    for emulator in slurm_emulators {
        emulator.lock().jobs.reset();
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("failed to install the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("failed to wait for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}

/// The profile's Vast host outages, with the flags' figures in its place.
fn host_outage(args: &Args, profile: Profile) -> Option<HostOutage> {
    let base = profile.host_outage();
    let every = args.offline_every.or(base.map(|o| o.every))?;
    let after = args
        .offline_after_ms
        .map(Duration::from_millis)
        .or(base.map(|o| o.after))
        .unwrap_or(mock_providers::config::REALISTIC_OFFLINE_AFTER);
    (every > 0).then_some(HostOutage { every, after })
}
