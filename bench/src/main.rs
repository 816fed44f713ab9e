//! `vk-bench`: throughput, added latency, restart recovery and footprint of the virtual kubelet
//! at N pods, against a testbed that `scripts/bench` started (see issue 8 and `make bench`).
//!
//! For each N it starts the provider emulators (simulated mode) and the `vk` binary as child
//! processes, creates N pods bound to the VK node, waits for all to be Running, measures a quiet
//! poll window, SIGKILLs and restarts the VK, deletes every pod, and writes
//! `target/bench/report.json` and `report.md`. Everything it created is removed on exit, also on
//! Ctrl-C.

mod cluster;
mod dispatch;
mod kwok;
mod load;
mod procs;
mod report;

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

const API_KEY: &str = "vk-bench-emulator-key";
const GPU_TYPE: &str = "A100-80GB";
const CLUSTER_ID: &str = "vk-bench";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "vk-bench",
    about = "Benchmark the GPU virtual kubelet on a testbed started by scripts/bench"
)]
struct Args {
    /// Pod counts to run, one round each.
    #[arg(long = "n", value_delimiter = ',', default_values_t = [1000usize, 3000, 10000])]
    n: Vec<usize>,
    /// Smoke run: N = 200 only (and a 100-pod paced latency probe).
    #[arg(long)]
    quick: bool,
    /// Pods of the paced latency probe run after the throughput rounds (0: none). Unlike the
    /// throughput rounds, which create pods as fast as the apiserver takes them and so measure
    /// queueing under saturation, the probe shows the latency the VK adds when it keeps up.
    #[arg(long, default_value_t = 1500)]
    probe_n: usize,
    /// Pods per second created by the latency probe (50/s: the highest rate at which both
    /// latency targets held on 2 cores; at 100/s the apiserver's write latency breaks them).
    #[arg(long, default_value_t = 50.0)]
    probe_rate: f64,
    /// Run against a cluster without the bench's marker ConfigMap.
    #[arg(long)]
    i_know_this_cluster: bool,
    /// Where report.json, report.md and the logs go.
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// The `vk` binary (default: next to this one).
    #[arg(long)]
    vk_bin: Option<PathBuf>,
    /// The `mock-providers` binary (default: next to this one).
    #[arg(long)]
    mock_bin: Option<PathBuf>,
    /// The VK's provider poll interval.
    #[arg(long, default_value_t = 2000)]
    poll_ms: u64,
    /// Emulated time in PROVISIONING.
    #[arg(long, default_value_t = 0)]
    provision_ms: u64,
    /// Emulated time in STARTING.
    #[arg(long, default_value_t = 0)]
    start_ms: u64,
    /// The VK's reconcile workers (`workers` in its config). The VK's own default, 32, leaves
    /// pods queueing behind apiserver round trips when thousands arrive at once.
    #[arg(long, default_value_t = 256)]
    workers: usize,
    /// Create and delete requests the bench keeps in flight.
    #[arg(long, default_value_t = 48)]
    concurrency: usize,
    /// Share of pods pinned to the Vast emulator, percent (the rest go to RunPod).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    vast_percent: u32,
    /// How pods reach the VK node.
    #[arg(long, value_enum, default_value_t = Bind::NodeName)]
    bind: Bind,
    /// Name of the VK's node.
    #[arg(long, default_value = "vk-bench")]
    node: String,
    /// `RUST_LOG` of the VK (its log is JSON, in the logs folder).
    #[arg(long, default_value = "info")]
    vk_log: String,
    /// Extra environment of the VK process, KEY=VALUE (repeatable), for experiments such as
    /// allocator settings; recorded in the report's settings.
    #[arg(long = "vk-env", value_name = "KEY=VALUE")]
    vk_env: Vec<String>,
    /// The kwok binary: each round is also run on a node kwok simulates, for the side-by-side
    /// figures (none: kwok's column stays empty and the ratio target is not judged).
    #[arg(long, env = "VK_BENCH_KWOK_BIN")]
    kwok_bin: Option<PathBuf>,
    /// kwok's stage configuration (written by `scripts/bench` from kwok's own module).
    #[arg(long, env = "VK_BENCH_KWOK_CONFIG")]
    kwok_config: Option<PathBuf>,
    /// The kubeconfig kwok is given (the one this process uses).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The testbed's folder (its run/*.pid name the control plane processes to profile).
    #[arg(long, env = "TESTBED_DIR")]
    testbed_dir: Option<PathBuf>,
}

/// What the bench must undo, whatever happens.
struct Cleanup {
    client: Client,
    node: String,
    children: Children,
    namespaces: Mutex<Vec<String>>,
}

impl Cleanup {
    async fn run(&self) {
        self.children.stop_all().await;
        let namespaces: Vec<String> = self
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for ns in namespaces {
            cluster::remove_namespace(&self.client, &ns).await;
        }
        cluster::delete_node(&self.client, &self.node).await;
        cluster::delete_node(&self.client, kwok::NODE).await;
    }
}

pub(crate) fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[vk-bench {}] {}",
        Timestamp::now().strftime("%H:%M:%S"),
        msg.as_ref()
    );
}

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
    let mut plan: Vec<(usize, f64)> = args.n.iter().map(|&n| (n, 0.0)).collect();
    if args.probe_n > 0 {
        plan.push((args.probe_n, args.probe_rate));
    }
    for (n, rate) in plan {
        let bench = Bench {
            args,
            client: client.clone(),
            cleanup: cleanup.clone(),
            vk_bin: vk_bin.clone(),
            mock_bin: mock_bin.clone(),
            logs: logs.clone(),
            n,
            rate,
            label: if rate > 0.0 {
                format!("{n}-paced")
            } else {
                n.to_string()
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
    // The guard of issue 32: the run fails when the VK falls under its share of kwok's
    // throughput at N = 1,000.
    let missed: Vec<String> = report
        .rounds
        .iter()
        .filter(|r| r.n == 1000 && r.rate_per_s.is_none())
        .flat_map(|r| &r.targets)
        .filter(|t| t.name == report::VS_KWOK && t.met == Some(false))
        .map(|t| t.measured.clone())
        .collect();
    log(format!(
        "wrote {} and {}",
        args.out_dir.join("report.json").display(),
        args.out_dir.join("report.md").display()
    ));
    if !missed.is_empty() {
        bail!(
            "the VK's time to all Running at N = 1000 is under {} of kwok's: {}",
            report::VS_KWOK_TARGET,
            missed.join("; ")
        );
    }
    Ok(())
}

/// The emulators' addresses of one round.
struct Emulators {
    runpod: String,
    vast: String,
    http: reqwest::Client,
}

impl Emulators {
    fn all(&self) -> [(&'static str, &str); 2] {
        [("runpod", &self.runpod), ("vast", &self.vast)]
    }

    async fn counters(&self) -> anyhow::Result<BTreeMap<String, BTreeMap<String, f64>>> {
        let mut out = BTreeMap::new();
        for (name, addr) in self.all() {
            let v: BTreeMap<String, f64> = self
                .http
                .get(format!("http://{addr}/_admin/counters"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            out.insert(name.to_owned(), v);
        }
        Ok(out)
    }

    async fn workloads(&self) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        for (_, addr) in self.all() {
            let v: Vec<Value> = self
                .http
                .get(format!("http://{addr}/_admin/workloads"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            out.extend(v);
        }
        Ok(out)
    }

    async fn live(&self) -> anyhow::Result<usize> {
        Ok(self
            .workloads()
            .await?
            .iter()
            .filter(|w| {
                !matches!(
                    w["state"].as_str(),
                    Some("TERMINATED" | "terminated" | "deleted" | "DELETED")
                )
            })
            .count())
    }
}

fn counter_delta(
    a: &BTreeMap<String, BTreeMap<String, f64>>,
    b: &BTreeMap<String, BTreeMap<String, f64>>,
    scale: f64,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    b.iter()
        .map(|(p, m)| {
            let routes = m
                .iter()
                .map(|(k, v)| {
                    let d = v - a.get(p).and_then(|x| x.get(k)).copied().unwrap_or(0.0);
                    (k.clone(), round3(d * scale))
                })
                .filter(|(k, v)| *v != 0.0 || k == "total")
                .collect();
            (p.clone(), routes)
        })
        .collect()
}

/// Sum of a VK metric's samples whose label text contains every `labels` item.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let base = key.split('{').next()?;
            (base == name && labels.iter().all(|x| key.contains(x)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// (upper bound, cumulative count) pairs of a histogram in Prometheus text.
fn histogram(text: &str, name: &str) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&bucket)?;
            let (le, rest) = rest.split_once('"')?;
            let count = rest.rsplit(' ').next()?.parse::<f64>().ok()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count))
        })
        .collect()
}

/// One "created workload" line of the VK's JSON log.
struct CreateLine {
    uid: String,
    at: Timestamp,
    /// `since_seen_ms`: the VK's first sight of the pod to the provider's answer.
    since_seen_ms: Option<f64>,
    /// `provider_ms`: the provider's create call.
    provider_ms: Option<f64>,
}

/// Every "created workload" line of the VK's JSON log, read once.
fn vk_creates(log: &Path) -> Vec<CreateLine> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("created workload"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "created workload")
        .filter_map(|v| {
            let f = &v["fields"];
            Some(CreateLine {
                uid: f["uid"].as_str()?.to_owned(),
                at: v["timestamp"].as_str()?.parse().ok()?,
                since_seen_ms: f["since_seen_ms"].as_f64(),
                provider_ms: f["provider_ms"].as_f64(),
            })
        })
        .collect()
}

pub(crate) fn ms_between(a: Timestamp, b: Timestamp) -> f64 {
    b.duration_since(a).as_secs_f64() * 1000.0
}

/// Polls `f` every `every` until it is true; the instant it was, or None at the deadline.
pub(crate) async fn wait_until<F, Fut>(
    timeout: Duration,
    every: Duration,
    mut f: F,
) -> Option<Instant>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
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

    async fn start_emulators(&self) -> anyhow::Result<Emulators> {
        let share = f64::from(self.args.vast_percent.max(100 - self.args.vast_percent)) / 100.0;
        let gpus = (self.n as f64 * share * 1.1).ceil() as usize + 16;
        let (rp, vp) = (procs::free_port()?, procs::free_port()?);
        let args: Vec<String> = [
            "--runpod",
            &format!("127.0.0.1:{rp}"),
            "--vast",
            &format!("127.0.0.1:{vp}"),
            "--gpus",
            &format!("{GPU_TYPE}={gpus}@1.89"),
            // Vast's search matches exact names: the adapter maps A100-80GB to the A100 names.
            "--vast-gpus",
            &format!("A100 SXM4={gpus}@1.89"),
            "--mode",
            "simulated",
            // The bench measures the VK, not Vast's per-endpoint minimum intervals (one rent
            // per 4.5 s per key would make 500 Vast pods take 37 minutes): both sides off.
            "--vast-rate-limit-scale",
            "0",
            "--provision-ms",
            &self.args.provision_ms.to_string(),
            "--start-ms",
            &self.args.start_ms.to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        self.children().spawn(
            "mock-providers",
            &self.mock_bin,
            &args,
            &[("MOCK_API_KEY", API_KEY), ("RUST_LOG", "warn")],
            &self.logs.join(format!("mock-providers-{}.log", self.label)),
        )?;
        let emu = Emulators {
            runpod: format!("127.0.0.1:{rp}"),
            vast: format!("127.0.0.1:{vp}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        };
        let up = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { emu.counters().await.is_ok() },
        )
        .await;
        if up.is_none() {
            bail!(
                "the emulators did not answer within 30 s (log in {})",
                self.logs.display()
            );
        }
        Ok(emu)
    }

    fn write_vk_config(&self, emu: &Emulators) -> anyhow::Result<(PathBuf, u16)> {
        let metrics_port = procs::free_port()?;
        let config = json!({
            "nodeName": self.args.node,
            "clusterId": CLUSTER_ID,
            "kubeletPort": procs::free_port()?,
            "metricsAddr": format!("127.0.0.1:{metrics_port}"),
            "workers": self.args.workers,
            "capacity": {"pods": "1000000", "gpus": "1000000"},
            "timings": {"pollIntervalMs": self.args.poll_ms, "gcGraceMs": 30000},
            "providers": [
                {"name": "runpod", "kind": "runpod", "apiKeyEnv": "VK_BENCH_PROVIDER_KEY",
                 "settings": {"baseUrl": format!("http://{}/v2", emu.runpod), "defaultGpuType": GPU_TYPE}},
                {"name": "vast", "kind": "vast", "apiKeyEnv": "VK_BENCH_PROVIDER_KEY",
                 "settings": {"baseUrl": format!("http://{}", emu.vast), "defaultGpuType": GPU_TYPE,
                              "rateLimits": {"list": 0, "search": 0, "rent": 0, "destroy": 0, "logs": 0}}},
            ],
        });
        let path = self.logs.join(format!("vk-{}.yaml", self.label));
        // JSON is YAML.
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)
            .with_context(|| format!("failed to write {}", path.display()))?;
        Ok((path, metrics_port))
    }

    fn spawn_vk(&self, config: &Path, log: &Path) -> anyhow::Result<u32> {
        let args = vec![
            "--log-json".to_owned(),
            "run".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        let mut env = vec![
            ("VK_BENCH_PROVIDER_KEY", API_KEY),
            ("RUST_LOG", self.args.vk_log.as_str()),
        ];
        for kv in &self.args.vk_env {
            match kv.split_once('=') {
                Some((k, v)) if !k.is_empty() => env.push((k, v)),
                _ => bail!("--vk-env wants KEY=VALUE, got {kv:?}"),
            }
        }
        self.children().spawn("vk", &self.vk_bin, &args, &env, log)
    }

    async fn vk_metrics(&self, http: &reqwest::Client, port: u16) -> Option<String> {
        http.get(format!("http://127.0.0.1:{port}/metrics"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    /// Waits until the VK finished its start-up reconcile; its own figure, seconds.
    async fn vk_reconciled(
        &self,
        http: &reqwest::Client,
        port: u16,
        timeout: Duration,
    ) -> Option<(Instant, f64)> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.children().alive("vk") {
                return None;
            }
            if let Some(text) = self.vk_metrics(http, port).await {
                let s = metric(&text, "gpu_vk_startup_reconcile_seconds", &[]);
                if s > 0.0 {
                    return Some((Instant::now(), s));
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// What the API and the providers say about a few pods the watch never saw Running.
    async fn diagnose_not_running(
        &self,
        tracker: &Tracker,
        pods: &Api<Pod>,
        emu: &Emulators,
    ) -> Vec<String> {
        let stuck: Vec<(String, Option<String>)> = tracker
            .snapshot()
            .into_iter()
            .filter(|(_, t)| t.running.is_none())
            .map(|(n, t)| (n, t.uid))
            .take(5)
            .collect();
        let workloads = emu.workloads().await.unwrap_or_default();
        let mut out = Vec::new();
        for (name, uid) in stuck {
            let api = match pods.get_opt(&name).await {
                Ok(Some(p)) => {
                    let st = p.status.unwrap_or_default();
                    let cs = st
                        .container_statuses
                        .and_then(|c| c.into_iter().next())
                        .map(|c| serde_json::to_string(&c.state).unwrap_or_default())
                        .unwrap_or_default();
                    format!(
                        "phase {:?}, reason {:?}, message {:?}, container {cs}, annotations {:?}",
                        st.phase, st.reason, st.message, p.metadata.annotations
                    )
                }
                Ok(None) => "gone from the API".into(),
                Err(e) => format!("unreadable: {e}"),
            };
            let provider: Vec<String> = workloads
                .iter()
                .filter(|w| {
                    uid.as_deref()
                        .is_some_and(|u| w["name"].as_str().is_some_and(|n| n.ends_with(u)))
                })
                .map(|w| format!("{} {} {}", w["id"], w["state"], w["phase"]))
                .collect();
            out.push(format!(
                "not Running: {name}: API {api}; provider workloads: [{}]",
                provider.join("; ")
            ));
        }
        out
    }

    /// How long the round waits for all pods to be Running, and for all to be gone.
    pub(crate) fn wait_limit(&self) -> Duration {
        Duration::from_secs(60) + Duration::from_millis(25 * self.n as u64)
    }

    fn poll(&self) -> Duration {
        Duration::from_millis(self.args.poll_ms)
    }

    /// One round: start, create, wait for Running, measure, restart, delete, tear down;
    /// judged beside kwok's figures for the same N when there are some.
    async fn round(&self, kwok: Option<kwok::KwokRound>) -> anyhow::Result<Round> {
        let mut round = Round {
            n: self.n,
            rate_per_s: (self.rate > 0.0).then_some(self.rate),
            ..Default::default()
        };
        if let Some(k) = kwok {
            round.set_kwok(k);
        }
        let live = self.start().await?;
        let created = self.create_pods(&live, &mut round).await?;
        let running = self.wait_running(&live, &mut round, &created).await?;
        let quiet = self.footprint_and_quiet_window(&live, &mut round).await?;
        // Writes until the quiet window ended: Events the VK's event rate sent late count too.
        let api = ApiCounts::scrape(&self.client).await?;
        round.apiserver.writes_to_running_per_pod =
            load::writes_per_pod(&created.before.api.until(&api), created.attempts, self.n);
        self.measure_latency(&live, &mut round, &running.times, &quiet.vk_metrics_end)
            .await;
        self.restart_after_sigkill(&live, &mut round).await?;
        let deleted = self.delete_pods(&live, &mut round, &running.times).await?;
        self.measure_apiserver_cost(&live, &mut round, &running, &deleted, quiet.status_writes)
            .await;
        self.tear_down(live, &mut round).await;
        Ok(round)
    }

    /// Starts the emulators and the VK, waits for the node to be Ready, and creates the
    /// round's namespace with a watch on its pods.
    async fn start(&self) -> anyhow::Result<Live> {
        log(format!(
            "=== N = {}{}: starting emulators and the VK",
            self.n,
            if self.rate > 0.0 {
                format!(" at {} pods/s (latency probe)", self.rate)
            } else {
                String::new()
            }
        ));
        let emu = self.start_emulators().await?;
        let (config, metrics_port) = self.write_vk_config(&emu)?;
        let vk_log = self.logs.join(format!("vk-{}.log", self.label));
        let _ = std::fs::remove_file(&vk_log);
        self.spawn_vk(&config, &vk_log)?;
        let http = reqwest::Client::new();
        if self
            .vk_reconciled(&http, metrics_port, Duration::from_secs(60))
            .await
            .is_none()
        {
            bail!(
                "the VK did not become ready within 60 s (log: {})",
                vk_log.display()
            );
        }
        let node = self.args.node.clone();
        let client = self.client.clone();
        if wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
            cluster::node_ready(&client, &node)
        })
        .await
        .is_none()
        {
            bail!("node {} is not Ready after 60 s", self.args.node);
        }

        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let ns = format!("vk-bench-{}-{}", self.label, &suffix[..6]);
        self.cleanup
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ns.clone());
        cluster::create_namespace(&self.client, &ns).await?;
        let tracker = Tracker::default();
        let watch = tracker.watch(&self.client, &ns);
        // Let the watch's initial list finish before the clock starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        Ok(Live {
            emu,
            config,
            metrics_port,
            vk_log,
            http,
            ns,
            pods,
            tracker,
            watch,
        })
    }

    /// Creates the round's pods (paced when the round has a rate), spread over the providers.
    async fn create_pods(&self, live: &Live, round: &mut Round) -> anyhow::Result<Created> {
        let n = self.n;
        let before = Snapshots {
            cpu: CpuSnapshot::take(&self.pids()),
            api: ApiCounts::scrape(&self.client).await?,
            emu: live.emu.counters().await?,
        };
        log(format!(
            "creating {n} pods in {} ({} in flight)",
            live.ns, self.args.concurrency
        ));
        let vast_percent = self.args.vast_percent as usize;
        // Spread evenly: pod i goes to Vast when the running share crosses a whole pod.
        let names: Vec<(String, &'static str)> = (0..n)
            .map(|i| {
                let provider = if (i + 1) * vast_percent / 100 > i * vast_percent / 100 {
                    "vast"
                } else {
                    "runpod"
                };
                (format!("b-{i:05}"), provider)
            })
            .collect();
        let sent = load::create_all(
            &live.pods,
            &live.tracker,
            names,
            &self.args.node,
            self.args.bind,
            self.args.concurrency,
            self.rate,
        )
        .await;
        let errors = sent.errors;
        round.throughput.create_requests_s = round3(sent.secs);
        round.throughput.create_errors = errors;
        log(format!(
            "create requests done in {:.1} s ({errors} errors); waiting for Running",
            round.throughput.create_requests_s
        ));
        Ok(Created {
            before,
            errors,
            attempts: sent.attempts,
        })
    }

    /// Waits until every created pod is Running, sampling the VK's queue depth meanwhile, and
    /// records the create phase's throughput, CPU and API and provider calls.
    async fn wait_running(
        &self,
        live: &Live,
        round: &mut Round,
        created: &Created,
    ) -> anyhow::Result<Running> {
        let n = self.n;
        let tracker = &live.tracker;
        // Samples the VK's queue depth while pods are coming in.
        let max_depth = Arc::new(Mutex::new(0.0f64));
        let sampler = {
            let max_depth = max_depth.clone();
            let http = live.http.clone();
            let metrics_port = live.metrics_port;
            tokio::spawn(async move {
                loop {
                    if let Ok(r) = http
                        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
                        .timeout(Duration::from_secs(2))
                        .send()
                        .await
                        && let Ok(text) = r.text().await
                    {
                        let d = metric(&text, "gpu_vk_queue_depth", &[]);
                        let mut m = max_depth.lock().unwrap_or_else(|e| e.into_inner());
                        *m = m.max(d);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let expected = n - created.errors;
        let mut last_report = Instant::now();
        let running_at = wait_until(self.wait_limit(), Duration::from_millis(100), || {
            let c = tracker.count(|t| t.running.is_some());
            if last_report.elapsed() > Duration::from_secs(10) {
                log(format!("  {c}/{expected} Running"));
                last_report = Instant::now();
            }
            async move { c >= expected }
        })
        .await;
        sampler.abort();
        round.apiserver.vk_max_queue_depth = *max_depth.lock().unwrap_or_else(|e| e.into_inner());
        let cpu1 = CpuSnapshot::take(&self.pids());
        let api1 = ApiCounts::scrape(&self.client).await?;
        let before = &created.before;
        round.apiserver.create_phase_mean_latency_ms = before
            .api
            .mean_latency_ms(&api1)
            .into_iter()
            .filter(|(k, _)| {
                let res = k.split_whitespace().nth(1).unwrap_or_default();
                res.starts_with("pods") || res.starts_with("events")
            })
            .collect();
        let emu1 = live.emu.counters().await?;
        round.cpu.insert("create".into(), before.cpu.until(&cpu1));
        round.provider_calls.create_phase = counter_delta(&before.emu, &emu1, 1.0);
        round.throughput.running = tracker.count(|t| t.running.is_some());
        if running_at.is_none() {
            round.notes.push(format!(
                "timed out after {:.0} s with {}/{n} Running",
                self.wait_limit().as_secs_f64(),
                round.throughput.running
            ));
            round.notes.extend(
                self.diagnose_not_running(tracker, &live.pods, &live.emu)
                    .await,
            );
        }
        let times = tracker.snapshot();
        let first_bind = times
            .values()
            .filter_map(|t| bind_time(self.args.bind, t))
            .min();
        let last_running = times.values().filter_map(|t| t.running).max();
        if let (Some(a), Some(b), Some(_)) = (first_bind, last_running, running_at) {
            round.throughput.all_running_s = Some(round3(ms_between(a, b) / 1000.0));
        }
        log(format!(
            "{}/{n} Running, {} s after the first bind",
            round.throughput.running,
            round
                .throughput
                .all_running_s
                .map_or("—".into(), |s| format!("{s:.1}"))
        ));
        Ok(Running {
            times,
            api_requests: before.api.until(&api1),
            create_attempts: created.attempts,
        })
    }

    /// The VK's memory and CPU with every pod Running, then three poll intervals in which
    /// nothing changes: the provider calls per interval and any status writes.
    async fn footprint_and_quiet_window(
        &self,
        live: &Live,
        round: &mut Round,
    ) -> anyhow::Result<QuietWindow> {
        if let Some(pid) = self.children().pid("vk") {
            if let Some((rss, hwm)) = procs::rss_mib(pid) {
                round.footprint.vk_rss_mib = Some(round3(rss));
                round.footprint.vk_peak_rss_mib = Some(round3(hwm));
            }
            round.footprint.vk_cpu_s_to_running = procs::cpu_seconds(pid).map(round3);
        }
        let poll = self.poll();
        let vk1_metrics = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let quiet0 = live.emu.counters().await?;
        let tq = Instant::now();
        tokio::time::sleep(poll * 3).await;
        let quiet1 = live.emu.counters().await?;
        let intervals = tq.elapsed().as_secs_f64() / poll.as_secs_f64();
        round.provider_calls.per_interval = counter_delta(&quiet0, &quiet1, 1.0 / intervals);
        let vk1_end = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let vk1_writes = metric(&vk1_end, "gpu_vk_pod_status_writes_total", &[]);
        let quiet_writes = vk1_writes - metric(&vk1_metrics, "gpu_vk_pod_status_writes_total", &[]);
        if quiet_writes > 0.0 {
            round.notes.push(format!(
                "{quiet_writes} status writes during the quiet window with nothing changing"
            ));
        }
        Ok(QuietWindow {
            status_writes: vk1_writes,
            vk_metrics_end: vk1_end,
        })
    }

    /// Latencies from the VK's log, the emulators' workloads, the pod watch and the VK's
    /// status latency histogram (`vk_metrics`).
    async fn measure_latency(
        &self,
        live: &Live,
        round: &mut Round,
        times: &HashMap<String, PodTimes>,
        vk_metrics: &str,
    ) {
        let create_lines = vk_creates(&live.vk_log);
        let mut creates: HashMap<String, Timestamp> = HashMap::new();
        for c in &create_lines {
            creates.entry(c.uid.clone()).or_insert(c.at);
        }
        let workloads = live.emu.workloads().await.unwrap_or_default();
        let emu_created: HashMap<String, Timestamp> = workloads
            .iter()
            .filter_map(|w| {
                // Workload names end with the pod UID (36 characters).
                let name = w["name"].as_str()?;
                let uid = name.get(name.len().checked_sub(36)?..)?;
                let at = w["created_at"].as_str()?.parse::<Timestamp>().ok()?;
                Some((uid.to_owned(), at))
            })
            .collect();
        let lifecycle_ms = (self.args.provision_ms + self.args.start_ms) as i64;
        let mut to_create = Vec::new();
        let mut to_running = Vec::new();
        let mut mismatches = 0;
        for t in times.values() {
            let Some(uid) = &t.uid else { continue };
            let Some(created) = creates.get(uid) else {
                continue;
            };
            if let Some(b) = bind_time(self.args.bind, t) {
                to_create.push(ms_between(b, *created));
            }
            if let Some(e) = emu_created.get(uid) {
                let d = ms_between(*e, *created);
                if !(-500.0..=1500.0).contains(&d) {
                    mismatches += 1;
                }
            }
            if let Some(r) = t.running {
                let provider_running = created
                    .checked_add(jiff::SignedDuration::from_millis(lifecycle_ms))
                    .unwrap_or(*created);
                to_running.push(ms_between(provider_running, r));
            }
        }
        round.latency.bind_to_create_ms = Percentiles::of(to_create);
        round.latency.provider_running_to_pod_running_ms = Percentiles::of(to_running);
        round.latency.created_at_mismatches = mismatches;
        round.latency.vk_seen_to_create_ms = Percentiles::of(
            create_lines
                .iter()
                .filter_map(|c| c.since_seen_ms)
                .collect(),
        );
        round.latency.provider_create_call_ms =
            Percentiles::of(create_lines.iter().filter_map(|c| c.provider_ms).collect());
        round.latency.vk_list_to_status_ms =
            Percentiles::of_histogram(histogram(vk_metrics, "gpu_vk_pod_status_latency_seconds"));
    }

    /// SIGKILLs the VK with every pod Running and starts it again: how long its start-up
    /// reconcile takes and what it costs (provider creates, status writes, CPU).
    async fn restart_after_sigkill(&self, live: &Live, round: &mut Round) -> anyhow::Result<()> {
        let (http, metrics_port, emu) = (&live.http, live.metrics_port, &live.emu);
        log(format!(
            "restart: SIGKILL the VK with {} pods Running",
            round.throughput.running
        ));
        let cpu_r0 = CpuSnapshot::take(&self.pids());
        let api_r0 = ApiCounts::scrape(&self.client).await?;
        let emu_r0 = emu.counters().await?;
        let t_kill = Instant::now();
        self.children().kill9("vk").await;
        let restart_log = self.logs.join(format!("vk-{}-restart.log", self.label));
        let _ = std::fs::remove_file(&restart_log);
        self.spawn_vk(&live.config, &restart_log)?;
        match self
            .vk_reconciled(http, metrics_port, Duration::from_secs(120))
            .await
        {
            Some((at, own)) => {
                round.restart.reconciled_s = Some(round3(at.duration_since(t_kill).as_secs_f64()));
                round.restart.vk_reported_s = Some(round3(own));
            }
            None => round
                .notes
                .push("the restarted VK did not finish its start-up reconcile in 120 s".into()),
        }
        // Anything the restart would write shows up within a poll interval.
        tokio::time::sleep(self.poll() + Duration::from_millis(500)).await;
        let vk2 = self
            .vk_metrics(http, metrics_port)
            .await
            .unwrap_or_default();
        let emu_r1 = emu.counters().await?;
        let api_r1 = ApiCounts::scrape(&self.client).await?;
        let mut cpu_restart = cpu_r0.until(&CpuSnapshot::take(&self.pids()));
        round.restart.pods = live
            .tracker
            .count(|t| t.running.is_some() && t.gone.is_none());
        round.restart.provider_creates = emu_r1
            .values()
            .zip(emu_r0.values())
            .map(|(b, a)| {
                b.get("create").copied().unwrap_or(0.0) - a.get("create").copied().unwrap_or(0.0)
            })
            .sum();
        round.restart.status_writes = metric(&vk2, "gpu_vk_pod_status_writes_total", &[]);
        round.restart.reconciles = metric(&vk2, "gpu_vk_reconciles_total", &[]);
        round.restart.apiserver_status_patches = api_r0
            .until(&api_r1)
            .get("PATCH pods/status")
            .copied()
            .unwrap_or(0.0);
        if let Some(pid) = self.children().pid("vk") {
            round.footprint.vk_rss_after_restart_mib = procs::rss_mib(pid).map(|m| round3(m.0));
            round.footprint.vk_cpu_s_restart = procs::cpu_seconds(pid).map(round3);
            if let Some(c) = round.footprint.vk_cpu_s_restart {
                cpu_restart.cpu_s.insert("vk".into(), c);
            }
        }
        round.cpu.insert("restart".into(), cpu_restart);
        log(format!(
            "restart: reconciled in {} s, {} creates, {} status writes",
            round
                .restart
                .reconciled_s
                .map_or("—".into(), |s| format!("{s:.2}")),
            round.restart.provider_creates,
            round.restart.status_writes
        ));
        Ok(())
    }

    /// Deletes every pod of the round and waits until the pods are gone from the API and the
    /// providers hold no live workload.
    async fn delete_pods(
        &self,
        live: &Live,
        round: &mut Round,
        times: &HashMap<String, PodTimes>,
    ) -> anyhow::Result<Deleted> {
        let (tracker, emu) = (&live.tracker, &live.emu);
        let wait_limit = self.wait_limit();
        let vk2_cpu0 = self.children().pid("vk").and_then(procs::cpu_seconds);
        let cpu_d0 = CpuSnapshot::take(&self.pids());
        let api_d0 = ApiCounts::scrape(&self.client).await?;
        log(format!("deleting {} pods", self.n));
        let t_delete = Instant::now();
        let ts_delete = Timestamp::now();
        let delete_attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let names: Vec<String> = times.keys().cloned().collect();
        let del_errors = futures::stream::iter(names.into_iter().map(|name| {
            let pods = live.pods.clone();
            let tracker = tracker.clone();
            let attempts = delete_attempts.clone();
            async move {
                let dp = DeleteParams::default();
                let r = cluster::with_retries(|| {
                    attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    pods.delete(&name, &dp)
                })
                .await;
                let now = Timestamp::now();
                match r {
                    Ok(_) => {
                        tracker.update(&name, |t| t.delete_requested = Some(now));
                        0usize
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => 0,
                    Err(e) => {
                        log(format!("delete {name} failed: {e}"));
                        1
                    }
                }
            }
        }))
        .buffer_unordered(self.args.concurrency.max(1))
        .fold(0usize, |acc, e| async move { acc + e })
        .await;
        round.throughput.delete_errors = del_errors;
        log(format!(
            "delete requests done in {:.1} s; waiting for pods and workloads to be gone",
            t_delete.elapsed().as_secs_f64()
        ));
        let total = times.len();
        let mut last_report = Instant::now();
        let gone_at = wait_until(wait_limit, Duration::from_millis(100), || {
            let c = tracker.count(|t| t.gone.is_some());
            if last_report.elapsed() > Duration::from_secs(10) {
                log(format!("  {c}/{total} gone"));
                last_report = Instant::now();
            }
            async move { c >= total }
        })
        .await;
        let empty_at = wait_until(wait_limit, Duration::from_millis(250), || async {
            emu.live().await.is_ok_and(|l| l == 0)
        })
        .await;
        let cpu_d1 = CpuSnapshot::take(&self.pids());
        let api_d1 = ApiCounts::scrape(&self.client).await?;
        round.cpu.insert("delete".into(), cpu_d0.until(&cpu_d1));
        if let (Some(a), Some(b)) = (
            vk2_cpu0,
            self.children().pid("vk").and_then(procs::cpu_seconds),
        ) {
            round.footprint.vk_cpu_s_delete = Some(round3(b - a));
        }
        let last_gone = tracker.snapshot().values().filter_map(|t| t.gone).max();
        if let (Some(_), Some(g)) = (gone_at, last_gone) {
            round.throughput.all_pods_gone_s = Some(round3(ms_between(ts_delete, g) / 1000.0));
        }
        match (gone_at, empty_at) {
            (Some(g), Some(e)) => {
                let end = g.max(e);
                round.throughput.all_deleted_s =
                    Some(round3(end.duration_since(t_delete).as_secs_f64()));
            }
            _ => round.notes.push(format!(
                "deletion timed out: {} pods left, provider {}",
                total - tracker.count(|t| t.gone.is_some()),
                match emu.live().await {
                    Ok(l) => format!("{l} live workloads"),
                    Err(e) => format!("unreadable: {e}"),
                }
            )),
        }
        log(format!(
            "deleted: pods gone in {} s, provider empty after {} s",
            round
                .throughput
                .all_pods_gone_s
                .map_or("—".into(), |s| format!("{s:.1}")),
            round
                .throughput
                .all_deleted_s
                .map_or("—".into(), |s| format!("{s:.1}"))
        ));
        Ok(Deleted {
            attempts: delete_attempts.load(std::sync::atomic::Ordering::Relaxed),
            api_requests: api_d0.until(&api_d1),
        })
    }

    /// The API server's cost per pod lifecycle: pod and event requests of the create and
    /// delete phases, less the bench's own, and the VK's status writes (`quiet_status_writes`
    /// from before the restart, the rest counted by the restarted VK).
    async fn measure_apiserver_cost(
        &self,
        live: &Live,
        round: &mut Round,
        running: &Running,
        deleted: &Deleted,
        quiet_status_writes: f64,
    ) {
        let n = self.n;
        let mut breakdown = running.api_requests.clone();
        for (k, v) in &deleted.api_requests {
            *breakdown.entry(k.clone()).or_insert(0.0) += v;
        }
        let pods_and_events = cluster::sum_resources(&breakdown, &["pods", "events"]);
        let bench_own = (running.create_attempts + deleted.attempts) as f64;
        let vk2_end = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let writes = quiet_status_writes + metric(&vk2_end, "gpu_vk_pod_status_writes_total", &[]);
        let per = |x: f64| round3(x / n as f64);
        round.apiserver.pod_and_event_requests_per_pod = per(pods_and_events);
        round.apiserver.vk_requests_per_pod = per(pods_and_events - bench_own);
        round.apiserver.status_writes_per_pod = per(writes);
        round.apiserver.breakdown = breakdown
            .into_iter()
            .filter(|(k, _)| {
                let res = k.split_whitespace().nth(1).unwrap_or_default();
                res.starts_with("pods") || res.starts_with("events")
            })
            .collect();
    }

    /// Stops the watch, the VK and the emulators, removes the namespace, and judges the round
    /// against its targets.
    async fn tear_down(&self, live: Live, round: &mut Round) {
        live.watch.abort();
        self.children().stop("vk", Duration::from_secs(10)).await;
        self.children()
            .stop("mock-providers", Duration::from_secs(5))
            .await;
        cluster::remove_namespace(&self.client, &live.ns).await;
        self.cleanup
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|x| x != &live.ns);
        round.judge(self.args.poll_ms);
        for t in &round.targets {
            log(format!(
                "  {:<38} {:<28} {:<14} {}",
                t.name,
                t.target,
                t.measured,
                match t.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "n/a",
                }
            ));
        }
    }
}

/// What one round has running: the emulators, the VK (its config, metrics port and log), the
/// namespace of its pods and the watch timing them.
struct Live {
    emu: Emulators,
    config: PathBuf,
    metrics_port: u16,
    vk_log: PathBuf,
    http: reqwest::Client,
    ns: String,
    pods: Api<Pod>,
    tracker: Tracker,
    watch: tokio::task::JoinHandle<()>,
}

/// CPU, API server and provider counters at the start of a phase.
struct Snapshots {
    cpu: CpuSnapshot,
    api: ApiCounts,
    emu: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The outcome of the create requests.
struct Created {
    /// Taken before the first create.
    before: Snapshots,
    /// Pods whose create failed for good.
    errors: usize,
    /// Create requests sent, retries included.
    attempts: usize,
}

/// The create phase once the pods are Running (or the wait timed out).
struct Running {
    /// Each pod's times, as the watch saw them at the end of the phase.
    times: HashMap<String, PodTimes>,
    /// API server requests during the phase, by verb and resource.
    api_requests: BTreeMap<String, f64>,
    /// Create requests sent, retries included.
    create_attempts: usize,
}

/// The quiet window after all pods are Running.
struct QuietWindow {
    /// The VK's status writes so far.
    status_writes: f64,
    /// The VK's metrics at the end of the window.
    vk_metrics_end: String,
}

/// The delete phase.
struct Deleted {
    /// Delete requests sent, retries included.
    attempts: usize,
    /// API server requests during the phase, by verb and resource.
    api_requests: BTreeMap<String, f64>,
}

/// When a pod was bound: with the scheduler, when the watch first saw it with `spec.nodeName`;
/// created bound, the earlier of the create answer and that first sight.
fn bind_time(bind: Bind, t: &PodTimes) -> Option<Timestamp> {
    match bind {
        Bind::NodeName => match (t.created, t.bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
        Bind::Scheduler => t.bound,
    }
}
