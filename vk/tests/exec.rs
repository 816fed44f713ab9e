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

/// A TTY session (`kubectl exec -it`), here through kube-rs' WebSocket client: the command sees
/// a terminal, gets the client's terminal size (and its change), input is echoed by the
/// remote terminal, and the exit code comes back.
#[tokio::test]
async fn a_tty_session_through_the_api_server() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    bed.running_pod("shell", SLURM).await;
    let pods: Api<Pod> = Api::namespaced(bed.c.clone(), &bed.ns);
    let script = "test -t 0 && echo on-a-tty; read x; echo \"got $x\"; stty size; exit 4";
    let mut p = pods
        .exec(
            "shell",
            ["sh", "-c", script],
            &AttachParams::interactive_tty(),
        )
        .await
        .unwrap();
    let mut size = p.terminal_size().unwrap();
    size.send(TerminalSize {
        width: 100,
        height: 30,
    })
    .await
    .unwrap();
    let mut stdout = p.stdout().unwrap();
    let mut stdin = p.stdin().unwrap();
    let status = p.take_status().unwrap();
    // The size is applied before the command reads its input.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stdin.write_all(b"typed\n").await.unwrap();
    let mut out = String::new();
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            let n = stdout.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the TTY session ended");
    eprintln!("TTY output: {out:?}");
    assert!(out.contains("on-a-tty"), "{out:?}");
    // Echoed by the remote terminal, then answered; terminals end lines with \r\n.
    assert!(out.contains("typed\r\n"), "{out:?}");
    assert!(out.contains("got typed\r\n"), "{out:?}");
    assert!(out.contains("30 100"), "{out:?}");
    assert!(!out.contains("srun:"), "{out:?}");
    let status = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .unwrap()
        .expect("a status");
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!(
        (cause.reason.as_deref(), cause.message.as_deref()),
        (Some("ExitCode"), Some("4"))
    );
    bed.finish().await;
}

/// A `kubectl port-forward` running in the background, with the local port it listens on.
struct Forward {
    child: tokio::process::Child,
    local: u16,
}

async fn port_forward(ns: &str, pod: &str, port: u16, env: &[(&str, &str)]) -> Forward {
    port_forward_by(&kubectl(), ns, pod, port, env).await
}

/// [`port_forward`] with the given kubectl binary.
async fn port_forward_by(
    kubectl: &Path,
    ns: &str,
    pod: &str,
    port: u16,
    env: &[(&str, &str)],
) -> Forward {
    let mut child = tokio::process::Command::new(kubectl)
        .args(["port-forward", "-n", ns, pod, &format!(":{port}")])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl starts");
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // "Forwarding from 127.0.0.1:41235 -> 8080"
    let local = tokio::time::timeout(Duration::from_secs(30), async {
        use tokio::io::AsyncBufReadExt;
        loop {
            line.clear();
            if out.read_line(&mut line).await.unwrap() == 0 {
                return None;
            }
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                return rest.split_whitespace().next()?.parse::<u16>().ok();
            }
        }
    })
    .await
    .ok()
    .flatten();
    // kubectl goes on writing to stdout ("Handling connection for ..."): keep reading it, or
    // its next write hits a closed pipe and SIGPIPE ends it.
    tokio::spawn(async move {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut out, &mut sink).await;
    });
    let Some(local) = local else {
        let _ = child.kill().await;
        let err = child.wait_with_output().await.unwrap();
        panic!(
            "kubectl port-forward did not start listening: {}",
            String::from_utf8_lossy(&err.stderr)
        );
    };
    Forward { child, local }
}

/// One HTTP/1.0 GET through the forwarded port: the status line, or the error.
async fn http_status_through(local: u16) -> Result<String, String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", local))
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /ready HTTP/1.0\r\nHost: model\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut body))
        .await
        .map_err(|_| "no answer in 20 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .next()
        .filter(|l| l.starts_with("HTTP/"))
        .map(str::to_owned)
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))
}

/// The transport of each port-forward session in the VK's log, in order: `websocket` (the
/// SPDY-over-WebSocket tunnel) or `spdy`.
fn port_forward_transports(log: &str) -> Vec<&'static str> {
    log.lines()
        .filter(|l| l.contains("port-forward session starting"))
        .map(|l| {
            if l.contains("websocket") {
                "websocket"
            } else if l.contains("SPDY/3.1") {
                "spdy"
            } else {
                "unknown"
            }
        })
        .collect()
}

/// `kubectl port-forward` to a RunPod pod reaches the container port where RunPod publishes it,
/// through the API server: kubectl's default WebSocket tunnel reaches the VK as that tunnel
/// from a 1.36 API server (the Node declares `ExtendWebSocketsToKubelet`) and as SPDY from
/// older ones, `KUBECTL_PORT_FORWARD_WEBSOCKETS=false` as SPDY; a port the pod does not
/// publish, and a provider that publishes none, say so.
#[tokio::test]
async fn kubectl_port_forward_reaches_the_published_port() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    let passes_websockets = bed.passes_websockets().await;
    let tunnel = if passes_websockets {
        "websocket"
    } else {
        "spdy"
    };
    bed.running_pod_with_ports("model", RUNPOD, &[8080]).await;
    for (env, transport) in [
        (&[][..], tunnel),
        (&[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")][..], "spdy"),
    ] {
        let before = port_forward_transports(&bed.vk.log()).len();
        let mut fwd = port_forward(&bed.ns, "model", 8080, env).await;
        bed.rp
            .admin_post("/serve", json!({"httpStatus": 200}))
            .await;
        let first = http_status_through(fwd.local).await;
        if !first.as_deref().is_ok_and(|l| l.contains(" 200")) {
            let _ = fwd.child.kill().await;
            let out = fwd.child.wait_with_output().await.unwrap();
            panic!(
                "{env:?}: {first:?}; kubectl port-forward said: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The answer is the workload's own listener's: switching it shows through.
        bed.rp
            .admin_post("/serve", json!({"httpStatus": 503}))
            .await;
        let second = http_status_through(fwd.local).await;
        assert!(
            second.as_deref().is_ok_and(|l| l.contains(" 503")),
            "{env:?}: {second:?}"
        );
        fwd.child.kill().await.unwrap();
        // kubectl opens one session for its whole run, over the transport expected for 1.{minor}.
        let log = bed.vk.log();
        let sessions = port_forward_transports(&log);
        assert_eq!(
            sessions.get(before..),
            Some(&[transport][..]),
            "WebSockets passed through: {passes_websockets}, {env:?}: port-forward sessions in the VK log: {sessions:?}"
        );
    }

    // A port the container does not publish: the connection fails and kubectl names why.
    let mut fwd = port_forward(&bed.ns, "model", 9999, &[]).await;
    let r = http_status_through(fwd.local).await;
    assert!(r.is_err(), "{r:?}");
    fwd.child.kill().await.unwrap();
    let out = fwd.child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error forwarding port 9999 to pod")
            && stderr.contains("provider rp publishes no address for port 9999"),
        "{stderr}"
    );

    // A provider that publishes no ports: refused before any connection, naming it.
    bed.running_pod("batch", SLURM).await;
    let r = run_kubectl(
        &["port-forward", "-n", &bed.ns, "batch", ":8080"],
        None,
        &[],
    )
    .await;
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr
            .contains("not supported by provider hpc: port forwarding"),
        "{r:?}"
    );
    bed.finish().await;
}

/// A `kubectl attach` running in the background: what it has printed so far.
struct Attached {
    child: tokio::process::Child,
    stdout: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Attached {
    async fn start(ns: &str, pod: &str, env: &[(&str, &str)]) -> Self {
        Self::start_by(&kubectl(), ns, pod, env).await
    }

    async fn start_by(kubectl: &Path, ns: &str, pod: &str, env: &[(&str, &str)]) -> Self {
        let mut child = tokio::process::Command::new(kubectl)
            .args(["attach", "-n", ns, pod])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl starts");
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut out = child.stdout.take().unwrap();
        let seen = stdout.clone();
        // Read all along (a kubectl whose stdout is not read dies of SIGPIPE).
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, stdout }
    }

    fn printed(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }
}

/// Attach sessions the VK has started so far (its debug log).
fn attach_sessions(vk: &Vk) -> usize {
    vk.log()
        .lines()
        .filter(|l| l.contains("attach session starting"))
        .count()
}

/// `kubectl attach` shows what the container writes from the attach on (nothing from before),
/// until the container ends, on both transports: on the real Slurm through the API server's
/// default path, and on a RunPod emulator (its log stream followed) over SPDY.
#[tokio::test]
async fn kubectl_attach_shows_the_output_written_after_it() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;

    // Slurm: the container waits for a file the test creates once the attach is in place.
    let go = bed.slurm.output_dir.join(format!("attach-go-{}", bed.ns));
    let script = format!(
        "echo before-attach; while [ ! -e {go} ]; do sleep 0.2; done; echo after-attach; \
         echo on-stderr >&2; sleep 1; echo last-line",
        go = go.display()
    );
    bed.running_pod_spec("talker", SLURM, &["sh", "-c", &script], &[])
        .await;
    bed.wait_for_log("talker", "before-attach").await;
    let mut attached = Attached::start(&bed.ns, "talker", &[]).await;
    wait_for(Duration::from_secs(30), "the attach session", || async {
        (attach_sessions(&bed.vk) >= 1).then_some(())
    })
    .await;
    std::fs::write(&go, b"").unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), attached.child.wait())
        .await
        .expect("kubectl attach ends when the container does")
        .unwrap();
    let _ = std::fs::remove_file(&go);
    let printed = attached.printed();
    eprintln!("kubectl attach on Slurm printed {printed:?}, {status:?}");
    assert!(status.success(), "{status:?}: {printed:?}");
    assert_eq!(
        printed
            .lines()
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>(),
        ["after-attach", "on-stderr", "last-line"],
        "{printed:?}"
    );

    // RunPod: lines added to the emulator's log before and after the attach (SPDY).
    let pod = bed.running_pod("cloud", RUNPOD).await;
    let logs = bed.runpod_log_of(&pod).await;
    bed.rp
        .admin_post(&logs, json!({"lines": ["earlier line"]}))
        .await;
    bed.wait_for_log("cloud", "earlier line").await;
    let spdy = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
    let mut attached = Attached::start(&bed.ns, "cloud", &spdy).await;
    wait_for(
        Duration::from_secs(30),
        "the second attach session",
        || async { (attach_sessions(&bed.vk) >= 2).then_some(()) },
    )
    .await;
    bed.rp
        .admin_post(&logs, json!({"lines": ["later line 1", "later line 2"]}))
        .await;
    wait_for(
        Duration::from_secs(30),
        "the later lines through attach",
        || async { attached.printed().contains("later line 2").then_some(()) },
    )
    .await;
    let printed = attached.printed();
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        ["later line 1", "later line 2"],
        "{printed:?}"
    );
    attached.child.kill().await.unwrap();
    assert!(
        bed.vk.log().contains("SPDY/3.1"),
        "no SPDY session in the VK log"
    );
    bed.finish().await;
}

/// kubectl 1.29, whose exec, attach and port-forward speak SPDY only (WebSockets became
/// kubectl's default in 1.30): built by `scripts/testbed/build`, named in the testbed's env
/// file.
fn spdy_only_kubectl() -> PathBuf {
    let path = testbed_env("TESTBED_SPDY_KUBECTL").expect(
        "TESTBED_SPDY_KUBECTL not found in the testbed env file; start the testbed with \
         `scripts/testbed/up` (it builds kubectl 1.29) or run `make test`",
    );
    PathBuf::from(path)
}

/// A kubectl that speaks SPDY only (1.29) execs (output, exit code, stdin), attaches and
/// forwards a port through the API server, which passes its SPDY upgrade to the VK.
#[tokio::test]
async fn a_spdy_only_kubectl_execs_attaches_and_forwards_ports() {
    let _turn = SERIAL.lock().await;
    let old = spdy_only_kubectl();
    let version = run_kubectl_with(&old, &["version", "--client", "-o", "json"], None, &[]).await;
    assert!(
        version.stdout.contains("\"gitVersion\": \"v1.29."),
        "not kubectl 1.29: {version:?}"
    );
    let bed = Bed::start().await;
    bed.running_pod("shell", SLURM).await;
    exec_works(&bed, &old, "shell", &[]).await;
    let spdy_sessions = |log: &str| {
        log.lines()
            .filter(|l| l.contains("exec session starting") && l.contains("SPDY/3.1"))
            .count()
    };
    // Three exec sessions, each over SPDY (the only transport this kubectl has).
    assert!(
        spdy_sessions(&bed.vk.log()) >= 3,
        "no SPDY exec sessions in the VK log"
    );

    // Attach: the lines added after it, through SPDY.
    let pod = bed.running_pod_with_ports("model", RUNPOD, &[8080]).await;
    let logs = bed.runpod_log_of(&pod).await;
    let attached = Attached::start_by(&old, &bed.ns, "model", &[]).await;
    wait_for(Duration::from_secs(30), "the attach session", || async {
        (attach_sessions(&bed.vk) >= 1).then_some(())
    })
    .await;
    bed.rp
        .admin_post(&logs, json!({"lines": ["seen by kubectl 1.29"]}))
        .await;
    wait_for(
        Duration::from_secs(30),
        "the line through attach",
        || async {
            attached
                .printed()
                .contains("seen by kubectl 1.29")
                .then_some(())
        },
    )
    .await;
    drop(attached);

    // Port-forward to the published port.
    let mut fwd = port_forward_by(&old, &bed.ns, "model", 8080, &[]).await;
    bed.rp
        .admin_post("/serve", json!({"httpStatus": 200}))
        .await;
    let answer = http_status_through(fwd.local).await;
    assert!(
        answer.as_deref().is_ok_and(|l| l.contains(" 200")),
        "{answer:?}"
    );
    fwd.child.kill().await.unwrap();
    bed.finish().await;
}
