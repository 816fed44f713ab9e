//! Contract tests of the Vast adapter: the instance list (pages, states, malformed answers), logs
//! and usage.

use super::*;

#[tokio::test]
async fn list_is_one_call_per_page_and_maps_every_state() {
    let server = MockServer::start().await;
    let ours = |uid: &str| owner().workload_id(uid).unwrap().as_str().to_owned();
    let other_vk = Owner::new("cluster-b", "vk-node")
        .workload_id(UID)
        .unwrap()
        .as_str()
        .to_owned();
    let mut exited_bad = instance(
        105,
        &ours("00000000-0000-4000-8000-000000000005"),
        json!("exited"),
        "running",
        false,
    );
    exited_bad["status_msg"] = json!("Error response from daemon: pull access denied");
    // A host whose daemon refuses the image (vast-cli's own tests show it in `status_msg`).
    let mut loading_denied = instance(
        102,
        &ours("00000000-0000-4000-8000-000000000002"),
        json!("loading"),
        "running",
        false,
    );
    loading_denied["status_msg"] = json!(
        "Error response from daemon: pull access denied for private/image, repository does not exist or may require authorization"
    );
    let page1 = json!([
        instance(
            101,
            &ours("00000000-0000-4000-8000-000000000001"),
            Value::Null,
            "running",
            false
        ),
        loading_denied,
        instance(
            103,
            &ours("00000000-0000-4000-8000-000000000003"),
            json!("running"),
            "running",
            true
        ),
        instance(
            104,
            &ours("00000000-0000-4000-8000-000000000004"),
            json!("exited"),
            "running",
            false
        ),
        exited_bad,
        instance(
            106,
            &ours("00000000-0000-4000-8000-000000000006"),
            json!("stopped"),
            "running",
            true
        ),
        instance(
            107,
            &ours("00000000-0000-4000-8000-000000000007"),
            json!("offline"),
            "running",
            false
        ),
    ]);
    let page2 = json!([
        instance(
            108,
            &ours("00000000-0000-4000-8000-000000000008"),
            json!("unknown"),
            "running",
            false
        ),
        instance(
            109,
            &ours("00000000-0000-4000-8000-000000000009"),
            json!("defrosting"),
            "running",
            false
        ),
        instance(
            110,
            &ours("00000000-0000-4000-8000-00000000000a"),
            json!(17),
            "running",
            false
        ),
        instance(111, &other_vk, json!("running"), "running", false),
        instance(112, "my-notebook", json!("running"), "running", false),
        json!({"id": 113, "label": null, "actual_status": "running"}),
        json!("garbage"),
    ]);
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .and(query_param("after_token", "tok-2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(page2, None)))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/instances/"))
        .and(query_param("limit", "25"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(page1, Some("tok-2"))))
        .expect(1)
        .mount(&server)
        .await;

    let observed = adapter(&server).list().await.unwrap();

    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "one call per page"
    );
    let by_id = |pid: &str| {
        observed
            .iter()
            .find(|o| o.provider_id == pid)
            .map(|o| o.state.clone())
    };
    assert_eq!(by_id("106"), Some(WorkloadState::Preempted));
    let pull = |pid: &str| {
        observed
            .iter()
            .find(|o| o.provider_id == pid)
            .and_then(|o| o.pull_failure.clone())
    };
    assert!(
        pull("102").is_some_and(|m| m.contains("pull access denied for private/image")),
        "a refused pull of an instance still loading is a pull failure"
    );
    assert_eq!(
        pull("105"),
        None,
        "an exited instance is not a pull in progress"
    );
    assert_eq!(pull("101"), None);
    assert_eq!(
        by_id("105"),
        Some(WorkloadState::Failed {
            exit_code: 1,
            reason: FailureReason::Error
        })
    );
    // An offline host may come back ("Instance back online"): not lost, not ready.
    assert!(matches!(by_id("107"), Some(WorkloadState::NotReady { .. })));
    assert_eq!(
        by_id("109"),
        Some(WorkloadState::Unknown {
            raw: "defrosting".into()
        })
    );
    assert_eq!(
        by_id("110"),
        Some(WorkloadState::Unknown { raw: "17".into() })
    );
    assert!(
        by_id("111").is_some(),
        "any VK's workloads are listed; the framework filters"
    );
    assert_eq!(by_id("112"), None);
    assert_eq!(by_id("113"), None);
    insta::assert_json_snapshot!("vast_list_observed", observed);
}

#[tokio::test]
async fn a_single_page_list_is_exactly_one_call() {
    let server = MockServer::start().await;
    mount_lookup(
        &server,
        json!([instance(1, &id(), json!("running"), "running", false)]),
    )
    .await;
    let observed = adapter(&server).list().await.unwrap();
    assert_eq!(observed.len(), 1);
    assert_eq!(observed[0].ip.as_deref(), Some("203.0.113.7"));
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn malformed_or_failed_lists() {
    for body in ["not json", "[1,2]"] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let err = adapter(&server).list().await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Transient { .. }),
            "{body}: {err:?}"
        );
    }
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "success": false, "error": "auth_error", "msg": "Invalid user key"})))
        .mount(&server)
        .await;
    assert!(matches!(
        adapter(&server).list().await.unwrap_err(),
        ProviderError::Auth { .. }
    ));
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "30"))
        .mount(&server)
        .await;
    match adapter(&server).list().await.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(30)))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn logs_request_an_upload_then_download_it_without_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/instances/request_logs/4242/"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "success": true, "result_url": format!("{}/instance_logs/abc.log", server.uri()),
            "msg": "uploading"})))
        .expect(2)
        .mount(&server)
        .await;
    // Not uploaded yet on the first try, as S3 answers.
    Mock::given(method("GET"))
        .and(path("/instance_logs/abc.log"))
        .respond_with(ResponseTemplate::new(404))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/instance_logs/abc.log"))
        .respond_with(ResponseTemplate::new(200).set_body_string("epoch 1\nepoch 2\n"))
        .mount(&server)
        .await;
    let vast = adapter(&server);

    let opts = LogOptions {
        tail_lines: Some(50),
        ..LogOptions::default()
    };
    let chunks: Vec<_> = vast.logs("4242", &opts).await.unwrap().collect().await;
    let text: Vec<u8> = chunks
        .into_iter()
        .flat_map(|c| c.unwrap().to_vec())
        .collect();
    assert_eq!(text, b"epoch 1\nepoch 2\n");

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs[0].body_json::<Value>().unwrap(), json!({"tail": "50"}));
    let downloads: Vec<_> = reqs
        .iter()
        .filter(|r| r.url.path() == "/instance_logs/abc.log")
        .collect();
    assert_eq!(downloads.len(), 2, "retried until the upload landed");
    assert!(
        downloads
            .iter()
            .all(|r| r.headers.get("authorization").is_none()),
        "key sent to the log host"
    );

    let limited = LogOptions {
        limit_bytes: Some(7),
        ..LogOptions::default()
    };
    let chunks: Vec<_> = vast.logs("4242", &limited).await.unwrap().collect().await;
    assert_eq!(chunks[0].as_ref().unwrap().as_ref(), b"epoch 1");

    let previous = LogOptions {
        previous: true,
        ..LogOptions::default()
    };
    assert!(matches!(
        vast.logs("4242", &previous).await.err(),
        Some(ProviderError::Unsupported { .. })
    ));
}

#[tokio::test]
async fn logs_of_an_unknown_instance_are_not_found() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_json(json!({"error": "invalid_id", "msg": "Invalid instance id."})),
        )
        .mount(&server)
        .await;
    assert_eq!(
        adapter(&server)
            .logs("9", &LogOptions::default())
            .await
            .err(),
        Some(ProviderError::NotFound)
    );
}

#[tokio::test]
async fn running_instances_carry_usage_for_the_kubelet_stats() {
    let server = MockServer::start().await;
    let mut running = instance(1, &id(), json!("running"), "running", false);
    running["cpu_util"] = json!(150.0);
    running["mem_usage"] = json!(2.0);
    running["mem_limit"] = json!(64.0);
    running["gpu_util"] = json!(80.0);
    running["uptime_mins"] = json!(1.0);
    mount_lookup(&server, json!([running.clone()])).await;
    let vast = adapter(&server);
    let observed = vast.list().await.unwrap();
    let usage = observed[0]
        .usage
        .clone()
        .expect("usage of a running instance");
    assert_eq!(usage.cpu_millis, 1500);
    assert_eq!(usage.memory_bytes, 2_000_000_000);
    assert_eq!(usage.cpu_usage_nanos, 1500 * 60 * 1_000_000);
    // A minute later at 10 % of a core: the counter goes on at the new rate (rate times
    // uptime would fall to 100m * 120 s, and metrics-server would drop the sample).
    running["cpu_util"] = json!(10.0);
    running["uptime_mins"] = json!(2.0);
    server.reset().await;
    mount_lookup(&server, json!([running])).await;
    let later = vast.list().await.unwrap()[0].usage.clone().unwrap();
    assert_eq!(later.cpu_millis, 100);
    assert_eq!(
        later.cpu_usage_nanos,
        (1500 * 60 + 100 * 60) * 1_000_000,
        "integrated, never falling"
    );
}

#[tokio::test]
async fn an_offline_or_silent_host_is_not_ready_not_lost() {
    let server = MockServer::start().await;
    let other = WorkloadBuilder::new(&owner(), "00000000-0000-4000-8000-00000000000a")
        .gpu("RTX4090", 1)
        .build();
    mount_lookup(
        &server,
        json!([
            instance(1, &id(), json!("offline"), "running", false),
            instance(2, other.id.as_str(), json!("unknown"), "running", false),
        ]),
    )
    .await;
    let observed = adapter(&server).list().await.unwrap();
    assert_eq!(observed.len(), 2);
    for o in observed {
        assert!(
            matches!(o.state, WorkloadState::NotReady { .. }),
            "{:?}",
            o.state
        );
        assert!(o.usage.is_none());
    }
}
