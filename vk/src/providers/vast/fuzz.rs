//! Fuzzing Vast's instance lists (see [`crate::fuzz`]): instances with fields replaced by any
//! JSON translate to a workload or are skipped, never a panic.

use proptest::prelude::*;
use serde_json::json;

use super::state::observe;
use super::wire::Instance;
use crate::fuzz::{cases, edits, mutate};

const LABEL: &str = "vk-0123abcd-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn samples() -> Vec<serde_json::Value> {
    vec![
        json!({"id": 4242, "label": LABEL, "actual_status": "running", "intended_status": "running",
               "cpu_util": 250.0, "mem_usage": 1.5, "mem_limit": 32.0, "uptime_mins": 2.0,
               "start_date": 1_796_000_000.5, "public_ipaddr": " 198.51.100.4 ", "dph_total": 0.42,
               "status_msg": "success, running", "is_bid": false}),
        json!({"id": 4243, "label": LABEL, "actual_status": "exited", "intended_status": "stopped",
               "status_msg": "Error: exit 3"}),
        json!({"id": "4244", "label": LABEL, "actual_status": null, "is_bid": true}),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn listed_instances_translate_or_are_skipped(sample in 0..3usize, edits in edits()) {
        let raw = mutate(&samples()[sample], &edits);
        let Ok(inst) = serde_json::from_value::<Instance>(raw) else {
            return Ok(());
        };
        if let Some(o) = observe("vast", inst) {
            prop_assert!(!o.provider_id.is_empty());
            if let Some(u) = o.usage {
                prop_assert!(u.cpu_millis < u64::MAX && u.memory_bytes < u64::MAX);
            }
        }
    }
}
