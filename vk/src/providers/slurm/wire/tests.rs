//! Tests of the slurmrestd wire format: exit decoding, the state mapping, submit bodies per
//! dialect and error spellings.

use super::jobs::decode_exit;
use super::*;
use crate::provider::{FailureReason, WorkloadState};

fn job(v: Value) -> JobRecord {
    serde_json::from_value(v).unwrap()
}

#[test]
fn raw_wait_status_decodes() {
    assert_eq!(decode_exit(&json!(0)), Some(0));
    assert_eq!(decode_exit(&json!(768)), Some(3));
    assert_eq!(decode_exit(&json!(256)), Some(1));
    assert_eq!(decode_exit(&json!(15)), Some(143));
    assert_eq!(decode_exit(&json!(9)), Some(137));
    assert_eq!(decode_exit(&json!(-1)), None);
    assert_eq!(decode_exit(&json!("x")), None);
}

#[test]
fn verbose_exit_code_decodes() {
    let v = json!({"status": ["ERROR"], "return_code": {"set": true, "infinite": false, "number": 3},
                   "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}});
    assert_eq!(decode_exit(&v), Some(3));
    let v = json!({"status": ["SIGNALED"], "return_code": {"set": true, "number": 0},
                   "signal": {"id": {"set": true, "number": 9}, "name": "KILL"}});
    assert_eq!(decode_exit(&v), Some(137));
    let v = json!({"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}});
    assert_eq!(decode_exit(&v), Some(0));
}

#[test]
fn states_map_as_documented() {
    let s = |state: Value, exit: Value, reason: &str| {
        workload_state(&job(
            json!({"job_state": state, "exit_code": exit, "state_reason": reason}),
        ))
    };
    assert_eq!(
        s(json!("PENDING"), json!(0), "Resources"),
        WorkloadState::Queued {
            reason: Some("Resources".into())
        }
    );
    assert_eq!(
        s(json!("PENDING"), json!(0), "None"),
        WorkloadState::Queued { reason: None }
    );
    assert_eq!(
        s(json!(["PENDING", "REQUEUED"]), json!(0), "BeginTime"),
        WorkloadState::Queued {
            reason: Some("BeginTime".into())
        }
    );
    assert_eq!(
        s(json!("CONFIGURING"), json!(0), "None"),
        WorkloadState::Queued { reason: None }
    );
    // An ended job Slurm 25.11 is checking for an expedited requeue is not final: not a
    // failure, not a lost node.
    for base in ["FAILED", "NODE_FAIL"] {
        assert_eq!(
            s(json!([base, "EXPEDITING"]), json!(256), "None"),
            WorkloadState::Queued { reason: None },
            "{base}"
        );
    }
    assert_eq!(s(json!("RUNNING"), json!(0), ""), WorkloadState::Running);
    assert_eq!(s(json!("COMPLETING"), json!(0), ""), WorkloadState::Running);
    assert_eq!(
        s(json!(["COMPLETED", "COMPLETING"]), json!(0), ""),
        WorkloadState::Running
    );
    assert!(matches!(
        s(json!("SUSPENDED"), json!(0), ""),
        WorkloadState::NotReady { .. }
    ));
    assert_eq!(
        s(json!("COMPLETED"), json!(0), ""),
        WorkloadState::Succeeded
    );
    assert_eq!(
        s(json!("FAILED"), json!(768), "NonZeroExitCode"),
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert_eq!(
        s(json!("BOOT_FAIL"), json!(0), ""),
        WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        }
    );
    assert_eq!(
        s(json!("DEADLINE"), json!(0), ""),
        WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        }
    );
    for oom in ["OOM", "OUT_OF_MEMORY"] {
        assert_eq!(
            s(json!(oom), json!(0), ""),
            WorkloadState::Failed {
                exit_code: 137,
                reason: FailureReason::OomKilled
            }
        );
    }
    assert_eq!(
        s(json!("TIMEOUT"), json!(15), ""),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::DeadlineExceeded
        }
    );
    assert_eq!(
        s(json!("PREEMPTED"), json!(0), ""),
        WorkloadState::Preempted
    );
    assert_eq!(s(json!("NODE_FAIL"), json!(0), ""), WorkloadState::Lost);
    assert_eq!(
        s(json!("CANCELLED"), json!(15), ""),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::Evicted
        }
    );
    assert_eq!(
        s(json!("CANCELLED"), json!(0), ""),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::Evicted
        }
    );
    assert_eq!(
        s(json!("MELTING"), json!(0), ""),
        WorkloadState::Unknown {
            raw: "MELTING".into()
        }
    );
    assert!(matches!(
        s(json!(null), json!(0), ""),
        WorkloadState::Unknown { .. }
    ));
}

#[test]
fn submit_bodies_follow_each_dialect() {
    let r = JobRequest {
        name: "n".into(),
        comment: "c".into(),
        script: "#!/bin/bash\n".into(),
        environment: Environment([("PATH".to_owned(), "/bin".to_owned())].into()),
        working_directory: "/tmp".into(),
        standard_output: Some("/out/slurm-%j.log".into()),
        partition: Some("gpu".into()),
        account: None,
        qos: None,
        time_limit_minutes: Some(30),
        gpus_per_node: Some("2".into()),
        cpus_per_task: None,
        memory_per_node_mb: Some(1024),
        requeue: None,
    };
    let v38 = submit_body(Dialect::V0038, &r);
    assert_eq!(v38["script"], "#!/bin/bash\n");
    assert_eq!(v38["job"]["environment"], json!({"PATH": "/bin"}));
    assert_eq!(v38["job"]["gpus_per_node"], "2");
    assert_eq!(v38["job"]["time_limit"], 30);
    let v41 = submit_body(Dialect::V0041, &r);
    assert!(v41.get("script").is_none());
    assert_eq!(v41["job"]["script"], "#!/bin/bash\n");
    assert_eq!(v41["job"]["environment"], json!(["PATH=/bin"]));
    assert_eq!(v41["job"]["tres_per_node"], "gres/gpu:2");
    assert_eq!(
        v41["job"]["time_limit"],
        json!({"set": true, "infinite": false, "number": 30})
    );
}

#[test]
fn errors_are_read_in_every_spelling() {
    let e = errors_of(
        br#"{"errors": [{"error_code": 2014, "error": "Requested node configuration is not available"}]}"#,
    );
    assert_eq!(e[0].number, Some(2014));
    let e = errors_of(
        br#"{"errors": [{"description": "Unable to find JobId=9", "error_number": 2017, "error": "Invalid job id specified", "source": "slurm_load_job"}]}"#,
    );
    assert_eq!(e[0].number, Some(2017));
    assert_eq!(
        e[0].text(),
        "Invalid job id specified: Unable to find JobId=9"
    );
    let e = errors_of(br#"{"result": {"error_code": 2072, "error": "Invalid gres"}}"#);
    assert_eq!(e[0].number, Some(2072));
    assert!(errors_of(b"Authentication failure").is_empty());
    // v0.0.42+ cancellation answer (HTTP 200) for an unknown job, as 24.11.5 sends it.
    let e = errors_of(
        br#"{"status": [{"error": {"string": "Invalid job id specified", "code": 2017, "message": "Invalid job id specified"}, "step_id": "987654", "job_id": {"set": false, "infinite": false, "number": 0}, "federation": {"sibling": ""}}], "errors": [], "warnings": []}"#,
    );
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].number, Some(2017));
    assert_eq!(e[0].text(), "Invalid job id specified");
    // A job cancelled fine: code 0, nothing to report.
    let e = errors_of(
        br#"{"status": [{"error": {"string": "No error", "code": 0, "message": "No error"}, "step_id": "12", "job_id": {"set": true, "infinite": false, "number": 12}}], "errors": []}"#,
    );
    assert!(e.is_empty(), "{e:?}");
}

#[test]
fn submit_warnings_name_the_fields_never_the_values() {
    // 24.11.5's answer to a job with an unknown field and a number for a boolean (measured).
    let a: SubmitAnswer = serde_json::from_str(
        r##"{"job_id": 5, "warnings": [
            {"description": "Expected OpenAPI type=boolean (Slurm type=boolean) but got OpenAPI type=integer (Slurm type=64 bit integer): 3", "source": "#/job/requeue/"},
            {"description": "Ignoring unknown field \"bogus\" of type string in DATA_PARSER_JOB_DESC_MSG", "source": "#/job/bogus/"}],
            "errors": []}"##,
    )
    .unwrap();
    assert_eq!(a.job_id(), Some(5));
    assert_eq!(a.warned_fields(), vec!["#/job/requeue/", "#/job/bogus/"]);
    let none: SubmitAnswer = serde_json::from_str(r#"{"job_id": 5, "warnings": []}"#).unwrap();
    assert!(none.warned_fields().is_empty());
}
