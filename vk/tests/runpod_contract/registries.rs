//! Contract tests of the RunPod adapter's private images: registry credentials created once per
//! login (found again by name after a restart, named without the secret), sent by id, swept
//! when no pod uses them; a pull that fails read from the pod's system log.

use super::*;

const PASSWORD: &str = "reg-pass-9f3e-secret";

fn private() -> WorkloadBuilder {
    workload()
        .image("registry.example.com/acme/model-server:2")
        .login("registry.example.com", "robot", PASSWORD)
}

async fn mount_create(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/v2/pods"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pod("n1", "x", "PROVISIONING")))
        .mount(server)
        .await;
}

fn calls(reqs: &[wiremock::Request]) -> Vec<String> {
    reqs.iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

#[tokio::test]
async fn a_login_becomes_one_credential_sent_by_id_and_found_again_by_name() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/registries"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"registries": [
                {"id": "someone-else", "name": "team-ghcr"}
            ]})),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/registries"))
        .respond_with(
            ResponseTemplate::new(201).set_body_json(json!({"id": "reg-1", "name": "ignored"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    mount_create(&server).await;
    let rp = adapter(&server);
    rp.create(&private().build()).await.unwrap();
    // A second pod with the same login reuses the credential: no registry call.
    rp.create(
        &private()
            .pod_uid("00000000-0000-4000-8000-000000000002")
            .build(),
    )
    .await
    .unwrap();
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(
        calls(&reqs),
        [
            "GET /v2/registries",
            "POST /v2/registries",
            "POST /v2/pods",
            "POST /v2/pods"
        ]
    );
    let cred: Value = reqs[1].body_json().unwrap();
    let errors = mock_providers::schema::runpod().request_errors("POST /v2/registries", &cred);
    assert!(errors.is_empty(), "RunPod would refuse {cred}: {errors:?}");
    let name = cred["name"].as_str().unwrap();
    assert!(
        name.starts_with(&format!("gpu-vk-{}-", owner().tag())),
        "{name}"
    );
    assert!(
        !name.contains(PASSWORD) && !name.contains("robot"),
        "{name}"
    );
    assert_eq!(
        (cred["username"].as_str(), cred["password"].as_str()),
        (Some("robot"), Some(PASSWORD))
    );
    for r in &reqs[2..] {
        let body: Value = r.body_json().unwrap();
        assert_valid_create(&body);
        assert_eq!(body["registry"], "reg-1");
        assert!(
            !body.to_string().contains(PASSWORD),
            "the pod body holds no password"
        );
    }

    // A restarted VK finds the credential by its name: no second POST.
    let restarted = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/registries"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"registries": [
                {"id": "reg-1", "name": name}
            ]})),
        )
        .mount(&restarted)
        .await;
    mount_create(&restarted).await;
    adapter(&restarted)
        .create(&private().build())
        .await
        .unwrap();
    let reqs = restarted.received_requests().await.unwrap();
    assert_eq!(calls(&reqs), ["GET /v2/registries", "POST /v2/pods"]);
    assert_eq!(reqs[1].body_json::<Value>().unwrap()["registry"], "reg-1");

    // A public image, or a login for another registry: no credential.
    let plain = MockServer::start().await;
    mount_create(&plain).await;
    let other = workload()
        .login("ghcr.example.com", "robot", PASSWORD)
        .build();
    adapter(&plain).create(&other).await.unwrap();
    let reqs = plain.received_requests().await.unwrap();
    assert_eq!(calls(&reqs), ["POST /v2/pods"]);
    assert!(
        reqs[0]
            .body_json::<Value>()
            .unwrap()
            .get("registry")
            .is_none()
    );
}

#[tokio::test]
async fn the_sweep_deletes_only_this_owners_unused_credentials() {
    let server = MockServer::start().await;
    let mine = |d: &str| format!("gpu-vk-{}-{d}", owner().tag());
    let mut using = pod("p1", "x", "RUNNING");
    using["registry"] = json!("reg-used");
    mount_list(&server, json!([using])).await;
    Mock::given(method("GET"))
        .and(path("/v2/registries"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"registries": [
                {"id": "reg-used", "name": mine("00000000000000aa")},
                {"id": "reg-idle", "name": mine("00000000000000bb")},
                {"id": "reg-theirs", "name": "gpu-vk-other-owner-00000000000000cc"},
                {"id": "reg-hand", "name": "team-ghcr"}
            ]})),
        )
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/registries/reg-idle"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = RunPodConfig {
        registry_sweep_seconds: 0,
        ..config(&server)
    };
    let rp = RunPod::new("runpod".into(), cfg, owner()).unwrap();
    rp.list().await.unwrap();
    let deletes: Vec<String> = calls(&server.received_requests().await.unwrap())
        .into_iter()
        .filter(|c| c.starts_with("DELETE"))
        .collect();
    assert_eq!(deletes, ["DELETE /v2/registries/reg-idle"]);
}

/// A pod's system log while its host fails to pull the image, as RunPod users report it
/// (runpod/runpod-python#165).
const PULL_DENIED: &str = "id: 1\n\
    data: {\"source\":\"system\",\"line\":\"allocated 1 x A100\",\"ts\":\"2026-12-01T10:00:00Z\"}\n\n\
    id: 2\n\
    data: {\"source\":\"system\",\"line\":\"error pulling image: Error response from daemon: pull access denied for registry.example.com/acme/model-server, repository does not exist or may require 'docker login'\",\"ts\":\"2026-12-01T10:00:15Z\"}\n\n";

#[tokio::test]
async fn a_pull_that_fails_is_read_from_the_system_log_of_a_pod_still_starting() {
    let server = MockServer::start().await;
    let name = owner()
        .workload_id("00000000-0000-4000-8000-000000000003")
        .unwrap();
    mount_list(&server, json!([pod("p-start", name.as_str(), "STARTING")])).await;
    Mock::given(method("GET"))
        .and(path("/v2/pods/p-start/logs"))
        .and(query_param("source", "system"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(PULL_DENIED),
        )
        .expect(1)
        .mount(&server)
        .await;
    let rp = adapter(&server);
    // The first list only notes the pod; the second starts the look in the background.
    assert_eq!(rp.list().await.unwrap()[0].pull_failure, None);
    assert_eq!(rp.list().await.unwrap()[0].pull_failure, None);
    let mut seen = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = rp.list().await.unwrap()[0].pull_failure.clone();
        if seen.is_some() {
            break;
        }
    }
    let msg = seen.expect("the pull failure is reported");
    assert!(
        msg.starts_with("Error response from daemon: pull access denied for registry.example.com"),
        "{msg}"
    );
}
