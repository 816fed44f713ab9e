//! Contract tests of the Vast adapter: pacing per endpoint and 429s, against wiremock and the
//! rate-limited emulator.

use super::*;

#[tokio::test]
async fn calls_are_paced_per_endpoint_and_429s_retried() {
    let server = MockServer::start().await;
    // The documented 429 of the rent endpoint, with no Retry-After, once.
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(
                json!({"detail": "API requests too frequent endpoint threshold=4.5"}),
            ),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .mount(&server)
        .await;
    mount_offers(&server, json!([offer(1, 0.5, 0.2)])).await;
    let vast = adapter_with(VastConfig {
        rate_limits: MinIntervals {
            search: 0.2,
            rent: 0.0,
            list: 0.0,
            destroy: 0.0,
            logs: 0.0,
        },
        ..config(&server)
    });
    vast.create(&workload().build())
        .await
        .expect("a 429 is retried, not surfaced");
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(
        calls(&reqs),
        [
            "POST /api/v0/bundles/",
            "PUT /api/v0/asks/1/",
            "PUT /api/v0/asks/1/"
        ]
    );
}

#[tokio::test]
async fn a_429_that_persists_is_transient() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(
                json!({"detail": "API requests too frequent endpoint threshold=3.0"}),
            ),
        )
        .expect(u64::from(vk::providers::vast::MAX_429_RETRIES) + 1)
        .mount(&server)
        .await;
    let err = adapter(&server).delete("42").await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
}

/// Time scale of the rate-limit tests against the emulator: the adapter is paced at this
/// fraction of Vast's documented intervals and the emulator enforces the same fraction (as
/// the conformance harness does at a tenth), so the test stays short.
const EMULATED_SCALE: f64 = 0.05;

/// A Vast emulator enforcing Vast's per-endpoint intervals at [`EMULATED_SCALE`], stocked with
/// 64 RTX 4090s (8 machines of 8) under Vast's exact name; the adapter maps the neutral
/// `RTX4090` to it through its built-in table (no `gpuNames`).
async fn rate_limited_emulator() -> (
    String,
    mock_providers::vast::State,
    tokio::task::JoinHandle<()>,
) {
    use mock_providers::{EmulatorConfig, ExecutionMode, GpuStock};
    let cfg = EmulatorConfig::new(KEY, vec![GpuStock::new("RTX 4090", 64, 0.69)])
        .with_mode(ExecutionMode::simulated(0, 0, None))
        .with_endpoint_limits(EMULATED_SCALE);
    let state = mock_providers::vast::State::new(cfg);
    let (addr, task) = mock_providers::spawn(mock_providers::vast::router(state.clone()))
        .await
        .unwrap();
    (format!("http://{addr}"), state, task)
}

fn emulator_config(base_url: String, paced: bool) -> VastConfig {
    let real = MinIntervals::default();
    let s = if paced { EMULATED_SCALE } else { 0.0 };
    VastConfig {
        base_url,
        rate_limits: MinIntervals {
            list: real.list * s,
            search: real.search * s,
            rent: real.rent * s,
            destroy: real.destroy * s,
            logs: real.logs * s,
        },
        ..VastConfig::default()
    }
    .with_api_key(KEY)
}

fn rate_limited(state: &mock_providers::vast::State) -> u64 {
    state.engine().lock().gate.counters()["rate_limited"]
}

#[tokio::test]
async fn thirty_creates_at_once_against_the_rate_limited_emulator_surface_no_error() {
    let (url, state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, true));
    let workloads: Vec<Workload> = (0..30).map(workload_n).collect();
    let results = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        errors.is_empty(),
        "{} creates failed ({} requests refused as too frequent): {errors:?}",
        errors.len(),
        rate_limited(&state)
    );
    let listed = vast.list().await.unwrap();
    assert_eq!(listed.len(), 30);
    let mut ids: Vec<String> = listed.iter().map(|o| o.id.as_str().to_owned()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "one instance per workload");
}

#[tokio::test]
async fn an_unpaced_adapter_is_refused_by_the_rate_limited_emulator() {
    let (url, state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, false));
    let workloads: Vec<Workload> = (0..4).map(workload_n).collect();
    let _ = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;
    assert!(
        rate_limited(&state) > 0,
        "four rents at once break the rent interval"
    );
}

/// Vast matches `gpu_name` exactly: a type neither mapped nor built in is searched as written
/// and finds nothing, even one letter off a real name's neutral spelling.
#[tokio::test]
async fn an_unmapped_gpu_type_finds_no_offer_on_the_emulator() {
    let (url, _state, _task) = rate_limited_emulator().await;
    let vast = adapter_with(emulator_config(url, true));
    let w = workload().gpu("RTX4090X", 2).build();
    let err = vast.create(&w).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Capacity { .. }),
        "no offer is capacity: {err:?}"
    );
    assert!(err.to_string().contains("RTX4090X"), "{err}");
    // The same pod with the neutral name rents.
    vast.create(&workload().build()).await.unwrap();
}
