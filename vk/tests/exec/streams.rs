//! kubectl port-forward and attach through the VK on the testbed, and a kubectl that speaks only
//! SPDY (exec, attach and port-forward).

use super::*;

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
