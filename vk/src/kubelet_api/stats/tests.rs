//! Tests of the resource metrics text, the summary JSON and the node CPU ledger.

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
