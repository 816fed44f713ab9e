//! The `kubernetes` conformance target: a second local testbed plays the remote cluster (its
//! only node is the project's own VK over a RunPod emulator), started once per run; each
//! scenario gets its own remote namespaces and its own counting, fault-injecting proxy in
//! front of the remote API server.
//!
//! What the steps see and do there:
//! - workloads: the remote pods of the scenario's namespaces, listed through the remote API
//!   server (id `<namespace>/<name>/<uid>`, the provider id the adapter uses);
//! - creates and deletes: counted by the proxy the VK talks through (`POST` and `DELETE` of
//!   pods), as an emulator counts its API calls;
//! - lost: the remote pod is deleted through the remote API; preempted: it is evicted
//!   (Eviction API); out of capacity: a ResourceQuota of 0 GPUs in the remote namespace;
//! - empty, partial and failing lists: answered by the proxy in place of the API server;
//! - exits, log lines and CPU figures of a workload: the remote node's emulator admin API on
//!   the emulator workload of the remote pod (the remote VK turns them into the remote pod's
//!   status, logs and metrics, which reach the local pod through the adapter).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::{DeleteParams, EvictParams, ListParams, PostParams, Preconditions};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::{Value, json};

use super::{Emulator, Vk, VkOptions, is_terminated, namespace, wait_for, wait_node_ready};

mod proxy;
use proxy::{Proxy, ProxyState, forward};

/// The local namespace whose pods would go to the spare remote namespace. No scenario uses
/// it: the spare namespace exists so a second remote pod under a workload's name can be put
/// where the adapter lists ("the provider holds a second workload").
const SPARE_LOCAL_NAMESPACE: &str = "gpu-vk-conformance-spare";

/// How long the remote node's emulator takes to stop a workload: a real container takes a
/// moment to stop, and an evicted remote pod shows its `DisruptionTarget` condition while it
/// terminates (with an instant stop, the remote VK removes it before the adapter's next list).
const STOP_LATENCY_MS: u64 = 1500;

/// `scripts/testbed/<name>` for testbed `testbed`, with none of the local testbed's env (its
/// `TESTBED_*_PORT` would be taken as fixed ports for the second one).
fn testbed_command(script: &str, testbed: &str) -> std::process::Command {
    let path = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../scripts/testbed")
        .join(script);
    let mut cmd = std::process::Command::new(path);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TESTBED_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("TESTBED_NAME", testbed);
    cmd
}

/// The second testbed `<TESTBED_NAME>-remote` with the VK that is its node.
pub struct RemoteCluster {
    pub name: String,
    pub client: Client,
    /// The remote node (our VK over [`RemoteCluster::emulator`]).
    pub node: String,
    pub emulator: Emulator,
    api_url: String,
    /// To the remote API server as its admin (the proxies' upstream).
    http: reqwest::Client,
    vk: tokio::sync::Mutex<Option<Vk>>,
}

impl RemoteCluster {
    /// Starts `<TESTBED_NAME>-remote` (stopping an old one first) and its node.
    pub async fn up() -> Arc<Self> {
        let base = std::env::var("TESTBED_NAME").unwrap_or_else(|_| "test".into());
        let name = format!("{base}-remote");
        let out = tokio::task::block_in_place(|| {
            let _ = testbed_command("down", &name).env("QUIET", "1").status();
            testbed_command("up", &name).output()
        })
        .expect("scripts/testbed/up runs");
        assert!(
            out.status.success(),
            "the remote testbed did not come up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig: PathBuf = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .expect("up prints the kubeconfig")
            .trim()
            .into();
        let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
        let cluster = kc.clusters[0].cluster.clone().unwrap();
        let user = kc.auth_infos[0].auth_info.clone().unwrap();
        let read = |p: Option<String>| std::fs::read(p.expect("a file in the kubeconfig")).unwrap();
        let mut identity = read(user.client_certificate);
        identity.extend(read(user.client_key));
        let http = reqwest::Client::builder()
            .http1_only()
            .add_root_certificate(
                reqwest::Certificate::from_pem(&read(cluster.certificate_authority)).unwrap(),
            )
            .identity(reqwest::Identity::from_pem(&identity).unwrap())
            .build()
            .unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = Client::try_from(cfg).unwrap();
        let emulator = Emulator::runpod(
            ExecutionMode::simulated(100, 100, None),
            vec![GpuStock::new("A100-80GB", 256, 1.89)],
        )
        .await;
        emulator
            .admin_post(
                "/faults",
                json!({"route": "delete", "latency_ms": STOP_LATENCY_MS}),
            )
            .await;
        let vk = Vk::start(
            &[("runpod", &emulator)],
            VkOptions {
                kubeconfig: Some(kubeconfig),
                ..VkOptions::default()
            },
        )
        .await;
        wait_node_ready(&client, &vk.node).await;
        Arc::new(Self {
            name,
            client,
            node: vk.node.clone(),
            emulator,
            api_url: cluster.server.unwrap().trim_end_matches('/').to_owned(),
            http,
            vk: tokio::sync::Mutex::new(Some(vk)),
        })
    }

    /// Stops the remote node and the remote testbed.
    pub async fn down(&self) {
        if let Some(mut vk) = self.vk.lock().await.take() {
            vk.cleanup(&self.client).await;
        }
        let name = self.name.clone();
        tokio::task::block_in_place(|| {
            let _ = testbed_command("down", &name).env("QUIET", "1").status();
        });
    }
}

/// One scenario's view of the remote cluster: its remote namespaces and its proxy.
pub struct RemoteView {
    pub cluster: Arc<RemoteCluster>,
    /// Where the scenario's pods go.
    pub namespace: String,
    /// Listed by the adapter too (a mapping no scenario's pods use).
    pub spare_namespace: String,
    proxy: Arc<Proxy>,
    kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RemoteView {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

impl RemoteView {
    pub async fn new(cluster: Arc<RemoteCluster>) -> Self {
        let namespace = namespace(&cluster.client, "conf").await;
        let spare_namespace = format!("{namespace}-spare");
        super::create_namespace(&cluster.client, &spare_namespace).await;
        let proxy = Arc::new(Proxy {
            upstream: cluster.api_url.clone(),
            http: cluster.http.clone(),
            state: Mutex::new(ProxyState::default()),
        });
        let router = axum::Router::new()
            .fallback(forward)
            .with_state(proxy.clone());
        let (addr, task): (SocketAddr, _) =
            mock_providers::spawn_on(SocketAddr::from(([127, 0, 0, 1], 0)), router)
                .await
                .unwrap();
        let kubeconfig = std::env::temp_dir().join(format!("{namespace}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: remote\n  cluster: {{server: \"http://{addr}\"}}\n\
                 users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: remote\n  context: {{cluster: remote, user: proxy}}\n\
                 current-context: remote\n"
            ),
        )
        .unwrap();
        Self {
            cluster,
            namespace,
            spare_namespace,
            proxy,
            kubeconfig,
            task,
        }
    }

    /// The adapter's entry of the VK's `providers:` list: through this scenario's proxy,
    /// remote pods pinned to the remote node. Secret env values are allowed, as for the
    /// emulated clouds (the suites pass Secrets on purpose).
    pub fn provider_yaml(&self, name: &str) -> String {
        format!(
            "- name: {name}\n  kind: kubernetes\n  secretEnv: allow\n  settings:\n    \
             kubeconfig: {kc}\n    namespace: {ns}\n    namespaceMapping: {{{SPARE_LOCAL_NAMESPACE}: {spare}}}\n    \
             nodeSelector: {{kubernetes.io/hostname: {node}}}\n    \
             tolerations: [{{key: virtual-kubelet.io/provider, operator: Exists}}]\n    requestTimeoutSecs: 10\n",
            kc = serde_json::to_string(&self.kubeconfig.to_string_lossy()).unwrap(),
            ns = self.namespace,
            spare = self.spare_namespace,
            node = self.cluster.node,
        )
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), ns)
    }

    /// Every remote pod of the scenario's namespaces: `{id, name, uid, state, gpu_count,
    /// command}`; `state` is the phase, `Terminating` once deleted.
    pub async fn workloads(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for ns in [&self.namespace, &self.spare_namespace] {
            let pods = self.pods(ns).list(&ListParams::default()).await.unwrap();
            out.extend(pods.items.iter().map(workload_json));
        }
        out
    }

    /// A counter of the proxy: `create`, `created` (accepted), `delete`, `list`.
    pub fn counter(&self, name: &str) -> u64 {
        let s = self.proxy.state.lock().unwrap();
        s.counters.get(name).copied().unwrap_or(0)
    }

    /// The next `lists` lists of each remote namespace leave out the remote pods with these
    /// provider ids (all of them when empty).
    pub fn hide_lists(&self, lists: u32, ids: &[String]) {
        let mut s = self.proxy.state.lock().unwrap();
        for ns in [&self.namespace, &self.spare_namespace] {
            s.hide.insert(ns.clone(), lists);
        }
        s.hidden = ids
            .iter()
            .filter_map(|id| id.split('/').nth(1))
            .map(str::to_owned)
            .collect();
    }

    /// The next `calls` lists fail with 503 (the main namespace's: the adapter's list ends
    /// at the first failing namespace, so each failing call is one failed list of the VK).
    pub fn fail_lists(&self, calls: u32) {
        let mut s = self.proxy.state.lock().unwrap();
        s.fail.insert(self.namespace.clone(), calls);
    }

    /// Creates a remote pod named `name` outside any VK, labelled as the adapter labels its
    /// own when the name is a workload id (`vk-<tag>-<uid>`), in the main namespace or, when
    /// a pod has the name there, in the spare one; returns its provider id.
    pub async fn inject(&self, name: &str) -> String {
        let mut labels = json!({});
        if let Some(rest) = name.strip_prefix("vk-")
            && let Some((tag, uid)) = rest.split_once('-')
        {
            labels = json!({"gpu-vk.io/owner": tag, "gpu-vk.io/pod-uid": uid,
                             "app.kubernetes.io/managed-by": "gpu-vk"});
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": self.cluster.node},
                "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }))
        .unwrap();
        let mut last = None;
        for ns in [&self.namespace, &self.spare_namespace] {
            match self.pods(ns).create(&PostParams::default(), &pod).await {
                Ok(p) => return workload_json(&p)["id"].as_str().unwrap().to_owned(),
                Err(kube::Error::Api(s)) if s.code == 409 => last = Some(s),
                Err(e) => panic!("remote pod {name} not created: {e}"),
            }
        }
        panic!("remote pod {name} exists in both namespaces: {last:?}");
    }

    /// The remote pod is deleted through the remote API (the provider lost the workload).
    pub async fn lose(&self, id: &str) {
        let (ns, name, uid) = split_id(id);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.pods(ns).delete(name, &dp).await.unwrap();
    }

    /// The remote pod is evicted through the Eviction API (the provider preempted it).
    pub async fn preempt(&self, id: &str) {
        let (ns, name, _) = split_id(id);
        self.pods(ns)
            .evict(name, &EvictParams::default())
            .await
            .unwrap();
    }

    /// A ResourceQuota of 0 GPUs in the main remote namespace; returns once the quota
    /// controller has computed its usage (admission refuses every pod before that, with
    /// another message).
    pub async fn no_capacity(&self) {
        let api: Api<ResourceQuota> = Api::namespaced(self.cluster.client.clone(), &self.namespace);
        let q: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "no-gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
        }))
        .unwrap();
        api.create(&PostParams::default(), &q).await.unwrap();
        wait_for(Duration::from_secs(30), "the quota's status", || async {
            let q = api.get("no-gpus").await.ok()?;
            q.status?
                .hard?
                .contains_key("requests.nvidia.com/gpu")
                .then_some(())
        })
        .await;
    }

    /// An admin action (`exit`, `logs`, `usage`, `fail`) on the remote node's emulator
    /// workload that runs the remote pod `id`.
    pub async fn act(&self, id: &str, action: &str, body: Value) {
        let (_, _, uid) = split_id(id);
        let emu = &self.cluster.emulator;
        let eid = wait_for(
            Duration::from_secs(20),
            "the remote node's workload of the remote pod",
            || async {
                emu.workloads()
                    .await
                    .into_iter()
                    .filter(|w| !is_terminated(w))
                    .find(|w| w["name"].as_str().is_some_and(|n| n.ends_with(uid)))
                    .and_then(|w| w["id"].as_str().map(str::to_owned))
            },
        )
        .await;
        emu.admin_post(&format!("/workloads/{eid}/{action}"), body)
            .await;
    }

    /// Drops the scenario's remote namespaces (and every remote pod in them).
    pub async fn cleanup(&self) {
        for ns in [&self.namespace, &self.spare_namespace] {
            super::delete_namespace(&self.cluster.client, ns).await;
        }
    }
}

fn split_id(id: &str) -> (&str, &str, &str) {
    let mut p = id.splitn(3, '/');
    let (Some(ns), Some(name), Some(uid)) = (p.next(), p.next(), p.next()) else {
        panic!("{id:?} is not a remote pod id");
    };
    (ns, name, uid)
}

/// A remote pod in the observers' shape.
fn workload_json(p: &Pod) -> Value {
    let ns = p.metadata.namespace.clone().unwrap_or_default();
    let name = p.metadata.name.clone().unwrap_or_default();
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    let state = if p.metadata.deletion_timestamp.is_some() {
        "Terminating".to_owned()
    } else {
        phase
    };
    let c = p.spec.as_ref().and_then(|s| s.containers.first());
    let gpus = c
        .and_then(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get("nvidia.com/gpu")
                .cloned()
        })
        .and_then(|q| q.0.parse::<u64>().ok())
        .unwrap_or(0);
    let command: Vec<String> = c
        .map(|c| {
            c.command
                .iter()
                .flatten()
                .chain(c.args.iter().flatten())
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    json!({
        "id": format!("{ns}/{name}/{uid}"),
        "name": name,
        "uid": uid,
        "state": state,
        "gpu_count": gpus,
        "command": command.join(" "),
        // The remote pod's IP: what the adapter reports as the local pod's.
        "address": p.status.as_ref().and_then(|s| s.pod_ip.clone()),
    })
}
