//! Fuzzing RunPod's list answers (see [`crate::fuzz`]): listed pods with fields replaced by any
//! JSON translate to a workload or are skipped, never a panic, and a published port is never
//! an endpoint without a port.

use proptest::prelude::*;
use serde_json::json;

use super::state::observe;
use super::wire::Pod;
use super::{RunPodConfig, UnknownExit};
use crate::fuzz::{cases, edits, mutate};

const NAME: &str = "vk-0123abcd-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn samples() -> Vec<serde_json::Value> {
    vec![
        json!({"id": "p1", "name": NAME, "desiredStatus": "RUNNING", "lastStartedAt": "2026-11-29T10:00:00Z",
               "costPerHr": 1.89, "gpu": {"id": "NVIDIA A100 80GB PCIe", "count": 2},
               "runtime": {"uptimeInSeconds": 10, "ports": [
                   {"private": 8080, "public": 43210, "type": "tcp", "ip": "203.0.113.7"},
                   {"private": 8888, "public": null, "type": "http", "ip": null}],
                   "cpu": {"util": 50}, "memory": {"util": 25}},
               "globalNetworking": {"enabled": true, "ip": "10.65.1.42"}}),
        json!({"id": "p1", "name": NAME, "status": "EXITED", "lastStatusChange": "Exited by user: 2026-11-29"}),
        json!({"id": "p1", "name": NAME, "status": "PROVISIONING", "message": "waiting for a GPU"}),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn listed_pods_translate_or_are_skipped(
        sample in 0..3usize,
        edits in edits(),
        exited in any::<bool>(),
        failed in any::<bool>(),
    ) {
        let raw = mutate(&samples()[sample], &edits);
        let Ok(pod) = serde_json::from_value::<Pod>(raw) else {
            return Ok(());
        };
        let cfg = RunPodConfig {
            unknown_exit_as: if failed { UnknownExit::Failed } else { UnknownExit::Succeeded },
            ..RunPodConfig::default()
        };
        if let Some(o) = observe("rp", pod, exited, &cfg) {
            prop_assert!(!o.provider_id.is_empty());
            for e in o.ports.values() {
                prop_assert!(!e.host.is_empty());
            }
        }
    }
}
