//! Fuzzing slurmrestd's job lists, both dialects (see [`crate::fuzz`]): jobs with fields
//! replaced by any JSON decode leniently and translate to a workload or are skipped, never a
//! panic.

use proptest::prelude::*;
use serde_json::json;

use super::observe;
use super::wire::JobRecord;
use crate::fuzz::{cases, edits, mutate};
use crate::naming::Owner;

fn samples(name: &str) -> Vec<serde_json::Value> {
    vec![
        // v0.0.38
        json!({"job_id": 12, "name": name, "job_state": "COMPLETED", "state_reason": "None",
               "exit_code": 256, "restart_cnt": 1, "submit_time": 1_796_000_000,
               "start_time": 1_796_000_010, "end_time": 1_796_000_100, "nodes": "node1",
               "tres_per_node": "gres:gpu:2", "comment": "gpu-vk"}),
        // v0.0.41
        json!({"job_id": 13, "name": name, "job_state": ["RUNNING", "REQUEUED"],
               "exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "number": 0},
                             "signal": {"id": {"set": true, "number": 9}}},
               "submit_time": {"set": true, "infinite": false, "number": 1_796_000_000},
               "start_time": {"set": true, "number": 1_796_000_010},
               "end_time": {"set": false, "infinite": true, "number": 0},
               "nodes": "node[1-2]", "tres_per_node": "gres/gpu:a100:2"}),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn listed_jobs_translate_or_are_skipped(sample in 0..2usize, edits in edits()) {
        let owner = Owner::new("c1", "vk");
        let name = owner
            .workload_id(crate::test_support::UID)
            .unwrap()
            .as_str()
            .to_owned();
        let raw = mutate(&samples(&name)[sample], &edits);
        let Ok(job) = serde_json::from_value::<JobRecord>(raw) else {
            return Ok(());
        };
        let _ = job.gpus();
        if let Some(o) = observe(&owner, &job, None) {
            prop_assert!(!o.provider_id.is_empty());
            if let (Some(s), Some(f)) = (o.started_at, o.finished_at) {
                prop_assert!(s <= f || o.state.is_terminal());
            }
        }
    }
}
