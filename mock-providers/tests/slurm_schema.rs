#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The slurmrestd emulator against the `/openapi/v3` of the real slurmrestd 24.11.5 that serves
//! its `v0.0.41` (schemas/slurm-24.11.json): every route the adapter uses answers, in every job
//! state, a body valid against that daemon's schema; and submissions that break the schema are
//! answered as the real daemons answer them (22.05 refuses an unknown field, 24.11 drops it with
//! a warning, a value of the wrong type is refused with the data parser's error).

#[path = "support/slurm.rs"]
mod slurm_emu;

use mock_providers::schema::{SlurmRelease, slurm};
use reqwest::Method;
use serde_json::{Value, json};
use slurm_emu::*;

const V: &str = "v0.0.41";

/// The status and body of a request, after checking the body against the 24.11 schema's
/// response of `operation` for that status.
async fn checked(
    emu: &Emu,
    method: Method,
    path: &str,
    operation: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = emu.req(method, path);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{operation} {status}: not JSON ({e}): {text}"));
    let spec = slurm(SlurmRelease::R2411);
    assert!(
        spec.documents(operation, status),
        "{operation} {status}: {body}"
    );
    let errors = spec.response_errors(operation, status, &body);
    assert!(
        errors.is_empty(),
        "{operation} {status} does not match slurmrestd 24.11's schema: {errors:?}\n{body}"
    );
    (status, body)
}

fn job41(script: &str) -> Value {
    json!({"job": {"script": format!("#!/bin/bash\n{script}\n"), "name": "j",
           "environment": ["PATH=/usr/bin:/bin"], "current_working_directory": "/tmp",
           "tres_per_node": "gres/gpu:1", "comment": "c",
           "time_limit": {"set": true, "infinite": false, "number": 30}}})
}

#[tokio::test]
async fn every_route_answers_as_slurmrestd_24_11s_schema_says() {
    let emu = start(instant().with_cluster(1, 8)).await;
    let submit = format!("POST /slurm/{V}/job/submit");
    let mut ids = Vec::new();
    for action in [
        "",
        "preempt",
        "timeout",
        "oom",
        "cancel",
        "node_fail",
        "exit",
    ] {
        let (status, body) = checked(
            &emu,
            Method::POST,
            &format!("/slurm/{V}/job/submit"),
            &submit,
            Some(job41("sleep 100")),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let id = body["job_id"].as_u64().unwrap();
        if !action.is_empty() {
            let extra = if action == "exit" {
                json!({"exit_code": 3})
            } else {
                json!({})
            };
            assert_eq!(
                emu.admin(&format!("/_admin/workloads/{id}/{action}"), extra)
                    .await,
                204,
                "{action}"
            );
        }
        ids.push(id);
    }
    let (status, list) = checked(
        &emu,
        Method::GET,
        &format!("/slurm/{V}/jobs/"),
        &format!("GET /slurm/{V}/jobs"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["jobs"].as_array().unwrap().len(), ids.len());
    let one = format!("GET /slurm/{V}/job/{{job_id}}");
    for id in &ids {
        let (status, body) = checked(
            &emu,
            Method::GET,
            &format!("/slurm/{V}/job/{id}"),
            &one,
            None,
        )
        .await;
        assert_eq!(
            (status, body["jobs"][0]["job_id"].as_u64()),
            (200, Some(*id))
        );
    }
    checked(
        &emu,
        Method::GET,
        &format!("/slurm/{V}/nodes/"),
        &format!("GET /slurm/{V}/nodes"),
        None,
    )
    .await;
    let cancel = format!("DELETE /slurm/{V}/job/{{job_id}}");
    let (status, _) = checked(
        &emu,
        Method::DELETE,
        &format!("/slurm/{V}/job/{}", ids[0]),
        &cancel,
        None,
    )
    .await;
    assert_eq!(status, 200);
    // Errors too: an unknown job, a refused submission.
    let (status, body) = checked(
        &emu,
        Method::GET,
        &format!("/slurm/{V}/job/999999"),
        &one,
        None,
    )
    .await;
    assert_ne!(status, 200, "{body}");
    let (status, _) = checked(
        &emu,
        Method::POST,
        &format!("/slurm/{V}/job/submit"),
        &submit,
        Some(json!({"job": {"script": "#!/bin/bash\n", "tres_per_node": "gres/gpu:99"}})),
    )
    .await;
    assert_eq!(status, 500);
}

#[tokio::test]
async fn an_unknown_field_is_refused_by_22_05_and_dropped_with_a_warning_by_24_11() {
    let emu = start(instant()).await;
    let mut old = json!({"script": "#!/bin/bash\ntrue\n", "job": {"name": "j",
        "environment": {"PATH": "/bin"}, "current_working_directory": "/tmp", "tres_per_node": "gres/gpu:1"}});
    let (status, body) = emu.submit("v0.0.38", old.clone()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["errors"][0]["description"],
        "Unknown key \"tres_per_node\""
    );
    assert_eq!(body["errors"][1]["error_code"], 9001);
    assert!(
        emu.jobs("v0.0.38").await.is_empty(),
        "a refused job was queued"
    );
    old["job"].as_object_mut().unwrap().remove("tres_per_node");
    assert_eq!(emu.submit("v0.0.38", old).await.0, 200);

    let mut new = job41("true");
    new["job"]["gpus_per_node"] = json!("1");
    let (status, body) = emu.submit(V, new).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["warnings"][0]["source"], "#/job/gpus_per_node/");
    assert!(
        body["warnings"][0]["description"]
            .as_str()
            .unwrap()
            .starts_with("Ignoring unknown field \"gpus_per_node\""),
        "{body}"
    );
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_refused_with_the_data_parsers_error() {
    let emu = start(instant()).await;
    let mut body = job41("true");
    body["job"]["environment"] = json!("PATH=/bin");
    let (status, answer) = emu.submit(V, body).await;
    assert_eq!(status, 500, "{answer}");
    assert_eq!(answer["errors"][0]["error_number"], 9208);
    assert_eq!(answer["errors"][0]["source"], "#/job/environment/");
    assert!(
        !answer.to_string().contains("PATH=/bin"),
        "the value is echoed: {answer}"
    );
    let mut body = job41("true");
    body["job"]["time_limit"] = json!("soon");
    let (status, answer) = emu.submit(V, body).await;
    assert_eq!(status, 500, "{answer}");
    assert_eq!(answer["errors"][0]["source"], "#/job/time_limit/");
    assert!(emu.jobs(V).await.is_empty(), "a refused job was queued");
}
