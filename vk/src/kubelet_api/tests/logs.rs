//! Router tests of `/containerLogs`: errors, options, byte limits and follow streams pulled
//! on demand.

use super::*;

#[tokio::test]
async fn logs_errors_name_what_is_wrong() {
    let s = setup(false);
    let (status, body) = call(&s.app, get("/containerLogs/ml/ghost/main")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("ml/ghost"), "{body}");
    let (status, body) = call(&s.app, get("/containerLogs/ml/train/sidecar")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("\"sidecar\"") && body.contains("ml/train"),
        "{body}"
    );
    let (status, body) = call(&s.app, get("/containerLogs/ml/train/main?tailLines=ten")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("tailLines"), "{body}");
    let (status, body) = call(&s.app, get("/containerLogs/ml/quiet/main")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(body.trim(), "not supported by provider runpod: logs");
    let (status, body) = call(&s.app, get("/containerLogs/ml/pending/main")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("no workload"), "{body}");
}

#[tokio::test]
async fn logs_stream_with_options_and_limit_bytes() {
    let s = setup(false);
    let (status, body) = call(
        &s.app,
        get("/containerLogs/ml/train/main?tailLines=2&timestamps=true&sinceTime=2026-05-01T10:00:00Z"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "hello world\nsecond line\n");
    let opts = s.logs_provider.last_opts.lock().unwrap().clone().unwrap();
    assert_eq!(opts.tail_lines, Some(2));
    assert!(opts.timestamps);
    assert_eq!(opts.since, Some("2026-05-01T10:00:00Z".parse().unwrap()));

    let (_, body) = call(&s.app, get("/containerLogs/ml/train/main?limitBytes=5")).await;
    assert_eq!(body, "hello");
}

#[tokio::test]
async fn a_follow_stream_is_pulled_on_demand_and_dropped_with_the_client() {
    let s = setup(true);
    let resp = s
        .app
        .clone()
        .oneshot(get("/containerLogs/ml/train/main?follow=true"))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    for _ in 0..3 {
        assert!(!body.next().await.unwrap().unwrap().is_empty());
    }
    // Nothing is read ahead of the client: an endless provider stream was polled only for
    // the frames taken.
    assert_eq!(s.logs_provider.polls.load(Ordering::SeqCst), 3);
    assert!(!s.logs_provider.dropped.load(Ordering::SeqCst));
    drop(body);
    assert!(s.logs_provider.dropped.load(Ordering::SeqCst));
}
