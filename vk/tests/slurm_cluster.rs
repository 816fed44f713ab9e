//! Cluster tests of the Slurm provider end to end: the VK on the real testbed with two
//! providers (a RunPod emulator first in preference order, the real single-node Slurm of
//! `make slurm-up` second), pods pinned to Slurm with the `gpu-vk.io/provider` annotation.
//! A Deployment runs as one Slurm job per pod, deleting a pod cancels exactly its job, and
//! `kubectl logs` (plain and `--follow`) through the API server returns the jobs' real output.
//!
//! The Slurm is found through `SLURM_ENV_FILE` (`make test` sets it); without it these tests
//! fail, on purpose, saying to run `make slurm-up`: they never pass without having run. The
//! node has 2 CPUs and 2 GPUs, so each test uses at most two jobs and the tests take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, LogParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::{Value, json};

/// The tests share a 2-slot Slurm node: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The name of the real Slurm provider in the VK configuration.
const SLURM: &str = "hpc";

/// A VK whose providers are a RunPod emulator (preferred) and the real Slurm.
struct Bed {
    c: Client,
    slurm: RealSlurm,
    rp: Emulator,
    vk: Vk,
    ns: String,
    _jobs: JobsGuard,
}

impl Bed {
    async fn start() -> Self {
        // The Slurm first: without it the failure names `make slurm-up`.
        let slurm = RealSlurm::from_env();
        let c = client().await;
        let rp = Emulator::runpod(
            ExecutionMode::simulated(200, 200, None),
            vec![GpuStock::new("A100-80GB", 16, 1.89)],
        )
        .await;
        let providers = format!("{}{}", rp.provider_yaml("rp"), slurm.provider_yaml(SLURM));
        let vk = Vk::start_with(providers, VkOptions::default()).await;
        let node = vk.node.clone();
        wait_node_ready(&c, &node).await;
        let ns = namespace(&c, "slurm").await;
        let jobs = JobsGuard {
            slurm: slurm.clone(),
            prefix: vk.owner_prefix(),
        };
        Self {
            c,
            slurm,
            rp,
            vk,
            ns,
            _jobs: jobs,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.c.clone(), &self.ns)
    }

    fn job_name(&self, pod: &Pod) -> String {
        workload_name(&self.vk.cluster_id, &self.vk.node, &uid(pod))
    }

    /// `squeue` entries named after this pod's workload id: `(job id, state)`.
    fn squeue_of(&self, pod: &Pod) -> Vec<(String, String)> {
        let name = self.job_name(pod);
        self.slurm
            .squeue()
            .into_iter()
            .filter(|(_, n, _)| *n == name)
            .map(|(id, _, state)| (id, state))
            .collect()
    }

    /// Waits until this pod has exactly one job in `squeue`, RUNNING; returns its id.
    async fn running_job(&self, pod: &Pod) -> String {
        let name = pod.metadata.name.clone().unwrap();
        wait_for(
            Duration::from_secs(60),
            &format!("one RUNNING job in squeue for pod {name}"),
            || async {
                let jobs = self.squeue_of(pod);
                match jobs.as_slice() {
                    [(id, state)] if state == "RUNNING" => Some(id.clone()),
                    _ => None,
                }
            },
        )
        .await
    }

    /// Slurm's record of a job (REST), in the observers' shape.
    async fn job(&self, id: &str) -> Option<Value> {
        self.slurm
            .workloads()
            .await
            .into_iter()
            .find(|w| w["id"] == id)
    }

    async fn finish(mut self) {
        delete_namespace(&self.c, &self.ns).await;
        // The VK cancels the jobs of the deleted pods itself.
        let prefix = self.vk.owner_prefix();
        let obs = Observer::Slurm(self.slurm.clone());
        wait_for(
            Duration::from_secs(60),
            "the VK cancels the jobs of the deleted namespace",
            || async { obs.live_with_prefix(&prefix).await.is_empty().then_some(()) },
        )
        .await;
        self.vk.cleanup(&self.c).await;
        self.slurm.cancel_owned(&prefix).await;
    }
}

/// A pod spec for the virtual node running `script` with one GPU, pinned to the Slurm.
fn spec(node: &str, script: &str) -> Value {
    json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", script],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }],
    })
}

fn pinned() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([("gpu-vk.io/provider", SLURM)])
}

async fn running_replicas(bed: &Bed, app: &str, n: usize) -> Vec<Pod> {
    wait_for(
        Duration::from_secs(90),
        &format!("{n} Running replicas of {app}"),
        || async {
            let pods: Vec<Pod> = pods_with_label(&bed.c, &bed.ns, app)
                .await
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            (pods.len() == n && pods.iter().all(|p| phase(p) == "Running")).then_some(pods)
        },
    )
    .await
}

#[tokio::test]
async fn a_deployment_pinned_to_slurm_runs_one_job_per_pod_and_a_pod_deletion_cancels_exactly_its_job()
 {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "sleeper"}},
                 "template": {"metadata": {"labels": {"app": "sleeper"}, "annotations": pinned()},
                              "spec": spec(&bed.vk.node, "sleep 300")}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(bed.c.clone(), &bed.ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();

    let pods = running_replicas(&bed, "sleeper", 2).await;
    let mut jobs = Vec::new();
    for p in &pods {
        let id = bed.running_job(p).await;
        let record = bed.job(&id).await.expect("the job in slurmrestd's list");
        assert_eq!(record["name"], bed.job_name(p).as_str());
        assert_eq!(record["user"], bed.slurm.user.as_str());
        jobs.push(id);
    }
    assert_ne!(jobs[0], jobs[1], "two pods share a job");
    // Pinned: nothing went to the preferred RunPod emulator.
    assert!(
        bed.rp.workloads().await.is_empty(),
        "a pinned pod reached RunPod"
    );

    let (victim, other) = (&pods[0], &pods[1]);
    let (victim_job, other_job) = (jobs[0].clone(), jobs[1].clone());
    bed.pods()
        .delete(
            victim.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    let victim_uid = uid(victim);
    wait_for(
        Duration::from_secs(60),
        "the deleted pod gone and its job cancelled",
        || async {
            let pod_gone = bed
                .pods()
                .get_opt(victim.metadata.name.as_deref().unwrap())
                .await
                .unwrap()
                .is_none_or(|p| uid(&p) != victim_uid);
            let job = bed.job(&victim_job).await?;
            (pod_gone && job["state"] == "CANCELLED" && bed.squeue_of(victim).is_empty())
                .then_some(())
        },
    )
    .await;
    // Exactly that job: the other pod's job is the same one, still RUNNING.
    assert_eq!(
        bed.squeue_of(other),
        vec![(other_job.clone(), "RUNNING".to_owned())],
        "the other pod's job was touched"
    );
    let cancelled: Vec<Value> = bed
        .slurm
        .workloads()
        .await
        .into_iter()
        .filter(|w| {
            w["state"] == "CANCELLED"
                && w["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&bed.vk.owner_prefix()))
        })
        .collect();
    assert_eq!(
        cancelled.len(),
        1,
        "exactly one job cancelled: {cancelled:?}"
    );

    // The ReplicaSet's replacement gets a job of its own once the slot is free.
    let pods = running_replicas(&bed, "sleeper", 2).await;
    for p in &pods {
        let id = bed.running_job(p).await;
        assert_ne!(id, victim_job);
    }
    assert!(pods.iter().any(|p| uid(p) == uid(other)));
    bed.finish().await;
}

#[tokio::test]
async fn kubectl_logs_returns_the_jobs_output_and_follow_streams_new_lines() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    let pod = |name: &str, script: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": pinned()},
            "spec": spec(&bed.vk.node, script),
        }))
        .unwrap()
    };
    let pods = bed.pods();
    pods.create(
        &PostParams::default(),
        &pod("hello", "echo hello-from-slurm; sleep 300"),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod(
            "ticker",
            "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done",
        ),
    )
    .await
    .unwrap();
    for name in ["hello", "ticker"] {
        let p = wait_for(
            Duration::from_secs(60),
            &format!("pod {name} Running"),
            || async {
                pods.get_opt(name)
                    .await
                    .ok()?
                    .filter(|p| phase(p) == "Running")
            },
        )
        .await;
        bed.running_job(&p).await;
    }

    // Plain `kubectl logs`: the job's real stdout, from its output file, via the VK.
    let text = wait_for(
        Duration::from_secs(30),
        "logs of hello with its greeting",
        || async {
            let t = pods.logs("hello", &LogParams::default()).await.ok()?;
            t.contains("hello-from-slurm").then_some(t)
        },
    )
    .await;
    assert_eq!(text, "hello-from-slurm\n");

    // `kubectl logs -f`: a line printed after the request started arrives on the stream.
    let stream = pods
        .log_stream(
            "ticker",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let tick = |l: &str| l.trim().strip_prefix("tick-")?.parse::<u64>().ok();
    // Everything printed so far, read after the follow request was answered.
    let before = wait_for(
        Duration::from_secs(30),
        "ticks in the logs of ticker",
        || async {
            let t = pods.logs("ticker", &LogParams::default()).await.ok()?;
            t.lines().filter_map(tick).max()
        },
    )
    .await;
    let mut lines = stream.lines();
    let newer = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next().await {
            let line = line.unwrap();
            if let Some(n) = tick(&line).filter(|n| *n > before) {
                return n;
            }
        }
        panic!("the follow stream ended before a new line arrived");
    })
    .await
    .unwrap_or_else(|_| panic!("no line after tick-{before} arrived on the follow stream"));
    assert!(newer > before);
    drop(lines);
    bed.finish().await;
}
