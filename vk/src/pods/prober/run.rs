//! One probe task of [`super::Prober`]: it sleeps on the probe's schedule, probes (HTTP and TCP
//! at the address the published host was checked at, exec through the provider) and publishes
//! a changed result.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use tokio::sync::Semaphore;
use tracing::debug;

use super::super::Queue;
use super::super::networks::dial_address;
use super::super::probe::{Action, Outcome, Spec, Tracker};
use super::{Published, Reach};
use crate::provider::{DynProvider, Endpoint, ExecRequest};

/// One probe task.
pub(super) struct Run {
    pub(super) uid: String,
    pub(super) spec: Spec,
    pub(super) reach: Reach,
    pub(super) provider_id: String,
    pub(super) started_at: Option<Timestamp>,
    pub(super) provider: Arc<dyn DynProvider>,
    pub(super) http: Option<reqwest::Client>,
    pub(super) limit: Arc<Semaphore>,
    pub(super) result: Arc<Mutex<Published>>,
    pub(super) queue: Queue,
    /// The cluster's own networks when the task started: never dialled.
    pub(super) cluster: Arc<[ipnet::IpNet]>,
}

impl Run {
    pub(super) async fn run(self) {
        let mut tracker = Tracker::new(&self.spec);
        let running_for = self
            .started_at
            .and_then(|s| Duration::try_from(Timestamp::now().duration_since(s)).ok())
            .unwrap_or(Duration::ZERO);
        let mut pause = tracker.wait(&self.spec, running_for);
        loop {
            tokio::time::sleep(pause).await;
            let start = Instant::now();
            let outcome = {
                let Ok(_permit) = self.limit.acquire().await else {
                    return;
                };
                self.probe_once().await
            };
            match outcome {
                Some((o, detail)) => {
                    let mut published = self.result.lock().unwrap_or_else(|p| p.into_inner());
                    if o == Outcome::Failure {
                        published.detail = detail;
                    }
                    if tracker.record(o) {
                        published.outcome = Some(tracker.result());
                        debug!(uid = %self.uid, kind = self.spec.kind.as_str(),
                            result = ?tracker.result(), "probe result changed");
                        self.queue.add(&self.uid);
                    }
                }
                None => tracker.skip(),
            }
            // Periods run from probe start to probe start.
            pause = tracker
                .wait(&self.spec, running_for)
                .saturating_sub(start.elapsed());
        }
    }

    /// One probe and, for a failure, why (worded as the kubelet words it); `None` when the
    /// prober itself could not run it (thrown away).
    async fn probe_once(&self) -> Option<(Outcome, String)> {
        match (&self.spec.action, &self.reach) {
            (
                Action::Http {
                    https,
                    path,
                    headers,
                    ..
                },
                Reach::Connect(e),
            ) => self.http_get(*https, path, headers, e).await,
            (Action::Tcp { .. }, Reach::Connect(e)) => Some(self.tcp_socket(e).await),
            (Action::Exec { command }, Reach::Exec) => self.exec(command).await,
            _ => None,
        }
    }

    /// An `httpGet` probe of the published endpoint `e`.
    async fn http_get(
        &self,
        https: bool,
        path: &str,
        headers: &[(String, String)],
        e: &Endpoint,
    ) -> Option<(Outcome, String)> {
        let timeout = self.spec.timeout;
        let http = self.http.as_ref()?;
        let scheme = if https { "https" } else { "http" };
        let url = format!("{scheme}://{e}");
        let addr = match dial_address(&e.host, e.port, &self.cluster, false).await {
            Ok(a) => a,
            Err(why) => return Some((Outcome::Failure, format!("Get \"{url}\": {why}"))),
        };
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        // The checked address, with the published host as the Host header.
        let mut req = http
            .get(format!("{scheme}://{addr}{path}"))
            .header("Host", e.to_string())
            .timeout(timeout)
            .header("User-Agent", "kube-probe/gpu-vk")
            .header("Accept", "*/*");
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let url = format!("{url}{path}");
        Some(match req.send().await {
            Ok(r) if (200..400).contains(&r.status().as_u16()) => (Outcome::Success, String::new()),
            // Connection refused, timeouts and error statuses are all failures.
            Ok(r) => (
                Outcome::Failure,
                format!("HTTP probe failed with statuscode: {}", r.status().as_u16()),
            ),
            Err(err) if err.is_timeout() => (
                Outcome::Failure,
                format!(
                    "Get \"{url}\": context deadline exceeded (timeout {}s)",
                    timeout.as_secs()
                ),
            ),
            Err(err) => (Outcome::Failure, format!("Get \"{url}\": {}", root(&err))),
        })
    }

    /// A `tcpSocket` probe of the published endpoint `e`.
    async fn tcp_socket(&self, e: &Endpoint) -> (Outcome, String) {
        let addr = match dial_address(&e.host, e.port, &self.cluster, false).await {
            Ok(a) => a,
            Err(why) => return (Outcome::Failure, format!("dial tcp {e}: {why}")),
        };
        let dial = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(self.spec.timeout, dial).await {
            Ok(Ok(_)) => (Outcome::Success, String::new()),
            Ok(Err(err)) => (Outcome::Failure, format!("dial tcp {e}: {err}")),
            Err(_) => (Outcome::Failure, format!("dial tcp {e}: i/o timeout")),
        }
    }

    /// An `exec` probe through the provider's exec.
    async fn exec(&self, command: &[String]) -> Option<(Outcome, String)> {
        let timeout = self.spec.timeout;
        let req = ExecRequest {
            command: command.to_vec(),
            stdin: false,
            tty: false,
        };
        let run = async {
            let s = self.provider.exec(&self.provider_id, req).await?;
            let drain = |st: crate::provider::LogStream| st.for_each(|_| async {});
            let stderr = async {
                if let Some(e) = s.stderr {
                    drain(e).await;
                }
            };
            futures::join!(drain(s.stdout), stderr);
            s.exit.await
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(0)) => Some((Outcome::Success, String::new())),
            Ok(Ok(code)) => Some((
                Outcome::Failure,
                format!("command {command:?} exited with {code}"),
            )),
            Err(_) => Some((
                Outcome::Failure,
                format!("command {command:?} timed out after {}s", timeout.as_secs()),
            )),
            // The provider could not run the command at all: not the container's fault.
            Ok(Err(_)) => None,
        }
    }
}

/// The innermost cause of an error (reqwest's own message says only "error sending request").
fn root(err: &(dyn std::error::Error + 'static)) -> String {
    let mut e = err;
    while let Some(next) = e.source() {
        e = next;
    }
    e.to_string()
}
