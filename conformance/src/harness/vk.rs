//! The virtual kubelet under test: the `vk` binary as a child process or, on kind, a pod of the
//! Helm chart; its naming of workloads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

#[allow(unused_imports)]
use super::*;

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
/// Fields the harness's `ha` module reads are `pub(super)`: it extends `Vk` with the replicas.
pub struct Vk {
    pub node: String,
    pub cluster_id: String,
    pub(super) child: Option<tokio::process::Child>,
    /// The Helm release when the VK runs as a pod.
    pub(super) pod: Option<pod::PodVk>,
    /// Replicas electing a leader, when the VK runs as processes with `replicas` above 1.
    pub(super) ha: Option<ha::Replicas>,
    pub(super) dir: PathBuf,
    pub(super) config: String,
    pub(super) rust_log: String,
    pub(super) kubeconfig: Option<PathBuf>,
    /// The intervals the VK was configured with, which absence checks wait on.
    pub timings: Timings,
}

/// The VK's own intervals (its config's `timings`), from which a step that checks that nothing
/// happens derives how long to watch: what the VK does, it does on its next polls.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub poll_ms: u64,
    pub gc_grace_ms: u64,
    pub loss_window_ms: u64,
}

impl Timings {
    fn of(opts: &VkOptions) -> Self {
        Self {
            poll_ms: opts.poll_ms,
            gc_grace_ms: opts.gc_grace_ms,
            loss_window_ms: opts.loss_window_ms,
        }
    }
}

/// The start-up reconcile's log line, once per VK process that finished it.
const RECONCILED: &str = "start-up reconcile finished";

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
            poll_ms: lab::poll_ms(),
            gc_grace_ms: 2000,
            restart_backoff_ms: 500,
            loss_window_ms: lab::loss_window_ms(),
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
                timings: Timings::of(&opts),
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
            timings: Timings::of(&opts),
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

    /// Watches for `polls` of the VK's provider polls plus `extra`, saying so, for a step that
    /// checks that `what` does not happen: a window derived from the VK's own intervals, not a
    /// fixed pause, so a slower profile watches as many polls as a fast one.
    pub async fn hold_still(&self, what: &str, polls: u64, extra: Duration) {
        let window = Duration::from_millis(self.timings.poll_ms * polls) + extra;
        println!(
            "    (watching {} ms, {polls} polls of {} ms + {} ms, for {what})",
            window.as_millis(),
            self.timings.poll_ms,
            extra.as_millis()
        );
        tokio::time::sleep(window).await;
    }

    /// How many VK processes of this node have finished their start-up reconcile so far.
    pub fn reconciles(&self) -> usize {
        self.log().matches(RECONCILED).count()
    }

    /// Waits until more than `before` start-up reconciles are in the VK's log: a VK started
    /// after that count has derived its state from the cluster and the providers.
    pub async fn wait_reconciled(&self, before: usize) {
        wait_for(
            Duration::from_secs(120),
            &format!("a start-up reconcile after the {before} seen (\"{RECONCILED}\" in the log)"),
            || async { (self.reconciles() > before).then_some(()) },
        )
        .await;
    }

    pub fn restart(&mut self) {
        if let Some(p) = &self.pod {
            p.start();
            return;
        }
        assert!(self.child.is_none(), "stop the VK before restarting it");
        self.spawn();
    }

    /// The VK's config file as written.
    pub fn config(&self) -> &str {
        &self.config
    }

    /// Restarts the VK for the same node with its config file rewritten by `edit`, the way an
    /// operator changes it (a VK pod: `helm upgrade`); returns once the new VK has started.
    pub async fn reconfigure(&mut self, edit: impl FnOnce(&str) -> String) {
        let started = self.log().matches("virtual kubelet started").count();
        self.config = edit(&self.config);
        if let Some(p) = self.pod.as_mut() {
            let (config, dir) = (self.config.clone(), self.dir.clone());
            tokio::task::block_in_place(|| p.reconfigure(&config, &dir));
        } else {
            self.stop().await;
            std::fs::write(self.dir.join("config.yaml"), &self.config).unwrap();
            self.spawn();
        }
        wait_for(
            Duration::from_secs(120),
            "the reconfigured VK to start",
            || async {
                (self.log().matches("virtual kubelet started").count() > started).then_some(())
            },
        )
        .await;
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

    /// The VK's whole Prometheus exposition.
    pub async fn metrics_text(&self) -> String {
        match &self.pod {
            Some(p) => tokio::task::block_in_place(|| p.metrics()),
            None => reqwest::get(self.metrics_url())
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        }
    }

    /// Reads one of the VK's own Prometheus counters.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.metrics_text().await;
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
