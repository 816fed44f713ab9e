//! Contract tests of the RunPod adapter: what is refused before any request, and how create, delete
//! and list errors are classified.

use super::*;

#[tokio::test]
async fn invalid_workloads_fail_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let rp = adapter(&server);

    let bad_cloud = workload().option("cloud", "MOON").build();
    // Not allowed by the operator (only the configured SECURE), or above the disk ceiling.
    let other_cloud = workload().option("cloud", "community").build();
    let capped = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            max_disk_gb: Some(100),
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    for (w, want) in [
        (other_cloud, "not allowed by the operator"),
        (workload().option("disk_gb", "101").build(), "ceiling"),
    ] {
        let err = capped.create(&w).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Invalid { message } if message.contains(want)),
            "{err:?}"
        );
    }
    let too_many = workload().any_gpu(16).build();
    let foreign = workload()
        .owner(&Owner::new("cluster-b", "vk-node"))
        .build();

    let no_cpu_flavor = RunPod::new(
        "runpod".into(),
        RunPodConfig {
            cpu_flavor_id: None,
            ..config(&server)
        },
        owner(),
    )
    .unwrap();
    let err = no_cpu_flavor
        .create(&workload().no_gpu().build())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("cpuFlavorId")),
        "{err:?}"
    );
    assert!(no_cpu_flavor.capabilities().gpu_only);

    for w in [bad_cloud, too_many, foreign] {
        let err = rp.create(&w).await.unwrap_err();
        assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    }
}

/// Runs a create whose POST answers `resp`.
async fn create_error(resp: ResponseTemplate) -> ProviderError {
    let server = MockServer::start().await;
    mount_list(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(resp)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_key(&err);
    err
}

/// RunPod's v2 API has no balance; at $0 it terminates pods without a network volume
/// (billing docs) and refuses creates with 402. A 402 since the last successful create makes
/// vanished pods "balance exhausted"; without one, the message names the causes.
#[tokio::test]
async fn vanished_pods_are_put_down_to_the_balance_after_a_402() {
    let server = MockServer::start().await;
    mount_list(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(
            ResponseTemplate::new(402).set_body_json(problem(402, "insufficient balance")),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("p-1", "x", "PROVISIONING")))
        .mount(&server)
        .await;
    let rp = adapter(&server);
    match rp.vanished_cause() {
        Some(Vanished::Hint(h)) => assert!(h.contains("balance at $0"), "{h}"),
        other => panic!("before any 402: {other:?}"),
    }
    rp.create(&workload().build()).await.unwrap_err();
    match rp.vanished_cause() {
        Some(Vanished::BalanceExhausted(m)) => assert!(m.contains("insufficient balance"), "{m}"),
        other => panic!("after a 402: {other:?}"),
    }
    rp.create(&workload().build()).await.unwrap();
    assert!(
        matches!(rp.vanished_cause(), Some(Vanished::Hint(_))),
        "a create that succeeds says the account is paid up again"
    );
}

#[tokio::test]
async fn create_errors_are_classified() {
    let capacity = create_error(ResponseTemplate::new(400).set_body_json(problem(
        400,
        "There are no longer any instances available with the requested specifications.",
    )))
    .await;
    assert!(
        matches!(capacity, ProviderError::Capacity { .. }),
        "{capacity:?}"
    );

    let invalid = create_error(ResponseTemplate::new(400).set_body_json(problem(
        400,
        "gpu.allowedCudaVersions and gpu.minCudaVersion are exclusive",
    )))
    .await;
    match invalid {
        ProviderError::Invalid { message } => {
            assert!(message.contains("are exclusive"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let schema = create_error(ResponseTemplate::new(422).set_body_json(json!({
        "title": "Unprocessable Entity", "status": 422, "detail": "Request validation failed.",
        "errors": ["$: additional properties 'bogus' not allowed"]
    })))
    .await;
    match schema {
        ProviderError::Invalid { message } => {
            assert!(message.contains("'bogus' not allowed"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let auth = create_error(
        ResponseTemplate::new(401).set_body_json(problem(401, &format!("bad token {KEY}"))),
    )
    .await;
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    // v2 create: 403 "Your account cannot access the requested pool. Skip this candidate,
    // keep going" -- the next provider is tried, as after a capacity error.
    let forbidden =
        create_error(ResponseTemplate::new(403).set_body_json(problem(403, "access denied"))).await;
    assert!(
        matches!(&forbidden, ProviderError::Capacity { message }
            if message.contains("access denied") && message.contains("Read Only")),
        "{forbidden:?}: the refusal names both causes of RunPod's 403"
    );

    let broke = create_error(
        ResponseTemplate::new(402).set_body_json(problem(402, "insufficient balance")),
    )
    .await;
    assert!(matches!(broke, ProviderError::Capacity { .. }), "{broke:?}");

    let limited = create_error(
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "12")
            .set_body_json(problem(429, "rate limit exceeded for the minute window")),
    )
    .await;
    assert_eq!(
        limited,
        ProviderError::Transient {
            message: "RunPod HTTP 429: rate limit exceeded for the minute window".into(),
            retry_after: Some(Duration::from_secs(12)),
        }
    );

    let down =
        create_error(ResponseTemplate::new(500).set_body_json(problem(500, "upstream failed")))
            .await;
    assert!(
        matches!(
            down,
            ProviderError::Transient {
                retry_after: None,
                ..
            }
        ),
        "{down:?}"
    );
    let html =
        create_error(ResponseTemplate::new(502).set_body_string("<html>bad gateway</html>")).await;
    match html {
        ProviderError::Transient { message, .. } => {
            assert!(message.contains("bad gateway"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delete_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(problem(404, "pod not found")))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/member"))
        .respond_with(ResponseTemplate::new(409).set_body_json(problem(
            409,
            "Pod belongs to a cluster and cannot be terminated via the pod endpoints.",
        )))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/pods/busy"))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "3"))
        .mount(&server)
        .await;
    let rp = adapter(&server);

    assert_eq!(
        rp.delete("gone").await.unwrap_err(),
        ProviderError::NotFound
    );
    assert!(matches!(
        rp.delete("member").await.unwrap_err(),
        ProviderError::Invalid { .. }
    ));
    match rp.delete("busy").await.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("{other:?}"),
    }
    // Path segments are encoded: an id can never escape its segment.
    let err = rp.delete("../pods").await.unwrap_err();
    assert!(
        matches!(err, ProviderError::NotFound | ProviderError::Invalid { .. }),
        "{err:?}"
    );
    let paths: Vec<_> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        paths.contains(&"/v2/pods/..%2Fpods".to_owned()),
        "{paths:?}"
    );
}

#[tokio::test]
async fn malformed_list_answers_are_transient() {
    for body in ["not json", r#"{"pods": "nope"}"#, r#"[]"#] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/pods"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let err = adapter(&server).list().await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Transient { .. }),
            "{body}: {err:?}"
        );
    }
}

/// A pod of ours listed without its `id` (the v2 schema requires it) makes the list malformed:
/// an error naming the field, so the pipeline judges nothing on it, rather than a list without
/// the workload, which would be taken for lost. Someone else's pod without an id is skipped.
#[tokio::test]
async fn a_listed_pod_of_ours_without_its_id_is_a_malformed_answer_not_a_lost_workload() {
    let w = workload().build();
    let mut ours = pod("p1", w.id.as_str(), "RUNNING");
    ours.as_object_mut().unwrap().remove("id");
    let mut foreign = pod("p2", "my-notebook", "RUNNING");
    foreign["id"] = Value::Null;

    let server = MockServer::start().await;
    mount_list(&server, json!([foreign.clone(), ours])).await;
    let err = adapter(&server).list().await.unwrap_err();
    match &err {
        ProviderError::Malformed {
            provider,
            field,
            message,
        } => {
            assert_eq!((provider.as_str(), field.as_str()), ("runpod", "Pod.id"));
            assert!(message.contains(w.id.as_str()), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let server = MockServer::start().await;
    mount_list(&server, json!([foreign])).await;
    assert_eq!(adapter(&server).list().await.unwrap(), Vec::new());
}

#[tokio::test]
async fn list_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(problem(401, "missing bearer token")),
        )
        .mount(&server)
        .await;
    let err = adapter(&server).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn connection_failures_are_transient() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let cfg = RunPodConfig {
        base_url: format!("http://{addr}/v2"),
        ..RunPodConfig::default()
    }
    .with_api_key(KEY);
    let rp = RunPod::new("runpod".into(), cfg, owner()).unwrap();
    let err = rp.list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    assert_no_key(&err);
}
