//! The virtual kubelet as a pod (`VK_MODE=pod`, set by `make e2e KIND=1`): each [`super::Vk`]
//! is a Helm release of `deploy/helm/gpu-vk` in the namespace [`NAMESPACE`] of the kind
//! cluster, running the locally built image, with the chart's own RBAC. Stopping it scales the
//! Deployment to zero and deletes the pod (no grace for a kill); starting it again scales back
//! to one, so Kubernetes starts a fresh pod. The emulators stay in the test process, listening on
//! the kind network's gateway address ([`emulator_bind`]), which pods reach; the Slurm
//! emulator's job output lives in a folder mounted at the same path in every kind node and in
//! the VK pod ([`shared_dir`]), as a shared filesystem is on a real Slurm cluster.
//!
//! Everything here shells out to `helm` and `kubectl` (`HELM`, `TESTBED_KUBECTL`), synchronously:
//! the calls are short, and the panic path (a log tail in `Drop`) cannot await.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod node;
pub use node::sigkill;
use node::{wait_no_vk, wait_running, wait_service_programmed};

/// The namespace every VK release lives in.
pub const NAMESPACE: &str = "gpu-vk-e2e";

/// True when the VK under test runs as a pod (`VK_MODE=pod`).
pub fn pod_mode() -> bool {
    std::env::var("VK_MODE").is_ok_and(|m| m == "pod")
}

/// Where emulators listen: `E2E_EMULATOR_BIND` (the kind network's gateway, reachable from
/// pods), else loopback.
pub fn emulator_bind() -> IpAddr {
    std::env::var("E2E_EMULATOR_BIND")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// A folder the VK pod sees at the same path (`E2E_SHARED_DIR`), for the Slurm emulator's job
/// output; the system temp folder when the VK is a process.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("E2E_SHARED_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

fn tool(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_owned())
}

fn kubectl() -> Command {
    let mut c = Command::new(tool("TESTBED_KUBECTL", "kubectl"));
    c.args(["--namespace", NAMESPACE, "--request-timeout=30s"]);
    c
}

/// Runs a command, panicking with its output when it fails; returns stdout.
pub(crate) fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The least time the kubelet gives a container to stop, even for a pod deleted with no grace.
const KUBELET_MINIMUM_GRACE: Duration = Duration::from_secs(2);

/// One VK release; uninstalled when dropped.
pub struct PodVk {
    release: String,
    /// Logs of the pods this release had before the current one.
    past_logs: String,
    uninstalled: bool,
}

impl PodVk {
    /// Installs the chart for `node` with `config` (the VK's config.yaml), the log filter
    /// `rust_log` and the environment `env`, and returns at once (the caller waits for the VK's
    /// start line).
    pub fn install(
        node: &str,
        config: &str,
        rust_log: &str,
        env: &[(&str, &str)],
        dir: &std::path::Path,
        replicas: u32,
        extra_values: &str,
    ) -> Self {
        let release = node.to_owned();
        let mut values = String::new();
        values.push_str(&format!(
            "fullnameOverride: {release}\nreplicas: {replicas}\nallNamespaces: true\nlogJson: false\nlogLevel: {}\n",
            serde_json::json!(rust_log)
        ));
        if replicas > 1 {
            values.push_str(super::ha::LEADER_VALUES);
        }
        values.push_str(&format!(
            "image:\n  repository: {}\n  tag: {}\n  pullPolicy: Never\n",
            tool("VK_IMAGE_REPOSITORY", "gpu-vk/vk"),
            tool("VK_IMAGE_TAG", "dev")
        ));
        values.push_str("config:\n");
        for line in config.lines() {
            values.push_str("  ");
            values.push_str(line);
            values.push('\n');
        }
        values.push_str("extraEnv:\n");
        for (k, v) in env {
            values.push_str(&format!("- name: {k}\n  value: {}\n", serde_json::json!(v)));
        }
        let shared = shared_dir();
        let shared = shared.display();
        values.push_str(&format!(
            "extraVolumes:\n- name: shared\n  hostPath: {{path: {shared}, type: Directory}}\n\
             extraVolumeMounts:\n- {{name: shared, mountPath: {shared}, readOnly: true}}\n"
        ));
        values.push_str(extra_values);
        if !values.ends_with('\n') {
            values.push('\n');
        }
        let file = dir.join("values.yaml");
        std::fs::write(&file, values).unwrap();
        let mut helm = Command::new(tool("HELM", "helm"));
        helm.args(["install", &release, &tool("VK_CHART", "deploy/helm/gpu-vk")])
            .args(["--namespace", NAMESPACE, "--create-namespace", "--values"])
            .arg(&file);
        run(helm, &format!("helm install {release}"));
        Self {
            release,
            past_logs: String::new(),
            uninstalled: false,
        }
    }

    /// The name of the release's current pod (the first, with several), if one exists.
    fn pod(&self) -> Option<String> {
        self.pods().into_iter().next()
    }

    /// The names of the release's current pods.
    pub(crate) fn pods(&self) -> Vec<String> {
        let mut c = kubectl();
        c.args(["get", "pods", "-l"])
            .arg(format!("app.kubernetes.io/instance={}", self.release))
            .args(["-o", "jsonpath={.items[*].metadata.name}"]);
        let out = run(c, "kubectl get pods");
        out.split_whitespace().map(str::to_owned).collect()
    }

    fn pod_logs(pod: &str) -> String {
        let mut c = kubectl();
        c.args(["logs", pod]);
        c.output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Logs of every pod of this release so far, oldest first.
    pub fn logs(&self) -> String {
        let mut all = self.past_logs.clone();
        for pod in self.pods() {
            all.push_str(&Self::pod_logs(&pod));
        }
        all
    }

    /// Kills the VK process of pod `name` with SIGKILL inside its container ([`sigkill`]), then
    /// deletes the dead pod with no grace period (its logs are kept), so the Deployment starts a
    /// replacement rather than the kubelet restarting the container after its crash back-off.
    pub fn kill(&mut self, name: &str) {
        self.past_logs.push_str(&Self::pod_logs(name));
        sigkill(name);
        let mut c = kubectl();
        c.args([
            "delete",
            "pod",
            name,
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
        run(c, "kubectl delete pod");
    }

    /// Scales to zero and deletes the pod (`grace` seconds), waiting until it is gone. With 0 it
    /// is a crash: the VK process is killed by SIGKILL inside its container first ([`sigkill`]),
    /// at whatever it was doing, and the dead pod is then removed so that it stays down.
    pub fn stop(&mut self, grace: u32) {
        let pod = self.pod();
        self.past_logs = self.logs();
        let mut killed = None;
        if grace == 0
            && let Some(pod) = &pod
        {
            // A pod started a moment ago (a churn's kill right after a restart) is killed once
            // its container runs: a kill before that would be no crash at all.
            wait_running(pod);
            killed = Some(sigkill(pod));
        }
        self.scale(0);
        if let Some(pod) = pod {
            let mut c = kubectl();
            c.args(["delete", "pod", &pod, "--ignore-not-found", "--wait=true"])
                .arg(format!("--grace-period={grace}"));
            if grace == 0 {
                c.arg("--force");
            }
            run(c, "kubectl delete pod");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.pod().is_some() {
            assert!(
                Instant::now() < deadline,
                "the VK pod of {} did not go away",
                self.release
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some((node, uid)) = killed {
            // A pod deleted with no grace is gone from the API at once, but the kubelet still
            // gives a container it restarted meanwhile at least 2 s after SIGTERM
            // (`minimumGracePeriodInSeconds`, pkg/kubelet/kuberuntime/kuberuntime_container.go).
            // A kill is over when no process of the pod is left.
            wait_no_vk(&node, &uid);
        } else if grace == 0 {
            std::thread::sleep(KUBELET_MINIMUM_GRACE + Duration::from_secs(1));
        }
    }

    /// Deletes the current pod with no grace period and leaves the Deployment as it is, so
    /// Kubernetes starts a new one (the way a node failure or an eviction replaces a VK);
    /// returns once the new pod exists.
    pub fn replace(&mut self) {
        let old = self.pod().expect("a VK pod to replace");
        self.past_logs = self.logs();
        sigkill(&old);
        let mut c = kubectl();
        c.args([
            "delete",
            "pod",
            &old,
            "--grace-period=0",
            "--force",
            "--wait=true",
        ]);
        run(c, "kubectl delete pod");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.pod().is_none_or(|p| p == old) {
            assert!(
                Instant::now() < deadline,
                "Kubernetes started no new VK pod for {}",
                self.release
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Replaces the release's VK config with `config` (`helm upgrade`; the chart's config
    /// checksum rolls the pod, the old one going first) and returns once the new pod is Ready.
    pub fn reconfigure(&mut self, config: &str, dir: &std::path::Path) {
        let old = self.pod();
        self.past_logs = self.logs();
        let file = dir.join("values.yaml");
        let values = std::fs::read_to_string(&file).unwrap();
        let mut out = String::new();
        let mut in_config = false;
        for line in values.lines() {
            if line == "config:" {
                in_config = true;
                out.push_str("config:\n");
                for c in config.lines() {
                    out.push_str("  ");
                    out.push_str(c);
                    out.push('\n');
                }
                continue;
            }
            if in_config && line.starts_with("  ") {
                continue;
            }
            in_config = false;
            out.push_str(line);
            out.push('\n');
        }
        std::fs::write(&file, out).unwrap();
        let mut helm = Command::new(tool("HELM", "helm"));
        helm.args([
            "upgrade",
            &self.release,
            &tool("VK_CHART", "deploy/helm/gpu-vk"),
        ])
        .args(["--namespace", NAMESPACE, "--values"])
        .arg(&file);
        run(helm, &format!("helm upgrade {}", self.release));
        // Until the old pod is gone, not only a new one there: a label-selected wait would
        // also wait on the old pod, and fail when it disappears under it.
        let deadline = Instant::now() + Duration::from_secs(90);
        let new = loop {
            let pods = self.pods();
            if !pods.is_empty() && old.as_ref().is_none_or(|o| !pods.contains(o)) {
                break pods;
            }
            assert!(
                Instant::now() < deadline,
                "the VK pod of {} was not replaced after its config changed (pods {pods:?})",
                self.release
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        for pod in new {
            let mut c = kubectl();
            c.args(["wait", "--for=condition=Ready", "--timeout=90s"])
                .arg(format!("pod/{pod}"));
            run(c, "waiting for the new VK pod to be Ready");
        }
    }

    /// Waits until the release's pod is Ready: its readiness probe passed, so the kubelet
    /// Service routes to it (the API server reaches the VK's kubelet API through that Service).
    pub fn wait_ready(&self) {
        let mut c = kubectl();
        c.args([
            "wait",
            "pod",
            "--for=condition=Ready",
            "--timeout=90s",
            "-l",
        ])
        .arg(format!("app.kubernetes.io/instance={}", self.release));
        run(c, "waiting for the VK pod to be Ready");
    }

    /// Waits until the API server reaches `node`'s kubelet API (`/healthz` through the node
    /// proxy), the path of `kubectl logs`, `exec` and `top`. A Ready VK pod is not enough: the
    /// node's address is its Service, and kube-proxy on the API server's node programs the new
    /// endpoint a moment later (kube-proxy rejects connections to a Service with no ready
    /// endpoint: the Kubernetes docs, "Virtual IPs and Service Proxies", and kube-proxy's
    /// iptables REJECT rule for services without endpoints); until then the API server's dial is
    /// refused (a kind run's
    /// `kubectl logs --follow` failed so: "dial tcp <service ip>:10250: connect: connection
    /// refused").
    ///
    /// The first dial must wait for kube-proxy on the API server's node: before it programs the
    /// Service, a dial to its ClusterIP leaves the cluster by the default route, and where an
    /// egress proxy answers it (this testbed's sandbox does, with a 403 "denied destination")
    /// the API server keeps that connection alive and reuses it for every later request to the
    /// node (a kind run waited 60 s on it). So this first waits for the Service's NAT rule on
    /// the control-plane node, then dials.
    pub fn wait_reachable(&self, node: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        wait_service_programmed(node, deadline);
        let mut last;
        loop {
            let out = kubectl()
                .args(["get", "--raw"])
                .arg(format!("/api/v1/nodes/{node}/proxy/healthz"))
                .output();
            last = match out {
                Ok(o)
                    if o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok" =>
                {
                    return;
                }
                Ok(o) => format!(
                    "{}: {}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
                Err(e) => format!("cannot run kubectl: {e}"),
            };
            assert!(
                std::time::Instant::now() < deadline,
                "the API server did not reach node {node}'s kubelet API within 60 s; last answer: {last}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until the release's overflow companion (`overflow.enabled`) is Available: its
    /// webhook has published its certificate and serves.
    pub fn wait_overflow(&self) {
        let mut c = kubectl();
        c.args(["rollout", "status", "--timeout=120s"])
            .arg(format!("deployment/{}-overflow", self.release));
        run(c, "waiting for the overflow companion");
    }

    /// Scales back to one replica: Kubernetes starts a fresh pod.
    pub fn start(&self) {
        self.scale(1);
    }

    fn scale(&self, replicas: u32) {
        let mut c = kubectl();
        c.args(["scale", "deployment", &self.release])
            .arg(format!("--replicas={replicas}"));
        run(c, "kubectl scale");
    }

    /// The VK's Prometheus text, through the API server's pod proxy.
    pub fn metrics(&self) -> String {
        let pod = self.pod().expect("a VK pod");
        let mut c = kubectl();
        c.args(["get", "--raw"]).arg(format!(
            "/api/v1/namespaces/{NAMESPACE}/pods/{pod}:10255/proxy/metrics"
        ));
        run(c, "reading the VK's metrics")
    }

    /// Removes the release (and so the pod), waiting for it to go.
    pub fn uninstall(&mut self) {
        self.past_logs = self.logs();
        self.helm_uninstall(true);
    }

    fn helm_uninstall(&mut self, wait: bool) {
        let mut helm = Command::new(tool("HELM", "helm"));
        helm.args(["uninstall", &self.release, "--namespace", NAMESPACE]);
        if wait {
            helm.arg("--wait");
        }
        let _ = helm.output();
        self.uninstalled = true;
    }
}

impl Drop for PodVk {
    /// A scenario that failed half-way leaves no VK running in the cluster.
    fn drop(&mut self) {
        if !self.uninstalled {
            self.helm_uninstall(false);
        }
    }
}
