//! What the suite does on a kind node itself, through its container (a kind node is a Docker
//! container named as its Node): the VK's process found, killed with SIGKILL and waited out, and
//! kube-proxy's rules for the VK's Service read on the control-plane node.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{kubectl, run};

/// Waits up to 60 s until the first container of pod `pod` runs.
pub(super) fn wait_running(pod: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = kubectl();
        c.args(["get", "pod", pod, "-o"])
            .arg("jsonpath={.status.containerStatuses[0].state.running.startedAt}");
        if !run(c, "reading the VK pod's container state")
            .trim()
            .is_empty()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the VK container of pod {pod} did not run within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The node and UID of pod `pod` (in [`super::NAMESPACE`]).
fn node_and_uid(pod: &str) -> (String, String) {
    let mut c = kubectl();
    c.args([
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.spec.nodeName} {.metadata.uid}",
    ]);
    let out = run(c, "reading the VK pod's node and UID");
    let mut parts = out.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(node), Some(uid)) => (node.to_owned(), uid.to_owned()),
        _ => panic!("VK pod {pod} has no node or UID yet: {out:?}"),
    }
}

/// Runs on `node` (a kind node is a Docker container named as its Node) over every process
/// named `vk` whose cgroup carries pod `uid` (with `-` or `_`, as the kubelet's cgroup driver
/// writes it): with `kill`, sends it SIGKILL. Returns how many there were.
fn vk_processes(node: &str, uid: &str, kill: bool) -> usize {
    let act = if kill {
        r#"kill -KILL "${d#/proc/}" && "#
    } else {
        ""
    };
    let script = format!(
        r#"n=0
for d in /proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = vk ] || continue
  grep -qe 'pod{uid}' -e 'pod{under}' "$d/cgroup" 2>/dev/null || continue
  {act}n=$((n + 1))
done
echo "$n""#,
        under = uid.replace('-', "_")
    );
    let mut c = Command::new("docker");
    c.args(["exec", node, "sh", "-c", &script]);
    let out = run(
        c,
        &format!("looking for the VK process of pod {uid} on node {node}"),
    );
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("counting VK processes on {node}: {out:?}"))
}

/// Kills the `vk` process of pod `pod` with SIGKILL, through its node's container: other VK
/// pods on the same node are untouched, and from the node's PID namespace the VK is an
/// ordinary process (a SIGKILL from inside its own container would be ignored: it is PID 1
/// there, and pid_namespaces(7) says a namespace's init receives from within the namespace only
/// the signals it handles, SIGKILL included). Panics unless exactly the pod's VK process was killed. Returns the node and UID.
pub fn sigkill(pod: &str) -> (String, String) {
    let (node, uid) = node_and_uid(pod);
    let killed = vk_processes(&node, &uid, true);
    assert_eq!(
        killed, 1,
        "SIGKILL of pod {pod}'s VK process on node {node}: killed {killed} processes, not 1"
    );
    eprintln!("conformance: SIGKILL of the VK process of pod {pod} on node {node}");
    (node, uid)
}

/// Waits until no VK process of pod `uid` runs on `node`, seen twice 500 ms apart: after a
/// SIGKILL the kubelet may restart the container before it learns that the pod is deleted, and
/// that process lives until the kubelet stops it (at least its 2 s minimum grace, longer on a
/// busy node). A VK started before then would run beside it (seen on kind: two VKs creating
/// one pod's workload).
pub(super) fn wait_no_vk(node: &str, uid: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut clear = 0;
    while clear < 2 {
        assert!(
            Instant::now() < deadline,
            "a VK process of pod {uid} still runs on node {node} 60 s after the pod was deleted"
        );
        clear = if vk_processes(node, uid, false) == 0 {
            clear + 1
        } else {
            0
        };
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits (until `deadline`) for kube-proxy on the kind cluster's control-plane node to route
/// `node`'s InternalIP (the VK's Service ClusterIP) on the kubelet port. Skipped where the
/// rules cannot be read (no `KIND_CLUSTER`, no docker, no iptables in the node image).
pub(super) fn wait_service_programmed(node: &str, deadline: Instant) {
    let Ok(cluster) = std::env::var("KIND_CLUSTER") else {
        return;
    };
    let mut c = kubectl();
    c.args(["get", "node", node, "-o"])
        .arg(r#"jsonpath={.status.addresses[?(@.type=="InternalIP")].address}"#);
    let ip = run(c, "reading the VK node's address");
    let ip = ip.trim();
    if ip.is_empty() {
        return;
    }
    let rule = format!("-d {ip}/32 -p tcp");
    loop {
        let out = Command::new("docker")
            .args([
                "exec",
                &format!("{cluster}-control-plane"),
                "iptables-save",
                "-t",
                "nat",
            ])
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                if text
                    .lines()
                    .any(|l| l.contains(&rule) && l.contains("--dport 10250"))
                {
                    return;
                }
            }
            _ => return,
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy on {cluster}-control-plane did not route node {node}'s address {ip}:10250 within 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
