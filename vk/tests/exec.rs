//! `kubectl exec` end to end: the testbed's kubectl, the 1.36 API server passing the WebSocket
//! straight through to the VK (its Node declares `ExtendWebSocketsToKubelet`; a 1.34 testbed's
//! API server translates it to SPDY instead, `scripts/test-minor`), the kubelet
//! API's v5 channel protocol, and the Slurm provider running the command with `srun --jobid
//! --overlap` inside the pod's real job (`make slurm-up`). Also: exec on a provider without
//! exec (a RunPod emulator) names the provider; kubectl with WebSockets off reaches the VK over
//! SPDY/3.1, and so does the API server for a node that does not declare the feature.
//! `kubectl attach` shows the output written after it (Slurm and RunPod), `kubectl
//! port-forward` reaches RunPod's published port, and kubectl 1.29 (SPDY only,
//! `TESTBED_SPDY_KUBECTL`) does all three.
//!
//! The Slurm is found through `SLURM_ENV_FILE` (`make test` sets it); without it these tests
//! fail, on purpose, saying to run `make slurm-up`: they never pass without having run. The
//! Slurm node is small (2 CPUs), so the tests take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::SinkExt;
use harness::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{AttachParams, DeleteParams, PostParams, TerminalSize};
use kube::{Api, Client};
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Provider names in the VK configuration.
const SLURM: &str = "hpc";
const RUNPOD: &str = "rp";

/// The testbed's own kubectl (same version as the API server).
fn kubectl() -> PathBuf {
    testbed_kubectl()
}

/// The steps of `job` other than its batch step (`squeue --steps`).
fn exec_steps(slurm: &RealSlurm, job: &str) -> Vec<String> {
    let out = slurm
        .command("squeue", &["-h", "-s", "-j", job, "-o", "%i"])
        .output()
        .expect("squeue runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty() && !l.ends_with(".batch") && !l.ends_with(".extern"))
        .collect()
}

/// A VK with a RunPod emulator and the real Slurm (exec enabled) as providers.
struct Bed {
    c: Client,
    slurm: RealSlurm,
    rp: Emulator,
    vk: Vk,
    ns: String,
    _jobs: JobsGuard,
}

impl Bed {
    /// The RunPod emulator's admin path that adds lines to the log of `pod`'s workload.
    async fn runpod_log_of(&self, pod: &Pod) -> String {
        let uid = pod.metadata.uid.clone().unwrap();
        let id = self.rp.workloads_of(&uid).await[0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        format!("/workloads/{id}/logs")
    }

    /// Waits until `kubectl logs` of `pod` shows `text`.
    async fn wait_for_log(&self, pod: &str, text: &str) {
        wait_for(
            Duration::from_secs(60),
            &format!("{text:?} in the log of {pod}"),
            || async {
                let r = run_kubectl(&["logs", "-n", &self.ns, pod], None, &[]).await;
                r.stdout.contains(text).then_some(())
            },
        )
        .await;
    }

    async fn start() -> Self {
        Self::start_opts(VkOptions::default()).await
    }

    async fn start_opts(opts: VkOptions) -> Self {
        // The Slurm first: without it the failure names `make slurm-up`.
        let slurm = RealSlurm::from_env();
        let c = client().await;
        let rp = Emulator::runpod(
            ExecutionMode::simulated(200, 200, None),
            vec![GpuStock::new("A100-80GB", 16, 1.89)],
        )
        .await;
        let providers = format!(
            "{}{}",
            rp.provider_yaml(RUNPOD),
            slurm.provider_yaml_with_exec(SLURM)
        );
        let vk = Vk::start_with(providers, opts).await;
        let node = vk.node.clone();
        wait_node_ready(&c, &node).await;
        let ns = namespace(&c, "exec").await;
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

    /// Creates a pod pinned to `provider` running `sleep 300` and waits until it is Running.
    /// RunPod runs GPU pods only, so a pod for it asks for one.
    async fn running_pod(&self, name: &str, provider: &str) -> Pod {
        self.running_pod_with_ports(name, provider, &[]).await
    }

    /// [`Self::running_pod`] whose container declares `ports` (TCP).
    async fn running_pod_with_ports(&self, name: &str, provider: &str, ports: &[u16]) -> Pod {
        self.running_pod_spec(name, provider, &["sleep", "300"], ports)
            .await
    }

    /// A pod pinned to `provider` running `command`, once Running.
    async fn running_pod_spec(
        &self,
        name: &str,
        provider: &str,
        command: &[&str],
        ports: &[u16],
    ) -> Pod {
        let ports: Vec<_> = ports.iter().map(|p| json!({"containerPort": p})).collect();
        let pods: Api<Pod> = Api::namespaced(self.c.clone(), &self.ns);
        let resources = if provider == RUNPOD {
            json!({"limits": {"nvidia.com/gpu": "1"}})
        } else {
            json!({})
        };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"gpu-vk.io/provider": provider}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": self.vk.node},
                "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": command,
                    "resources": resources,
                    "ports": ports,
                }],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        wait_for(
            Duration::from_secs(120),
            &format!("pod {name} Running"),
            || async {
                pods.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .filter(|p| phase(p) == "Running")
            },
        )
        .await
    }

    /// Whether the API server passes streaming WebSockets through to the VK: from 1.36 on,
    /// when the Node declares `ExtendWebSocketsToKubelet` (checked here: it must declare it
    /// exactly there; an API server before 1.36 drops `status.declaredFeatures` and always
    /// translates kubectl's WebSocket to SPDY towards the node).
    async fn passes_websockets(&self) -> bool {
        let node = Api::<Node>::all(self.c.clone())
            .get(&self.vk.node)
            .await
            .unwrap();
        let declared = node.status.unwrap().declared_features.unwrap_or_default();
        let minor: u32 = self
            .c
            .apiserver_version()
            .await
            .unwrap()
            .minor
            .trim_end_matches('+')
            .parse()
            .unwrap();
        let passes = minor >= 36;
        assert_eq!(
            declared.iter().any(|f| f == "ExtendWebSocketsToKubelet"),
            passes,
            "1.{minor}: {declared:?}"
        );
        passes
    }

    async fn exec(&self, pod: &str, args: &[&str], stdin: Option<&[u8]>) -> KubectlRun {
        self.exec_with_env(pod, args, stdin, &[]).await
    }

    async fn exec_with_env(
        &self,
        pod: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        env: &[(&str, &str)],
    ) -> KubectlRun {
        self.exec_by(&kubectl(), pod, args, stdin, env).await
    }

    /// `kubectl exec` with the given kubectl binary.
    async fn exec_by(
        &self,
        kubectl: &Path,
        pod: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        env: &[(&str, &str)],
    ) -> KubectlRun {
        let mut all = vec!["exec", "-n", &self.ns, pod];
        if stdin.is_some() {
            all.push("-i");
        }
        all.push("--");
        all.extend_from_slice(args);
        run_kubectl_with(kubectl, &all, stdin, env).await
    }

    async fn finish(mut self) {
        let pods: Api<Pod> = Api::namespaced(self.c.clone(), &self.ns);
        for p in pods.list(&Default::default()).await.unwrap().items {
            if let Some(name) = p.metadata.name.as_deref() {
                let _ = pods.delete(name, &DeleteParams::default()).await;
            }
        }
        // The VK cancels the jobs of deleted pods and then removes them.
        wait_for(Duration::from_secs(60), "pods gone", || async {
            pods.list(&Default::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
        })
        .await;
        delete_namespace(&self.c, &self.ns).await;
        self.vk.cleanup(&self.c).await;
    }
}

#[tokio::test]
async fn kubectl_exec_runs_in_the_slurm_job_with_output_exit_code_and_stdin() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;

    // The Node tells the API server it can take exec over WebSockets. An API server before
    // 1.36 has no `status.declaredFeatures` (it drops the field) and always translates
    // `kubectl exec`'s WebSocket to SPDY towards the node.
    let passes_websockets = bed.passes_websockets().await;

    bed.running_pod("shell", SLURM).await;

    let r = bed
        .exec(
            "shell",
            &["sh", "-c", "echo out; echo err >&2; exit 7"],
            None,
        )
        .await;
    eprintln!("kubectl exec (exit 7): {r:?}");
    assert_eq!(r.code, Some(7), "{r:?}");
    assert_eq!(r.stdout, "out\n", "{r:?}");
    // kubectl adds its own "command terminated with exit code 7"; srun's report of the
    // exit does not reach the user.
    assert_eq!(r.stderr.lines().next(), Some("err"), "{r:?}");
    assert!(!r.stderr.contains("srun:"), "{r:?}");

    // The command really runs inside the pod's job: Slurm's step environment names it.
    let r = bed
        .exec("shell", &["sh", "-c", "echo job=$SLURM_JOB_ID"], None)
        .await;
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.starts_with("job="), "{r:?}");
    let job = r.stdout.trim().trim_start_matches("job=").to_owned();
    assert!(job.parse::<u64>().is_ok(), "{r:?}");

    // `kubectl exec -i`: stdin reaches the command, its end (the v5 close signal) ends `cat`.
    let input = b"hello from stdin\nsecond line with 'quotes' and $dollar\n";
    let r = bed.exec("shell", &["cat"], Some(input)).await;
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.stdout.as_bytes(), input, "{r:?}");

    // A client that goes away mid-command frees the provider side: the srun step ends.
    let mut kubectl_exec = tokio::process::Command::new(kubectl())
        .args(["exec", "-n", &bed.ns, "shell", "--", "sleep", "120"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(30), "the exec step running", || async {
        (!exec_steps(&bed.slurm, &job).is_empty()).then_some(())
    })
    .await;
    kubectl_exec.kill().await.unwrap();
    wait_for(Duration::from_secs(40), "the exec step gone", || async {
        exec_steps(&bed.slurm, &job).is_empty().then_some(())
    })
    .await;

    // A 1.36 API server streamed WebSockets straight to the VK (no SPDY translation), an older
    // one translated them to SPDY; the command line never reached the VK's log.
    let log = bed.vk.log();
    if passes_websockets {
        assert!(
            log.contains("exec session starting") && log.contains("v5.channel.k8s.io"),
            "no WebSocket exec session in the VK log"
        );
    } else {
        assert!(
            log.contains("SPDY/3.1"),
            "no SPDY exec session in the VK log"
        );
    }
    assert!(
        !log.contains("second line with"),
        "stdin leaked into the log"
    );
    assert!(!log.contains("echo out"), "the command leaked into the log");
    bed.finish().await;
}

#[tokio::test]
async fn exec_on_a_provider_without_exec_names_it() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    bed.running_pod("cloud", RUNPOD).await;
    let r = bed.exec("cloud", &["true"], None).await;
    eprintln!("kubectl exec on the RunPod pod: {r:?}");
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr.contains("not supported by provider rp: exec"),
        "{r:?}"
    );

    bed.finish().await;
}

/// Checks exec's output, exit code and stdin on `pod` with the given kubectl environment.
async fn exec_works(bed: &Bed, kubectl: &Path, pod: &str, env: &[(&str, &str)]) {
    let r = bed
        .exec_by(
            kubectl,
            pod,
            &["sh", "-c", "echo out; echo err >&2; exit 7"],
            None,
            env,
        )
        .await;
    eprintln!("kubectl exec (exit 7) {env:?}: {r:?}");
    assert_eq!(r.code, Some(7), "{r:?}");
    assert_eq!(r.stdout, "out\n", "{r:?}");
    assert_eq!(r.stderr.lines().next(), Some("err"), "{r:?}");
    let r = bed
        .exec_by(kubectl, pod, &["sh", "-c", "echo fine"], None, env)
        .await;
    assert_eq!((r.code, r.stdout.as_str()), (Some(0), "fine\n"), "{r:?}");
    let input = b"spdy stdin line\nsecond line with 'quotes' and $dollar\n";
    let r = bed.exec_by(kubectl, pod, &["cat"], Some(input), env).await;
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.stdout.as_bytes(), input, "{r:?}");
}

/// kubectl with WebSockets turned off speaks SPDY; the API server passes it through to the VK.
#[tokio::test]
async fn kubectl_exec_over_spdy() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    bed.running_pod("shell", SLURM).await;
    exec_works(
        &bed,
        &kubectl(),
        "shell",
        &[("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")],
    )
    .await;
    let log = bed.vk.log();
    assert!(
        log.contains("SPDY/3.1"),
        "no SPDY exec session in the VK log"
    );
    assert!(
        !log.contains("spdy stdin line"),
        "stdin leaked into the log"
    );
    assert!(!log.contains("echo out"), "the command leaked into the log");
    bed.finish().await;
}

/// A node that does not declare `ExtendWebSocketsToKubelet`: the API server translates the
/// default kubectl's WebSocket to SPDY towards the VK.
#[tokio::test]
async fn kubectl_exec_through_a_node_without_websocket_support() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start_opts(VkOptions {
        extra_config: "kubeletApi:\n  declareExtendWebSocketsToKubelet: false\n".into(),
        ..VkOptions::default()
    })
    .await;
    let node = Api::<Node>::all(bed.c.clone())
        .get(&bed.vk.node)
        .await
        .unwrap();
    let declared = node.status.unwrap().declared_features.unwrap_or_default();
    assert!(
        !declared.iter().any(|f| f == "ExtendWebSocketsToKubelet"),
        "{declared:?}"
    );
    bed.running_pod("shell", SLURM).await;
    exec_works(&bed, &kubectl(), "shell", &[]).await;
    assert!(
        bed.vk.log().contains("SPDY/3.1"),
        "the API server did not speak SPDY to the VK"
    );
    bed.finish().await;
}

#[path = "exec/streams.rs"]
mod streams;
#[path = "exec/tty.rs"]
mod tty;
