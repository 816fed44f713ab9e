//! `vk-bench`: throughput, added latency, restart recovery and footprint of the virtual kubelet
//! at N pods, against a testbed that `scripts/bench` started (see issue 8 and `make bench`).
//!
//! For each N it starts the provider emulators (simulated mode) and the `vk` binary as child
//! processes, creates N pods bound to the VK node, waits for all to be Running, measures a quiet
//! poll window, SIGKILLs and restarts the VK, deletes every pod, and writes
//! `target/bench/report.json` and `report.md`. Everything it created is removed on exit, also on
//! Ctrl-C.

mod args;
mod cluster;
mod dispatch;
mod emulators;
mod kwok;
mod load;
mod phases;
mod procs;
mod report;
mod scrape;
mod setup;
mod state;
mod teardown;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use cluster::{ApiCounts, Bind, PodTimes, Tracker};
use procs::{Children, CpuSnapshot, Machine, round3};
use report::{Percentiles, Report, Round};

pub(crate) use args::log;
use args::{Args, Cleanup};
use emulators::Emulators;
pub(crate) use scrape::wait_until;
use scrape::*;
use state::*;

const API_KEY: &str = "vk-bench-emulator-key";
const GPU_TYPE: &str = "A100-80GB";
const CLUSTER_ID: &str = "vk-bench";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match bench().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            log(format!("error: {e:#}"));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.n = vec![200];
        args.probe_n = args.probe_n.min(100);
    }
    if !(args.probe_rate > 0.0 && args.probe_rate.is_finite()) {
        bail!("--probe-rate must be a positive number of pods per second");
    }
    if args.n.is_empty() || args.n.contains(&0) {
        bail!("--n needs positive pod counts");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::try_default()
        .await
        .context("failed to build a Kubernetes client (is KUBECONFIG set?)")?;
    cluster::check_marker(&client, args.i_know_this_cluster).await?;

    let cleanup = Arc::new(Cleanup {
        client: client.clone(),
        node: args.node.clone(),
        children: Children::default(),
        namespaces: Mutex::default(),
    });
    let result = tokio::select! {
        r = run(&args, &client, &cleanup) => r,
        s = interrupted() => Err(anyhow::anyhow!("interrupted by {s}")),
    };
    log("cleaning up: children, namespaces, node");
    if tokio::time::timeout(Duration::from_secs(120), cleanup.run())
        .await
        .is_err()
    {
        log("clean-up timed out");
    }
    result
}

async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

async fn run(args: &Args, client: &Client, cleanup: &Arc<Cleanup>) -> anyhow::Result<()> {
    let machine = Machine::describe();
    log(format!("machine: {}", machine.one_line()));
    let vk_bin = match &args.vk_bin {
        Some(p) => p.clone(),
        None => procs::sibling_binary("vk")?,
    };
    let mock_bin = match &args.mock_bin {
        Some(p) => p.clone(),
        None => procs::sibling_binary("mock-providers")?,
    };
    let logs = args.out_dir.join("logs");
    std::fs::create_dir_all(&logs)
        .with_context(|| format!("failed to create {}", logs.display()))?;

    let mut report = Report {
        machine,
        started_at: Timestamp::now().to_string(),
        settings: json!({
            "n": args.n, "poll_ms": args.poll_ms, "provision_ms": args.provision_ms,
            "start_ms": args.start_ms, "workers": args.workers, "concurrency": args.concurrency,
            "vast_percent": args.vast_percent, "bind": args.bind, "node": args.node,
            "vk_env": args.vk_env,
        }),
        rounds: Vec::new(),
        summary: Vec::new(),
        dispatch: dispatch::measure(),
    };
    for d in &report.dispatch {
        log(format!(
            "dispatch: {} providers, {:.0} ns per pod",
            d.providers, d.ns_per_pod
        ));
    }
    let kwok = match (&args.kwok_bin, &args.kwok_config, &args.kubeconfig) {
        (Some(bin), Some(config), Some(kubeconfig)) => Some(kwok::Kwok {
            bin: bin.clone(),
            config: config.clone(),
            kubeconfig: kubeconfig.clone(),
        }),
        _ => {
            log("kwok not given (--kwok-bin, --kwok-config, KUBECONFIG): no side-by-side figures");
            None
        }
    };
    // The N of the kwok guard runs `gate_runs` times, each paired with kwok's own.
    let mut plan: Vec<(usize, f64, u32)> = Vec::new();
    for &n in &args.n {
        let runs = if n == GATE_N && kwok.is_some() {
            args.gate_runs
        } else {
            1
        };
        plan.extend((1..=runs).map(|run| (n, 0.0, run)));
    }
    if args.probe_n > 0 {
        plan.push((args.probe_n, args.probe_rate, 1));
    }
    for (n, rate, run) in plan {
        let bench = Bench {
            args,
            client: client.clone(),
            cleanup: cleanup.clone(),
            vk_bin: vk_bin.clone(),
            mock_bin: mock_bin.clone(),
            logs: logs.clone(),
            n,
            rate,
            label: match (rate > 0.0, run) {
                (true, _) => format!("{n}-paced"),
                (false, 1) => n.to_string(),
                (false, run) => format!("{n}-run{run}"),
            },
        };
        // kwok first: our round's restart and deletes leave the API server more history.
        let theirs = match &kwok {
            Some(k) if rate == 0.0 => Some(
                k.round(
                    client,
                    &cleanup.children,
                    &logs,
                    n,
                    args.concurrency,
                    bench.wait_limit(),
                )
                .await?,
            ),
            _ => None,
        };
        let round = bench.round(theirs).await?;
        report.rounds.push(round);
        report.summary = report::judge_provider_calls(&report.rounds);
        report.write(&args.out_dir)?;
    }
    println!("{}", report.markdown());
    log(format!(
        "wrote {} and {}",
        args.out_dir.join("report.json").display(),
        args.out_dir.join("report.md").display()
    ));
    gate(&report)
}

/// The N whose ratio to kwok guards the run.
const GATE_N: usize = 1000;

/// The guard of issue 32: the run fails when the median ratio to kwok's time of the rounds at
/// [`GATE_N`] falls under the target.
fn gate(report: &Report) -> anyhow::Result<()> {
    let mut ratios: Vec<f64> = report
        .rounds
        .iter()
        .filter(|r| r.n == GATE_N && r.rate_per_s.is_none())
        .filter_map(|r| r.vs_kwok)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let Some(&median) = ratios.get(ratios.len() / 2) else {
        return Ok(());
    };
    let all = ratios
        .iter()
        .map(|r| format!("{r:.2}x"))
        .collect::<Vec<_>>()
        .join(", ");
    log(format!(
        "kwok guard at N = {GATE_N}: median {median:.2}x of {all} (target {}x)",
        report::VS_KWOK_TARGET
    ));
    if median < report::VS_KWOK_TARGET {
        bail!(
            "the VK's time to all Running at N = {GATE_N} is under {} of kwok's: median \
             {median:.2}x of {all}",
            report::VS_KWOK_TARGET
        );
    }
    Ok(())
}

/// One round at N pods.
struct Bench<'a> {
    args: &'a Args,
    client: Client,
    cleanup: Arc<Cleanup>,
    vk_bin: PathBuf,
    mock_bin: PathBuf,
    logs: PathBuf,
    n: usize,
    /// Pods per second to create; 0 for as fast as possible.
    rate: f64,
    /// Names this round's files.
    label: String,
}

impl Bench<'_> {
    fn children(&self) -> &Children {
        &self.cleanup.children
    }

    fn pids(&self) -> Vec<(String, u32)> {
        let mut pids = procs::testbed_pids(self.args.testbed_dir.as_deref());
        for role in ["vk", "mock-providers"] {
            if let Some(pid) = self.children().pid(role) {
                pids.push((role.to_owned(), pid));
            }
        }
        pids.push(("vk-bench".to_owned(), std::process::id()));
        pids
    }
}
