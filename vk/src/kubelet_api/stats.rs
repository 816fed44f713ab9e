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

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

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

/// The container a provider runs for a pod (pods on this node have exactly one).
fn main_container(pod: &Pod) -> Option<String> {
    Some(pod.spec.as_ref()?.containers.first()?.name.clone())
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

// ---- Prometheus text -------------------------------------------------------------------------

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<String>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }
    fn push(&mut self, labels: &[(&str, &str)], value: &str, ts: Option<Timestamp>) {
        let mut line = String::from(self.name);
        if !labels.is_empty() {
            line.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{k}=\"{}\"", escape(v));
            }
            line.push('}');
        }
        let _ = write!(line, " {value}");
        if let Some(ts) = ts {
            let _ = write!(line, " {}", ts.as_millisecond());
        }
        self.samples.push(line);
    }
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn seconds(nanos: u64) -> String {
    (nanos as f64 / 1e9).to_string()
}

/// Renders the resource metrics in the Prometheus text format (version 0.0.4), families sorted
/// by name as the kubelet's registry emits them.
pub fn render_resource_metrics(s: &Snapshot) -> String {
    let mut c_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut c_mem = Family::new(
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    );
    let mut c_start = Family::new(
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    let mut n_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut n_mem = Family::new(
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
    );
    let mut p_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut p_mem = Family::new(
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    let mut r_err = Family::new(
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    let mut s_err = Family::new(
        "scrape_error",
        "gauge",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
    );

    for c in &s.containers {
        let labels = [
            ("container", c.container.as_str()),
            ("namespace", c.namespace.as_str()),
            ("pod", c.pod.as_str()),
        ];
        let pod_labels = [("namespace", c.namespace.as_str()), ("pod", c.pod.as_str())];
        let u = &c.usage;
        let mut any = false;
        if u.cpu_usage_nanos > 0 {
            c_cpu.push(&labels, &seconds(u.cpu_usage_nanos), Some(u.timestamp));
            p_cpu.push(&pod_labels, &seconds(u.cpu_usage_nanos), Some(u.timestamp));
            any = true;
        }
        if u.memory_bytes > 0 {
            c_mem.push(&labels, &u.memory_bytes.to_string(), Some(u.timestamp));
            p_mem.push(&pod_labels, &u.memory_bytes.to_string(), Some(u.timestamp));
            any = true;
        }
        if any && let Some(start) = c.container_start {
            let secs = start.as_nanosecond() as f64 / 1e9;
            c_start.push(&labels, &secs.to_string(), None);
        }
    }
    if let Some(ts) = s.node.timestamp {
        if s.node.cpu_usage_nanos > 0 {
            n_cpu.push(&[], &seconds(s.node.cpu_usage_nanos), Some(ts));
        }
        if s.node.memory_bytes > 0 {
            n_mem.push(&[], &s.node.memory_bytes.to_string(), Some(ts));
        }
    }
    r_err.push(&[], "0", None);
    s_err.push(&[], "0", None);

    let mut out = String::new();
    for f in [
        c_cpu, c_mem, c_start, n_cpu, n_mem, p_cpu, p_mem, r_err, s_err,
    ] {
        if f.samples.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for line in f.samples {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

// ---- /stats/summary --------------------------------------------------------------------------

/// `stats/v1alpha1.Summary`, CPU and memory only.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: String,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
}

/// RFC 3339 with whole seconds, as `metav1.Time` serialises.
fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

fn non_zero(v: u64) -> Option<u64> {
    (v > 0).then_some(v)
}

fn cpu(time: Timestamp, millis: u64, nanos: u64) -> Option<CpuStats> {
    let nano_cores = non_zero(millis.saturating_mul(1_000_000));
    let core_nanos = non_zero(nanos);
    (nano_cores.is_some() || core_nanos.is_some()).then(|| CpuStats {
        time: rfc3339(time),
        usage_nano_cores: nano_cores,
        usage_core_nano_seconds: core_nanos,
    })
}

fn memory(time: Timestamp, bytes: u64) -> Option<MemoryStats> {
    non_zero(bytes).map(|b| MemoryStats {
        time: rfc3339(time),
        usage_bytes: Some(b),
        working_set_bytes: Some(b),
    })
}

/// The summary of a snapshot; one pod entry per running container with usage.
pub fn summary_of(s: &Snapshot) -> Summary {
    let node_time = s.node.timestamp;
    let pods = s
        .containers
        .iter()
        .map(|c| {
            let u = &c.usage;
            let start = c.container_start.or(c.pod_start).unwrap_or(u.timestamp);
            PodStats {
                pod_ref: PodReference {
                    name: c.pod.clone(),
                    namespace: c.namespace.clone(),
                    uid: c.uid.clone(),
                },
                start_time: rfc3339(c.pod_start.unwrap_or(start)),
                containers: vec![ContainerStats {
                    name: c.container.clone(),
                    start_time: rfc3339(start),
                    cpu: cpu(u.timestamp, u.cpu_millis, u.cpu_usage_nanos),
                    memory: memory(u.timestamp, u.memory_bytes),
                }],
                cpu: cpu(u.timestamp, u.cpu_millis, u.cpu_usage_nanos),
                memory: memory(u.timestamp, u.memory_bytes),
            }
        })
        .collect();
    Summary {
        node: NodeStats {
            node_name: s.node_name.clone(),
            start_time: rfc3339(s.node_start),
            cpu: node_time.and_then(|t| cpu(t, s.node.cpu_millis, s.node.cpu_usage_nanos)),
            memory: node_time.and_then(|t| memory(t, s.node.memory_bytes)),
        },
        pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn container(ns: &str, pod: &str, cpu_nanos: u64, millis: u64, mem: u64) -> ContainerUsage {
        ContainerUsage {
            namespace: ns.into(),
            pod: pod.into(),
            uid: format!("uid-{pod}"),
            container: "main".into(),
            pod_start: Some(ts("2026-05-01T11:00:00Z")),
            container_start: Some(ts("2026-05-01T11:00:02.5Z")),
            usage: Usage {
                cpu_usage_nanos: cpu_nanos,
                cpu_millis: millis,
                memory_bytes: mem,
                timestamp: ts("2026-05-01T12:00:00.123Z"),
            },
        }
    }

    fn snapshot_of(containers: Vec<ContainerUsage>) -> Snapshot {
        let node = NodeUsage {
            cpu_usage_nanos: containers.iter().map(|c| c.usage.cpu_usage_nanos).sum(),
            cpu_millis: containers.iter().map(|c| c.usage.cpu_millis).sum(),
            memory_bytes: containers.iter().map(|c| c.usage.memory_bytes).sum(),
            timestamp: containers.iter().map(|c| c.usage.timestamp).max(),
        };
        Snapshot {
            node_name: "vk-node".into(),
            node_start: ts("2026-05-01T10:00:00Z"),
            node,
            containers,
        }
    }

    #[test]
    fn resource_metrics_text() {
        let s = snapshot_of(vec![
            container("ml", "train-0", 90_500_000_000, 1500, 314_572_800),
            container("ml", "odd\"name", 1_000_000_000, 250, 0),
        ]);
        insta::assert_snapshot!(render_resource_metrics(&s));
    }

    #[test]
    fn no_usage_means_no_samples_but_the_scrape_error_gauges() {
        let text = render_resource_metrics(&snapshot_of(vec![]));
        assert!(!text.contains("node_cpu"));
        assert!(text.contains("scrape_error 0"));
        // A container reporting zeros only is left out entirely, start time included.
        let text = render_resource_metrics(&snapshot_of(vec![container("a", "b", 0, 0, 0)]));
        assert!(!text.contains("container_"), "{text}");
    }

    #[test]
    fn summary_json() {
        let s = snapshot_of(vec![container(
            "ml",
            "train-0",
            90_500_000_000,
            1500,
            314_572_800,
        )]);
        insta::assert_json_snapshot!(summary_of(&s));
    }

    #[test]
    fn node_cpu_counter_stays_monotonic() {
        let mut l = CpuLedger::default();
        let live: HashSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(l.total(&live, [("a", 10), ("b", 5)]), 15);
        // b restarts its counter at the provider: carried over.
        assert_eq!(l.total(&live, [("a", 12), ("b", 1)]), 18);
        // b leaves the node: its figure stays in the total.
        let only_a: HashSet<String> = ["a".to_owned()].into();
        assert_eq!(l.total(&only_a, [("a", 20)]), 26);
        // a is not running for a while (no sample) but still on the node.
        assert_eq!(l.total(&only_a, []), 26);
    }
}
