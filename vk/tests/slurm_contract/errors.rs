//! Contract tests of the Slurm adapter: how submit, cancel and list errors are classified, and
//! tokens kept out of them.

use super::*;

async fn submit_error(dialect: Dialect, resp: ResponseTemplate) -> (ProviderError, Vec<String>) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("{}/job/submit", prefix(dialect))))
        .respond_with(resp)
        .mount(&server)
        .await;
    mount_jobs(&server, dialect, json!([])).await;
    let err = adapter(&server, dialect)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert_no_token(&err);
    let calls = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect();
    (err, calls)
}

#[tokio::test]
async fn submit_errors_are_classified() {
    // 22.05's answer to an impossible GPU count: 500 with error_code 2014.
    let (err, calls) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(500).set_body_json(json!({"meta": meta(), "errors": [
            {"error_code": 2014, "error": "Requested node configuration is not available"}]})),
    )
    .await;
    match &err {
        ProviderError::Invalid { message } => {
            assert!(
                message.contains("Requested node configuration is not available"),
                "{message}"
            );
            assert!(message.contains("2014"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(
        calls,
        ["POST /slurm/v0.0.38/job/submit", "GET /slurm/v0.0.38/jobs/"],
        "a refused submission looks for a leftover job to cancel"
    );

    for (status, body, want) in [
        (
            500,
            json!({"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error": "environment must be set", "error_code": 2127}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error_number": 9001, "error": "Failure parsing"}]}),
            "invalid",
        ),
        (
            500,
            json!({"errors": [{"error_number": 2016, "error": "Requested nodes are busy"}]}),
            "capacity",
        ),
        (
            500,
            json!({"errors": [{"error_number": -1, "error": "Unspecified error", "description": "Failed while looking for jobs"}]}),
            "auth",
        ),
        (
            500,
            json!({"errors": [{"error_number": 1800, "error": "Unable to contact slurm controller (connect failure)"}]}),
            "transient",
        ),
        (502, json!({}), "transient"),
    ] {
        let (err, _) = submit_error(
            Dialect::V0038,
            ResponseTemplate::new(status).set_body_json(body.clone()),
        )
        .await;
        let got = match err {
            ProviderError::Invalid { .. } => "invalid",
            ProviderError::Capacity { .. } => "capacity",
            ProviderError::Auth { .. } => "auth",
            ProviderError::Transient { .. } => "transient",
            ProviderError::Unsupported { .. } => "unsupported",
            ProviderError::Malformed { .. } => "malformed",
            ProviderError::NotFound => "notfound",
        };
        assert_eq!(got, want, "{status} {body}");
    }
    // v0.0.41 repeats the code under `result`.
    let (err, _) = submit_error(
        Dialect::V0041,
        ResponseTemplate::new(500).set_body_json(json!({"result": {"job_id": 0, "error_code": 2072,
            "error": "Invalid generic resource (gres) specification"}, "errors": [{"error_number": 2072,
            "error": "Invalid generic resource (gres) specification", "description": "", "source": "slurm_submit_batch_job()"}]})),
    )
    .await;
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // Plain-text answers: 401 and 400 of slurmrestd itself.
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(401).set_body_string("Authentication failure"),
    )
    .await;
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(400).set_body_string("Unable to parse query."),
    )
    .await;
    assert!(matches!(err, ProviderError::Invalid { .. }), "{err:?}");
    // A URL slurmrestd does not serve (wrong dialect) is not a reason to fail the pod.
    let (err, _) = submit_error(
        Dialect::V0041,
        ResponseTemplate::new(404).set_body_string("Unable find requested URL"),
    )
    .await;
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    // Retry-After is honoured.
    let (err, _) = submit_error(
        Dialect::V0038,
        ResponseTemplate::new(503).insert_header("retry-after", "7"),
    )
    .await;
    assert_eq!(
        err,
        ProviderError::Transient {
            message: "slurmrestd HTTP 503: Service Unavailable".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
}

#[tokio::test]
async fn a_refused_submission_cancels_its_active_leftover() {
    let server = MockServer::start().await;
    let id = workload().build().id;
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.38/job/submit"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"errors": [
            {"error_code": 2014, "error": "Requested node configuration is not available"}]})))
        .mount(&server)
        .await;
    mount_jobs(
        &server,
        Dialect::V0038,
        json!([
            job38(5, id.as_str(), "PENDING", 0, "BadConstraints"),
            job38(6, id.as_str(), "FAILED", 1, "BadConstraints")
        ]),
    )
    .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/5"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"meta": meta(), "errors": []})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038)
        .create(&workload().build())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Invalid { .. }));
}

#[tokio::test]
async fn delete_errors_are_classified() {
    let server = MockServer::start().await;
    // A real 22.05 answers an unknown job with 500 and error 2017.
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/999"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"meta": meta(), "errors": [{
            "description": "unable to kill JobId=999 with signal 9: Invalid job id specified",
            "error_number": 2017, "error": "Invalid job id specified", "source": "slurm_kill_job"}]})))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/998"))
        .respond_with(ResponseTemplate::new(500).set_body_json(slurm_error(
            2021,
            "Job/step already completing or completed",
        )))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.38/job/997"))
        .respond_with(ResponseTemplate::new(500).set_body_json(slurm_error(
            1800,
            "Unable to contact slurm controller (connect failure)",
        )))
        .mount(&server)
        .await;
    let slurm = adapter(&server, Dialect::V0038);
    assert_eq!(slurm.delete("999").await, Err(ProviderError::NotFound));
    assert_eq!(slurm.delete("998").await, Ok(()));
    assert!(matches!(
        slurm.delete("997").await,
        Err(ProviderError::Transient { .. })
    ));
}

#[tokio::test]
async fn list_errors_are_classified() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>proxy</html>"))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"meta": {}})))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0038).list().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Transient { .. }),
        "no jobs field is not an empty list: {err:?}"
    );
}

#[tokio::test]
async fn an_expired_token_is_named_in_the_error() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.38/jobs/"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"errors": [{
            "description": "Failed while looking for jobs", "error_number": -1,
            "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []})))
        .mount(&server)
        .await;
    // exp = 1 (1970)
    let expired = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjEsInN1biI6InZrc2x1cm0ifQ.sig";
    let slurm = adapter_with(config(&server, Dialect::V0038).with_api_key(expired));
    match slurm.list().await.unwrap_err() {
        ProviderError::Auth { message } => {
            assert!(message.contains("expired at 1970-01-01"), "{message}");
            assert!(!message.contains(expired));
        }
        other => panic!("expected Auth, got {other:?}"),
    }
}

#[tokio::test]
async fn the_token_file_is_reread_when_it_changes() {
    let server = MockServer::start().await;
    for (token, status) in [("old-token-value", 401), ("new-token-value", 200)] {
        Mock::given(method("GET"))
            .and(path("/slurm/v0.0.38/jobs/"))
            .and(header("x-slurm-user-token", token))
            .respond_with(if status == 200 {
                ResponseTemplate::new(200).set_body_json(json!({"errors": [], "jobs": []}))
            } else {
                ResponseTemplate::new(401).set_body_string("Authentication failure")
            })
            .mount(&server)
            .await;
    }
    let dir = std::env::temp_dir().join(format!("vk-slurm-contract-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "SLURM_JWT=old-token-value\n").unwrap();
    let mut cfg = config(&server, Dialect::V0038);
    cfg.api_key = vk::config::Secret::default();
    cfg.token_file = Some(file.clone());
    let slurm = adapter_with(cfg);

    let err = slurm.list().await.unwrap_err();
    match &err {
        ProviderError::Auth { message } => {
            assert!(message.contains(&file.display().to_string()), "{message}");
            assert!(!message.contains("old-token-value"), "{message}");
        }
        other => panic!("expected Auth, got {other:?}"),
    }
    // A renewed token is used without restarting anything (the length changes too, so the
    // change is seen even on file systems with coarse timestamps).
    std::fs::write(&file, "SLURM_JWT=new-token-value-renewed\n").unwrap();
    let err = slurm.list().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Transient { .. }),
        "unmatched token: {err:?}"
    );
    std::fs::write(&file, "new-token-value\n").unwrap();
    assert_eq!(slurm.list().await.unwrap(), vec![]);
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(
        slurm.list().await,
        Err(ProviderError::Auth { .. })
    ));
}

#[tokio::test]
async fn connection_failures_are_transient() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = SlurmConfig {
        base_url: "http://127.0.0.1:9".into(),
        user_name: USER.into(),
        request_timeout_secs: 2,
        ..SlurmConfig::default()
    }
    .with_api_key(TOKEN);
    let slurm = Slurm::new("slurm".into(), cfg, owner()).unwrap();
    let err = slurm.list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    assert_no_token(&err);
}
