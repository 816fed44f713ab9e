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
#[path = "conformance/plugin.rs"]
mod plugin;
#[path = "conformance/pod_ip.rs"]
mod pod_ip;
#[path = "conformance/pods.rs"]
mod pods;
#[path = "conformance/private_images.rs"]
mod private_images;
#[path = "conformance/privilege.rs"]
mod privilege;
#[path = "conformance/replacement.rs"]
mod replacement;
#[path = "conformance/resilience.rs"]
mod resilience;
#[path = "conformance/runner.rs"]
mod runner;
#[path = "conformance/storms.rs"]
mod storms;
#[path = "conformance/tenancy.rs"]
mod tenancy;
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

/// The step that a granted gate (a capability or a condition of the run) matches: it asserts
/// nothing, it lets the scenario run. A gate not granted has no step, so its scenario is
/// skipped, and [`runner`] judges the skip declared.
fn gate_step(sentence: &str) -> (regex::Regex, cucumber::Step<Vkw>) {
    let re = regex::Regex::new(&format!("^{}$", regex::escape(sentence))).unwrap();
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

/// The conditions of [`runner`] that hold for this target of this run.
fn conditions(first: bool, pods: bool) -> Vec<&'static str> {
    let mut c = Vec::new();
    if first {
        c.push("the provider is the first of this run");
    }
    if !pods {
        c.push("the virtual kubelet runs as a process");
    }
    if pods && first {
        c.push("the virtual kubelet runs from the Helm chart");
        // In-cluster GPUs exist only on kind (the workers' fake GPUs).
        c.push(overflow::IN_CLUSTER_GPUS_SENTENCE);
    }
    if mock_providers::serve::range_is_local() {
        c.push("the test address range is routed to this machine");
    }
    c
}

/// Scenarios at a time: `CONFORMANCE_CONCURRENCY` (a run beside others on kind), else 1 on the
/// real Slurm (2 jobs at a time: its scenarios take turns), 3 on kind (every scenario's VK is a
/// pod behind a Service on the same 2 cores, so kube-proxy and metrics-server keep up with the
/// fresh VKs), 4 elsewhere.
fn concurrency(target: &str, pods: bool) -> usize {
    if let Ok(n) = std::env::var("CONFORMANCE_CONCURRENCY") {
        return n.parse().ok().filter(|n| *n > 0).unwrap_or_else(|| {
            runner::stop(format!(
                "CONFORMANCE_CONCURRENCY={n:?} is not a positive number"
            ))
        });
    }
    match (target, pods) {
        ("slurm-real", _) => 1,
        (_, true) => 3,
        _ => 4,
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let setup = std::sync::Arc::new(runner::Setup::load(&repo_root()));
    let providers = std::env::var("CONFORMANCE_PROVIDERS").unwrap_or_else(|_| match &setup.run {
        Some(r) => setup.plan.runs[r].targets.join(","),
        None => "runpod,vast,slurm,slurm-real,kubernetes".into(),
    });
    let targets: Vec<String> = conformance::plan::list(&providers);
    for t in &targets {
        // Each target's capabilities and features are read before anything runs.
        setup
            .plan
            .capabilities(t)
            .unwrap_or_else(|e| runner::stop(e));
        setup.features(t);
    }
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
    if conformance::harness::lab::realistic() {
        println!("=== conformance: emulators on the realistic profile, ten times faster ===");
    }
    // Where random moments and stuck starts fall; set it to replay a run.
    println!(
        "=== conformance: CONFORMANCE_SEED={} ===",
        conformance::harness::lab::seed()
    );
    let mut times: Vec<String> = Vec::new();
    let mut pending_took: Option<String> = None;
    for p in targets.iter().map(String::as_str) {
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
        let granted = setup.granted(p, &conditions(first, pods));
        println!(
            "\n=== conformance: provider {p}{release}{} (capabilities: {}) ===",
            if pods { ", VKs as pods" } else { "" },
            setup.plan.capabilities(p).unwrap_or_default().join(", ")
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
        let label = target.clone();
        let (after_setup, after_granted, filter_setup, filter_granted) = (
            setup.clone(),
            granted.clone(),
            setup.clone(),
            granted.clone(),
        );
        let mut cucumber = Vkw::cucumber()
            .max_concurrent_scenarios(concurrency(p, pods))
            .after(move |f, _r, s, ev, w| {
                use cucumber::event::ScenarioFinished as F;
                let outcome = match ev {
                    F::StepPassed => runner::Outcome::Passed,
                    F::StepSkipped => {
                        let given = runner::given_steps(f, s);
                        match after_setup
                            .plan
                            .skip_reason(given.iter().map(String::as_str), &after_granted)
                        {
                            Some(why) => runner::Outcome::Declared(why),
                            None => {
                                record_failure(
                                    &target,
                                    &f.name,
                                    &s.name,
                                    "skipped, and nothing declared lets it skip: a step matched no step definition",
                                );
                                runner::Outcome::Undeclared
                            }
                        }
                    }
                    // Kept for the recap at the very end: a CI log's tail then names what failed.
                    F::StepFailed(_, _, e) => {
                        record_failure(&target, &f.name, &s.name, &e.to_string());
                        runner::Outcome::Failed
                    }
                    F::BeforeHookFailed(_) => {
                        record_failure(&target, &f.name, &s.name, "its before hook failed");
                        runner::Outcome::Failed
                    }
                };
                runner::record(&target, &f.name, &s.name, outcome);
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
        for key in &granted {
            let sentence = if setup.plan.conditions.contains_key(key) {
                key.clone()
            } else {
                conformance::plan::sentence_of(key)
            };
            let (re, step) = gate_step(&sentence);
            cucumber = cucumber.given(re, step);
        }
        first = false;
        // A skip fails the run unless the plan declares why (a gate the target lacks).
        let cucumber = cucumber
            .fail_on_skipped_with(move |f, _r, s| {
                let given = runner::given_steps(f, s);
                filter_setup
                    .plan
                    .skip_reason(given.iter().map(String::as_str), &filter_granted)
                    .is_none()
            })
            .with_cli(cucumber::cli::Opts::<_, _, _, cucumber::cli::Empty>::default());
        let features = setup.features(p);
        println!(
            "=== conformance: {p} runs {}the features {} ===",
            setup
                .run
                .as_ref()
                .map(|r| format!("(CONFORMANCE_RUN={r}) "))
                .unwrap_or_default(),
            features.join(", ")
        );
        let result = rt.block_on(cucumber.filter_run(
            setup.features_dir.clone(),
            move |feature, _rule, _scenario| {
                let stem = feature
                    .path
                    .as_ref()
                    .and_then(|p| p.file_stem())
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_owned();
                features.contains(&stem)
            },
        ));
        if let Some(remote) = REMOTE.lock().unwrap().take() {
            rt.block_on(remote.down());
        }
        runner::report(&label);
        // Printed before the next target's run, so the output still ends with Cucumber's own
        // summary; every target's time is also in `target/conformance/times-<first target>.txt`.
        let took = format!(
            "=== conformance: provider {p}{release} took {:.0} s ===",
            started.elapsed().as_secs_f64()
        );
        times.push(took.clone());
        // Named after the run's first target: two runs at once keep a file each.
        let first_target = targets.first().map(String::as_str).unwrap_or_default();
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
