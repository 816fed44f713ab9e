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
#[path = "conformance/overflow_refused.rs"]
mod overflow_refused;
#[path = "conformance/pod_ip.rs"]
mod pod_ip;
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

const WAIT: Duration = Duration::from_secs(60);

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
        wait_for(WAIT, &format!("pod {name} {want}"), || async {
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
// Pods

fn with_policy(mut p: Pod, policy: &str) -> Pod {
    p.spec.as_mut().unwrap().restart_policy = Some(policy.into());
    p
}

#[given(expr = "a GPU pod {string} is Running")]
async fn pod_running(w: &mut Vkw, name: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1, "pod {name} has {} workloads", live.len());
    w.workloads
        .insert(name, live[0]["id"].as_str().unwrap_or_default().to_owned());
}

#[given(expr = "a GPU pod {string} with restart policy {string} is Running")]
async fn pod_running_policy(w: &mut Vkw, name: String, policy: String) {
    let node = w.node();
    w.create_pod(with_policy(gpu_pod(&name, &node, 1, &[]), &policy))
        .await;
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1);
    w.workloads
        .insert(name, live[0]["id"].as_str().unwrap_or_default().to_owned());
}

#[when(expr = "I create a GPU pod {string}")]
async fn create_pod(w: &mut Vkw, name: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
}

#[when(expr = "I create a GPU pod {string} with the annotation {string} set to {string}")]
async fn create_annotated(w: &mut Vkw, name: String, k: String, v: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[(&k, &v)])).await;
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with (a hostPath volume|an nfs volume|a privileged container|hostNetwork|spec.nodeName set and no toleration of the node's taint)$"#
)]
async fn create_unsupported(w: &mut Vkw, name: String, what: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    let spec = p.spec.as_mut().unwrap();
    match what.as_str() {
        "a hostPath volume" => {
            spec.volumes = Some(vec![
                serde_json::from_value(json!({"name": "d", "hostPath": {"path": "/data"}}))
                    .unwrap(),
            ]);
        }
        "an nfs volume" => {
            spec.volumes = Some(vec![
                serde_json::from_value(
                    json!({"name": "d", "nfs": {"server": "10.0.0.1", "path": "/export"}}),
                )
                .unwrap(),
            ]);
        }
        "a privileged container" => {
            spec.containers[0].security_context =
                Some(serde_json::from_value(json!({"privileged": true})).unwrap());
        }
        "hostNetwork" => spec.host_network = Some(true),
        _ => {
            // Bound by the user, not the scheduler: the taint check never ran.
            spec.node_selector = None;
            spec.tolerations = None;
            spec.node_name = Some(node.clone());
        }
    }
    w.create_pod(p).await;
}

fn env_from(kind: &str, name: &str, optional: bool) -> Value {
    let key = if kind == "Secret" {
        "secretKeyRef"
    } else {
        "configMapKeyRef"
    };
    json!({"name": "FROM_SOURCE", "valueFrom": {key: {"name": name, "key": "value", "optional": optional}}})
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with an env var from the missing (Secret|ConfigMap) "([^"]+)"$"#
)]
async fn create_missing_env(w: &mut Vkw, name: String, kind: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from(&kind, &source, false)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with an optional env var from the missing (Secret|ConfigMap) "([^"]+)"$"#
)]
async fn create_optional_env(w: &mut Vkw, name: String, kind: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from(&kind, &source, true)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(regex = r#"^I create a GPU pod "([^"]+)" with an env var from the Secret "([^"]+)"$"#)]
async fn create_secret_env(w: &mut Vkw, name: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from("Secret", &source, false)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(regex = r#"^the (Secret|ConfigMap) "([^"]+)" is created$"#)]
async fn create_source(w: &mut Vkw, kind: String, name: String) {
    let data = BTreeMap::from([("value".to_owned(), "present".to_owned())]);
    if kind == "Secret" {
        let s = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            string_data: Some(data),
            ..Default::default()
        };
        Api::<Secret>::namespaced(w.c(), &w.ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    } else {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(w.c(), &w.ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
}

#[then(expr = "pod {string} becomes Running")]
async fn becomes_running(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Running").await;
}

#[then(expr = "pod {string} becomes Succeeded")]
async fn becomes_succeeded(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Succeeded").await;
}

#[then(expr = "pod {string} becomes Failed")]
async fn becomes_failed(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Failed").await;
}

#[then(expr = "pod {string} becomes Failed with reason {string}")]
async fn failed_with(w: &mut Vkw, name: String, reason: String) {
    let p = w.wait_phase(&name, "Failed").await;
    let st = p.status.unwrap();
    assert_eq!(
        st.reason.as_deref(),
        Some(reason.as_str()),
        "message: {:?}",
        st.message
    );
    assert!(
        st.message.is_some_and(|m| !m.is_empty()),
        "a Failed pod needs a message a user can act on"
    );
}

#[then(expr = "pod {string} is Pending with container reason {string}")]
async fn pending_with(w: &mut Vkw, name: String, reason: String) {
    wait_for(WAIT, &format!("{name} waiting with {reason}"), || async {
        let p = w.get(&name).await?;
        let cs = p
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        (phase(&p) == "Pending" && cs.state?.waiting?.reason.as_deref() == Some(reason.as_str()))
            .then_some(())
    })
    .await;
}

#[then(expr = "pod {string} has an event {string}")]
async fn has_event(w: &mut Vkw, name: String, reason: String) {
    let (c, ns) = (w.c(), w.ns.clone());
    wait_for(
        Duration::from_secs(20),
        &format!("event {reason} on {name}"),
        || async {
            events_for(&c, &ns, &name)
                .await
                .iter()
                .any(|(r, _)| *r == reason)
                .then_some(())
        },
    )
    .await;
}

#[then(expr = "no workload exists for pod {string}")]
async fn no_workload(w: &mut Vkw, name: String) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let u = w.uids[&name].clone();
    let all: Vec<Value> = w
        .obs()
        .workloads()
        .await
        .into_iter()
        .filter(|x| x["name"].as_str().is_some_and(|n| n.ends_with(&u)))
        .collect();
    assert!(all.is_empty(), "pod {name} reached the provider: {all:?}");
}

#[then(expr = "pod {string} is Ready with a started container whose id names the provider")]
async fn ready_started(w: &mut Vkw, name: String) {
    let p = w.get(&name).await.unwrap();
    let st = p.status.unwrap();
    assert!(
        st.conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.started == Some(true));
    assert!(
        cs.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .is_some()
    );
    let id = cs.container_id.clone().unwrap();
    assert!(id.starts_with(&format!("{}://vk-", target())), "{id}");
    assert!(st.start_time.is_some());
}

#[then(expr = "the container of pod {string} is terminated with a non-zero exit code")]
async fn terminated_nonzero(w: &mut Vkw, name: String) {
    let p = w.get(&name).await.unwrap();
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    let t = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .expect("terminated state");
    assert_ne!(t.exit_code, 0);
    assert!(t.reason.is_some() && t.finished_at.is_some());
}

#[then(
    expr = "the container of pod {string} is terminated with exit code {int} and reason {string}"
)]
async fn terminated_with(w: &mut Vkw, name: String, code: i32, reason: String) {
    let p = w.get(&name).await.unwrap();
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    let t = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .expect("terminated state");
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (code, Some(reason.as_str()))
    );
}

// ----------------------------------------------------------------------------------------------
// Provider-side events (emulator admin API)

#[when(expr = "the provider fails the workload of pod {string}")]
async fn provider_fails(w: &mut Vkw, name: String) {
    let id = w.workloads[&name].clone();
    w.obs().act(&id, "fail", json!({})).await;
}

#[when(expr = "the workload of pod {string} exits with code {int}")]
async fn provider_exit(w: &mut Vkw, name: String, code: i32) {
    let id = w.workloads[&name].clone();
    w.obs().act(&id, "exit", json!({"exit_code": code})).await;
}

#[when(expr = "the provider loses the workload of pod {string}")]
async fn provider_loses(w: &mut Vkw, name: String) {
    let id = w.workloads[&name].clone();
    w.obs().vanish(&id).await;
}

async fn pick_replica(w: &mut Vkw, app: &str) -> String {
    let pods = w.replicas(app).await;
    let victim = pods[0].clone();
    let name = victim.metadata.name.clone().unwrap();
    w.victim = Some((name.clone(), uid(&victim)));
    w.others = pods[1..].iter().map(uid).collect();
    let live = w.live_of(&uid(&victim)).await;
    live[0]["id"].as_str().unwrap().to_owned()
}

#[when(expr = "the provider preempts the workload of one replica of deployment {string}")]
async fn preempt_replica(w: &mut Vkw, app: String) {
    let id = pick_replica(w, &app).await;
    w.obs().act(&id, "preempt", json!({})).await;
}

#[when(expr = "the provider loses the workload of one replica of deployment {string}")]
async fn lose_replica(w: &mut Vkw, app: String) {
    resilience::mark_incident(w, &app).await;
    let id = pick_replica(w, &app).await;
    w.obs().vanish(&id).await;
}

#[then(expr = "that replica becomes Failed with reason {string}")]
async fn victim_failed(w: &mut Vkw, reason: String) {
    let (name, _) = w.victim.clone().unwrap();
    failed_with(w, name.clone(), reason.clone()).await;
    has_event(w, name, reason).await;
}

// ----------------------------------------------------------------------------------------------
// Deployments and deletion

#[given(regex = r#"^a deployment "([^"]+)" with (\d+) (interruptible )?GPU replicas is Running$"#)]
async fn deployment(w: &mut Vkw, name: String, n: usize, interruptible: String) {
    let annotations = if interruptible.is_empty() {
        json!({})
    } else {
        json!({"gpu-vk.io/interruptible": "true"})
    };
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": pod_spec(&w.node(), 1)}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let pods = w.wait_replicas(&name, n).await;
    for p in &pods {
        assert_eq!(w.live_of(&uid(p)).await.len(), 1);
    }
}

#[when(expr = "I delete one replica of deployment {string}")]
async fn delete_replica(w: &mut Vkw, app: String) {
    pick_replica(w, &app).await;
    let (name, _) = w.victim.clone().unwrap();
    w.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

async fn gone_with_workload(w: &Vkw, name: &str, pod_uid: &str) {
    wait_for(
        WAIT,
        &format!("pod {name} and its workload gone"),
        || async {
            let pod_gone = w.get(name).await.is_none_or(|p| uid(&p) != pod_uid);
            (pod_gone && w.live_of(pod_uid).await.is_empty()).then_some(())
        },
    )
    .await;
}

#[then("that replica is gone and so is its workload")]
async fn victim_gone(w: &mut Vkw) {
    let (name, u) = w.victim.clone().unwrap();
    gone_with_workload(w, &name, &u).await;
}

#[then("the workloads of the other replicas are untouched")]
async fn others_untouched(w: &mut Vkw) {
    for u in w.others.clone() {
        assert_eq!(
            w.live_of(&u).await.len(),
            1,
            "a sibling's workload was touched"
        );
    }
}

#[then(
    regex = r#"^deployment "([^"]+)" (?:returns to|has) (\d+) Running replicas?, (?:each )?with exactly one workload$"#
)]
async fn deployment_back(w: &mut Vkw, app: String, n: usize) {
    let pods = w.wait_replicas(&app, n).await;
    for p in &pods {
        let live = wait_for(WAIT, "one workload per replica", || async {
            let l = w.live_of(&uid(p)).await;
            (l.len() == 1).then_some(l)
        })
        .await;
        assert_eq!(live.len(), 1);
    }
}

#[when(expr = "I scale deployment {string} to {int} replica(s)")]
async fn scale(w: &mut Vkw, app: String, n: i32) {
    let api: Api<Deployment> = Api::namespaced(w.c(), &w.ns);
    api.patch(
        &app,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": n}})),
    )
    .await
    .unwrap();
}

#[then(expr = "the provider runs exactly {int} workload(s) of this node")]
async fn exactly_ours(w: &mut Vkw, n: usize) {
    wait_for(
        WAIT,
        &format!("{n} live workloads of this node"),
        || async { (w.ours().await.len() == n).then_some(()) },
    )
    .await;
}

#[when(expr = "I delete pod {string}")]
async fn delete_pod(w: &mut Vkw, name: String) {
    w.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[when(expr = "I force delete pod {string}")]
async fn force_delete(w: &mut Vkw, name: String) {
    w.pods()
        .delete(
            &name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

#[then(expr = "pod {string} is gone and so is its workload")]
async fn pod_gone(w: &mut Vkw, name: String) {
    let u = w.uids[&name].clone();
    gone_with_workload(w, &name, &u).await;
}

// ----------------------------------------------------------------------------------------------
// Restarts

#[when("the virtual kubelet is stopped")]
async fn vk_stop(w: &mut Vkw) {
    w.vk().kill9().await;
}

#[when("the virtual kubelet is started again")]
async fn vk_start(w: &mut Vkw) {
    w.vk().restart();
}

#[then(expr = "pod {string} is Running with the same workload as before")]
async fn same_workload(w: &mut Vkw, name: String) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0]["id"].as_str().unwrap(),
        w.workloads[&name],
        "the workload was replaced"
    );
}

#[then("every pod has exactly one workload at the provider")]
async fn one_each(w: &mut Vkw) {
    let pods = w.pods().list(&Default::default()).await.unwrap().items;
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let live = wait_for(WAIT, "one workload per pod", || async {
            let l = w.live_of(&uid(p)).await;
            (l.len() == 1).then_some(l)
        })
        .await;
        assert_eq!(live.len(), 1, "pod {:?}", p.metadata.name);
    }
}

#[then("no workload was created twice")]
async fn no_duplicates(w: &mut Vkw) {
    let prefix = w.prefix();
    let all = w.obs().workloads().await;
    let mut per_uid: HashMap<String, usize> = HashMap::new();
    for x in &all {
        if let Some(n) = x["name"].as_str().filter(|n| n.starts_with(&prefix)) {
            *per_uid.entry(n.to_owned()).or_default() += 1;
        }
    }
    let dups: Vec<_> = per_uid.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dups.is_empty(),
        "workloads created more than once: {dups:?}"
    );
    assert!(
        w.obs().creates(&prefix).await <= w.all_uids.len(),
        "more creates than pods"
    );
}

#[then("the provider runs no workload without a pod")]
async fn no_leaks(w: &mut Vkw) {
    let pods: HashSet<String> = w
        .pods()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(uid)
        .collect();
    wait_for(WAIT, "no leaked workloads", || async {
        let ours = w.ours().await;
        ours.iter()
            .all(|x| {
                x["name"]
                    .as_str()
                    .is_some_and(|n| pods.iter().any(|u| n.ends_with(u.as_str())))
            })
            .then_some(())
    })
    .await;
}

#[when(
    expr = "{int} GPU pods are created and {int} of them deleted while the virtual kubelet is killed {int} times at random moments"
)]
async fn churn(w: &mut Vkw, n: usize, deleted: usize, kills: usize) {
    use rand_like::pick;
    let node = w.node();
    let mut names = Vec::new();
    let mut kills_left = kills;
    for i in 0..n {
        let name = format!("churn-{i}");
        w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
        names.push(name);
        if i < deleted {
            // Delete an earlier pod, sometimes before the VK saw it.
            let victim = names[pick(names.len())].clone();
            let _ = w.pods().delete(&victim, &DeleteParams::default()).await;
        }
        if kills_left > 0 && pick(n / kills + 1) == 0 {
            tokio::time::sleep(Duration::from_millis(pick(400) as u64)).await;
            w.vk().kill9().await;
            w.vk().restart();
            kills_left -= 1;
        }
        tokio::time::sleep(Duration::from_millis(pick(150) as u64)).await;
    }
    while kills_left > 0 {
        tokio::time::sleep(Duration::from_millis(pick(600) as u64)).await;
        w.vk().kill9().await;
        w.vk().restart();
        kills_left -= 1;
    }
    w.vk().kill9().await;
}

/// Tiny randomness without another dependency: the clock's nanoseconds.
mod rand_like {
    pub fn pick(n: usize) -> usize {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        if n == 0 { 0 } else { (nanos as usize / 7) % n }
    }
}

#[then("every remaining pod becomes Running")]
async fn remaining_running(w: &mut Vkw) {
    wait_for(
        Duration::from_secs(90),
        "remaining pods Running",
        || async {
            let pods = w.pods().list(&Default::default()).await.unwrap().items;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let terminating = pods.len() - live.len();
            (terminating == 0 && live.iter().all(|p| phase(p) == "Running")).then_some(())
        },
    )
    .await;
}

// ----------------------------------------------------------------------------------------------
// Garbage collection

#[given("a workload owned by this node whose pod does not exist")]
async fn orphan(w: &mut Vkw) {
    let vk = w.vk.as_ref().unwrap();
    let (name, _) = w.inject_name(&vk.cluster_id, &vk.node);
    w.obs().inject(&name).await;
    w.orphan = Some(name);
}

#[given("a workload owned by another node of this cluster")]
async fn foreign_node(w: &mut Vkw) {
    let cluster = w.vk.as_ref().unwrap().cluster_id.clone();
    let (name, _) = w.inject_name(&cluster, "another-node");
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[given("a workload owned by this node name in another cluster")]
async fn foreign_cluster(w: &mut Vkw) {
    let node = w.node();
    let (name, _) = w.inject_name("another-cluster", &node);
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[given("a workload that no virtual kubelet created")]
async fn unowned(w: &mut Vkw) {
    let name = unique("notebook");
    w.obs().inject(&name).await;
    w.foreign.push(name);
}

#[then(expr = "that workload is deleted within {int} seconds")]
#[when(expr = "that workload is deleted within {int} seconds")]
async fn orphan_deleted(w: &mut Vkw, secs: u64) {
    let name = w.orphan.clone().unwrap();
    wait_for(Duration::from_secs(secs), "orphan collected", || async {
        (!w.obs()
            .live()
            .await
            .iter()
            .any(|x| x["name"] == name.as_str()))
        .then_some(())
    })
    .await;
}

#[then(expr = "the other {int} workloads are still running")]
async fn foreign_kept(w: &mut Vkw, n: usize) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let live = w.obs().live().await;
    let kept = w
        .foreign
        .iter()
        .filter(|f| live.iter().any(|x| x["name"] == f.as_str()))
        .count();
    assert_eq!(kept, n, "foreign workloads were touched");
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
        let junit =
            std::fs::File::create(report_dir.join(format!("junit-{mode}{p}{release}{k8s}.xml")))
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
