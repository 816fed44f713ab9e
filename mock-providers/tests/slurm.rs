#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The slurmrestd emulator over HTTP: auth as a real 22.05 answers it, submissions and job
//! lists in both dialects, Slurm's error numbers, the admin events (preempt, node failure,
//! time limit, requeue, exit codes), faults and counters, process mode, and 10,000 jobs.

use std::time::{Duration, Instant};

use mock_providers::config::ExecutionMode;
use mock_providers::slurm::SlurmConfig;
use serde_json::{Value, json};

#[path = "support/slurm.rs"]
mod slurm_emu;

use slurm_emu::*;

fn job38(script: &str, gpus: &str) -> Value {
    json!({"script": format!("#!/bin/bash\n{script}\n"), "job": {"name": "j", "environment": {"PATH": "/usr/bin:/bin"},
           "current_working_directory": "/tmp", "gpus_per_node": gpus, "comment": "c"}})
}

#[tokio::test]
async fn auth_is_checked_as_slurmrestd_does() {
    let emu = start(instant()).await;
    let r = emu
        .client
        .get(format!("{}/slurm/v0.0.38/jobs/", emu.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.text().await.unwrap(), "Authentication failure");

    for (v, number) in [("v0.0.38", -1), ("v0.0.41", 1007)] {
        let r = emu
            .client
            .get(format!("{}/slurm/{v}/jobs/", emu.base))
            .header("X-SLURM-USER-NAME", USER)
            .header("X-SLURM-USER-TOKEN", "wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["errors"][0]["error_number"], number);
    }
    let r = emu
        .req(reqwest::Method::GET, "/slurm/v0.0.99/jobs/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn v0038_submit_list_cancel() {
    let emu = start(instant()).await;
    let (status, body) = emu.submit("v0.0.38", job38("sleep 1", "1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["step_id"], "BATCH");
    let id = body["job_id"].as_u64().unwrap();
    let j = emu.job("v0.0.38", id).await;
    assert_eq!(j["job_state"], "RUNNING");
    assert_eq!(j["name"], "j");
    assert_eq!(j["tres_per_node"], "gres:gpu:1");
    assert!(j["start_time"].as_i64().unwrap() > 0);

    let r = emu
        .req(reqwest::Method::GET, &format!("/slurm/v0.0.38/job/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let r = emu
        .req(reqwest::Method::DELETE, &format!("/slurm/v0.0.38/job/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let j = emu.job("v0.0.38", id).await;
    assert_eq!(j["job_state"], "CANCELLED");
    assert_eq!(j["exit_code"], 15);
    // Cancelling a finished job is fine; an unknown one is error 2017 with HTTP 500.
    let r = emu
        .req(reqwest::Method::DELETE, &format!("/slurm/v0.0.38/job/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for method in [reqwest::Method::DELETE, reqwest::Method::GET] {
        let r = emu
            .req(method, "/slurm/v0.0.38/job/999")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["errors"][0]["error_number"], 2017);
    }
}

#[tokio::test]
async fn v0038_errors_carry_slurm_numbers() {
    let emu = start(instant()).await;
    // Impossible GPU count: 2014, and a FAILED record with reason BadConstraints.
    let (status, body) = emu.submit("v0.0.38", job38("true", "8")).await;
    assert_eq!(status, 500);
    assert_eq!(body["errors"][0]["error_code"], 2014);
    let jobs = emu.jobs("v0.0.38").await;
    assert_eq!(jobs[0]["job_state"], "FAILED");
    assert_eq!(jobs[0]["state_reason"], "BadConstraints");

    let (status, body) = emu
        .submit(
            "v0.0.38",
            json!({"script": "#!/bin/bash\n", "job": {"name": "x"}}),
        )
        .await;
    assert_eq!(status, 500);
    assert_eq!(
        body["errors"][0]["error_code"], 2127,
        "environment must be set"
    );

    let mut bad_partition = job38("true", "1");
    bad_partition["job"]["partition"] = json!("nope");
    let (_, body) = emu.submit("v0.0.38", bad_partition).await;
    assert_eq!(body["errors"][0]["error_code"], 2000);

    let r = emu
        .req(reqwest::Method::POST, "/slurm/v0.0.38/job/submit")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.text().await.unwrap(), "Unable to parse query.");
}

#[tokio::test]
async fn v0041_shapes() {
    let emu = start(instant()).await;
    let (status, body) = emu
        .submit(
            "v0.0.41",
            json!({"job": {"script": "#!/bin/bash\ntrue\n", "name": "n", "environment": ["PATH=/bin"],
                   "tres_per_node": "gres/gpu:2", "time_limit": {"set": true, "infinite": false, "number": 5}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["job_id"].as_u64().unwrap();
    assert_eq!(body["result"]["job_id"], id);
    emu.admin(
        &format!("/_admin/workloads/{id}/exit"),
        json!({"exit_code": 3}),
    )
    .await;
    let j = emu.job("v0.0.41", id).await;
    assert_eq!(j["job_state"], json!(["FAILED"]));
    assert_eq!(j["exit_code"]["return_code"]["number"], 3);
    assert_eq!(j["exit_code"]["status"], json!(["ERROR"]));
    assert_eq!(j["time_limit"]["number"], 5);
    assert_eq!(j["tres_per_node"], "gres/gpu:2");
    let (status, body) = emu
        .submit(
            "v0.0.41",
            json!({"job": {"script": "#!/bin/bash\n", "tres_per_node": "gres/gpu:9"}}),
        )
        .await;
    assert_eq!(status, 500);
    assert_eq!(body["errors"][0]["error_number"], 2014);
}

#[tokio::test]
async fn admin_events_follow_slurm_semantics() {
    let emu = start(instant()).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (_, body) = emu.submit("v0.0.38", job38("sleep 100", "1")).await;
        ids.push(body["job_id"].as_u64().unwrap());
    }
    let state = |j: &Value| j["job_state"].as_str().unwrap().to_owned();
    assert_eq!(
        emu.admin(&format!("/_admin/workloads/{}/requeue", ids[0]), json!({}))
            .await,
        204
    );
    let j = emu.job("v0.0.38", ids[0]).await;
    assert_eq!(state(&j), "PENDING");
    assert_eq!(j["state_reason"], "BeginTime");
    assert_eq!(j["restart_cnt"], 1);
    assert_eq!(
        emu.admin(
            &format!("/_admin/workloads/{}/node_fail", ids[1]),
            json!({})
        )
        .await,
        204
    );
    assert_eq!(state(&emu.job("v0.0.38", ids[1]).await), "NODE_FAIL");
    assert_eq!(
        emu.admin(&format!("/_admin/workloads/{}/preempt", ids[1]), json!({}))
            .await,
        409
    );

    for (action, want) in [
        ("preempt", "PREEMPTED"),
        ("timeout", "TIMEOUT"),
        ("oom", "OUT_OF_MEMORY"),
        ("cancel", "CANCELLED"),
    ] {
        let (_, body) = emu.submit("v0.0.38", job38("sleep 100", "0")).await;
        let id = body["job_id"].as_u64().unwrap();
        assert_eq!(
            emu.admin(&format!("/_admin/workloads/{id}/{action}"), json!({}))
                .await,
            204,
            "{action}"
        );
        assert_eq!(state(&emu.job("v0.0.38", id).await), want);
    }
    let (_, body) = emu.submit("v0.0.38", job38("sleep 100", "0")).await;
    let id = body["job_id"].as_u64().unwrap();
    emu.admin(
        &format!("/_admin/workloads/{id}/exit"),
        json!({"exit_code": 3}),
    )
    .await;
    let j = emu.job("v0.0.38", id).await;
    assert_eq!(state(&j), "FAILED");
    assert_eq!(j["exit_code"], 768);

    // Admin ids may be job names too.
    let (_, body) = emu.submit("v0.0.38", job38("sleep 100", "0")).await;
    let id = body["job_id"].as_u64().unwrap();
    assert_eq!(
        emu.admin("/_admin/workloads/j/suspend", json!({})).await,
        204
    );
    assert_eq!(state(&emu.job("v0.0.38", id).await), "SUSPENDED");

    let listed: Value = emu
        .client
        .get(format!("{}/_admin/workloads", emu.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listed.as_array().unwrap().len() >= 8);
    let inv: Value = emu
        .client
        .get(format!("{}/_admin/inventory", emu.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(inv["gpus_per_node"], 2);
}

#[tokio::test]
async fn faults_and_counters_use_the_shared_gate() {
    let emu = start(instant()).await;
    assert_eq!(
        emu.admin(
            "/_admin/faults",
            json!({"route": "list", "fail_next": 1, "status": 503, "retry_after_s": 4})
        )
        .await,
        201
    );
    let r = emu
        .req(reqwest::Method::GET, "/slurm/v0.0.38/jobs/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "4");
    let body: Value = r.json().await.unwrap();
    assert!(body["errors"][0]["error_number"].is_number());
    assert!(emu.jobs("v0.0.38").await.is_empty());
    emu.submit("v0.0.38", job38("true", "0")).await;
    let counters: Value = emu
        .client
        .get(format!("{}/_admin/counters", emu.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counters["list"], 2);
    assert_eq!(counters["create"], 1);
    assert_eq!(emu.admin("/_admin/reset", json!({})).await, 204);
    assert!(emu.jobs("v0.0.38").await.is_empty());
}

#[tokio::test]
async fn process_mode_runs_the_batch_script() {
    let out = std::env::temp_dir().join(format!("mock-slurm-test-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let emu = start(
        SlurmConfig::new(TOKEN, USER)
            .with_mode(ExecutionMode::process())
            .with_cluster(1, 2),
    )
    .await;
    let mut body = job38("echo \"hi $GREETING\"; echo err >&2; exit 3", "1");
    body["job"]["environment"]["GREETING"] = json!("there");
    body["job"]["standard_output"] = json!(format!("{}/slurm-%j.log", out.display()));
    let (_, answer) = emu.submit("v0.0.38", body).await;
    let id = answer["job_id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let job = loop {
        let j = emu.job("v0.0.38", id).await;
        if j["job_state"] != "RUNNING" && j["job_state"] != "PENDING" {
            break j;
        }
        assert!(Instant::now() < deadline, "job did not finish: {j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(job["job_state"], "FAILED");
    assert_eq!(job["exit_code"], 3 << 8);
    let log = std::fs::read_to_string(out.join(format!("slurm-{id}.log"))).unwrap();
    assert_eq!(log, "hi there\nerr\n");

    // A cancelled running job's process is killed.
    let (_, answer) = emu.submit("v0.0.38", job38("sleep 300", "0")).await;
    let id = answer["job_id"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = emu
        .state
        .emulator()
        .snapshot()
        .into_iter()
        .find(|j| j["id"].as_str().and_then(|s| s.parse::<u64>().ok()) == Some(id))
        .and_then(|j| j["pid"].as_u64())
        .expect("process started");
    emu.req(reqwest::Method::DELETE, &format!("/slurm/v0.0.38/job/{id}"))
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "process {pid} survived the cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[tokio::test]
async fn ten_thousand_jobs_are_cheap() {
    let emu = start(
        SlurmConfig::new(TOKEN, USER)
            .with_mode(ExecutionMode::simulated(0, 0, None))
            .with_cluster(10, 8),
    )
    .await;
    {
        let mut inner = emu.state.emulator().lock();
        let now = Instant::now();
        for i in 0..10_000 {
            inner
                .jobs
                .submit(
                    USER,
                    mock_providers::slurm::jobs::NewJob {
                        name: format!("job-{i}"),
                        script: "#!/bin/bash\n".into(),
                        gpus: 1,
                        ..Default::default()
                    },
                    now,
                )
                .unwrap();
        }
    }
    let started = Instant::now();
    let jobs = emu.jobs("v0.0.38").await;
    let running = jobs.iter().filter(|j| j["job_state"] == "RUNNING").count();
    assert_eq!(jobs.len(), 10_000);
    assert_eq!(running, 80, "80 GPUs, one each");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "listing 10k jobs took {:?}",
        started.elapsed()
    );
}
