//! `kubectl exec` end to end: the testbed's kubectl, the 1.36 API server passing the WebSocket
//! straight through to the VK (its Node declares `ExtendWebSocketsToKubelet`; a 1.34 testbed's
//! API server translates it to SPDY instead, `scripts/test-oldest`), the kubelet
//! API's v5 channel protocol, and the Slurm provider running the command with `srun --jobid
//! --overlap` inside the pod's real job (`make slurm-up`). Also: exec on a provider without
//! exec (a RunPod emulator) names the provider; kubectl with WebSockets off reaches the VK over
//! SPDY/3.1, and so does the API server for a node that does not declare the feature.
//!
//! The Slurm is found through `SLURM_ENV_FILE` (`make test` sets it); without it these tests
//! fail, on purpose, saying to run `make slurm-up`: they never pass without having run. The
//! Slurm node is small (2 CPUs), so the tests take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/harness.rs"]
mod harness;

use std::path::PathBuf;
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

/// A value of the testbed's env file (next to its kubeconfig).
fn testbed_env(name: &str) -> Option<String> {
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

/// The testbed's own kubectl (same version as the API server).
fn kubectl() -> PathBuf {
    let path = testbed_env("TESTBED_KUBECTL").expect(
        "TESTBED_KUBECTL not found in the testbed env file next to KUBECONFIG; start the testbed \
         with `scripts/testbed/up` or run `make test`",
    );
    PathBuf::from(path)
}

/// What a kubectl run gave back.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs kubectl with `args`, feeding `stdin` if given; `env` adds variables.
async fn run_kubectl(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(kubectl());
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
        let mut w = child.stdin.take().unwrap();
        w.write_all(input).await.unwrap();
        drop(w);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 90 s"))
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
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

/// The Slurm provider's settings with exec on: srun finds the cluster through `slurmConf`;
/// when the tests run as root, srun runs as the jobs' user (Slurm lets only a job's owner add
/// steps to it).
fn slurm_with_exec(slurm: &RealSlurm) -> String {
    let mut yaml = slurm.provider_yaml(SLURM);
    yaml.push_str("    exec: srun\n");
    if let Some(conf) = &slurm.slurm_conf {
        yaml.push_str(&format!("    slurmConf: {}\n", json!(conf)));
    }
    if rustix::process::getuid().is_root() {
        yaml.push_str(&format!(
            "    execWrapper: [runuser, -u, {}, --]\n",
            json!(slurm.user)
        ));
    }
    yaml
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
        let providers = format!("{}{}", rp.provider_yaml(RUNPOD), slurm_with_exec(&slurm));
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
                    "command": ["sleep", "300"],
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

    async fn exec(&self, pod: &str, args: &[&str], stdin: Option<&[u8]>) -> Run {
        self.exec_with_env(pod, args, stdin, &[]).await
    }

    async fn exec_with_env(
        &self,
        pod: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        env: &[(&str, &str)],
    ) -> Run {
        let mut all = vec!["exec", "-n", &self.ns, pod];
        if stdin.is_some() {
            all.push("-i");
        }
        all.push("--");
        all.extend_from_slice(args);
        run_kubectl(&all, stdin, env).await
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
    let node = Api::<Node>::all(bed.c.clone())
        .get(&bed.vk.node)
        .await
        .unwrap();
    let declared = node.status.unwrap().declared_features.unwrap_or_default();
    let minor: u32 = bed
        .c
        .apiserver_version()
        .await
        .unwrap()
        .minor
        .trim_end_matches('+')
        .parse()
        .unwrap();
    let passes_websockets = minor >= 36;
    assert_eq!(
        declared.iter().any(|f| f == "ExtendWebSocketsToKubelet"),
        passes_websockets,
        "1.{minor}: {declared:?}"
    );

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
async fn exec_works(bed: &Bed, pod: &str, env: &[(&str, &str)]) {
    let r = bed
        .exec_with_env(
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
        .exec_with_env(pod, &["sh", "-c", "echo fine"], None, env)
        .await;
    assert_eq!((r.code, r.stdout.as_str()), (Some(0), "fine\n"), "{r:?}");
    let input = b"spdy stdin line\nsecond line with 'quotes' and $dollar\n";
    let r = bed.exec_with_env(pod, &["cat"], Some(input), env).await;
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
    exec_works(&bed, "shell", &[]).await;
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
    let mut child = tokio::process::Command::new(kubectl())
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
    let node = Api::<Node>::all(bed.c.clone())
        .get(&bed.vk.node)
        .await
        .unwrap();
    let declared = node.status.unwrap().declared_features.unwrap_or_default();
    let minor: u32 = bed
        .c
        .apiserver_version()
        .await
        .unwrap()
        .minor
        .trim_end_matches('+')
        .parse()
        .unwrap();
    let passes_websockets = minor >= 36;
    assert_eq!(
        declared.iter().any(|f| f == "ExtendWebSocketsToKubelet"),
        passes_websockets,
        "1.{minor}: {declared:?}"
    );
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
            "1.{minor}, {env:?}: port-forward sessions in the VK log: {sessions:?}"
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
