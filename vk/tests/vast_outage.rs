#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A Vast instance whose host is `offline` or `unknown`: NotReady while the outage may end,
//! reported failed (so destroyed and replaced) once it has lasted the provider's
//! `unreachableDeadlineSeconds`; Vast's docs say such an instance "will never reach running".

use std::time::Duration;

use serde_json::{Value, json};
use vk::naming::Owner;
use vk::provider::{FailureReason, Provider, WorkloadState};
use vk::providers::vast::{MinIntervals, Vast, VastConfig};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

fn adapter(server: &MockServer, deadline_s: u64) -> Vast {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = VastConfig {
        base_url: server.uri(),
        unreachable_deadline_seconds: deadline_s,
        rate_limits: MinIntervals {
            list: 0.0,
            search: 0.0,
            rent: 0.0,
            destroy: 0.0,
            logs: 0.0,
        },
        ..VastConfig::default()
    }
    .with_api_key("vast-test-key-0123456789");
    Vast::new("vast".into(), cfg, Owner::new("cluster-a", "vk-node")).unwrap()
}

async fn list_answers(server: &MockServer, actual: &str) {
    server.reset().await;
    let label = Owner::new("cluster-a", "vk-node").workload_id(UID).unwrap();
    let inst: Value = json!({"id": 4242, "label": label.as_str(), "actual_status": actual,
        "intended_status": "running", "is_bid": false, "public_ipaddr": "203.0.113.7"});
    Mock::given(method("GET"))
        .and(path_regex("^/api/v1/instances/?$"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"success": true, "instances": [inst], "next_token": null})),
        )
        .mount(server)
        .await;
}

async fn state(vast: &Vast) -> (WorkloadState, Option<String>) {
    let o = vast.list().await.unwrap().pop().unwrap();
    (o.state, o.message)
}

#[tokio::test]
async fn an_outage_past_the_deadline_fails_the_instance_and_a_shorter_one_does_not() {
    let server = MockServer::start().await;
    let vast = adapter(&server, 1);
    for status in ["offline", "unknown"] {
        list_answers(&server, status).await;
        assert!(
            matches!(state(&vast).await.0, WorkloadState::NotReady { .. }),
            "{status}: an outage that may end"
        );
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (s, message) = state(&vast).await;
        assert_eq!(
            s,
            WorkloadState::Failed {
                exit_code: 1,
                reason: FailureReason::ProviderError
            },
            "{status}: past the deadline"
        );
        let message = message.unwrap();
        assert!(
            message.contains("unreachableDeadlineSeconds")
                && message.contains("never reach running"),
            "{message}"
        );
        // The host comes back: running again, and the next outage is timed from zero.
        list_answers(&server, "running").await;
        assert_eq!(state(&vast).await.0, WorkloadState::Running);
    }
    list_answers(&server, "offline").await;
    assert!(matches!(
        state(&vast).await.0,
        WorkloadState::NotReady { .. }
    ));

    // A deadline of 0: an outage is waited out however long it lasts.
    let patient = adapter(&server, 0);
    state(&patient).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(matches!(
        state(&patient).await.0,
        WorkloadState::NotReady { .. }
    ));
}
