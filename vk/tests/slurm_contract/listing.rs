//! Contract tests of the Slurm adapter: the job list in each dialect, and logs from output files.

use super::*;

#[tokio::test]
async fn list_is_one_call_and_maps_v0038_jobs() {
    let server = MockServer::start().await;
    let id = |n: u32| {
        owner()
            .workload_id(&format!("00000000-0000-4000-8000-{n:012}"))
            .unwrap()
    };
    let foreign = Owner::new("cluster-b", "vk-node").workload_id(UID).unwrap();
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(1, id(1).as_str(), "PENDING", 0, "Resources"),
            job38(2, id(2).as_str(), "RUNNING", 0, "None"),
            job38(3, id(3).as_str(), "COMPLETED", 0, "None"),
            job38(4, id(4).as_str(), "FAILED", 768, "NonZeroExitCode"),
            job38(5, id(5).as_str(), "CANCELLED", 15, "None"),
            job38(6, id(6).as_str(), "TIMEOUT", 15, "TimeLimit"),
            job38(7, id(7).as_str(), "OUT_OF_MEMORY", 0, "OutOfMemory"),
            job38(8, id(8).as_str(), "PREEMPTED", 0, "None"),
            job38(9, id(9).as_str(), "NODE_FAIL", 0, "NodeDown"),
            job38(10, id(10).as_str(), "SUSPENDED", 0, "None"),
            job38(11, "my-interactive-job", "RUNNING", 0, "None"),
            job38(12, foreign.as_str(), "RUNNING", 0, "None"),
            {"job_id": 13, "name": id(13).as_str(), "job_state": "PENDING", "state_reason": "BeginTime", "restart_cnt": 1, "exit_code": "odd"},
            "not an object"
        ]),
    )
    .await;
    Mock::given(method("GET"))
        .and(path(format!("{}/nodes/", prefix(Dialect::V0038))))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"meta": meta(),
            "errors": [], "nodes": [{"name": "vm", "hostname": "vm", "address": "198.51.100.4"}]})),
        )
        .mount(&server)
        .await;
    let slurm = adapter(&server, Dialect::V0038);
    let observed = slurm.list().await.unwrap();
    let calls = |reqs: Vec<wiremock::Request>| -> Vec<String> {
        reqs.iter().map(|r| r.url.path().to_owned()).collect()
    };
    assert_eq!(
        calls(server.received_requests().await.unwrap()),
        ["/slurm/v0.0.38/jobs/", "/slurm/v0.0.38/nodes/"],
        "one list call for all pods, and the node records for their addresses"
    );
    // The node records are remembered: the next list is one call.
    slurm.list().await.unwrap();
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    let ip = |n: u32| {
        observed
            .iter()
            .find(|o| o.id == id(n))
            .and_then(|o| o.ip.clone())
    };
    assert_eq!(
        ip(2).as_deref(),
        Some("198.51.100.4"),
        "a running job: its node's address"
    );
    assert_eq!(ip(1), None, "a pending job runs nowhere yet");
    let state = |n: u32| {
        observed
            .iter()
            .find(|o| o.id == id(n))
            .map(|o| o.state.clone())
            .unwrap()
    };
    assert_eq!(observed.len(), 11, "foreign and unnamed jobs are left out");
    assert_eq!(
        state(1),
        WorkloadState::Queued {
            reason: Some("Resources".into())
        }
    );
    assert_eq!(state(2), WorkloadState::Running);
    assert_eq!(state(3), WorkloadState::Succeeded);
    assert_eq!(
        state(4),
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert_eq!(
        state(5),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::Evicted
        }
    );
    assert_eq!(
        state(6),
        WorkloadState::Failed {
            exit_code: 143,
            reason: FailureReason::DeadlineExceeded
        }
    );
    assert_eq!(
        state(7),
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::OomKilled
        }
    );
    assert_eq!(state(8), WorkloadState::Preempted);
    assert_eq!(state(9), WorkloadState::Lost);
    assert!(matches!(state(10), WorkloadState::NotReady { .. }));
    let requeued = observed.iter().find(|o| o.id == id(13)).unwrap();
    assert_eq!(requeued.provider_restarts, 1);
    assert_eq!(requeued.provider_id, "13");
    let snap: Vec<Value> = observed
        .iter()
        .filter(|o| o.id == id(1) || o.id == id(4))
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    insta::assert_json_snapshot!("slurm_list_observed_v0038", snap);
}

#[tokio::test]
async fn list_maps_v0041_jobs() {
    let server = MockServer::start().await;
    let id = |n: u32| {
        owner()
            .workload_id(&format!("00000000-0000-4000-8000-{n:012}"))
            .unwrap()
    };
    let ok = json!({"status": ["SUCCESS"], "return_code": {"set": true, "infinite": false, "number": 0}});
    let three =
        json!({"status": ["ERROR"], "return_code": {"set": true, "infinite": false, "number": 3}});
    let killed = json!({"status": ["SIGNALED"], "return_code": {"set": true, "number": 0},
                        "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}});
    mount_jobs(
        &server,
        Dialect::V0041,
        json!([
            job41(1, id(1).as_str(), json!(["RUNNING"]), ok.clone()),
            job41(2, id(2).as_str(), json!(["FAILED"]), three),
            job41(
                3,
                id(3).as_str(),
                json!(["PENDING", "REQUEUED"]),
                ok.clone()
            ),
            job41(4, id(4).as_str(), json!(["COMPLETED"]), ok),
            job41(5, id(5).as_str(), json!(["CANCELLED"]), killed),
        ]),
    )
    .await;
    let observed = adapter(&server, Dialect::V0041).list().await.unwrap();
    let get = |n: u32| observed.iter().find(|o| o.id == id(n)).unwrap();
    assert_eq!(get(1).state, WorkloadState::Running);
    assert_eq!(get(1).provider_restarts, 1);
    assert!(get(1).started_at.is_some());
    assert_eq!(
        get(2).state,
        WorkloadState::Failed {
            exit_code: 3,
            reason: FailureReason::Error
        }
    );
    assert!(get(2).finished_at.is_some());
    assert!(matches!(get(3).state, WorkloadState::Queued { .. }));
    assert_eq!(get(4).state, WorkloadState::Succeeded);
    assert_eq!(
        get(5).state,
        WorkloadState::Failed {
            exit_code: 137,
            reason: FailureReason::Evicted
        }
    );
}

#[tokio::test]
async fn jobs_sharing_a_workload_id_are_all_listed() {
    // Collapsing them here would hide a duplicate that bills; the pipeline picks one.
    let server = MockServer::start().await;
    let id = workload().build().id;
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(8, id.as_str(), "RUNNING", 0, "None"),
            job38(3, id.as_str(), "FAILED", 256, "None")
        ]),
    )
    .await;
    let observed = adapter(&server, Dialect::V0038).list().await.unwrap();
    let mut ids: Vec<&str> = observed.iter().map(|o| o.provider_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["3", "8"]);
    assert!(observed.iter().all(|o| o.id == id));
}

#[tokio::test]
async fn logs_come_from_the_output_file() {
    let server = MockServer::start().await;
    let dir = std::env::temp_dir().join(format!("vk-slurm-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("slurm-42.log"), "one\ntwo\nthree\n").unwrap();
    let mut cfg = config(&server, Dialect::V0038);
    cfg.output_dir = Some(dir.clone());
    let slurm = adapter_with(cfg);
    assert!(slurm.capabilities().logs && slurm.capabilities().follow_logs);

    let read = |opts: LogOptions| {
        let slurm = &slurm;
        async move {
            use futures::StreamExt;
            let mut s = slurm.logs("42", &opts).await.unwrap();
            let mut out = Vec::new();
            while let Some(chunk) = s.next().await {
                out.extend_from_slice(&chunk.unwrap());
            }
            String::from_utf8(out).unwrap()
        }
    };
    assert_eq!(read(LogOptions::default()).await, "one\ntwo\nthree\n");
    assert_eq!(
        read(LogOptions {
            tail_lines: Some(2),
            ..LogOptions::default()
        })
        .await,
        "two\nthree\n"
    );
    assert_eq!(
        read(LogOptions {
            limit_bytes: Some(5),
            ..LogOptions::default()
        })
        .await,
        "one\nt"
    );
    // Following a job that has ended returns what is there, then ends.
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/job/42"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"errors": [], "jobs": [job38(42, "x", "COMPLETED", 0, "None")]}),
            ),
        )
        .mount(&server)
        .await;
    let followed = tokio::time::timeout(
        Duration::from_secs(10),
        read(LogOptions {
            follow: true,
            tail_lines: Some(1),
            ..LogOptions::default()
        }),
    )
    .await
    .expect("follow ends when the job has ended");
    assert_eq!(followed, "three\n");
    assert!(matches!(
        slurm
            .logs(
                "42",
                &LogOptions {
                    previous: true,
                    ..LogOptions::default()
                }
            )
            .await,
        Err(ProviderError::Unsupported { .. })
    ));

    let mut cfg = config(&server, Dialect::V0038);
    cfg.output_dir = None;
    let no_logs = adapter_with(cfg);
    assert!(!no_logs.capabilities().logs && !no_logs.capabilities().follow_logs);
    assert!(matches!(
        no_logs.logs("42", &LogOptions::default()).await,
        Err(ProviderError::Unsupported { .. })
    ));
}
