//! Contract tests of the RunPod adapter: logs from the container's event stream, and exits seen
//! through the uptime.

use super::*;

/// A log stream as `GET /v2/pods/{id}/logs` sends it: container and system events.
const LOG_STREAM: &str = "id: 2026-12-01T10:00:00Z\n\
    data: {\"source\":\"system\",\"line\":\"pulling image\",\"ts\":\"2026-12-01T10:00:00Z\"}\n\n\
    : keepalive\n\n\
    id: 2026-12-01T10:00:01Z\n\
    data: {\"source\":\"container\",\"line\":\"loading model\",\"ts\":\"2026-12-01T10:00:01Z\"}\n\n\
    id: 2026-12-01T10:00:02Z\n\
    data: {\"source\":\"container\",\"line\":\"serving on 8080\",\"ts\":\"2026-12-01T10:00:02Z\"}\n\n";

async fn read_logs(rp: &RunPod, opts: &LogOptions) -> Result<String, ProviderError> {
    let mut s = rp.logs("p1", opts).await?;
    let mut out = String::new();
    while let Some(chunk) = s.next().await {
        out.push_str(&String::from_utf8_lossy(&chunk?));
    }
    Ok(out)
}

#[tokio::test]
async fn logs_read_the_documented_event_stream_of_the_container() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("source", "container"))
        .and(query_param("tail", "5000"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("accept", "text/event-stream"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(LOG_STREAM),
        )
        .expect(2)
        .mount(&server)
        .await;
    let rp = adapter(&server);
    // Without --tail: the most the API replays; system narration is not the container's log.
    let text = read_logs(&rp, &LogOptions::default()).await.unwrap();
    assert_eq!(text, "loading model\nserving on 8080\n");
    let opts = LogOptions {
        timestamps: true,
        limit_bytes: Some(30),
        ..Default::default()
    };
    let text = read_logs(&rp, &opts).await.unwrap();
    assert_eq!(text, "2026-12-01T10:00:01Z loading m");
}

#[tokio::test]
async fn logs_ask_for_tail_or_since_as_kubectl_does() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("tail", "5000"))
        .respond_with(ResponseTemplate::new(200).set_body_string(""))
        .expect(1)
        .named("tail above the API's maximum is capped")
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .and(query_param("since", "2026-12-01T10:00:00Z"))
        .respond_with(ResponseTemplate::new(200).set_body_string(""))
        .expect(1)
        .mount(&server)
        .await;
    let rp = adapter(&server);
    let tail = LogOptions {
        tail_lines: Some(9000),
        ..Default::default()
    };
    assert_eq!(read_logs(&rp, &tail).await.unwrap(), "");
    let since = LogOptions {
        since: Some("2026-12-01T10:00:00Z".parse().unwrap()),
        ..Default::default()
    };
    assert_eq!(read_logs(&rp, &since).await.unwrap(), "");
}

#[tokio::test]
async fn log_refusals_are_the_providers_errors_without_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/gone/logs"))
        .respond_with(ResponseTemplate::new(404).set_body_json(problem(404, "pod not found")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p1/logs"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(problem(401, &format!("bad key {KEY}"))),
        )
        .mount(&server)
        .await;
    let rp = adapter(&server);
    let gone = rp.logs("gone", &Default::default()).await.err().unwrap();
    assert!(matches!(gone, ProviderError::NotFound), "{gone:?}");
    let auth = rp.logs("p1", &Default::default()).await.err().unwrap();
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    assert_no_key(&auth);
}

/// A RUNNING pod of ours with this uptime.
fn running_for(uptime: u64) -> Value {
    let name = owner().workload_id(UID).unwrap().as_str().to_owned();
    let mut p = pod("p1", &name, "RUNNING");
    p["startedAt"] = json!("2026-06-01T12:02:00Z");
    p["runtime"] = json!({"uptime": uptime});
    p
}

#[tokio::test]
async fn a_container_exit_is_seen_through_a_falling_uptime() {
    // RunPod restarts an exited container in place and the pod stays RUNNING
    // (runpodctl#149, dstack#1142): only `runtime.uptime` tells.
    let server = MockServer::start().await;
    let rp = adapter(&server);
    let list_once = |uptime: u64| {
        let server = &server;
        async move {
            server.reset().await;
            mount_list(server, json!([running_for(uptime)])).await;
        }
    };
    list_once(40).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Running);
    list_once(41).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Running);
    // The command ended; RunPod started it again a moment ago.
    list_once(1).await;
    let o = rp.list().await.unwrap().remove(0);
    assert_eq!(o.state, WorkloadState::Succeeded);
    assert!(o.message.unwrap().contains("no exit code"));
    // It stays ended while RunPod keeps re-running it: the framework must stop it.
    list_once(2).await;
    assert_eq!(rp.list().await.unwrap()[0].state, WorkloadState::Succeeded);
}

#[tokio::test]
async fn unknown_exits_can_be_reported_as_failures() {
    let server = MockServer::start().await;
    let rp = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            unknown_exit_as: vk::providers::runpod::UnknownExit::Failed,
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    mount_list(&server, json!([running_for(500)])).await;
    rp.list().await.unwrap();
    server.reset().await;
    mount_list(&server, json!([running_for(3)])).await;
    assert_eq!(
        rp.list().await.unwrap()[0].state,
        WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        }
    );
    let yaml = "unknownExitAs: Failed\ncpuFlavorId: null";
    let cfg = RunPodConfig::from_settings(&serde_saphyr::from_str(yaml).unwrap()).unwrap();
    assert_eq!(
        cfg.unknown_exit_as,
        vk::providers::runpod::UnknownExit::Failed
    );
    assert_eq!(cfg.cpu_flavor_id, None);
}
