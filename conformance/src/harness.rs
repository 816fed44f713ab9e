//! Harness for cluster tests and the conformance suite: the real testbed (KUBECONFIG from
//! `make test`), provider emulators served in-process over HTTP (RunPod, Vast, slurmrestd), the
//! real single-node Slurm of `make slurm-up` observed through its REST API, and the `vk`
//! binary run as a child process (so scenarios can `kill -9` it), or, with `VK_MODE=pod`
//! (`make e2e KIND=1`), as a pod of a kind cluster installed by the Helm chart ([`pod`]).
//!
//! Steps look at the provider side through an [`Observer`]: an emulator's `/_admin` API,
//! slurmrestd's own job list for a real Slurm (which has no admin API, so only the generic
//! views exist there: all workloads, live ones, those of one pod), or for another Kubernetes
//! cluster its remote pods and a proxy in front of its API server ([`kubernetes`]).
//!
//! Test support code: failing loudly (panics with a message) is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{EmulatorConfig, ExecutionMode, GpuStock};
pub use mock_providers::slurm::Dialect as SlurmDialect;
use serde_json::{Value, json};

pub mod ha;
pub mod kubernetes;
pub mod pod;

/// The API key (RunPod, Vast) or JWT (Slurm) every emulator accepts; the VK gets it through
/// `apiKeyEnv: TEST_PROVIDER_KEY`.
pub const API_KEY: &str = "emulator-key-7f3a";
/// The Slurm user of the slurmrestd emulator (`X-SLURM-USER-NAME`).
pub const SLURM_EMULATOR_USER: &str = "vkslurm";

/// A client for the testbed; fails loudly when not run under `make test`.
pub async fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: cluster tests run against the local testbed; use `make test` \
         (or `eval \"$(make -s testbed-up)\"` first)"
    );
    Client::try_default().await.expect("testbed reachable")
}

/// A unique, short suffix for names.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..8])
}

/// Creates a namespace named `<prefix>-<unique suffix>` and waits for its default
/// ServiceAccount; returns its name.
pub async fn namespace(c: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    create_namespace(c, &name).await;
    name
}

/// Creates namespace `name` and waits for its default ServiceAccount.
pub async fn create_namespace(c: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sa: Api<ServiceAccount> = Api::namespaced(c.clone(), name);
    wait_for(
        Duration::from_secs(30),
        "default service account",
        || async { sa.get_opt("default").await.ok().flatten().map(|_| ()) },
    )
    .await;
}

pub async fn delete_namespace(c: &Client, name: &str) {
    let _ = Api::<Namespace>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Polls `f` until it returns `Some`, or panics naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (20 s) until Node `node` reports Ready.
pub async fn wait_node_ready(c: &Client, node: &str) {
    wait_for(Duration::from_secs(20), "node Ready", || async {
        let n = Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
            .get_opt(node)
            .await
            .ok()??;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Time scale of the Vast emulator's per-endpoint intervals in the suites: a tenth of the real
/// figures, as the VK's Vast adapter is paced (its `rateLimits` in [`Emulator::provider_yaml`]).
pub const VAST_TIME_SCALE: f64 = 0.1;

/// The exact Vast `gpu_name` the VK's Vast adapter maps a neutral GPU type to (its built-in
/// table, `vk::providers::vast::gpus`, for the types the suites stock); other names as given.
/// Vast's search matches names exactly, so the emulator is stocked under these.
pub fn vast_gpu_name(neutral: &str) -> String {
    match neutral {
        "A100-80GB" => "A100 SXM4",
        "RTX4090" => "RTX 4090",
        "H100" => "H100 SXM",
        other => other,
    }
    .to_owned()
}

/// A provider emulator (RunPod v2, Vast, slurmrestd) served in-process; stopped when dropped.
pub struct Emulator {
    pub addr: SocketAddr,
    /// `runpod`, `vast` or `slurm` (the adapter kind in the VK configuration).
    pub kind: &'static str,
    /// GPU type the VK asks for when a pod names none (the first stocked type, as the VK names
    /// it; empty for Slurm).
    pub default_gpu: String,
    /// The same type as the provider names it in its stock (Vast: its exact `gpu_name`).
    pub stock_gpu: String,
    /// Slurm only: what the VK's provider settings need.
    pub slurm: Option<SlurmEmulation>,
    http: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

/// The Slurm side of an [`Emulator::slurm`].
#[derive(Clone, Debug)]
pub struct SlurmEmulation {
    /// The only dialect served (so a VK configured with another one fails loudly).
    pub dialect: SlurmDialect,
    pub user: String,
    /// The partition pods run in (the emulator's default one).
    pub partition: String,
    /// The jobs' `standard_output` directory (the VK reads logs from there); removed on drop.
    pub output_dir: PathBuf,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(s) = &self.slurm {
            let _ = std::fs::remove_dir_all(&s.output_dir);
        }
    }
}

impl Emulator {
    pub async fn runpod(mode: ExecutionMode, gpus: Vec<GpuStock>) -> Self {
        let cfg = EmulatorConfig::new(API_KEY, gpus.clone()).with_mode(mode);
        let default_gpu = gpus.first().map(|g| g.gpu_type.clone()).unwrap_or_default();
        let router = mock_providers::runpod::router(mock_providers::runpod::State::new(cfg));
        Self::serve(router, "runpod", default_gpu).await
    }

    /// A Vast emulator stocked with `gpus` (neutral types, stocked under their Vast names: see
    /// [`vast_gpu_name`]), enforcing Vast's per-endpoint intervals at the tenth of the real
    /// figures the VK is paced at (see [`Emulator::provider_yaml`]).
    pub async fn vast(mode: ExecutionMode, gpus: Vec<GpuStock>) -> Self {
        let stock: Vec<GpuStock> = gpus
            .iter()
            .map(|g| GpuStock {
                gpu_type: vast_gpu_name(&g.gpu_type),
                ..g.clone()
            })
            .collect();
        let cfg = EmulatorConfig::new(API_KEY, stock)
            .with_mode(mode)
            .with_endpoint_limits(VAST_TIME_SCALE);
        let default_gpu = gpus.first().map(|g| g.gpu_type.clone()).unwrap_or_default();
        let router = mock_providers::vast::router(mock_providers::vast::State::new(cfg));
        let mut e = Self::serve(router, "vast", default_gpu).await;
        e.stock_gpu = vast_gpu_name(&e.default_gpu);
        e
    }

    /// A slurmrestd emulator serving only `dialect`, with 4 nodes of 8 GPUs, partition
    /// `debug`, user [`SLURM_EMULATOR_USER`] and token [`API_KEY`].
    pub async fn slurm(mode: ExecutionMode, dialect: SlurmDialect) -> Self {
        let cfg =
            mock_providers::slurm::SlurmConfig::new(API_KEY, SLURM_EMULATOR_USER).with_mode(mode);
        Self::slurm_with(cfg, dialect).await
    }

    /// A slurmrestd emulator from a full configuration (cluster shape, process mode...); its
    /// token must be [`API_KEY`] and only `dialect` is served.
    pub async fn slurm_with(
        mut cfg: mock_providers::slurm::SlurmConfig,
        dialect: SlurmDialect,
    ) -> Self {
        assert_eq!(
            cfg.token, API_KEY,
            "the VK presents API_KEY as the Slurm token"
        );
        cfg.dialects = vec![dialect];
        let output_dir = pod::shared_dir().join(unique("gpu-vk-slurm-emulator"));
        std::fs::create_dir_all(&output_dir).unwrap();
        let user = cfg.user.clone();
        let partition = cfg.partitions.first().cloned().unwrap_or_default();
        let router = mock_providers::slurm::router(mock_providers::slurm::State::new(cfg));
        let mut e = Self::serve(router, "slurm", String::new()).await;
        e.slurm = Some(SlurmEmulation {
            dialect,
            user,
            partition,
            output_dir,
        });
        e
    }

    async fn serve(router: axum::Router, kind: &'static str, default_gpu: String) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (addr, task) =
            mock_providers::spawn_on(SocketAddr::new(pod::emulator_bind(), 0), router)
                .await
                .unwrap();
        Self {
            addr,
            kind,
            stock_gpu: default_gpu.clone(),
            default_gpu,
            slurm: None,
            http: reqwest::Client::new(),
            task,
        }
    }

    pub fn base_url(&self) -> String {
        match self.kind {
            "runpod" => format!("http://{}/v2", self.addr),
            _ => format!("http://{}", self.addr),
        }
    }

    /// This emulator as one entry of the VK's `providers:` list, named `name`.
    pub fn provider_yaml(&self, name: &str) -> String {
        match &self.slurm {
            Some(s) => format!(
                "- name: {name}\n  kind: slurm\n  apiKeyEnv: TEST_PROVIDER_KEY\n  settings:\n    \
                 baseUrl: {url}\n    dialect: {dialect}\n    userName: {user}\n    partition: {partition}\n    \
                 runtime: bare\n    outputDir: {out}\n    defaultTimeLimitMinutes: 60\n{insecure}",
                insecure = self.insecure_http(),
                url = yaml_str(&self.base_url()),
                dialect = s.dialect.version(),
                user = yaml_str(&s.user),
                partition = yaml_str(&s.partition),
                out = yaml_str(&s.output_dir.to_string_lossy()),
            ),
            // The clouds deny Secret env by default; the suites pass Secrets to them on
            // purpose (env resolution, log redaction), so the test operator allows it.
            None => format!(
                "- name: {name}\n  kind: {kind}\n  apiKeyEnv: TEST_PROVIDER_KEY\n  secretEnv: allow\n  settings:\n    baseUrl: {url}\n    defaultGpuType: {gpu}\n{names}{paced}{insecure}",
                insecure = self.insecure_http(),
                // The emulator runs on simulated (shortened) timings: the Vast adapter paces
                // its calls at a tenth of the service's documented intervals to match, the
                // intervals the Vast emulator enforces ([`VAST_TIME_SCALE`]).
                paced = if self.kind == "vast" {
                    "    rateLimits: {list: 0.1, search: 0.6, rent: 0.45, destroy: 0.3, logs: 0.1}\n"
                } else {
                    ""
                },
                // The operator's mapping of the stocked type, as a real configuration has it
                // (`gpuNames`): the adapter's inventory then names its quotes as pods do.
                names = if self.kind == "vast" && self.stock_gpu != self.default_gpu {
                    format!(
                        "    gpuNames: {{{}: {}}}\n",
                        yaml_str(&self.default_gpu),
                        yaml_str(&self.stock_gpu)
                    )
                } else {
                    String::new()
                },
                kind = self.kind,
                url = self.base_url(),
                gpu = self.default_gpu,
            ),
        }
    }

    /// `allowInsecureHttp: true` when the emulator listens beyond loopback (the kind network,
    /// for a VK pod): the VK accepts plain http only to loopback unless told so.
    fn insecure_http(&self) -> &'static str {
        if self.addr.ip().is_loopback() {
            ""
        } else {
            "    allowInsecureHttp: true\n"
        }
    }

    /// Leaves the provider without capacity for new GPU workloads. RunPod and Vast: the GPU
    /// stock drops to zero. Slurm: every submission is refused with `ESLURM_NODES_BUSY` (2016,
    /// "Requested nodes are busy"), slurmctld's answer to a job that must start now and cannot;
    /// a plain full Slurm cluster queues jobs instead (ProviderQueued).
    pub async fn no_capacity(&self) {
        if let Some(s) = &self.slurm {
            let entry = if s.dialect == SlurmDialect::V0038 {
                json!({"error_code": 2016, "error": "Requested nodes are busy"})
            } else {
                json!({"error_number": 2016, "error": "Requested nodes are busy",
                       "description": "", "source": "slurm_submit_batch_job()"})
            };
            let r = self
                .http
                .post(self.admin("/faults"))
                .json(&json!({"route": "create", "status": 500, "body": {"errors": [entry]}}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "fault injection: {}", r.status());
            return;
        }
        let r = self
            .http
            .put(self.admin("/inventory"))
            .json(&json!({"gpus": [{"gpu_type": self.stock_gpu, "count": 0, "price_per_hour": 1.89}]}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "inventory: {}", r.status());
    }

    fn admin(&self, path: &str) -> String {
        format!("http://{}/_admin{path}", self.addr)
    }

    pub async fn workloads(&self) -> Vec<Value> {
        let v: Value = self
            .http
            .get(self.admin("/workloads"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v.as_array().cloned().unwrap_or_default()
    }

    /// Live workloads (not terminated) whose name carries this pod UID.
    pub async fn workloads_of(&self, uid: &str) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.ends_with(uid)))
            .filter(|w| !is_terminated(w))
            .collect()
    }

    pub async fn live(&self) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| !is_terminated(w))
            .collect()
    }

    pub async fn counters(&self) -> Value {
        self.http
            .get(self.admin("/counters"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn counter(&self, name: &str) -> u64 {
        self.counters().await[name].as_u64().unwrap_or(0)
    }

    /// Injects a running workload with the given name; returns its provider id.
    pub async fn inject(&self, name: &str) -> String {
        let body = if self.slurm.is_some() {
            json!({"name": name, "gpu_count": 1})
        } else {
            json!({"name": name, "image": "busybox", "gpu_type": self.stock_gpu, "gpu_count": 1})
        };
        let r = self
            .http
            .post(self.admin("/workloads"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "inject failed: {}", r.status());
        let v: Value = r.json().await.unwrap();
        v["id"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    }

    /// Makes a workload vanish silently (the provider lost it).
    pub async fn vanish(&self, id: &str) {
        let r = self
            .http
            .delete(self.admin(&format!("/workloads/{id}")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "vanish failed: {}", r.status());
    }

    pub async fn admin_post(&self, path: &str, body: Value) {
        let r = self
            .http
            .post(self.admin(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "admin {path} failed: {}",
            r.status()
        );
    }
}

/// Whether a workload (as an [`Observer`] shows it) has ended: RunPod/Vast terminal states,
/// Slurm's terminal job states and a remote pod's terminal phases. A Slurm job still COMPLETING (its processes being killed)
/// is not terminated yet.
pub fn is_terminated(w: &Value) -> bool {
    matches!(
        w["state"].as_str(),
        Some(
            "TERMINATED"
                | "terminated"
                | "Succeeded"
                | "Failed"
                | "deleted"
                | "DELETED"
                | "COMPLETED"
                | "CANCELLED"
                | "FAILED"
                | "TIMEOUT"
                | "OUT_OF_MEMORY"
                | "OOM"
                | "PREEMPTED"
                | "NODE_FAIL"
                | "BOOT_FAIL"
                | "DEADLINE"
                | "REVOKED"
                | "SPECIAL_EXIT"
                | "LAUNCH_FAILED"
        )
    )
}

/// A YAML scalar for any string (JSON strings are YAML).
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Where a test looks at the provider's workloads. Both give the same view of a workload:
/// `{"id": <provider id>, "name": <workload id>, "state": <provider state>, ...}`.
pub enum Observer {
    /// An in-process emulator: its `/_admin` API (workloads, counters, fault injection).
    Emulator(Emulator),
    /// A real Slurm: slurmrestd's job list, with no admin API.
    Slurm(RealSlurm),
    /// Another Kubernetes cluster: the remote pods, a counting proxy in front of the remote
    /// API server, faults through the remote cluster's own API ([`kubernetes`]).
    Kubernetes(kubernetes::RemoteView),
}

impl Observer {
    /// The emulator behind this observer, when there is one (admin API, fault injection).
    pub fn emulator(&self) -> Option<&Emulator> {
        match self {
            Self::Emulator(e) => Some(e),
            Self::Slurm(_) | Self::Kubernetes(_) => None,
        }
    }

    /// This provider as one entry of the VK's `providers:` list.
    pub fn provider_yaml(&self, name: &str) -> String {
        match self {
            Self::Emulator(e) => e.provider_yaml(name),
            Self::Slurm(s) => s.provider_yaml(name),
            Self::Kubernetes(k) => k.provider_yaml(name),
        }
    }

    /// Every workload the provider knows (for a real Slurm: every job slurmctld still lists,
    /// finished ones for `MinJobAge`, whoever submitted them).
    pub async fn workloads(&self) -> Vec<Value> {
        match self {
            Self::Emulator(e) => e.workloads().await,
            Self::Slurm(s) => s.workloads().await,
            Self::Kubernetes(k) => k.workloads().await,
        }
    }

    /// Live workloads (not terminated) whose name carries this pod UID.
    pub async fn workloads_of(&self, uid: &str) -> Vec<Value> {
        self.live()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.ends_with(uid)))
            .collect()
    }

    /// Live (not terminated) workloads.
    pub async fn live(&self) -> Vec<Value> {
        self.workloads()
            .await
            .into_iter()
            .filter(|w| !is_terminated(w))
            .collect()
    }

    /// Live workloads whose name starts with `prefix` (e.g. [`Vk::owner_prefix`]).
    pub async fn live_with_prefix(&self, prefix: &str) -> Vec<Value> {
        self.live()
            .await
            .into_iter()
            .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .collect()
    }

    /// How many workloads were created for names starting with `prefix`: the emulator's
    /// `created` counter (accepted create calls; a Vast offer rented by someone else meanwhile is
    /// refused and creates nothing), or for a real Slurm the jobs with such names it still lists
    /// (finished ones included, for `MinJobAge`).
    pub async fn creates(&self, prefix: &str) -> usize {
        match self {
            // Accepted creates: a refused call (a Vast offer taken meanwhile) created nothing.
            Self::Emulator(e) => e.counter("created").await as usize,
            Self::Kubernetes(k) => k.counter("created") as usize,
            Self::Slurm(s) => s
                .workloads()
                .await
                .iter()
                .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .count(),
        }
    }

    /// Creates a running workload named `name` outside any VK (the emulator's admin API, or a
    /// plain `sleep` job submitted to the real Slurm); returns its provider id.
    pub async fn inject(&self, name: &str) -> String {
        match self {
            Self::Emulator(e) => e.inject(name).await,
            Self::Slurm(s) => s.submit(name, "sleep 600").await,
            Self::Kubernetes(k) => k.inject(name).await,
        }
    }

    /// The provider's count of API calls of a kind (`create`, `delete`, `list`; `created`:
    /// accepted creates). Needs fault injection (an emulator or the remote cluster's proxy).
    pub async fn counter(&self, name: &str) -> u64 {
        match self {
            Self::Emulator(e) => e.counter(name).await,
            Self::Kubernetes(k) => k.counter(name),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// An admin action on workload `id`: `exit` / `fail` / `preempt` it, add `logs` lines,
    /// set its `usage` (an emulator's `/_admin/workloads/{id}/<action>`; on the remote
    /// cluster, `preempt` is an eviction and the others go to the remote node's emulator).
    pub async fn act(&self, id: &str, action: &str, body: Value) {
        match self {
            Self::Emulator(e) => {
                e.admin_post(&format!("/workloads/{id}/{action}"), body)
                    .await;
            }
            Self::Kubernetes(k) if action == "preempt" => k.preempt(id).await,
            Self::Kubernetes(k) => k.act(id, action, body).await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The workload vanishes without the VK's doing (the provider lost it).
    pub async fn vanish(&self, id: &str) {
        match self {
            Self::Emulator(e) => e.vanish(id).await,
            Self::Kubernetes(k) => k.lose(id).await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// Leaves the provider without capacity for new GPU workloads.
    pub async fn no_capacity(&self) {
        match self {
            Self::Emulator(e) => e.no_capacity().await,
            Self::Kubernetes(k) => k.no_capacity().await,
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The next `lists` lists leave out the workloads with these provider ids (every
    /// workload when `ids` is empty).
    pub async fn hide_lists(&self, lists: u32, ids: &[String]) {
        match self {
            Self::Emulator(e) => {
                let body = if ids.is_empty() {
                    json!({ "lists": lists })
                } else {
                    json!({ "lists": lists, "ids": ids })
                };
                e.admin_post("/hide", body).await;
            }
            Self::Kubernetes(k) => k.hide_lists(lists, ids),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// The next `calls` list calls fail with 503.
    pub async fn fail_lists(&self, calls: u32) {
        match self {
            Self::Emulator(e) => {
                e.admin_post(
                    "/faults",
                    json!({ "route": "list", "fail_next": calls, "status": 503 }),
                )
                .await;
            }
            Self::Kubernetes(k) => k.fail_lists(calls),
            Self::Slurm(_) => no_admin_api(),
        }
    }

    /// Ends the live workloads with these exact names (a real Slurm only, as
    /// [`Observer::cancel_owned`]).
    pub async fn cancel_named(&self, names: &[String]) {
        if let Self::Slurm(s) = self {
            for w in s.workloads().await {
                if !is_terminated(&w)
                    && w["name"]
                        .as_str()
                        .is_some_and(|n| names.iter().any(|x| x == n))
                    && let Some(id) = w["id"].as_str()
                {
                    s.cancel(id).await;
                }
            }
        }
    }

    /// Ends every live workload whose name starts with `prefix` and waits until none is left
    /// (a real Slurm; an emulator is simply dropped; the remote cluster's scenario namespaces
    /// are deleted). Test clean-up, so the next test
    /// finds the small real cluster free.
    pub async fn cancel_owned(&self, prefix: &str) {
        match self {
            Self::Slurm(s) => s.cancel_owned(prefix).await,
            // The scenario's remote namespaces go, with every remote pod in them.
            Self::Kubernetes(k) => k.cleanup().await,
            Self::Emulator(_) => {}
        }
    }
}

/// A step needed fault injection on a provider without an admin API.
fn no_admin_api() -> ! {
    panic!(
        "a real Slurm has no admin API (no call counts, no faults): gate the scenario with \
         `Given the provider supports fault injection`"
    )
}

/// A real single-node Slurm of `make slurm-up` (`scripts/slurm/up`: the host's 22.05, or with
/// `--suite trixie|sid` 24.11 or 26.05 in a container), found through the env file named by
/// `SLURM_ENV_FILE`, observed and cleaned up through slurmrestd in the dialect that release
/// serves (`SLURM_EXPECT_DIALECT`, measured per release) with the same JWT the VK uses.
#[derive(Clone, Debug)]
pub struct RealSlurm {
    pub url: String,
    /// The slurmrestd dialect the suite speaks itself (`v0.0.38` on 22.05, `v0.0.42` on
    /// 24.11, `v0.0.45` on 26.05); the VK detects its own from `/openapi/v3`.
    pub dialect: String,
    /// The container Slurm runs in (`SLURM_CONTAINER`): the command-line tools run there.
    pub container: Option<String>,
    /// `SLURM_VERSION`, when the env file names it.
    pub version: Option<String>,
    pub user: String,
    pub token_file: PathBuf,
    pub output_dir: PathBuf,
    pub partition: String,
    /// `SLURM_CONF` for the command-line tools (`squeue`, `scancel`).
    pub slurm_conf: Option<String>,
    http: reqwest::Client,
}

impl RealSlurm {
    /// Reads `SLURM_ENV_FILE`; fails loudly (never skips) when there is no Slurm to use.
    pub fn from_env() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let path = std::env::var("SLURM_ENV_FILE").unwrap_or_else(|_| {
            panic!(
                "SLURM_ENV_FILE is not set: this test needs the real Slurm. Run `make slurm-up` \
                 (it writes ${{VK_CACHE:-$HOME/.cache/gpu-vk}}/slurm/env) and set SLURM_ENV_FILE \
                 to that file, or run `make test`, which does both"
            )
        });
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("cannot read SLURM_ENV_FILE {path}: {e}; run `make slurm-up` first")
        });
        let vars: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
            .collect();
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{path} has no {k}; run `make slurm-up` again"))
        };
        Self {
            url: get("SLURM_REST_URL").trim_end_matches('/').to_owned(),
            dialect: vars
                .get("SLURM_EXPECT_DIALECT")
                .filter(|d| !d.is_empty())
                .cloned()
                .unwrap_or_else(|| "v0.0.38".into()),
            container: vars
                .get("SLURM_CONTAINER")
                .filter(|c| !c.is_empty())
                .cloned(),
            version: vars.get("SLURM_VERSION").filter(|v| !v.is_empty()).cloned(),
            user: get("SLURM_USER"),
            token_file: PathBuf::from(get("SLURM_TOKEN_FILE")),
            output_dir: PathBuf::from(get("SLURM_OUTPUT_DIR")),
            partition: vars
                .get("SLURM_PARTITION")
                .cloned()
                .unwrap_or_else(|| "debug".into()),
            slurm_conf: vars.get("SLURM_CONF").cloned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
        }
    }

    /// This Slurm as one entry of the VK's `providers:` list: no dialect (the adapter detects
    /// it from `/openapi/v3`, as a user's config would leave it), the token file (re-read by
    /// the adapter when `up` mints a new one), commands run bare (no container runtime on the
    /// test node), logs from the shared output directory, and a time limit so a job a failed
    /// test leaves behind ends on its own.
    pub fn provider_yaml(&self, name: &str) -> String {
        format!(
            "- name: {name}\n  kind: slurm\n  settings:\n    baseUrl: {url}\n    \
             userName: {user}\n    tokenFile: {token}\n    partition: {partition}\n    runtime: bare\n    \
             outputDir: {out}\n    defaultTimeLimitMinutes: 10\n    requestTimeoutSecs: 20\n",
            url = yaml_str(&self.url),
            user = yaml_str(&self.user),
            token = yaml_str(&self.token_file.to_string_lossy()),
            partition = yaml_str(&self.partition),
            out = yaml_str(&self.output_dir.to_string_lossy()),
        )
    }

    /// [`Self::provider_yaml`] with `kubectl exec` on (`exec: srun`): srun finds the cluster
    /// through `slurmConf`; when the tests run as root, srun runs as the jobs' user (Slurm lets
    /// only a job's owner add steps to it).
    pub fn provider_yaml_with_exec(&self, name: &str) -> String {
        let mut yaml = self.provider_yaml(name);
        yaml.push_str("    exec: srun\n");
        if let Some(conf) = &self.slurm_conf {
            yaml.push_str(&format!("    slurmConf: {}\n", json!(conf)));
        }
        if rustix::process::getuid().is_root() {
            yaml.push_str(&format!(
                "    execWrapper: [runuser, -u, {}, --]\n",
                json!(self.user)
            ));
        }
        yaml
    }

    fn token(&self) -> String {
        let raw = std::fs::read_to_string(&self.token_file).unwrap_or_else(|e| {
            panic!(
                "cannot read the Slurm token {}: {e}; run `make slurm-up`",
                self.token_file.display()
            )
        });
        let t = raw.trim();
        t.strip_prefix("SLURM_JWT=").unwrap_or(t).to_owned()
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/slurm/{}{path}", self.url, self.dialect))
            .header("X-SLURM-USER-NAME", &self.user)
            .header("X-SLURM-USER-TOKEN", self.token())
    }

    /// slurmrestd's raw job records (`GET /slurm/<dialect>/jobs`).
    pub async fn jobs(&self) -> Vec<Value> {
        let r = self
            .request(reqwest::Method::GET, "/jobs")
            .send()
            .await
            .unwrap_or_else(|e| panic!("slurmrestd at {} unreachable: {e}", self.url));
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "slurmrestd GET /jobs answered {status}: {body}; is `make slurm-up` healthy?"
        );
        body["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// Every job, in the observers' shape: `{id, name, state, reason, exit_code, user,
    /// comment, nodes}` (`state` is Slurm's `job_state`).
    pub async fn workloads(&self) -> Vec<Value> {
        self.jobs()
            .await
            .iter()
            .map(|j| {
                json!({
                    "id": j["job_id"].as_u64().map(|n| n.to_string()).unwrap_or_default(),
                    "name": j["name"],
                    "state": job_state(j),
                    "reason": j["state_reason"],
                    "exit_code": j["exit_code"],
                    "user": j["user_name"],
                    "comment": j["comment"],
                    "nodes": j["nodes"],
                })
            })
            .collect()
    }

    /// Submits a batch job named `name` running `script` (no GPU, 10-minute limit, output
    /// discarded), as someone other than the VK would; returns its job id.
    pub async fn submit(&self, name: &str, script: &str) -> String {
        let body = submit_body(&self.dialect, name, script, &self.partition);
        let r = self
            .request(reqwest::Method::POST, "/job/submit")
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("slurmrestd at {} unreachable: {e}", self.url));
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        let id = v["job_id"].as_u64().filter(|_| status.is_success());
        id.unwrap_or_else(|| panic!("job submission refused ({status}): {v}"))
            .to_string()
    }

    /// Cancels a job (`DELETE /slurm/<dialect>/job/{id}`); a finished or unknown one is fine.
    pub async fn cancel(&self, job_id: &str) {
        let _ = self
            .request(reqwest::Method::DELETE, &format!("/job/{job_id}"))
            .send()
            .await;
    }

    /// Cancels every live job whose name starts with `prefix` and waits (up to a minute) until
    /// none is pending, running or completing.
    pub async fn cancel_owned(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live: Vec<Value> = self
                .workloads()
                .await
                .into_iter()
                .filter(|w| !is_terminated(w))
                .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .collect();
            if live.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                eprintln!("jobs of {prefix} still live after clean-up: {live:?}");
                return;
            }
            for w in &live {
                if w["state"] != "COMPLETING"
                    && let Some(id) = w["id"].as_str()
                {
                    self.cancel(id).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `squeue`'s view (pending, running and completing jobs of every user): `(job id, name,
    /// state)`.
    pub fn squeue(&self) -> Vec<(String, String, String)> {
        let cmd = self.command("squeue", &["-h", "-a", "-o", "%i|%j|%T"]);
        pod::run(cmd, "squeue")
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(3, '|');
                Some((
                    p.next()?.trim().to_owned(),
                    p.next()?.trim().to_owned(),
                    p.next()?.trim().to_owned(),
                ))
            })
            .collect()
    }
}

impl RealSlurm {
    /// A Slurm command-line tool with `args`, on the host (with `SLURM_CONF`) or, when this
    /// Slurm runs in a container, inside it (`docker exec`).
    pub fn command(&self, tool: &str, args: &[&str]) -> std::process::Command {
        let mut cmd = match &self.container {
            Some(c) => {
                let mut cmd = std::process::Command::new("docker");
                cmd.arg("exec");
                if let Some(conf) = &self.slurm_conf {
                    cmd.args(["-e", &format!("SLURM_CONF={conf}")]);
                }
                cmd.args([c.as_str(), tool]);
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new(tool);
                if let Some(conf) = &self.slurm_conf {
                    cmd.env("SLURM_CONF", conf);
                }
                cmd
            }
        };
        cmd.args(args);
        cmd
    }
}

/// A job submission from outside any VK in `dialect`: v0.0.38 takes the script beside `job`,
/// environment as an object and plain numbers; v0.0.41 and later (`v0.0.4x_job_desc_msg`)
/// take the script inside `job`, environment as `["K=V"]` and unset-able numbers as
/// `{set, infinite, number}`.
pub fn submit_body(dialect: &str, name: &str, script: &str, partition: &str) -> Value {
    let script = format!("#!/bin/bash\n{script}\n");
    let mut job = json!({
        "name": name,
        "comment": "created by the conformance suite, outside any virtual kubelet",
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "partition": partition,
    });
    if dialect == "v0.0.38" {
        job["environment"] = json!({"PATH": "/usr/local/bin:/usr/bin:/bin"});
        job["time_limit"] = json!(10);
        json!({"script": script, "job": job})
    } else {
        job["environment"] = json!(["PATH=/usr/local/bin:/usr/bin:/bin"]);
        job["time_limit"] = json!({"set": true, "infinite": false, "number": 10});
        job["script"] = json!(script);
        json!({"job": job})
    }
}

/// A v0.0.38 `job_state` (a string; v0.0.41 lists base state and flags, the last flag wins).
fn job_state(j: &Value) -> Value {
    match &j["job_state"] {
        Value::Array(a) => a.last().cloned().unwrap_or(Value::Null),
        other => other.clone(),
    }
}

/// The `vk` binary: `VK_BIN`, else `vk` next to the running test's `deps/` folder (where
/// `cargo test --workspace` and `cargo build -p vk` put it).
pub fn vk_binary() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("VK_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("exe dir");
    let bin = dir.join("vk");
    assert!(
        bin.exists(),
        "vk binary not found at {} (run `cargo build -p vk` or set VK_BIN)",
        bin.display()
    );
    bin
}

/// Cancels a VK's real Slurm jobs with `scancel` should a test panic half-way, so the next test finds the node free.
pub struct JobsGuard {
    pub slurm: RealSlurm,
    /// Job names starting with this are this VK's (see [`Vk::owner_prefix`]).
    pub prefix: String,
}

impl Drop for JobsGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let ids: Vec<String> = self
            .slurm
            .squeue()
            .into_iter()
            .filter(|(_, name, _)| name.starts_with(&self.prefix))
            .map(|(id, _, _)| id)
            .collect();
        if ids.is_empty() {
            return;
        }
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let _ = self.slurm.command("scancel", &ids).status();
    }
}

/// The ownership tag the VK embeds in workload names (documented format:
/// first 8 hex digits of SHA-256 of `<cluster id>/<node name>`).
pub fn owner_tag(cluster_id: &str, node: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{cluster_id}/{node}").as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The provider-side name of the workload of pod `uid` on `node`.
pub fn workload_name(cluster_id: &str, node: &str, uid: &str) -> String {
    format!("vk-{}-{uid}", owner_tag(cluster_id, node))
}

/// The `vk` binary running as a child process, or as a pod ([`pod::pod_mode`]).
pub struct Vk {
    pub node: String,
    pub cluster_id: String,
    child: Option<tokio::process::Child>,
    /// The Helm release when the VK runs as a pod.
    pod: Option<pod::PodVk>,
    /// Replicas electing a leader, when the VK runs as processes with `replicas` above 1.
    ha: Option<ha::Replicas>,
    dir: PathBuf,
    config: String,
    rust_log: String,
    kubeconfig: Option<PathBuf>,
}

pub struct VkOptions {
    pub poll_ms: u64,
    pub gc_grace_ms: u64,
    pub restart_backoff_ms: u64,
    /// `timings.lossWindowMs`: how long a workload must stay absent from its provider's lists
    /// (over at least 3 of them) before it counts as lost.
    pub loss_window_ms: u64,
    /// The node name (default: a fresh unique one).
    pub node_name: Option<String>,
    /// `RUST_LOG` of the VK process.
    pub rust_log: String,
    /// Replicas of the VK for the node; above 1 they elect a leader ([`ha::LEADER_TIMINGS`]).
    pub replicas: u32,
    /// More Helm values when the VK runs as a pod (YAML, top level), e.g. `overflow: {...}`.
    pub chart_values: String,
    /// More top-level keys of the VK's config file (YAML), e.g. `dispatch: {...}`.
    pub extra_config: String,
    /// The cluster the VK process registers with (default: `KUBECONFIG`'s), e.g. a second
    /// testbed that plays a remote cluster.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for VkOptions {
    fn default() -> Self {
        Self {
            poll_ms: 500,
            gc_grace_ms: 2000,
            restart_backoff_ms: 500,
            loss_window_ms: 2000,
            node_name: None,
            rust_log: "info,vk=debug".into(),
            replicas: 1,
            chart_values: String::new(),
            extra_config: String::new(),
            kubeconfig: None,
        }
    }
}

impl Vk {
    /// Starts a VK for a fresh node name, with the given emulators as providers (in order).
    pub async fn start(emulators: &[(&str, &Emulator)], opts: VkOptions) -> Self {
        let providers: String = emulators
            .iter()
            .map(|(name, e)| e.provider_yaml(name))
            .collect();
        Self::start_with(providers, opts).await
    }

    /// Starts a VK for a fresh node name with `providers_yaml` as its `providers:` list (one
    /// `- name: ...` entry per provider, as [`Emulator::provider_yaml`] and
    /// [`RealSlurm::provider_yaml`] write them). `TEST_PROVIDER_KEY` holds [`API_KEY`].
    pub async fn start_with(providers_yaml: String, opts: VkOptions) -> Self {
        let providers = providers_yaml;
        let node = opts.node_name.clone().unwrap_or_else(|| unique("vk-test"));
        let dir = std::env::temp_dir().join(&node);
        std::fs::create_dir_all(&dir).unwrap();
        let render = |metrics_addr: &str, kubelet_port: u16| {
            format!(
                "nodeName: {node}\nclusterId: test-cluster\nkubeletPort: {kubelet_port}\nmetricsAddr: {metrics_addr}\n\
                 workers: 8\ntimings:\n  pollIntervalMs: {}\n  gcGraceMs: {}\n  leaseRenewMs: 2000\n  restartBackoffMs: {}\n  restartBackoffMaxMs: 5000\n  lossLists: 3\n  lossWindowMs: {}\n{}providers:\n{providers}",
                opts.poll_ms,
                opts.gc_grace_ms,
                opts.restart_backoff_ms,
                opts.loss_window_ms,
                opts.extra_config
            )
        };
        if pod::pod_mode() {
            // A pod has its own address: the kubelet's and the metrics' usual ports. The chart
            // writes the config's leaderElection from its replicas.
            let config = render("0.0.0.0:10255", 10250);
            let release = pod::PodVk::install(
                &node,
                &config,
                &opts.rust_log,
                &[("TEST_PROVIDER_KEY", API_KEY)],
                &dir,
                opts.replicas,
                &opts.chart_values,
            );
            let vk = Self {
                node,
                cluster_id: "test-cluster".into(),
                child: None,
                pod: Some(release),
                ha: None,
                dir,
                config,
                rust_log: opts.rust_log.clone(),
                kubeconfig: opts.kubeconfig.clone(),
            };
            wait_for(Duration::from_secs(120), "the VK pod to start", || async {
                vk.log().contains("virtual kubelet started").then_some(())
            })
            .await;
            tokio::task::block_in_place(|| {
                let pod = vk.pod.as_ref().unwrap();
                pod.wait_ready();
                pod.wait_reachable(&vk.node);
            });
            return vk;
        }
        let local = |port: u16| format!("127.0.0.1:{port}");
        let mut config = render(&local(free_port()), free_port());
        if opts.replicas > 1 {
            config.push_str(&format!("leaderElection: {}\n", ha::LEADER_TIMINGS));
        }
        std::fs::write(dir.join("config.yaml"), &config).unwrap();
        let mut vk = Self {
            node: node.clone(),
            cluster_id: "test-cluster".into(),
            child: None,
            pod: None,
            ha: None,
            dir,
            config,
            rust_log: opts.rust_log.clone(),
            kubeconfig: opts.kubeconfig.clone(),
        };
        if opts.replicas > 1 {
            vk.ha = Some(ha::Replicas::default());
            for _ in 0..opts.replicas {
                vk.spawn_replica();
            }
            wait_for(Duration::from_secs(60), "a leader to start", || async {
                vk.log().contains("virtual kubelet started").then_some(())
            })
            .await;
            return vk;
        }
        vk.spawn();
        // A free port can be taken by another process between our probe and the VK's bind
        // (scenarios run side by side): start again on fresh ports when that happened.
        for _ in 0..5 {
            if !vk.lost_port_race().await {
                break;
            }
            vk.config = render(&local(free_port()), free_port());
            std::fs::write(vk.dir.join("config.yaml"), &vk.config).unwrap();
            let _ = std::fs::remove_file(vk.dir.join("vk.log"));
            vk.spawn();
        }
        vk
    }

    /// Waits until the VK has started its servers (true when it exited because a port was
    /// taken; false when it runs, or ended for any other reason, which the test then sees).
    async fn lost_port_race(&mut self) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let log = self.log();
            if log.contains("virtual kubelet started") {
                return false;
            }
            if let Some(status) = self.exited() {
                let raced = !status.success() && log.contains("Address already in use");
                if raced {
                    self.child = None;
                }
                return raced;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The prefix of this VK's workload names on every provider: `vk-<owner tag>-`.
    pub fn owner_prefix(&self) -> String {
        format!("vk-{}-", owner_tag(&self.cluster_id, &self.node))
    }

    pub fn metrics_url(&self) -> String {
        let port = self
            .config
            .lines()
            .find_map(|l| l.strip_prefix("metricsAddr: 127.0.0.1:"))
            .unwrap();
        format!("http://127.0.0.1:{port}/metrics")
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("vk.log"))
            .unwrap();
        let mut cmd = tokio::process::Command::new(vk_binary());
        cmd.args(["run", "--config"])
            .arg(self.dir.join("config.yaml"))
            .env("TEST_PROVIDER_KEY", API_KEY)
            .env("RUST_LOG", &self.rust_log);
        if let Some(k) = &self.kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("vk binary starts");
        self.child = Some(child);
    }

    /// The exit status once the VK process has ended by itself (`None` while it runs, and
    /// always for a VK pod, which Kubernetes restarts).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, no clean-up of any kind (a pod: deleted with no grace period).
    pub async fn kill9(&mut self) {
        if let Some(p) = self.pod.as_mut() {
            tokio::task::block_in_place(|| p.stop(0));
            return;
        }
        self.kill_replicas().await;
        if let Some(mut c) = self.child.take() {
            c.start_kill().unwrap();
            let _ = c.wait().await;
        }
    }

    /// SIGTERM and wait (a pod: deleted with its grace period).
    pub async fn stop(&mut self) {
        if let Some(p) = self.pod.as_mut() {
            tokio::task::block_in_place(|| p.stop(30));
            return;
        }
        self.kill_replicas().await;
        if let Some(mut c) = self.child.take() {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }

    pub fn restart(&mut self) {
        if let Some(p) = &self.pod {
            p.start();
            return;
        }
        assert!(self.child.is_none(), "stop the VK before restarting it");
        self.spawn();
    }

    /// Replaces the VK as its supervisor would after a crash: a VK pod is deleted with no grace
    /// period and its Deployment starts a new one; a VK process is killed and started again.
    pub async fn replace(&mut self) {
        if let Some(p) = self.pod.as_mut() {
            tokio::task::block_in_place(|| p.replace());
            return;
        }
        self.kill9().await;
        self.restart();
    }

    /// Everything the VK logged, across restarts.
    pub fn log(&self) -> String {
        if let Some(p) = &self.pod {
            return p.logs();
        }
        std::fs::read_to_string(self.dir.join("vk.log")).unwrap_or_default()
    }

    /// Reads one of the VK's own Prometheus counters.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = match &self.pod {
            Some(p) => tokio::task::block_in_place(|| p.metrics()),
            None => reqwest::get(self.metrics_url())
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        };
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits for the overflow companion of a VK pod's release (see [`pod::PodVk::wait_overflow`]).
    pub fn wait_overflow(&self) {
        let p = self
            .pod
            .as_ref()
            .expect("the overflow companion runs only with VKs as pods");
        tokio::task::block_in_place(|| p.wait_overflow());
    }

    /// Deletes the node object this VK registered (best effort).
    pub async fn cleanup(&mut self, c: &Client) {
        match self.pod.as_mut() {
            Some(p) => tokio::task::block_in_place(|| p.uninstall()),
            None => self.stop().await,
        }
        let _ = Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
            .delete(&self.node, &DeleteParams::default())
            .await;
    }
}

impl Drop for Vk {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- vk log tail ({}) ----", self.node);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A pod asking for GPUs that tolerates the virtual node's taint and selects it.
pub fn gpu_pod(name: &str, node: &str, gpus: u32, annotations: &[(&str, &str)]) -> Pod {
    let ann: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": ann, "labels": {"app": name}},
        "spec": pod_spec(node, gpus),
    }))
    .unwrap()
}

pub fn pod_spec(node: &str, gpus: u32) -> Value {
    json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "echo started; sleep 3600"],
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}},
        }],
    })
}

pub async fn pods_with_label(c: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

/// Events recorded for a pod (events.k8s.io/v1).
/// The (reason, note) events of a pod once `done` holds for them, waiting up to 20 s (the VK
/// sends events in the background, so one can land just after the status it explains); the
/// last list seen if it never does.
pub async fn events_when(
    c: &Client,
    ns: &str,
    pod: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = events_for(c, ns, pod).await;
        if done(&events) || std::time::Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn events_for(c: &Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A value of the testbed's env file (`env`, next to its kubeconfig, written by
/// `scripts/testbed/up`).
pub fn testbed_env(name: &str) -> Option<String> {
    let kubeconfig = std::env::var("KUBECONFIG").ok()?;
    let env = std::path::Path::new(&kubeconfig).parent()?.join("env");
    let text = std::fs::read_to_string(env).ok()?;
    text.lines().find_map(|l| {
        let v = l
            .strip_prefix("export ")?
            .strip_prefix(name)?
            .strip_prefix('=')?;
        Some(v.trim_matches(|c| c == '\'' || c == '"').to_owned())
    })
}

/// The testbed's own kubectl (the API server's version): `TESTBED_KUBECTL` of its env file.
pub fn testbed_kubectl() -> PathBuf {
    let path = testbed_env("TESTBED_KUBECTL").expect(
        "TESTBED_KUBECTL not found in the testbed env file next to KUBECONFIG; start the testbed \
         with `scripts/testbed/up` or run `make test`",
    );
    PathBuf::from(path)
}

/// What a kubectl run gave back.
#[derive(Debug)]
pub struct KubectlRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the testbed's kubectl with `args` ([`run_kubectl_with`]).
pub async fn run_kubectl(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> KubectlRun {
    run_kubectl_with(&testbed_kubectl(), args, stdin, env).await
}

/// Runs `kubectl` with `args` to its end (90 s at most), feeding it `stdin` if given (closed
/// after it); `env` adds variables.
pub async fn run_kubectl_with(
    kubectl: &std::path::Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> KubectlRun {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(kubectl);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("kubectl starts");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("piped stdin");
        w.write_all(input).await.expect("kubectl takes its input");
        drop(w);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 90 s"))
        .expect("kubectl runs");
    KubectlRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
