//! Contract tests of the Vast adapter: what a create asks for (price and disk, bids, the command).

use super::*;

#[tokio::test]
async fn interruptible_pods_bid() {
    // Bid at the offer's minimum.
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(5, 0.3, 0.12)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/5/"))
        .and(body_partial_json(json!({"price": 0.12})))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    let w = workload().option("interruptible", "true").build();
    adapter(&server).create(&w).await.unwrap();
    let search: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(search["type"], "bid");

    // An explicit bid skips offers whose minimum bid is higher.
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(6, 0.2, 0.3), offer(7, 0.4, 0.2)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/7/"))
        .and(body_partial_json(json!({"price": 0.25})))
        .respond_with(rented())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/6/"))
        .respond_with(rented())
        .expect(0)
        .mount(&server)
        .await;
    let w = workload()
        .option("interruptible", "true")
        .option("bid_price", "0.25")
        .build();
    adapter(&server).create(&w).await.unwrap();
}

#[tokio::test]
async fn a_lower_price_or_disk_than_the_operators_is_honoured() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter_with(VastConfig {
        max_price_per_hour: Some(1.0),
        max_disk_gb: Some(100),
        ..config(&server)
    });
    let w = workload()
        .option("max_price_per_hour", "0.6")
        .option("disk_gb", "40")
        .option("min_cuda", "12.8")
        .build();
    vast.create(&w).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    let search: Value = reqs
        .iter()
        .find(|r| r.url.path().contains("bundles"))
        .map(|r| r.body_json().unwrap())
        .expect("an offer search");
    assert_eq!(search["dph_total"], json!({"lte": 0.6}), "{search}");
    assert_eq!(search["disk_space"], json!({"gte": 40.0}), "{search}");
    // The CUDA floor: only hosts whose driver runs CUDA 12.8 (vast-cli's `cuda_vers>=12.8`).
    assert_eq!(search["cuda_max_good"], json!({"gte": 12.8}), "{search}");
    let errors = mock_providers::schema::vast().request_errors("POST /api/v0/bundles", &search);
    assert!(errors.is_empty(), "Vast would refuse {search}: {errors:?}");
}

#[tokio::test]
async fn command_overrides_the_entrypoint_and_args_replace_the_cmd() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.2)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .mount(&server)
        .await;
    // Only `args`: the image ENTRYPOINT stays (no `onstart`), `args` replace its CMD.
    let w = WorkloadBuilder::new(&owner(), UID)
        .pod("ml", "serve-0")
        .image("vllm/vllm-openai:v0.6")
        .args(["--model", "m"])
        .gpu("RTX4090", 2)
        .build();
    adapter(&server).create(&w).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    let rent: Value = reqs
        .iter()
        .rev()
        .find(|r| r.method.as_str() == "PUT")
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(rent["runtype"], "args");
    assert!(rent.get("onstart").is_none(), "{rent}");
    assert!(rent.get("args_str").is_none(), "{rent}");
    assert_eq!(rent["args"], json!(["--model", "m"]));
}
