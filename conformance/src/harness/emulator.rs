//! Provider emulators served in-process (RunPod, Vast, slurmrestd): start, settings for the
//! VK, admin calls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

#[allow(unused_imports)]
use super::*;

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
        Self::runpod_from(lab::apply(
            EmulatorConfig::new(API_KEY, gpus).with_mode(mode),
            true,
        ))
        .await
    }

    /// A RunPod emulator from a full configuration (a share of stuck starts, quotas...); its
    /// key must be [`API_KEY`].
    pub async fn runpod_from(cfg: EmulatorConfig) -> Self {
        let default_gpu = cfg
            .inventory
            .first()
            .map(|g| g.gpu_type.clone())
            .unwrap_or_default();
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
        let cfg = lab::apply(
            EmulatorConfig::new(API_KEY, stock)
                .with_mode(mode)
                .with_endpoint_limits(VAST_TIME_SCALE),
            false,
        );
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
                "- name: {name}\n  kind: slurm\n  apiKeyEnv: TEST_PROVIDER_KEY\n  secretEnv: allow\n  sharedSlurmUser: true\n  settings:\n    \
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
                "- name: {name}\n  kind: {kind}\n  apiKeyEnv: TEST_PROVIDER_KEY\n  secretEnv: allow\n{lab}  settings:\n    baseUrl: {url}\n    defaultGpuType: {gpu}\n{names}{paced}{resources}{insecure}",
                lab = lab::provider_settings(),
                insecure = self.insecure_http(),
                // The emulator runs on simulated (shortened) timings: the Vast adapter paces
                // its calls at a tenth of the service's documented intervals to match, the
                // intervals the Vast emulator enforces ([`VAST_TIME_SCALE`]).
                // A silent host is given up on after 3 s, not Vast's 10 minutes.
                paced = if self.kind == "vast" {
                    "    rateLimits: {list: 0.1, search: 0.6, rent: 0.45, destroy: 0.3, logs: 0.1}\n    \
                     unreachableDeadlineSeconds: 3\n"
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
                // RunPod reports no vCPUs or RAM for GPU pods, only utilisation: the operator
                // gives the per-GPU figures the emulated machines have, as for real GPU types.
                resources = if self.kind == "runpod" {
                    format!(
                        "    gpuPodResources: {{{}: {{vcpus: {}, memoryGb: {}}}}}\n",
                        yaml_str(&self.default_gpu),
                        mock_providers::runpod::VCPUS_PER_GPU,
                        mock_providers::runpod::RAM_GB_PER_GPU
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
pub(crate) fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
