//! `/metrics/resource` and `/stats/summary` from the usage figures providers report
//! (`Observed.usage` of running workloads).
//!
//! `/metrics/resource` carries exactly the families of the kubelet's resource metrics collector
//! (`pkg/kubelet/metrics/collectors/resource_metrics.go`) that metrics-server's scraper parses
//! (`pkg/scraper/client/resource/decode.go`): `node_cpu_usage_seconds_total`,
//! `node_memory_working_set_bytes`, `container_cpu_usage_seconds_total`,
//! `container_memory_working_set_bytes`, `container_start_time_seconds` (labels `container`,
//! `pod`, `namespace`), `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes` (labels
//! `pod`, `namespace`), `scrape_error` and `resource_scrape_error`. Samples carry the usage's
//! time in milliseconds, as the kubelet's do; metrics-server computes CPU rates from them.
//!
//! No zero is ever emitted for a running container: metrics-server drops a whole pod when one
//! of its containers has zero CPU or memory, and a zero would also be a lie. A container whose
//! provider reports no usage is left out, as the kubelet leaves out containers without stats.
//! Node figures are the sums over the node's containers; the node CPU counter stays monotonic
//! when pods go away (see [`CpuLedger`]). Without any usage the node samples are left out too
//! (metrics-server discards a node with zero CPU or memory anyway).
//!
//! This module gathers the figures into a [`Snapshot`] and serves both endpoints; `prometheus`
//! renders the resource metrics text and `summary` the stats summary.

mod prometheus;
mod summary;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

pub use prometheus::render_resource_metrics;
pub use summary::{
    ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, Summary, summary_of,
};

use super::{AppState, Host};
use crate::provider::{Usage, WorkloadState};

/// One running container and the usage its provider reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUsage {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
    pub pod_start: Option<Timestamp>,
    pub container_start: Option<Timestamp>,
    pub usage: Usage,
}

/// Node totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeUsage {
    /// Monotonic cumulative CPU time of the node's containers.
    pub cpu_usage_nanos: u64,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Latest usage time among the containers; `None` without any usage.
    pub timestamp: Option<Timestamp>,
}

/// What both endpoints render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub node_name: String,
    pub node_start: Timestamp,
    pub node: NodeUsage,
    pub containers: Vec<ContainerUsage>,
}

/// Keeps the node's cumulative CPU counter monotonic although it is a sum over containers that
/// come and go: a pod's last figure is retired into the total when the pod leaves the node, and
/// a container counter that restarts from zero is carried over. In memory only: a VK restart
/// resets the counter, which Prometheus-style consumers handle as any counter reset.
#[derive(Debug, Default)]
pub struct CpuLedger {
    /// pod UID -> (carried over from earlier restarts, last reported value)
    per_pod: HashMap<String, (u64, u64)>,
    retired: u64,
}

impl CpuLedger {
    /// Folds in the current counters (`samples`) given the UIDs of the pods still on the node,
    /// and returns the node's total.
    pub fn total<'a>(
        &mut self,
        live: &HashSet<String>,
        samples: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> u64 {
        for (uid, nanos) in samples {
            let entry = self.per_pod.entry(uid.to_owned()).or_insert((0, 0));
            if nanos < entry.1 {
                entry.0 = entry.0.saturating_add(entry.1);
            }
            entry.1 = nanos;
        }
        let gone: Vec<String> = self
            .per_pod
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some((base, last)) = self.per_pod.remove(&uid) {
                self.retired = self.retired.saturating_add(base).saturating_add(last);
            }
        }
        self.per_pod
            .values()
            .fold(self.retired, |acc, (base, last)| {
                acc.saturating_add(*base).saturating_add(*last)
            })
    }
}

/// The running containers of `host` with usage, sorted by namespace, pod and container.
pub fn running_containers(host: &dyn Host) -> (Vec<ContainerUsage>, HashSet<String>) {
    let live = std::cell::RefCell::new(HashSet::new());
    let mut out = Vec::new();
    // Only pods with a running workload that reports usage are decoded.
    let want = |uid: &str| {
        live.borrow_mut().insert(uid.to_owned());
        host.workload_of(uid).is_some_and(|(_, o)| {
            o.usage.is_some()
                && matches!(
                    o.state,
                    WorkloadState::Running | WorkloadState::NotReady { .. }
                )
        })
    };
    host.visit_pods(&want, &mut |pod| {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let Some((_, observed)) = host.workload_of(&uid) else {
            return;
        };
        if !matches!(
            observed.state,
            WorkloadState::Running | WorkloadState::NotReady { .. }
        ) {
            return;
        }
        let (Some(usage), Some(container)) = (observed.usage, main_container(pod)) else {
            return;
        };
        let status = pod.status.as_ref();
        let container_start = observed.started_at.or_else(|| {
            status?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == container)?
                .state
                .as_ref()?
                .running
                .as_ref()?
                .started_at
                .as_ref()
                .map(|t| t.0)
        });
        out.push(ContainerUsage {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            uid,
            container,
            pod_start: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            container_start,
            usage,
        });
    });
    let live = live.into_inner();
    out.sort_by(|a, b| {
        (&a.namespace, &a.pod, &a.container).cmp(&(&b.namespace, &b.pod, &b.container))
    });
    (out, live)
}

/// The container a provider runs for a pod (pods on this node run exactly one).
fn main_container(pod: &Pod) -> Option<String> {
    Some(crate::pods::spec::main_container(pod)?.name.clone())
}

/// Builds the snapshot both endpoints render, advancing the node CPU ledger.
pub(crate) fn snapshot(s: &AppState) -> Snapshot {
    let (containers, live) = running_containers(s.host.as_ref());
    let cpu_usage_nanos = {
        let mut ledger = s.ledger.lock().unwrap_or_else(|e| e.into_inner());
        ledger.total(
            &live,
            containers
                .iter()
                .map(|c| (c.uid.as_str(), c.usage.cpu_usage_nanos)),
        )
    };
    let node = NodeUsage {
        cpu_usage_nanos,
        cpu_millis: containers.iter().map(|c| c.usage.cpu_millis).sum(),
        memory_bytes: containers.iter().map(|c| c.usage.memory_bytes).sum(),
        timestamp: containers.iter().map(|c| c.usage.timestamp).max(),
    };
    Snapshot {
        node_name: s.node_name.clone(),
        node_start: s.started,
        node,
        containers,
    }
}

pub(crate) async fn resource_metrics(State(s): State<AppState>) -> Response {
    let text = render_resource_metrics(&snapshot(&s));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(crate) async fn summary(State(s): State<AppState>) -> Response {
    axum::Json(summary_of(&snapshot(&s))).into_response()
}
