//! The Kubernetes provider end to end, across two real clusters: the VK on the testbed under
//! `KUBECONFIG` offloads to a second testbed that this test starts (`<TESTBED_NAME>-remote`),
//! whose node is the project's own VK over a Slurm emulator running commands as processes.
//! A Deployment's pods become one remote pod each; `kubectl logs -f` goes local API server ->
//! local VK -> remote API server -> remote VK; a `kill -9` of the local VK while the
//! Deployment scales leaves no duplicated and no leaked remote pod. And `kubectl exec` on a pod
//! offloaded to a remote cluster whose node is our VK over the real Slurm (`exec: srun`, `make
//! slurm-up`): local API server -> local VK -> remote API server -> remote VK -> `srun` into the
//! remote pod's job, with output, exit code and stdin coming back.
//!
//! Run: `TESTBED_NAME=k8s scripts/testbed/with cargo test -p vk --test kubernetes_cluster`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::path::PathBuf;
use std::time::Duration;

use futures::AsyncBufReadExt;
use harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use mock_providers::config::ExecutionMode;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// The tests take turns: each starts (and stops) the same second testbed.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A second local testbed, stopped when dropped.
struct RemoteTestbed {
    name: String,
    kubeconfig: PathBuf,
}

fn script(name: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../scripts/testbed")
        .join(name)
}

/// `scripts/testbed/<name>` for testbed `testbed`, with none of the local testbed's env.
fn testbed_command(name: &str, testbed: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(script(name));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TESTBED_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("TESTBED_NAME", testbed);
    cmd
}

impl RemoteTestbed {
    fn up() -> Self {
        let base = std::env::var("TESTBED_NAME").unwrap_or_else(|_| "k8s".into());
        let name = format!("{base}-remote");
        // The local testbed's env (sourced by `with`) exports its ports as TESTBED_*_PORT,
        // which `up` would take as fixed ports to use: none of it may reach the second one.
        let out = testbed_command("up", &name)
            .output()
            .expect("scripts/testbed/up runs");
        assert!(
            out.status.success(),
            "the remote testbed did not come up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .expect("up prints the kubeconfig")
            .trim()
            .into();
        Self { name, kubeconfig }
    }

    async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(cfg).unwrap()
    }
}

impl Drop for RemoteTestbed {
    fn drop(&mut self) {
        let _ = testbed_command("down", &self.name)
            .env("QUIET", "1")
            .status();
    }
}

async fn remote_pods(rc: &Client, ns: &str, owner: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(rc.clone(), ns)
        .list(&ListParams::default().labels(&format!("gpu-vk.io/owner={owner}")))
        .await
        .unwrap()
        .items
}

async fn scale(c: &Client, ns: &str, replicas: i32) {
    Api::<Deployment>::namespaced(c.clone(), ns)
        .patch(
            "ticker",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Waits until the Deployment has exactly `n` Running pods locally and the remote cluster
/// exactly one live remote pod for each, named by its workload id, and nothing else.
async fn settled(c: &Client, rc: &Client, ns: &str, rns: &str, vk: &Vk, n: usize) {
    wait_for(
        WAIT,
        &format!("{n} local pods with one remote pod each"),
        || async {
            let local: Vec<Pod> = pods_with_label(c, ns, "ticker")
                .await
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            if local.len() != n || local.iter().any(|p| phase(p) != "Running") {
                return None;
            }
            let mut want: Vec<String> = local
                .iter()
                .map(|p| workload_name(&vk.cluster_id, &vk.node, &uid(p)))
                .collect();
            want.sort();
            let tag = owner_tag(&vk.cluster_id, &vk.node);
            let mut have: Vec<String> = remote_pods(rc, rns, &tag)
                .await
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            have.sort();
            (have == want).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_offloads_to_another_cluster_with_logs_and_survives_a_vk_kill() {
    let _turn = SERIAL.lock().await;
    let remote = tokio::task::block_in_place(RemoteTestbed::up);
    let rc = remote.client().await;
    let emu = Emulator::slurm(ExecutionMode::process(), SlurmDialect::V0041).await;
    let mut rvk = Vk::start(
        &[("hpc", &emu)],
        VkOptions {
            kubeconfig: Some(remote.kubeconfig.clone()),
            ..VkOptions::default()
        },
    )
    .await;
    wait_node_ready(&rc, &rvk.node).await;
    let rns = namespace(&rc, "k8s-offload").await;

    let c = client().await;
    let providers = format!(
        "- name: east\n  kind: kubernetes\n  settings:\n    kubeconfig: {}\n    namespace: {rns}\n    \
         nodeSelector: {{kubernetes.io/hostname: {}}}\n    \
         tolerations: [{{key: virtual-kubelet.io/provider, operator: Exists}}]\n",
        remote.kubeconfig.display(),
        rvk.node
    );
    let mut vk = Vk::start_with(providers, VkOptions::default()).await;
    wait_node_ready(&c, &vk.node).await;
    let ns = namespace(&c, "k8s-local").await;
    let mut spec = pod_spec(&vk.node, 1);
    spec["containers"][0]["command"] = json!([
        "/bin/sh",
        "-c",
        "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done"
    ]);
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "ticker"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ticker"}},
                 "template": {"metadata": {"labels": {"app": "ticker"}}, "spec": spec}},
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    settled(&c, &rc, &ns, &rns, &vk, 2).await;

    // `kubectl logs -f` on an offloaded pod: the lines the remote process writes.
    let pod = pods_with_label(&c, &ns, "ticker").await.remove(0);
    let name = pod.metadata.name.clone().unwrap();
    let lp = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let mut lines = Api::<Pod>::namespaced(c.clone(), &ns)
        .log_stream(&name, &lp)
        .await
        .unwrap()
        .lines();
    use futures::StreamExt;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next())
            .await
            .expect("a followed log line")
            .expect("the stream stays open")
            .unwrap();
        seen.push(line);
    }
    assert!(seen.iter().all(|l| l.starts_with("tick-")), "{seen:?}");
    drop(lines);

    // Churn with a kill -9 in the middle: scale up, kill, scale down, restart.
    scale(&c, &ns, 5).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    vk.kill9().await;
    scale(&c, &ns, 3).await;
    vk.restart();
    settled(&c, &rc, &ns, &rns, &vk, 3).await;

    // The namespace goes: every remote pod with it.
    delete_namespace(&c, &ns).await;
    let tag = owner_tag(&vk.cluster_id, &vk.node);
    wait_for(WAIT, "no remote pod left", || async {
        remote_pods(&rc, &rns, &tag).await.is_empty().then_some(())
    })
    .await;
    vk.cleanup(&c).await;
    rvk.cleanup(&rc).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_exec_reaches_a_pod_offloaded_to_another_cluster() {
    let _turn = SERIAL.lock().await;
    // The real Slurm first: without it the failure names `make slurm-up`.
    let slurm = RealSlurm::from_env();
    let remote = tokio::task::block_in_place(RemoteTestbed::up);
    let rc = remote.client().await;
    let mut rvk = Vk::start_with(
        slurm.provider_yaml_with_exec("hpc"),
        VkOptions {
            kubeconfig: Some(remote.kubeconfig.clone()),
            ..VkOptions::default()
        },
    )
    .await;
    let _jobs = JobsGuard {
        slurm: slurm.clone(),
        prefix: rvk.owner_prefix(),
    };
    wait_node_ready(&rc, &rvk.node).await;
    let rns = namespace(&rc, "k8s-exec").await;

    let c = client().await;
    let providers = format!(
        "- name: east\n  kind: kubernetes\n  settings:\n    kubeconfig: {}\n    namespace: {rns}\n    \
         nodeSelector: {{kubernetes.io/hostname: {}}}\n    \
         tolerations: [{{key: virtual-kubelet.io/provider, operator: Exists}}]\n",
        remote.kubeconfig.display(),
        rvk.node
    );
    let mut vk = Vk::start_with(providers, VkOptions::default()).await;
    wait_node_ready(&c, &vk.node).await;
    let ns = namespace(&c, "k8s-exec-local").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shell"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": vk.node},
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "300"]}],
        },
    }))
    .unwrap();
    Api::<Pod>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    wait_for(WAIT, "the offloaded pod Running", || async {
        let p = Api::<Pod>::namespaced(c.clone(), &ns)
            .get_opt("shell")
            .await
            .ok()??;
        (phase(&p) == "Running").then_some(())
    })
    .await;

    // Output, stderr and the exit code, from the remote pod's Slurm job.
    let KubectlRun {
        code,
        stdout: out,
        stderr: err,
    } = run_kubectl(
        &[
            "exec",
            "-n",
            &ns,
            "shell",
            "--",
            "sh",
            "-c",
            "echo job=$SLURM_JOB_ID; echo err >&2; exit 7",
        ],
        None,
        &[],
    )
    .await;
    assert_eq!(code, Some(7), "{out} {err}");
    let job = out
        .trim()
        .strip_prefix("job=")
        .unwrap_or_else(|| panic!("{out:?} {err:?}"));
    assert!(
        !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
        "{out:?}"
    );
    assert_eq!(err.lines().next(), Some("err"), "{err:?}");
    // The job is the remote pod's own: its name is the remote VK's workload name.
    let remote_pod = remote_pods(&rc, &rns, &owner_tag(&vk.cluster_id, &vk.node))
        .await
        .into_iter()
        .next()
        .expect("one remote pod");
    let squeue = slurm
        .command("squeue", &["-h", "-j", job, "-o", "%j"])
        .output()
        .expect("squeue runs");
    let job_name = String::from_utf8_lossy(&squeue.stdout).trim().to_owned();
    let remote_uid = remote_pod.metadata.uid.clone().unwrap();
    assert!(
        job_name.ends_with(&remote_uid),
        "job {job_name} is not remote pod {remote_uid}'s"
    );
    // stdin reaches the command.
    let input = b"through two clusters\n";
    let KubectlRun {
        code,
        stdout: out,
        stderr: err,
    } = run_kubectl(
        &["exec", "-i", "-n", &ns, "shell", "--", "cat"],
        Some(input),
        &[],
    )
    .await;
    assert_eq!((code, out.as_bytes()), (Some(0), &input[..]), "{err}");

    delete_namespace(&c, &ns).await;
    let tag = owner_tag(&vk.cluster_id, &vk.node);
    wait_for(WAIT, "no remote pod left", || async {
        remote_pods(&rc, &rns, &tag).await.is_empty().then_some(())
    })
    .await;
    vk.cleanup(&c).await;
    rvk.cleanup(&rc).await;
}
