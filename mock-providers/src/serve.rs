//! What answers on an emulated workload's published TCP ports: one real local listener per
//! port while the workload runs, standing in for the workload's own server (a model server's
//! readiness endpoint, say), so a client such as the VK's prober has something real to reach.
//!
//! Every connection gets one HTTP response whose status the tests switch through the admin API
//! (`POST /_admin/serve`): 200 for a server that is ready, 503 for one still loading. With
//! `accept: false` the listener is closed (connections are refused) and reopened on the same
//! port when accepting again.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the stand-in server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    /// HTTP status of every response.
    pub http_status: u16,
    /// False: the port refuses connections.
    pub accept: bool,
}

impl Default for Answer {
    fn default() -> Self {
        Self {
            http_status: 200,
            accept: true,
        }
    }
}

/// The body of `POST /_admin/serve`: the answer of one workload's ports, or (without
/// `workload`) of every workload without its own.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SetAnswer {
    pub workload: Option<String>,
    #[serde(flatten)]
    pub answer: Answer,
}

struct Port {
    /// The workload's address, where the listener is bound.
    host: String,
    public: u16,
    task: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct Inner {
    /// What the provider API lists as every workload's address instead of its own (`POST
    /// /_admin/addresses`: a provider listing a malformed or loopback address).
    listed: Option<String>,
    default: Answer,
    by_workload: HashMap<String, Answer>,
    /// Listeners by workload id and container port.
    ports: HashMap<String, HashMap<u16, Port>>,
}

/// The listeners of every running workload with TCP ports.
#[derive(Clone, Default)]
pub struct Served {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served").finish_non_exhaustive()
    }
}

/// The address listeners bind and report as the pod's `ip`: `MOCK_PUBLISH_HOST` if set, else
/// this host's address on its default route (found by connecting a UDP socket, which sends
/// nothing), else 127.0.0.1. Not loopback where possible: the API server refuses loopback
/// addresses in EndpointSlices, and the pod IP comes from here as on RunPod.
pub fn host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        if let Ok(h) = std::env::var("MOCK_PUBLISH_HOST")
            && !h.is_empty()
        {
            return h;
        }
        std::net::UdpSocket::bind(("0.0.0.0", 0))
            .and_then(|s| {
                s.connect(("203.0.113.1", 9))?;
                s.local_addr()
            })
            .map(|a| a.ip())
            .ok()
            .filter(|ip| !ip.is_unspecified())
            .map_or_else(|| "127.0.0.1".to_owned(), |ip| ip.to_string())
    })
}

/// The address of the `n`-th emulated workload: its own, from the first half of RFC 2544's
/// benchmarking range 198.18.0.0/15 (never routed on the internet), when addresses of that
/// range are local to this host (the testbed routes the range to the loopback interface:
/// `ip route add local 198.18.0.0/15 dev lo`), so the workload's listeners answer there and
/// tests can tell pods apart; else [`host`], shared by every workload, as pods on one RunPod
/// machine share its public IP.
pub fn workload_address(n: u64) -> String {
    in_range(0, n)
}

/// The address of the `n`-th emulated Slurm node: from the second half of the range (see
/// [`workload_address`]), else [`host`].
pub fn node_address(n: u64) -> String {
    in_range(1, n)
}

fn in_range(half: u8, n: u64) -> String {
    if !range_is_local() {
        return host().to_owned();
    }
    range_address(half, n).to_string()
}

/// The `n`-th address of half `half` of 198.18.0.0/15: 254 (.1-.254) in each of its 256 /24s,
/// then again from the start.
fn range_address(half: u8, n: u64) -> std::net::Ipv4Addr {
    let n = n % (254 * 256);
    let (third, fourth) = ((n / 254) as u8, (n % 254) as u8 + 1);
    std::net::Ipv4Addr::new(198, 18 + half, third, fourth)
}

/// Whether the addresses of 198.18.0.0/15 can be bound here (`MOCK_WORKLOAD_ADDRESSES=host`
/// says no).
pub fn range_is_local() -> bool {
    static LOCAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOCAL.get_or_init(|| {
        std::env::var("MOCK_WORKLOAD_ADDRESSES").as_deref() != Ok("host")
            && std::net::TcpListener::bind(("198.18.0.1", 0)).is_ok()
    })
}

impl Served {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The public port of each of `private` for a running workload at `host` (its
    /// [`workload_address`]), opening listeners as needed (a port that cannot be bound is left
    /// out).
    pub fn open(&self, workload: &str, host: &str, private: &[u16]) -> Vec<(u16, u16)> {
        let mut inner = self.lock();
        let answer = answer_of(&inner, workload);
        let ports = inner.ports.entry(workload.to_owned()).or_default();
        let mut out = Vec::new();
        for &p in private {
            if let Some(port) = ports.get(&p) {
                out.push((p, port.public));
                continue;
            }
            let Ok((public, task)) = self.listen(workload, host, 0, answer.accept) else {
                continue;
            };
            let host = host.to_owned();
            ports.insert(p, Port { host, public, task });
            out.push((p, public));
        }
        out
    }

    /// What the provider API lists as the address of a workload at `host`.
    pub fn listed_address(&self, host: &str) -> String {
        self.lock()
            .listed
            .clone()
            .unwrap_or_else(|| host.to_owned())
    }

    /// Lists `listed` as every workload's address from now on (`None`: their own).
    pub fn set_listed(&self, listed: Option<String>) {
        self.lock().listed = listed;
    }

    /// Closes a workload's listeners (it stopped running or is gone).
    pub fn close(&self, workload: &str) {
        self.lock().ports.remove(workload);
    }

    /// Closes the listeners of workloads not in `live`.
    pub fn retain(&self, live: &HashSet<&str>) {
        self.lock().ports.retain(|w, _| live.contains(w.as_str()));
    }

    /// Sets how ports answer from now on.
    pub fn set(&self, s: SetAnswer) {
        let mut inner = self.lock();
        match &s.workload {
            Some(w) => {
                inner.by_workload.insert(w.clone(), s.answer);
            }
            None => {
                inner.default = s.answer;
                inner.by_workload.clear();
            }
        }
        // Apply `accept` to the open listeners: close them, or reopen them on their port.
        let targets: Vec<String> = match &s.workload {
            Some(w) => vec![w.clone()],
            None => inner.ports.keys().cloned().collect(),
        };
        for w in targets {
            let accept = answer_of(&inner, &w).accept;
            let Some(ports) = inner.ports.get_mut(&w) else {
                continue;
            };
            for port in ports.values_mut() {
                match (accept, port.task.is_some()) {
                    (false, true) => {
                        if let Some(t) = port.task.take() {
                            t.abort();
                        }
                    }
                    (true, false) => {
                        if let Ok((_, task)) = self.listen(&w, &port.host, port.public, true) {
                            port.task = task;
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Binds `port` (0: any) of `host` and serves it; with `accept` false only picks the
    /// number (nothing listens until accepting again).
    fn listen(
        &self,
        workload: &str,
        host: &str,
        port: u16,
        accept: bool,
    ) -> std::io::Result<(u16, Option<tokio::task::AbortHandle>)> {
        let std = std::net::TcpListener::bind((host, port))?;
        let public = std.local_addr()?.port();
        if !accept {
            return Ok((public, None));
        }
        std.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(std)?;
        let served = self.clone();
        let workload = workload.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((conn, peer)) = listener.accept().await {
                let status = answer_of(&served.lock(), &workload).http_status;
                tokio::spawn(respond(conn, peer, status, workload.clone()));
            }
        });
        Ok((public, Some(task.abort_handle())))
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

fn answer_of(inner: &Inner, workload: &str) -> Answer {
    inner
        .by_workload
        .get(workload)
        .copied()
        .unwrap_or(inner.default)
}

/// Serves the stand-in alone on `addr` until the process ends, answering 200 with `name` in
/// the body (`mock-providers stand-in`): an in-cluster replica of a test's Deployment answers as
/// its replicas on an emulated provider do, so a client of their Service can tell them apart.
pub async fn stand_in(addr: SocketAddr, name: String) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (conn, peer) = listener.accept().await?;
        tokio::spawn(respond(conn, peer, 200, name.clone()));
    }
}

/// Reads the request head (if any) and writes one response, then closes. The body names the
/// workload (whose id carries its pod's UID), so a client of a Service can tell which replica
/// answered.
async fn respond(
    mut conn: tokio::net::TcpStream,
    _peer: SocketAddr,
    status: u16,
    workload: String,
) {
    let mut buf = vec![0u8; 8192];
    let mut read = 0;
    let head = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while read < buf.len() {
            match conn.read(&mut buf[read..]).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => read += n,
            }
            if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                return true;
            }
        }
        true
    })
    .await;
    if head != Ok(true) {
        return;
    }
    let reason = match status {
        200 => "OK",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let body = format!("{status} {reason} {workload}\n");
    let resp = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(port: u16) -> Option<String> {
        let mut c = tokio::net::TcpStream::connect((host(), port)).await.ok()?;
        c.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .ok()?;
        let mut s = String::new();
        c.read_to_string(&mut s).await.ok()?;
        // The body names the workload that answered.
        let body = s.split("\r\n\r\n").nth(1)?;
        assert!(body.ends_with(" w1\n"), "{body:?}");
        s.lines().next().map(str::to_owned)
    }

    #[test]
    fn range_addresses_are_distinct_and_never_network_or_broadcast() {
        assert_eq!(range_address(0, 0).to_string(), "198.18.0.1");
        assert_eq!(range_address(0, 253).to_string(), "198.18.0.254");
        assert_eq!(range_address(0, 254).to_string(), "198.18.1.1");
        assert_eq!(range_address(1, 7).to_string(), "198.19.0.8");
        let all: HashSet<_> = (0..254 * 256).map(|n| range_address(0, n)).collect();
        assert_eq!(all.len(), 254 * 256);
        assert!(all.iter().all(|a| !matches!(a.octets()[3], 0 | 255)));
    }

    #[tokio::test]
    async fn ports_answer_as_switched_and_close_with_the_workload() {
        let s = Served::default();
        s.set(SetAnswer {
            workload: None,
            answer: Answer {
                http_status: 503,
                accept: true,
            },
        });
        let ports = s.open("w1", host(), &[8080]);
        let (private, public) = ports[0];
        assert_eq!(private, 8080);
        assert_eq!(s.open("w1", host(), &[8080]), ports, "opened once");
        assert_eq!(
            get(public).await.as_deref(),
            Some("HTTP/1.1 503 Service Unavailable")
        );
        s.set(SetAnswer {
            workload: Some("w1".into()),
            answer: Answer::default(),
        });
        assert_eq!(get(public).await.as_deref(), Some("HTTP/1.1 200 OK"));
        s.set(SetAnswer {
            workload: Some("w1".into()),
            answer: Answer {
                http_status: 200,
                accept: false,
            },
        });
        tokio::task::yield_now().await;
        assert!(get(public).await.is_none(), "refused");
        s.set(SetAnswer {
            workload: Some("w1".into()),
            answer: Answer::default(),
        });
        assert_eq!(get(public).await.as_deref(), Some("HTTP/1.1 200 OK"));
        s.close("w1");
        tokio::task::yield_now().await;
        assert!(get(public).await.is_none(), "closed with the workload");
    }
}
