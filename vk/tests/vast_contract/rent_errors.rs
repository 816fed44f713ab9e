//! Contract tests of the Vast adapter: what is refused before any request, and how rent and search
//! errors are classified.

use super::*;

#[tokio::test]
async fn invalid_workloads_fail_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let no_gpu = workload().no_gpu().build();
    let bad_bid = workload().option("bid_price", "-1").build();
    let bad_flag = workload().option("interruptible", "maybe").build();
    // Vast reads env keys as docker options: a name that is not a variable name never leaves.
    let docker_option = workload().env("-v /:/host", "1").build();
    for w in [no_gpu, bad_bid, bad_flag, docker_option] {
        let err = vast.create(&w).await.unwrap_err();
        assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    }
    let capped = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        ..config(&server)
    });
    let greedy = workload()
        .option("interruptible", "yes")
        .option("bid_price", "5")
        .build();
    let err = capped.create(&greedy).await.unwrap_err();
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // Annotations narrow the operator's ceilings, never widen them.
    let ceilings = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        max_disk_gb: Some(100),
        ..config(&server)
    });
    for (key, value) in [("max_price_per_hour", "2.5"), ("disk_gb", "500")] {
        let w = workload().option(key, value).build();
        let err = ceilings.create(&w).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Invalid { message } if message.contains("ceiling") && message.contains(key)),
            "{key}: {err:?}"
        );
    }
}

/// Runs a create whose rent (`PUT /asks`) answers `resp`.
async fn rent_error(resp: ResponseTemplate) -> ProviderError {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(resp)
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_key(&err);
    // Errors other than "offer gone" stop at the first offer.
    let puts = calls(&server.received_requests().await.unwrap())
        .iter()
        .filter(|c| c.starts_with("PUT"))
        .count();
    assert_eq!(puts, 1, "{err:?}");
    err
}

#[tokio::test]
async fn rent_errors_are_classified() {
    let invalid = rent_error(ResponseTemplate::new(400).set_body_json(json!({
        "success": false, "error": "invalid_args",
        "msg": "error 400/3467: Invalid args: 'image' is required", "ask_id": 1})))
    .await;
    match invalid {
        ProviderError::Invalid { message } => {
            assert!(message.contains("'image' is required"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let auth = rent_error(ResponseTemplate::new(401).set_body_json(json!({
        "success": false, "error": "auth_error", "msg": format!("Invalid user key {KEY}")})))
    .await;
    assert!(matches!(auth, ProviderError::Auth { .. }), "{auth:?}");
    let broke = rent_error(ResponseTemplate::new(402).set_body_json(json!({
        "success": false, "error": "insufficient_credit", "msg": "Insufficient credit"})))
    .await;
    assert!(matches!(broke, ProviderError::Capacity { .. }), "{broke:?}");
    let conflict = rent_error(ResponseTemplate::new(409).set_body_json(json!({
        "success": false, "error": "conflict", "msg": "conflict"})))
    .await;
    assert!(
        matches!(conflict, ProviderError::Invalid { .. }),
        "{conflict:?}"
    );
    let limited = rent_error(
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "7")
            .set_body_json(json!({"detail": "API requests too frequent endpoint threshold=4.5"})),
    )
    .await;
    assert_eq!(
        limited,
        ProviderError::Transient {
            message: "Vast HTTP 429: API requests too frequent endpoint threshold=4.5".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    let down =
        rent_error(ResponseTemplate::new(500).set_body_string("Internal Server Error")).await;
    assert!(matches!(down, ProviderError::Transient { .. }), "{down:?}");
    let unreadable =
        rent_error(ResponseTemplate::new(200).set_body_string("<html>ok?</html>")).await;
    assert!(
        matches!(unreadable, ProviderError::Transient { .. }),
        "{unreadable:?}"
    );
    let refused = rent_error(ResponseTemplate::new(200).set_body_json(json!({
        "success": false, "error": "invalid_price", "msg": "bid too low"})))
    .await;
    assert!(
        matches!(refused, ProviderError::Invalid { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn an_invalid_key_reported_as_404_on_search_is_auth() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    Mock::given(method("POST"))
        .and(path("/api/v0/bundles/"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_json(json!({"error": "auth_error", "msg": "Invalid user key"})),
        )
        .mount(&server)
        .await;
    let err = adapter(&server)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn an_env_value_over_the_vast_entry_limit_fails_naming_it_before_any_request() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let w = workload().env("PROMPT", &"x".repeat(300)).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message }
            if message.contains("PROMPT") && message.contains("256") && message.contains("env")),
        "{err:?}"
    );
    let long_args: Vec<String> = (0..50).map(|_| "a".repeat(100)).collect();
    let w = workload().args(long_args).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("4096")),
        "{err:?}"
    );
    let w = workload().option("disk_gb", "4").build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Invalid { message } if message.contains("8 GB")),
        "{err:?}"
    );
}
