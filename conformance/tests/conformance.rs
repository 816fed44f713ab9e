//! The conformance suite: runs `features/*.feature` against every provider under test (set by
//! `CONFORMANCE_PROVIDERS`, default `runpod,vast,slurm,slurm-real,kubernetes`; `slurm` is the slurmrestd
//! emulator, `slurm-v0.0.41` the same in the newer dialect, `slurm-real` the real Slurm of
//! `make slurm-up`, found through `SLURM_ENV_FILE`; `kubernetes` another cluster, the second
//! local testbed `<TESTBED_NAME>-remote` started for the run, whose node is our VK over a RunPod
//! emulator), each behind a real virtual kubelet on the testbed. Capability steps ("Given the provider supports logs") only match when the provider
//! has the capability, so unsupported scenarios are reported as skipped, never as passed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/batch.rs"]
mod batch;
#[path = "conformance/containers.rs"]
mod containers;
#[path = "conformance/dispatch.rs"]
mod dispatch;
#[path = "conformance/leader.rs"]
mod leader;
#[path = "conformance/lifecycle.rs"]
mod lifecycle;
#[path = "conformance/limits.rs"]
mod limits;
#[path = "conformance/observability.rs"]
mod observability;
#[path = "conformance/outage.rs"]
mod outage;
#[path = "conformance/overflow.rs"]
mod overflow;
#[path = "conformance/overflow_fit.rs"]
mod overflow_fit;
#[path = "conformance/overflow_handoff.rs"]
mod overflow_handoff;
#[path = "conformance/overflow_refused.rs"]
mod overflow_refused;
#[path = "conformance/pod_ip.rs"]
mod pod_ip;
#[path = "conformance/pods.rs"]
mod pods;
#[path = "conformance/privilege.rs"]
mod privilege;
#[path = "conformance/replacement.rs"]
mod replacement;
#[path = "conformance/resilience.rs"]
mod resilience;
#[path = "conformance/storms.rs"]
mod storms;
#[path = "conformance/traffic.rs"]
mod traffic;

use pods::*;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use conformance::harness::kubernetes;
use conformance::harness::*;
use cucumber::writer::Stats as _;
use cucumber::{World, WriterExt, given, then, when, writer};
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::{Value, json};

/// How long a step waits for what takes a fast run up to a minute (longer on the realistic
/// profile: [`conformance::harness::lab::patience`]).
fn wait() -> Duration {
    conformance::harness::lab::patience(Duration::from_secs(60))
}

/// The provider kind of the current run (runs are sequential).
static TARGET: Mutex<String> = Mutex::new(String::new());

fn target() -> String {
    TARGET.lock().unwrap().clone()
}

/// What a provider under test can do; selects the capability steps.
fn capabilities(target: &str) -> &'static [&'static str] {
    match target {
        // RunPod v2 has no preemption of its own; it streams container logs
        // (`GET /v2/pods/{id}/logs`, Server-Sent Events) and reports CPU and memory use.
        "runpod" => &[
            "fault injection",
            "metrics",
            "logs",
            "followed logs",
            "does not support exec",
            "many concurrent workloads",
            "workloads created outside the virtual kubelet",
            // v2 `CreatePodRequest.cpu`: CPU pods.
            "CPU-only pods",
            "runs one container per workload",
            // The emulator's admin API sets what `runtime.ports[].ip` lists.
            "setting the addresses it lists",
        ],
        // Vast bids can be outbid: real preemptions; Vast serves container logs.
        // Vast enforces a minimum interval per endpoint (the emulator at the tenth the VK is
        // paced at) and limits env entries to 256 characters (`create_instance.yaml`).
        "vast" => &[
            "fault injection",
            "preemption",
            "logs",
            "does not support exec",
            "many concurrent workloads",
            "workloads created outside the virtual kubelet",
            "per-endpoint rate limits",
            "a 256-character limit per env entry",
            // An instance `unknown` (the emulator's `fail`) past `unreachableDeadlineSeconds`
            // (3 s in the suite's settings) is replaced.
            "hosts that go silent",
            "runs one container per workload",
            "setting the addresses it lists",
        ],
        // The slurmrestd emulator (v0.0.38, or v0.0.41 as in Slurm 24.05+): PREEMPTED jobs
        // become Preempted pods; job output files are served as logs; no usage figures; exec
        // (srun) needs a real Slurm and is off in the adapter's settings.
        "slurm" | "slurm-v0.0.41" => &[
            "fault injection",
            "preemption",
            "logs",
            // The adapter follows the job's output file while the job lives.
            "followed logs",
            "does not support exec",
            "many concurrent workloads",
            "workloads created outside the virtual kubelet",
            // Each container of a pod a step of its job, with its own log.
            "containers as job steps",
            // The node records' `address`.
            "setting the addresses it lists",
        ],
        // The real single-node Slurm of `make slurm-up`: no admin API (no fault, exit or
        // preemption on demand), but anyone can submit jobs through slurmrestd; job output
        // files are served as logs; 2 CPUs and 2 GPUs, so at most 2 jobs run at a time. Exec
        // (srun) is off in the provider settings the suite uses (vk/tests/exec.rs covers it).
        "slurm-real" => &[
            "logs",
            "followed logs",
            "does not support exec",
            "workloads created outside the virtual kubelet",
            "containers as job steps",
        ],
        // Another cluster (a second testbed; its node is our VK over a RunPod emulator):
        // faults through the remote API (a deleted remote pod is lost, an evicted one
        // preempted, a ResourceQuota of 0 GPUs is no capacity), lists answered by a proxy
        // in front of the remote API server, exits, log lines and CPU figures set at the
        // remote node's emulator. Logs (followed) and usage through the remote API server;
        // exec too, but the remote node (RunPod) has none, so the refusal is what is tested.
        "kubernetes" => &[
            "fault injection",
            "preemption",
            "metrics",
            "logs",
            "followed logs",
            "does not support exec",
            "many concurrent workloads",
            "workloads created outside the virtual kubelet",
            "CPU-only pods",
            "runs one container per workload",
        ],
        _ => &[],
    }
}

/// The remote cluster of the `kubernetes` target, up while that target runs.
static REMOTE: Mutex<Option<std::sync::Arc<kubernetes::RemoteCluster>>> = Mutex::new(None);

#[derive(World)]
#[world(init = Self::new)]
struct Vkw {
    client: Option<Client>,
    /// The provider side: an emulator's admin API or a real Slurm's job list.
    provider: Option<Observer>,
    vk: Option<Vk>,
    ns: String,
    uids: HashMap<String, String>,
    /// Provider ids of live workloads remembered by pod name.
    workloads: HashMap<String, String>,
    /// Pods set aside by a step ("one replica", "the other replicas").
    victim: Option<(String, String)>,
    others: Vec<String>,
    /// Names of injected workloads.
    orphan: Option<String>,
    foreign: Vec<String>,
    /// Every pod UID this scenario created (for duplicate checks).
    all_uids: HashSet<String>,
    /// CPU the provider is told to report for a deployment's replicas (new ones included).
    cpu_target: Option<(String, u64)>,
    /// What was true when a provider incident began (see `resilience`).
    incident: Option<resilience::Incident>,
    /// What was true before the VK was replaced (see `replacement`).
    before_replacement: Option<replacement::Before>,
    /// How long each takeover took after the leader was killed (see `leader`).
    takeovers: Vec<Duration>,
    /// Workload names seen live twice at once, with how many (see `leader`).
    duplicates_seen: BTreeMap<String, usize>,
    /// What the overflow scenario created and measured (see `overflow`).
    overflow: Option<overflow::Overflow>,
    /// The providers of a dispatch scenario (see `dispatch`).
    dispatch: Option<dispatch::Dispatch>,
    /// A `kubectl logs --follow` under way: what it has shown so far (see `observability`).
    followed: Option<std::sync::Arc<std::sync::Mutex<String>>>,
}

impl std::fmt::Debug for Vkw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vkw")
            .field("ns", &self.ns)
            .field("uids", &self.uids)
            .finish()
    }
}

impl Vkw {
    fn new() -> Self {
        Self {
            client: None,
            provider: None,
            vk: None,
            ns: String::new(),
            uids: HashMap::new(),
            workloads: HashMap::new(),
            victim: None,
            others: Vec::new(),
            orphan: None,
            foreign: Vec::new(),
            all_uids: HashSet::new(),
            cpu_target: None,
            incident: None,
            before_replacement: None,
            takeovers: Vec::new(),
            duplicates_seen: BTreeMap::new(),
            overflow: None,
            dispatch: None,
            followed: None,
        }
    }

    fn c(&self) -> Client {
        self.client
            .clone()
            .expect("the Background starts a virtual kubelet")
    }
    /// The provider's observer (workloads, live ones, those of a pod).
    fn obs(&self) -> &Observer {
        self.provider.as_ref().expect("a provider under test")
    }
    fn vk(&mut self) -> &mut Vk {
        self.vk.as_mut().expect("a virtual kubelet")
    }
    fn node(&self) -> String {
        self.vk.as_ref().expect("a virtual kubelet").node.clone()
    }
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.c(), &self.ns)
    }

    async fn create_pod(&mut self, pod: Pod) -> Pod {
        let p = self
            .pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        self.uids.insert(p.metadata.name.clone().unwrap(), uid(&p));
        self.all_uids.insert(uid(&p));
        p
    }

    async fn get(&self, name: &str) -> Option<Pod> {
        self.pods().get_opt(name).await.unwrap()
    }

    async fn wait_phase(&self, name: &str, want: &str) -> Pod {
        wait_for(wait(), &format!("pod {name} {want}"), || async {
            self.get(name).await.filter(|p| phase(p) == want)
        })
        .await
    }

    async fn replicas(&self, app: &str) -> Vec<Pod> {
        pods_with_label(&self.c(), &self.ns, app).await
    }

    async fn wait_replicas(&mut self, app: &str, n: usize) -> Vec<Pod> {
        let pods = wait_for(
            Duration::from_secs(90),
            &format!("{n} Running replicas of {app}"),
            || async {
                // Failed replicas stay as records (ReplicaSets do not delete them); count live ones.
                let pods: Vec<Pod> = self
                    .replicas(app)
                    .await
                    .into_iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && !matches!(phase(p), "Failed" | "Succeeded")
                    })
                    .collect();
                (pods.len() == n && pods.iter().all(|p| phase(p) == "Running")).then_some(pods)
            },
        )
        .await;
        for p in &pods {
            self.all_uids.insert(uid(p));
        }
        pods
    }

    async fn live_of(&self, pod_uid: &str) -> Vec<Value> {
        self.obs().workloads_of(pod_uid).await
    }

    /// `vk-<owner tag>-`: the names of this node's workloads start with it.
    fn prefix(&self) -> String {
        self.vk.as_ref().unwrap().owner_prefix()
    }

    /// Live workloads carrying this node's owner tag.
    async fn ours(&self) -> Vec<Value> {
        self.obs().live_with_prefix(&self.prefix()).await
    }

    async fn start_vk(&mut self) {
        let providers = self.obs().provider_yaml(&target());
        self.start_vk_with(providers).await;
    }

    async fn start_vk_with(&mut self, providers: String) {
        let vk = Vk::start_with(providers, VkOptions::default()).await;
        self.vk = Some(vk);
        wait_node_ready(self).await;
    }

    async fn cleanup(&mut self) {
        overflow::cleanup(self).await;
        if let Some(c) = self.client.clone() {
            if !self.ns.is_empty() {
                delete_namespace(&c, &self.ns).await;
            }
            if let Some(vk) = self.vk.as_mut() {
                // Let the VK see the namespace go, so the emulator is left clean.
                tokio::time::sleep(Duration::from_millis(500)).await;
                vk.cleanup(&c).await;
                // A real provider outlives the scenario: end what the VK could not.
                let prefix = vk.owner_prefix();
                if let Some(obs) = &self.provider {
                    obs.cancel_owned(&prefix).await;
                    let injected: Vec<String> =
                        self.foreign.iter().chain(&self.orphan).cloned().collect();
                    obs.cancel_named(&injected).await;
                }
            }
        }
    }

    fn inject_name(&self, cluster: &str, node: &str) -> (String, String) {
        let u = uuid::Uuid::new_v4().to_string();
        (workload_name(cluster, node, &u), u)
    }
}

fn emulator_gpus() -> Vec<GpuStock> {
    vec![GpuStock::new("A100-80GB", 64, 1.89)]
}

// ----------------------------------------------------------------------------------------------
// Setup

/// Waits until the scenario's VK has registered its node and reports it Ready.
async fn wait_node_ready(w: &Vkw) {
    conformance::harness::wait_node_ready(&w.c(), &w.node()).await;
}

/// The reasons of every Event in the scenario's namespace.
async fn namespace_event_reasons(w: &Vkw) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.c(), &w.ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

#[given("a virtual kubelet with the provider under test")]
async fn setup(w: &mut Vkw) {
    setup_provider(w).await;
    w.start_vk().await;
}

/// The client, the provider under test and the scenario's namespace (no VK yet).
async fn setup_provider(w: &mut Vkw) {
    setup_provider_with(w, ExecutionMode::simulated(100, 100, None)).await;
}

/// [`setup_provider_with`], where the RunPod emulator never starts its create number `stuck`
/// (then every 20th, as the realistic profile's share); other targets as they are.
async fn setup_provider_stuck(w: &mut Vkw, mode: ExecutionMode, stuck: u32) {
    if target() != "runpod" {
        return setup_provider_with(w, mode).await;
    }
    let c = client().await;
    w.client = Some(c.clone());
    let cfg = mock_providers::config::EmulatorConfig::new(API_KEY, emulator_gpus())
        .with_mode(mode)
        .with_stuck_every(mock_providers::config::Profile::Realistic.stuck_every())
        .with_first_stuck(stuck);
    w.provider = Some(Observer::Emulator(Emulator::runpod_from(cfg).await));
    w.ns = namespace(&c, "conf").await;
}

/// [`setup_provider`] with emulated workloads in `mode` (their start time).
async fn setup_provider_with(w: &mut Vkw, mode: ExecutionMode) {
    let c = client().await;
    w.client = Some(c.clone());
    w.provider = Some(match target().as_str() {
        "runpod" => Observer::Emulator(Emulator::runpod(mode, emulator_gpus()).await),
        "vast" => Observer::Emulator(Emulator::vast(mode, emulator_gpus()).await),
        "slurm" => Observer::Emulator(Emulator::slurm(mode, SlurmDialect::V0038).await),
        "slurm-v0.0.41" => Observer::Emulator(Emulator::slurm(mode, SlurmDialect::V0041).await),
        "slurm-real" => Observer::Slurm(RealSlurm::from_env()),
        "kubernetes" => {
            let remote = REMOTE
                .lock()
                .unwrap()
                .clone()
                .expect("the remote cluster is up");
            Observer::Kubernetes(kubernetes::RemoteView::new(remote).await)
        }
        other => panic!("unknown provider under test {other:?}"),
    });
    w.ns = namespace(&c, "conf").await;
}

/// Replaces the scenario's VK with one whose provider has `secretEnv: deny`.
#[given("the provider under test may not receive Secret values")]
async fn deny_secrets(w: &mut Vkw) {
    let c = w.c();
    if let Some(mut vk) = w.vk.take() {
        vk.cleanup(&c).await;
    }
    let providers = w
        .obs()
        .provider_yaml(&target())
        .replace("  secretEnv: allow\n", "")
        + "  secretEnv: deny\n";
    w.start_vk_with(providers).await;
}

#[given("the provider has no GPUs left")]
async fn no_gpus(w: &mut Vkw) {
    w.obs().no_capacity().await;
}

// ----------------------------------------------------------------------------------------------
// Runner

/// The checkout the suite runs from: cargo sets `CARGO_MANIFEST_DIR` when it runs a test, and
/// the compile-time value may name another checkout that shares the cargo target directory.
fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .parent()
        .unwrap()
        .to_path_buf()
}

fn capability_step(cap: &'static str) -> (regex::Regex, cucumber::Step<Vkw>) {
    // "does not support X" and "runs X" read as sentences of their own; everything else is
    // "supports X".
    let sentence = match cap.strip_prefix("does not support ") {
        Some(what) => format!("^the provider does not support {}$", regex::escape(what)),
        None if cap.starts_with("runs ") => format!("^the provider {}$", regex::escape(cap)),
        None => format!("^the provider supports {}$", regex::escape(cap)),
    };
    let re = regex::Regex::new(&sentence).unwrap();
    (re, |_w, _ctx| async {}.boxed_local())
}

/// One line per failed scenario of the whole run, printed after the last target's summary.
static FAILURES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn record_failure(target: &str, feature: &str, scenario: &str, error: &str) {
    // The panic's first lines say what was expected; a whole captured log would drown the recap.
    let error: String = error.lines().take(3).collect::<Vec<_>>().join(" / ");
    let error: String = error.chars().take(600).collect();
    FAILURES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{target}: {feature}: {scenario}: {error}"));
}

/// The feature files of `CONFORMANCE_FEATURES_<TARGET>` (the target upper-cased, `-` and `.` as
/// `_`), which narrows that target alone (set but empty: the target runs whole): `make test` runs
/// on each target what it proves there (docs/testbed.md, "Which feature runs where").
fn features_of(target: &str) -> Option<Vec<String>> {
    let var = format!(
        "CONFORMANCE_FEATURES_{}",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    // Set but empty: the target runs whole.
    std::env::var(var)
        .ok()
        .map(|l| feature_list(&l))
        .filter(|l| !l.is_empty())
}

/// `CONFORMANCE_SKIP_FEATURES_<TARGET>`: features a target leaves out (e.g. those about the VK's
/// own decisions on a slow real provider whose capabilities its emulator already shows).
fn skipped_features_of(target: &str) -> Vec<String> {
    let var = format!(
        "CONFORMANCE_SKIP_FEATURES_{}",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    std::env::var(var)
        .map(|l| feature_list(&l))
        .unwrap_or_default()
}

fn feature_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|f| f.trim().to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let providers = std::env::var("CONFORMANCE_PROVIDERS")
        .unwrap_or_else(|_| "runpod,vast,slurm,slurm-real,kubernetes".into());
    // CONFORMANCE_FEATURES=deletion,status runs only those feature files.
    let only: Option<Vec<String>> = std::env::var("CONFORMANCE_FEATURES")
        .ok()
        .map(|l| feature_list(&l));
    let report_dir = repo_root().join("target/conformance");
    std::fs::create_dir_all(&report_dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut failed = Vec::new();
    // CONFORMANCE_ONCE_PER_RUN=0: a run beside another one that runs them (scripts/test-local
    // runs two at once), so no target of this run is "the first".
    let mut first = std::env::var("CONFORMANCE_ONCE_PER_RUN").map_or(true, |v| v != "0");
    let in_cluster_gpus = regex::Regex::new(overflow::IN_CLUSTER_GPUS).unwrap();
    // Scenarios that test the virtual kubelet rather than the provider run once per run.
    let first_provider = regex::Regex::new("^the provider is the first of this run$").unwrap();
    // Scenarios whose VKs run as processes beside the suite (they stop and start them).
    let local_testbed = regex::Regex::new("^the virtual kubelet runs as a process$").unwrap();
    // Scenarios about what the Helm chart grants (RBAC, admission policies): VKs as pods only.
    let from_chart = regex::Regex::new("^the virtual kubelet runs from the Helm chart$").unwrap();
    if conformance::harness::lab::realistic() {
        println!(
            "=== conformance: emulators on the realistic profile, ten times faster; \
             CONFORMANCE_SEED={} (where each emulator's starts never run) ===",
            conformance::harness::lab::seed()
        );
    }
    let mut times: Vec<String> = Vec::new();
    let mut pending_took: Option<String> = None;
    for p in providers
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        if let Some(t) = pending_took.take() {
            println!("{t}");
        }
        *TARGET.lock().unwrap() = p.to_owned();
        let started = std::time::Instant::now();
        // The run with VKs as pods (kind) keeps its own reports beside the local testbed's.
        let pods = conformance::harness::pod::pod_mode();
        let mode = if pods { "kind-" } else { "" };
        // A real Slurm is named by its release (`make test` runs the target once per release).
        let release = (p == "slurm-real")
            .then(|| RealSlurm::from_env().version)
            .flatten()
            .map(|v| format!("-{v}"))
            .unwrap_or_default();
        println!(
            "\n=== conformance: provider {p}{release}{} (capabilities: {}) ===",
            if pods { ", VKs as pods" } else { "" },
            capabilities(p).join(", ")
        );
        // The remote cluster: a second local testbed, once for the whole target.
        if p == "kubernetes" {
            if pods {
                // Its node and proxies are processes on this machine, out of a kind pod's reach.
                eprintln!("conformance: the kubernetes target runs on the local testbed only");
                failed.push(p.to_owned());
                continue;
            }
            *REMOTE.lock().unwrap() = Some(rt.block_on(kubernetes::RemoteCluster::up()));
        }
        // A run on another Kubernetes minor (`scripts/test-minor`) keeps its own reports too.
        let k8s = std::env::var("K8S_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| format!("-k8s-{v}"))
            .unwrap_or_default();
        let profile = if conformance::harness::lab::realistic() {
            "-realistic"
        } else {
            ""
        };
        let junit = std::fs::File::create(
            report_dir.join(format!("junit-{mode}{p}{release}{k8s}{profile}.xml")),
        )
        .unwrap();
        let target = format!("{p}{release}{}", if pods { " (kind)" } else { "" });
        let mut cucumber = Vkw::cucumber()
            // The real Slurm runs 2 jobs at a time: its scenarios take turns. On kind every
            // scenario's VK is a pod behind a Service on the same 2 cores: three at a time, so
            // kube-proxy and metrics-server keep up with the fresh VKs.
            .max_concurrent_scenarios(match (p, pods) {
                ("slurm-real", _) => 1,
                (_, true) => 3,
                _ => 4,
            })
            .after(move |f, _r, s, ev, w| {
                // Kept for the recap at the very end: a CI log's tail then names what failed.
                if let cucumber::event::ScenarioFinished::StepFailed(_, _, e) = ev {
                    record_failure(&target, &f.name, &s.name, &e.to_string());
                }
                async move {
                    if let Some(w) = w {
                        w.cleanup().await;
                    }
                }
                .boxed_local()
            })
            .with_writer(
                writer::Basic::raw(std::io::stdout(), writer::Coloring::Never, 0)
                    .summarized()
                    .tee::<Vkw, _>(writer::JUnit::for_tee(junit, 0))
                    .normalized(),
            );
        for cap in capabilities(p) {
            let (re, step) = capability_step(cap);
            cucumber = cucumber.given(re, step);
        }
        // In-cluster GPUs exist only on kind (the workers' fake GPUs); the overflow scenario
        // tests the cluster's scheduling around one virtual node, so it runs for the first
        // provider of a kind run only, and is skipped (never passed) elsewhere.
        if pods && first {
            cucumber = cucumber.given(in_cluster_gpus.clone(), |_w, _ctx| async {}.boxed_local());
        }
        if first {
            cucumber = cucumber.given(first_provider.clone(), |_w, _ctx| async {}.boxed_local());
        }
        if !pods {
            cucumber = cucumber.given(local_testbed.clone(), |_w, _ctx| async {}.boxed_local());
        } else if first {
            cucumber = cucumber.given(from_chart.clone(), |_w, _ctx| async {}.boxed_local());
        }
        first = false;
        let cucumber =
            cucumber.with_cli(cucumber::cli::Opts::<_, _, _, cucumber::cli::Empty>::default());
        // CONFORMANCE_FEATURES_<TARGET> (e.g. CONFORMANCE_FEATURES_VAST) narrows one target.
        let only = features_of(p).or_else(|| only.clone());
        let skipped = skipped_features_of(p);
        if !skipped.is_empty() {
            println!(
                "=== conformance: {p} leaves out the features {} ===",
                skipped.join(", ")
            );
        }
        if let Some(o) = &only {
            println!(
                "=== conformance: {p} runs the features {} ===",
                o.join(", ")
            );
        }
        let result = rt.block_on(cucumber.filter_run(
            repo_root().join("features"),
            move |feature, _rule, _scenario| {
                let stem = feature
                    .path
                    .as_ref()
                    .and_then(|p| p.file_stem())
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_owned();
                only.as_ref().is_none_or(|o| o.contains(&stem)) && !skipped.contains(&stem)
            },
        ));
        if let Some(remote) = REMOTE.lock().unwrap().take() {
            rt.block_on(remote.down());
        }
        // Printed before the next target's run, so the output still ends with Cucumber's own
        // summary; every target's time is also in `target/conformance/times-<first target>.txt`.
        let took = format!(
            "=== conformance: provider {p}{release} took {:.0} s ===",
            started.elapsed().as_secs_f64()
        );
        times.push(took.clone());
        // Named after the run's first target: two runs at once keep a file each.
        let first_target = providers.split(',').next().unwrap_or_default().trim();
        let _ = std::fs::write(
            report_dir.join(format!("times-{first_target}.txt")),
            times.join("\n") + "\n",
        );
        pending_took = Some(took);
        if result.execution_has_failed() {
            failed.push(p.to_owned());
        }
    }
    if !failed.is_empty() {
        for line in FAILURES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            eprintln!("failed: {line}");
        }
        eprintln!("conformance failed for: {}", failed.join(", "));
        std::process::exit(1);
    }
}
