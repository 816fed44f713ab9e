//! The testbed cluster: a client, namespaces, waiting for conditions, pods and their events,
//! the testbed's env file and its kubectl.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

#[allow(unused_imports)]
use super::*;

/// A client for the testbed; fails loudly when not run under `make test`.
pub async fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: cluster tests run against the local testbed; use `make test` \
         (or `eval \"$(make -s testbed-up)\"` first)"
    );
    Client::try_default().await.expect("testbed reachable")
}

/// A unique, short suffix for names.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..8])
}

/// Creates a namespace named `<prefix>-<unique suffix>` and waits for its default
/// ServiceAccount; returns its name.
pub async fn namespace(c: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    create_namespace(c, &name).await;
    name
}

/// Creates namespace `name` and waits for its default ServiceAccount.
pub async fn create_namespace(c: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sa: Api<ServiceAccount> = Api::namespaced(c.clone(), name);
    wait_for(
        Duration::from_secs(30),
        "default service account",
        || async { sa.get_opt("default").await.ok().flatten().map(|_| ()) },
    )
    .await;
}

pub async fn delete_namespace(c: &Client, name: &str) {
    let _ = Api::<Namespace>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Polls `f` until it returns `Some`, or panics naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// As [`wait_for`], for a check that says what it saw when it is not there yet (`Err`): a
/// timeout then reports the last thing seen, not only what was awaited.
pub async fn wait_seeing<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let seen = match f().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}; last seen: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (20 s) until Node `node` reports Ready.
pub async fn wait_node_ready(c: &Client, node: &str) {
    wait_for(Duration::from_secs(20), "node Ready", || async {
        let n = Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
            .get_opt(node)
            .await
            .ok()??;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// A port to give a VK or a test server to listen on.
///
/// Chosen outside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), from which a
/// port the OS handed out (`bind(":0")`) comes: between this choice and the VK's bind, any
/// outgoing connection of the host may take such a port as its source port, and the VK's bind
/// then fails with "Address already in use" (seen: an admission webhook that never listened).
/// Ports outside that range are only ever taken by an explicit bind; each call of this process
/// tries the next one, from a start spread by the process id so parallel test runs differ.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    let (first, span) = outside_ephemeral(low, high);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(first + (start + n) % span).expect("a port number");
        let free = |host: &str| std::net::TcpListener::bind((host, port)).is_ok();
        if free("127.0.0.1") && free("0.0.0.0") {
            return port;
        }
    }
    panic!("no free port between {first} and {}", first + span - 1)
}

/// The first port and the number of ports of the larger stretch outside `low..=high` (the
/// ephemeral range), above the well-known and registered ports most services use.
fn outside_ephemeral(low: u32, high: u32) -> (u32, u32) {
    const FLOOR: u32 = 10_000;
    let below = low.saturating_sub(FLOOR);
    let above = 65_535u32.saturating_sub(high.max(FLOOR - 1));
    if below >= above {
        (FLOOR, below)
    } else {
        (high.max(FLOOR - 1) + 1, above)
    }
}

#[cfg(test)]
mod tests {
    use super::outside_ephemeral;

    #[test]
    fn ports_are_chosen_outside_the_ephemeral_range() {
        // Linux's default range: the stretch below it.
        assert_eq!(outside_ephemeral(32768, 60999), (10_000, 22_768));
        // A range that starts low: the stretch above it.
        assert_eq!(outside_ephemeral(1024, 40000), (40001, 25_535));
    }
}

/// A pod asking for GPUs that tolerates the virtual node's taint and selects it.
pub fn gpu_pod(name: &str, node: &str, gpus: u32, annotations: &[(&str, &str)]) -> Pod {
    let ann: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": ann, "labels": {"app": name}},
        "spec": pod_spec(node, gpus),
    }))
    .unwrap()
}

pub fn pod_spec(node: &str, gpus: u32) -> Value {
    json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "echo started; sleep 3600"],
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}},
        }],
    })
}

pub async fn pods_with_label(c: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

/// Events recorded for a pod (events.k8s.io/v1).
/// The (reason, note) events of a pod once `done` holds for them, waiting up to 20 s (the VK
/// sends events in the background, so one can land just after the status it explains); the
/// last list seen if it never does.
pub async fn events_when(
    c: &Client,
    ns: &str,
    pod: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = events_for(c, ns, pod).await;
        if done(&events) || std::time::Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn events_for(c: &Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A value of the testbed's env file (`env`, next to its kubeconfig, written by
/// `scripts/testbed/up`).
pub fn testbed_env(name: &str) -> Option<String> {
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

/// The testbed's own kubectl (the API server's version): `TESTBED_KUBECTL` of its env file.
pub fn testbed_kubectl() -> PathBuf {
    let path = testbed_env("TESTBED_KUBECTL").expect(
        "TESTBED_KUBECTL not found in the testbed env file next to KUBECONFIG; start the testbed \
         with `scripts/testbed/up` or run `make test`",
    );
    PathBuf::from(path)
}

/// What a kubectl run gave back.
#[derive(Debug)]
pub struct KubectlRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the testbed's kubectl with `args` ([`run_kubectl_with`]).
pub async fn run_kubectl(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> KubectlRun {
    run_kubectl_with(&testbed_kubectl(), args, stdin, env).await
}

/// Runs `kubectl` with `args` to its end (90 s at most), feeding it `stdin` if given (closed
/// after it); `env` adds variables.
pub async fn run_kubectl_with(
    kubectl: &std::path::Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> KubectlRun {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(kubectl);
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
        let mut w = child.stdin.take().expect("piped stdin");
        w.write_all(input).await.expect("kubectl takes its input");
        drop(w);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 90 s"))
        .expect("kubectl runs");
    KubectlRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
