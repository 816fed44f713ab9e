//! The command line of `vk-bench`, and what it leaves to clean up when it stops.

use super::*;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "vk-bench",
    about = "Benchmark the GPU virtual kubelet on a testbed started by scripts/bench"
)]
pub(crate) struct Args {
    /// Pod counts to run, one round each.
    #[arg(long = "n", value_delimiter = ',', default_values_t = [1000usize, 3000, 10000])]
    pub(crate) n: Vec<usize>,
    /// Smoke run: N = 200 only (and a 100-pod paced latency probe).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Pods of the paced latency probe run after the throughput rounds (0: none). Unlike the
    /// throughput rounds, which create pods as fast as the apiserver takes them and so measure
    /// queueing under saturation, the probe shows the latency the VK adds when it keeps up.
    #[arg(long, default_value_t = 1500)]
    pub(crate) probe_n: usize,
    /// Pods per second created by the latency probe (50/s: the highest rate at which both
    /// latency targets held on 2 cores; at 100/s the apiserver's write latency breaks them).
    #[arg(long, default_value_t = 50.0)]
    pub(crate) probe_rate: f64,
    /// Run against a cluster without the bench's marker ConfigMap.
    #[arg(long)]
    pub(crate) i_know_this_cluster: bool,
    /// Where report.json, report.md and the logs go.
    #[arg(long, default_value = "target/bench")]
    pub(crate) out_dir: PathBuf,
    /// The `vk` binary (default: next to this one).
    #[arg(long)]
    pub(crate) vk_bin: Option<PathBuf>,
    /// The `mock-providers` binary (default: next to this one).
    #[arg(long)]
    pub(crate) mock_bin: Option<PathBuf>,
    /// The VK's provider poll interval.
    #[arg(long, default_value_t = 2000)]
    pub(crate) poll_ms: u64,
    /// Emulated time in PROVISIONING.
    #[arg(long, default_value_t = 0)]
    pub(crate) provision_ms: u64,
    /// Emulated time in STARTING.
    #[arg(long, default_value_t = 0)]
    pub(crate) start_ms: u64,
    /// The VK's reconcile workers (`workers` in its config). The VK's own default, 32, leaves
    /// pods queueing behind apiserver round trips when thousands arrive at once.
    #[arg(long, default_value_t = 256)]
    pub(crate) workers: usize,
    /// Create and delete requests the bench keeps in flight.
    #[arg(long, default_value_t = 48)]
    pub(crate) concurrency: usize,
    /// Paired runs (kwok's, then ours) at N = 1,000 when kwok is given; the run is judged on
    /// the median of their ratios, as a run of a few seconds moves with whatever else the host
    /// does in them (one run in seven fell to 0.77x where the others gave 0.90x to 1.32x).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub(crate) gate_runs: u32,
    /// Share of pods pinned to the Vast emulator, percent (the rest go to RunPod).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub(crate) vast_percent: u32,
    /// How pods reach the VK node.
    #[arg(long, value_enum, default_value_t = Bind::NodeName)]
    pub(crate) bind: Bind,
    /// Name of the VK's node.
    #[arg(long, default_value = "vk-bench")]
    pub(crate) node: String,
    /// `RUST_LOG` of the VK (its log is JSON, in the logs folder).
    #[arg(long, default_value = "info")]
    pub(crate) vk_log: String,
    /// Extra environment of the VK process, KEY=VALUE (repeatable), for experiments such as
    /// allocator settings; recorded in the report's settings.
    #[arg(long = "vk-env", value_name = "KEY=VALUE")]
    pub(crate) vk_env: Vec<String>,
    /// The kwok binary: each round is also run on a node kwok simulates, for the side-by-side
    /// figures (none: kwok's column stays empty and the ratio target is not judged).
    #[arg(long, env = "VK_BENCH_KWOK_BIN")]
    pub(crate) kwok_bin: Option<PathBuf>,
    /// kwok's stage configuration (written by `scripts/bench` from kwok's own module).
    #[arg(long, env = "VK_BENCH_KWOK_CONFIG")]
    pub(crate) kwok_config: Option<PathBuf>,
    /// The kubeconfig kwok is given (the one this process uses).
    #[arg(long, env = "KUBECONFIG")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The testbed's folder (its run/*.pid name the control plane processes to profile).
    #[arg(long, env = "TESTBED_DIR")]
    pub(crate) testbed_dir: Option<PathBuf>,
}

/// What the bench must undo, whatever happens.
pub(crate) struct Cleanup {
    pub(crate) client: Client,
    pub(crate) node: String,
    pub(crate) children: Children,
    pub(crate) namespaces: Mutex<Vec<String>>,
}

impl Cleanup {
    pub(crate) async fn run(&self) {
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
