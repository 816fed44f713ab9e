//! `/stats/summary`: the `stats/v1alpha1.Summary` JSON of a snapshot, CPU and memory only.

use jiff::Timestamp;
use serde::Serialize;

use super::Snapshot;

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
