//! Contract tests of the Vast adapter: concurrent creates, the offers they claim and the widening
//! search.

use super::*;

/// Offer ids of the rents (`PUT /api/v0/asks/{id}/`) the server received, in order.
async fn rents(server: &MockServer) -> Vec<u64> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "PUT")
        .filter_map(|r| {
            r.url
                .path()
                .strip_prefix("/api/v0/asks/")?
                .trim_end_matches('/')
                .parse()
                .ok()
        })
        .collect()
}

/// The `limit` of every offer search the server received, in order.
async fn search_limits(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| r.body_json::<Value>().unwrap()["limit"].clone())
        .collect()
}

/// Creates that arrive together share one search's answer (Vast allows 10 searches a minute)
/// and each rents an offer of its own from it.
#[tokio::test]
async fn concurrent_creates_share_one_search_and_rent_different_offers_on_the_first_try() {
    const N: u64 = 8;
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    // Equally cheap offers: every create would pick the first one.
    mount_offers(
        &server,
        Value::Array((1..=N).map(|i| offer(100 + i, 0.5, 0.1)).collect()),
    )
    .await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_millis(100)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..N as usize).map(workload_n).collect();

    let results = futures::future::join_all(workloads.iter().map(|w| vast.create(w))).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let searches = search_limits(&server).await.len();
    assert_eq!(searches, 1, "one search for {N} creates");
    let mut rented = rents(&server).await;
    assert_eq!(rented.len() as u64, N, "one rent per create: {rented:?}");
    rented.sort_unstable();
    assert_eq!(rented, (101..=100 + N).collect::<Vec<_>>());
}

#[tokio::test]
async fn every_offer_being_rented_by_other_creates_is_transient_not_capacity() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..3).map(workload_n).collect();

    let (first, second, third) = futures::join!(
        vast.create(&workloads[0]),
        vast.create(&workloads[1]),
        async {
            // Once both offers are being rented.
            while rents(&server).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            vast.create(&workloads[2]).await
        }
    );

    first.unwrap();
    second.unwrap();
    match third.unwrap_err() {
        ProviderError::Transient { retry_after, .. } => assert_eq!(
            retry_after,
            Some(vk::providers::vast::CONTENDED_RETRY),
            "retried shortly"
        ),
        other => panic!("expected transient, got {other:?}"),
    }
    let mut rented = rents(&server).await;
    rented.sort_unstable();
    assert_eq!(rented, [1, 2], "no offer is rented twice");
}

#[tokio::test]
async fn a_create_waits_out_contention_and_rents_the_offer_another_create_released() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    // Offer 1: the first rent fails after a while (its claim is released), later ones work.
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({"success": false, "error": "server_error"}))
                .set_delay(Duration::from_millis(250)),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented())
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/2/"))
        .respond_with(rented().set_delay(Duration::from_millis(250)))
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let workloads: Vec<Workload> = (0..3).map(workload_n).collect();
    let (first, second, third) = futures::join!(
        vast.create(&workloads[0]),
        vast.create(&workloads[1]),
        async {
            while rents(&server).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            vast.create(&workloads[2]).await
        }
    );
    // Which of the two takes offer 1 (the cheapest) depends on whose search answers first: the
    // one that does gets the failed rent reported, the other rents offer 2.
    assert_eq!(
        usize::from(first.is_err()) + usize::from(second.is_err()),
        1,
        "exactly one create (the one renting offer 1 first) reports the failed rent: \
         {first:?}, {second:?}"
    );
    // No transient error for contention inside this process: the third create searched again
    // and rented the offer the failed rent gave back.
    third.unwrap();
    let mut rented = rents(&server).await;
    rented.sort_unstable();
    assert_eq!(rented, [1, 1, 2]);
}

#[tokio::test]
async fn rented_and_gone_offers_stay_claimed_and_failed_rents_release_theirs() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(
        &server,
        json!([
            offer(1, 0.5, 0.1),
            offer(2, 0.6, 0.1),
            offer(3, 0.7, 0.1),
            offer(4, 0.8, 0.1)
        ]),
    )
    .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(
            ResponseTemplate::new(410)
                .set_body_json(json!({"success": false, "error": "no_such_ask"})),
        )
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/3/"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);

    // 1 is gone, 2 rented.
    vast.create(&workload_n(1)).await.unwrap();
    // 1 and 2 are skipped; 3 fails transiently...
    let err = vast.create(&workload_n(2)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    // ... which frees it for the next create.
    vast.create(&workload_n(3)).await.unwrap();
    vast.create(&workload_n(4)).await.unwrap();
    // Everything listed was rented or found gone a moment ago: no rent tried, and a new
    // search shortly, not "no capacity".
    let err = vast.create(&workload_n(5)).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Transient {
                retry_after: Some(_),
                ..
            }
        ),
        "{err:?}"
    );

    assert_eq!(rents(&server).await, [1, 2, 3, 3, 4]);
}

#[tokio::test]
async fn a_cancelled_rent_releases_its_offer() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1)])).await;
    Mock::given(method("PUT"))
        .respond_with(rented().set_delay(Duration::from_secs(5)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);

    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), vast.create(&workload_n(1))).await;
    assert!(cancelled.is_err(), "the slow rent was cut short");
    vast.create(&workload_n(2)).await.unwrap();

    assert_eq!(rents(&server).await, [1, 1]);
}

#[tokio::test]
async fn the_search_widens_for_creates_renting_meanwhile() {
    let server = MockServer::start().await;
    mount_lookup(&server, json!([])).await;
    // The first search finds one offer; later ones find a second.
    Mock::given(method("POST"))
        .and(path("/api/v0/bundles/"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"offers": [offer(1, 0.5, 0.1)]})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    mount_offers(&server, json!([offer(1, 0.5, 0.1), offer(2, 0.6, 0.1)])).await;
    Mock::given(method("PUT"))
        .and(path("/api/v0/asks/1/"))
        .respond_with(rented().set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(rented())
        .mount(&server)
        .await;
    let vast = adapter(&server);
    let (first, second) = (workload_n(1), workload_n(2));

    let (a, b) = futures::join!(vast.create(&first), async {
        // Start once the first create is renting.
        while rents(&server).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        vast.create(&second).await
    });

    a.unwrap();
    b.unwrap();
    // The second create found the first's answer used up, and searched wider.
    assert_eq!(search_limits(&server).await, [json!(20), json!(21)]);
    assert_eq!(rents(&server).await, [1, 2]);
    // Alone again: the default limit.
    vast.create(&workload_n(3)).await.unwrap_err();
    assert_eq!(search_limits(&server).await[2], json!(20));
}
