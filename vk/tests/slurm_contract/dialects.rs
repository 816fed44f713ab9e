//! Contract tests of the Slurm adapter: the dialect detected from /openapi, settings, and v0.0.42
//! cancels.

use super::*;

#[test]
fn settings_parse_from_yaml_and_are_checked() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let yaml = r#"
baseUrl: http://slurm.example:6820
dialect: v0.0.41
userName: vkslurm
tokenFile: /run/secrets/slurm-token
partition: gpu
account: proj1
qos: normal
defaultTimeLimitMinutes: 60
runtime: enroot
outputDir: /shared/vk-logs
workDir: /scratch
gpuTypes: {A100-80GB: a100}
"#;
    // slurmrestd over plain http to another host: only when the operator says so.
    let cfg: SlurmConfig = serde_saphyr::from_str(yaml).unwrap();
    let refused = Slurm::new("slurm".into(), cfg, owner())
        .err()
        .map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("only allowed to loopback")),
        "{refused:?}"
    );
    let yaml = format!("{yaml}allowInsecureHttp: true\n");
    let cfg: SlurmConfig = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(cfg.dialect, Dialect::V0041);
    assert_eq!(cfg.runtime, Runtime::Enroot);
    let slurm = Slurm::new("slurm".into(), cfg.clone(), owner()).unwrap();
    assert_eq!(slurm.capabilities().gpu_types, vec!["A100-80GB".to_owned()]);
    assert!(!format!("{cfg:?}").contains("secret-value"));

    assert!(serde_saphyr::from_str::<SlurmConfig>("dialect: v0.0.99\nuserName: u").is_err());
    assert!(serde_saphyr::from_str::<SlurmConfig>("userName: u\nbogus: 1").is_err());
    let no_user = SlurmConfig {
        token_file: Some("/x".into()),
        ..SlurmConfig::default()
    };
    assert!(Slurm::new("s".into(), no_user, owner()).is_err());
    let no_token = SlurmConfig {
        user_name: "u".into(),
        ..SlurmConfig::default()
    };
    assert!(Slurm::new("s".into(), no_token, owner()).is_err());
    let debug = format!(
        "{:?}",
        SlurmConfig {
            user_name: "u".into(),
            ..SlurmConfig::default()
        }
        .with_api_key("secret-value")
    );
    assert!(!debug.contains("secret-value"), "{debug}");
}

/// What 24.11.5's slurmrestd lists in `/openapi/v3` (paths only; v0.0.99 stands for a future
/// dialect the adapter does not speak).
fn openapi(versions: &[&str]) -> Value {
    let mut paths = serde_json::Map::new();
    for v in versions {
        for p in ["job/submit", "jobs/", "job/{job_id}", "ping/"] {
            paths.insert(format!("/slurm/{v}/{p}"), json!({}));
        }
    }
    paths.insert("/openapi/v3".into(), json!({}));
    json!({"openapi": "3.0.2", "info": {"version": "Slurm-24.11.5&openapi/slurmctld"}, "paths": paths})
}

async fn mount_openapi(server: &MockServer, versions: &[&str], times: Option<u64>) {
    let mock = Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .and(header("x-slurm-user-name", USER))
        .and(header("x-slurm-user-token", TOKEN))
        .respond_with(ResponseTemplate::new(200).set_body_json(openapi(versions)));
    match times {
        Some(n) => mock.up_to_n_times(n).mount(server).await,
        None => mock.mount(server).await,
    }
}

fn openapi_fetches(reqs: &[wiremock::Request]) -> usize {
    reqs.iter()
        .filter(|r| r.url.path() == "/openapi/v3")
        .count()
}

#[tokio::test]
async fn auto_detects_the_newest_served_dialect_once_and_submits_in_it() {
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.99"], None).await;
    // 24.11.5's submission answer in v0.0.42: no `result` any more.
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.42/job/submit"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "job_id": 9, "step_id": "batch", "job_submit_user_msg": "", "meta": {},
            "errors": [], "warnings": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    mount_jobs(&server, Dialect::V0042, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    slurm.create(&workload().build()).await.unwrap();
    assert_eq!(slurm.list().await.unwrap(), vec![]);
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0042));

    let reqs = server.received_requests().await.unwrap();
    assert_eq!(openapi_fetches(&reqs), 1, "detected once, then remembered");
    let body: Value = reqs
        .iter()
        .find(|r| r.url.path() == "/slurm/v0.0.42/job/submit")
        .unwrap()
        .body_json()
        .unwrap();
    assert!(body.get("script").is_none(), "v0.0.42 nests the script");
    assert_eq!(body["job"]["tres_per_node"], "gres/gpu:2");
    insta::assert_json_snapshot!("slurm_submit_v0042", body);

    // 26.05.5 serves v0.0.42 to v0.0.45: the newest wins.
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"], None).await;
    mount_jobs(&server, Dialect::V0045, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    slurm.list().await.unwrap();
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0045));
    // 22.05.8 serves only v0.0.38 (and its dbv0.0.38 when slurmdbd runs).
    let server = MockServer::start().await;
    let mut doc = openapi(&["v0.0.38"]);
    doc["paths"]["/slurmdb/v0.0.38/jobs/"] = json!({});
    Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .respond_with(ResponseTemplate::new(200).set_body_json(doc))
        .mount(&server)
        .await;
    assert_eq!(
        adapter(&server, Dialect::Auto).dialect().await,
        Ok(Dialect::V0038)
    );
}

#[tokio::test]
async fn auto_without_a_dialect_the_adapter_speaks_is_transient_and_submits_nothing() {
    let server = MockServer::start().await;
    mount_openapi(&server, &["v0.0.39", "v0.0.99"], None).await;
    let slurm = adapter(&server, Dialect::Auto);
    let err = slurm.create(&workload().build()).await.unwrap_err();
    match &err {
        ProviderError::Transient { message, .. } => {
            assert!(message.contains("[v0.0.39, v0.0.99]"), "{message}")
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    assert_no_token(&err);
    let reqs = server.received_requests().await.unwrap();
    assert!(
        reqs.iter().all(|r| r.url.path() == "/openapi/v3"),
        "{reqs:?}"
    );

    // A slurmrestd without /openapi/v3 asks for the setting; a rejected token is Auth.
    let server = MockServer::start().await;
    let err = adapter(&server, Dialect::Auto).list().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transient { message, .. } if message.contains("settings.dialect")),
        "{err:?}"
    );
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/openapi/v3"))
        .respond_with(ResponseTemplate::new(401).set_body_string("Authentication failure"))
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::Auto).list().await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn a_url_no_longer_served_makes_auto_detect_again() {
    let server = MockServer::start().await;
    // slurmrestd served v0.0.45, then restarted with 24.11 (up to v0.0.42).
    mount_openapi(&server, &["v0.0.43", "v0.0.44", "v0.0.45"], Some(1)).await;
    mount_openapi(&server, &["v0.0.40", "v0.0.41", "v0.0.42"], None).await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.45/jobs/"))
        .respond_with(ResponseTemplate::new(404).set_body_string("Not Found"))
        .mount(&server)
        .await;
    mount_jobs(&server, Dialect::V0042, json!([])).await;
    let slurm = adapter(&server, Dialect::Auto);
    let err = slurm.list().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transient { message, .. } if message.contains("v0.0.45")),
        "{err:?}"
    );
    slurm.list().await.expect("detected again: v0.0.42");
    assert_eq!(slurm.dialect().await, Ok(Dialect::V0042));
    assert_eq!(
        openapi_fetches(&server.received_requests().await.unwrap()),
        2
    );
}

/// v0.0.42 on answer a cancellation with HTTP 200 and the job's outcome in `status[]`
/// (bodies as 24.11.5 and 26.05.5 send them).
#[tokio::test]
async fn delete_v0042_reads_the_outcome_of_each_job() {
    let status = |code: i64, text: &str| {
        json!({"status": [{"error": {"string": text, "code": code, "message": text},
                "step_id": "42", "job_id": {"set": code != 2017, "infinite": false, "number": 42},
                "federation": {"sibling": ""}}], "meta": {}, "errors": [], "warnings": []})
    };
    for (answer, expected) in [
        (
            json!({"status": [], "meta": {}, "errors": [], "warnings": []}),
            Ok(()),
        ),
        (
            status(2017, "Invalid job id specified"),
            Err(ProviderError::NotFound),
        ),
        (
            status(2021, "Job/step already completing or completed"),
            Ok(()),
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("DELETE"))
            .and(path("/slurm/v0.0.42/job/42"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
            .mount(&server)
            .await;
        assert_eq!(
            adapter(&server, Dialect::V0042).delete("42").await,
            expected,
            "{answer}"
        );
    }
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/slurm/v0.0.42/job/42"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(status(2002, "Access/permission denied")),
        )
        .mount(&server)
        .await;
    let err = adapter(&server, Dialect::V0042)
        .delete("42")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Auth { message } if message.contains("Access/permission denied")),
        "{err:?}"
    );
}
