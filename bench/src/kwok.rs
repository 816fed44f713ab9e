//! kwok side by side (issue 32): the same load on a node that kwok (sigs.k8s.io/kwok, with
//! its "fast" stages: a pod bound to its node is Running in one status write) simulates, on the
//! same testbed, so each round prints the VK's time to all Running beside kwok's.
//!
//! kwok is the floor of what a node agent can cost the API server: it writes one status per pod
//! and nothing else. `scripts/bench` builds it from its Go module and writes its stage
//! configuration from that module's own stage files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

use crate::cluster::{self, ApiCounts, Bind, Tracker};
use crate::procs::{Children, round3};
use crate::{load, log, wait_until};

/// The node kwok manages (no other node carries its annotation).
pub const NODE: &str = "kwok-bench";
const ANNOTATION: &str = "kwok.x-k8s.io/node";

/// kwok's figures for one N.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KwokRound {
    /// First pod bound -> every pod Running (the bench's watch), as for the VK.
    pub all_running_s: Option<f64>,
    /// Time to send every create request while kwok ran (the bench's own API latency).
    pub create_requests_s: f64,
    pub running: usize,
    /// API writes per pod on pods and events from the first create to all Running, by
    /// "VERB resource", the bench's creates left out.
    pub writes_per_pod: BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

impl KwokRound {
    pub fn writes_total(&self) -> f64 {
        round3(self.writes_per_pod.values().sum())
    }
}

/// What running kwok needs.
pub struct Kwok {
    pub bin: PathBuf,
    pub config: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kwok {
    /// Runs N pods (`concurrency` creates in flight) on kwok's node and removes them again.
    pub async fn round(
        &self,
        client: &Client,
        children: &Children,
        logs: &Path,
        n: usize,
        concurrency: usize,
        limit: Duration,
    ) -> anyhow::Result<KwokRound> {
        log(format!("=== N = {n} on kwok: starting kwok"));
        create_node(client).await?;
        let args: Vec<String> = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={ANNOTATION}=fake"),
            format!("--config={}", self.config.display()),
            // Room for 65,534 pod IPs: the default /24 runs out at 254 pods.
            "--cidr=10.128.0.0/16".into(),
            "--node-ip=10.127.0.1".into(),
            // kwok logs every patch at INFO: on 2 cores that is its own CPU, not the API's.
            "--v=WARN".into(),
            // The lease heartbeat stage keeps the node Ready past the node controller's grace.
            "--node-lease-duration-seconds=40".into(),
        ];
        children.spawn(
            "kwok",
            &self.bin,
            &args,
            &[],
            &logs.join(format!("kwok-{n}.log")),
        )?;
        let ready = wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
            cluster::node_ready(client, NODE)
        })
        .await;
        if ready.is_none() {
            children.stop("kwok", Duration::from_secs(5)).await;
            bail!(
                "kwok did not make node {NODE} Ready within 60 s (log in {})",
                logs.display()
            );
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let ns = format!("kwok-bench-{n}-{}", &suffix[..6]);
        cluster::create_namespace(client, &ns).await?;
        let result = self.load(client, &ns, n, concurrency, limit).await;
        // kwok finishes the pods' deletion (its pod-delete stage), so it stays until the
        // namespace is gone; without it 10,000 pods wait for the pod garbage collector.
        cluster::remove_namespace(client, &ns).await;
        cluster::wait_namespace_gone(client, &ns, Duration::from_secs(300)).await;
        children.stop("kwok", Duration::from_secs(5)).await;
        cluster::delete_node(client, NODE).await;
        result
    }

    async fn load(
        &self,
        client: &Client,
        ns: &str,
        n: usize,
        concurrency: usize,
        limit: Duration,
    ) -> anyhow::Result<KwokRound> {
        let tracker = Tracker::default();
        let watch = tracker.watch(client, ns);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let before = ApiCounts::scrape(client).await?;
        let names = (0..n).map(|i| (format!("k-{i:05}"), "kwok")).collect();
        let sent = load::create_all(
            &pods,
            &tracker,
            names,
            NODE,
            Bind::NodeName,
            concurrency,
            0.0,
        )
        .await;
        let expected = n - sent.errors;
        let done = wait_until(limit, Duration::from_millis(100), || {
            let c = tracker.count(|t| t.running.is_some());
            async move { c >= expected }
        })
        .await;
        let after = ApiCounts::scrape(client).await?;
        watch.abort();
        let times = tracker.snapshot();
        let first = times.values().filter_map(|t| t.created).min();
        let last = times.values().filter_map(|t| t.running).max();
        let mut round = KwokRound {
            create_requests_s: round3(sent.secs),
            running: tracker.count(|t| t.running.is_some()),
            writes_per_pod: load::writes_per_pod(&before.until(&after), sent.attempts, n),
            ..Default::default()
        };
        match (first, last, done) {
            (Some(a), Some(b), Some(_)) => {
                round.all_running_s = Some(round3(crate::ms_between(a, b) / 1000.0));
            }
            _ => round.notes.push(format!(
                "kwok: {}/{n} Running after {:.0} s",
                round.running,
                limit.as_secs_f64()
            )),
        }
        log(format!(
            "kwok: {}/{n} Running, {} s after the first create; {} writes per pod",
            round.running,
            round
                .all_running_s
                .map_or("—".into(), |s| format!("{s:.1}")),
            round.writes_total()
        ));
        Ok(round)
    }
}

/// kwok's node: its annotation hands it to kwok; capacity as large as the VK's.
async fn create_node(client: &Client) -> anyhow::Result<()> {
    cluster::delete_node(client, NODE).await;
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": {ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": NODE}
        },
        "spec": {"taints": [{"key": "virtual-kubelet.io/provider", "value": "kwok", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "100000", "memory": "100Ti", "pods": "1000000", "nvidia.com/gpu": "1000000"},
            "capacity": {"cpu": "100000", "memory": "100Ti", "pods": "1000000", "nvidia.com/gpu": "1000000"}
        }
    }))
    .context("kwok's node manifest")?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("failed to create node {NODE}"))?;
    Ok(())
}
