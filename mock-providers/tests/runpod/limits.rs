//! The RunPod emulator's rate limits, list cost at scale, logs and stuck starts.

use super::*;

#[tokio::test]
async fn rate_limit_gives_429_with_retry_after_and_headers() {
    let emu = start_runpod(config(ExecutionMode::default()).with_rate_limit(3)).await;
    for remaining in [2, 1, 0] {
        let r = emu.get("/v2/pods").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let rl = r.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(
            rl.starts_with(&format!("\"minute\";r={remaining};t=")),
            "{rl}"
        );
        assert_eq!(
            r.headers()["ratelimit-policy"].to_str().unwrap(),
            "\"minute\";q=3;w=60"
        );
    }
    let r = emu.get("/v2/pods").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    let body: Value = r.json().await.unwrap();
    assert_problem(&body, 429);
    assert_eq!(body["detail"], "rate limit exceeded for the minute window");
    // Rate-limited calls are still counted.
    assert_eq!(emu.counters().await["list"], 4);
}

/// RunPod v2's quota windows (`RateLimit-Policy` example `"minute";q=60;w=60,
/// "hour";q=3000;w=3600, "day";q=50000;w=86400`): one member per window in both headers, and a
/// 429 names the exceeded window and waits for its reset.
#[tokio::test]
async fn the_hour_and_day_windows_are_enforced_and_reported() {
    let windows = mock_providers::config::RateWindows {
        per_minute: Some(5),
        per_hour: Some(3),
        per_day: Some(10),
    };
    let emu = start_runpod(config(ExecutionMode::default()).with_rate_windows(windows)).await;
    for (minute, hour, day) in [(4, 2, 9), (3, 1, 8), (2, 0, 7)] {
        let r = emu.get("/v2/pods").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let rl = r.headers()["ratelimit"].to_str().unwrap().to_owned();
        let members: Vec<&str> = rl.split(", ").collect();
        assert_eq!(members.len(), 3, "{rl}");
        assert!(
            members[0].starts_with(&format!("\"minute\";r={minute};t=")),
            "{rl}"
        );
        assert!(
            members[1].starts_with(&format!("\"hour\";r={hour};t=")),
            "{rl}"
        );
        assert!(
            members[2].starts_with(&format!("\"day\";r={day};t=")),
            "{rl}"
        );
        assert_eq!(
            r.headers()["ratelimit-policy"].to_str().unwrap(),
            "\"minute\";q=5;w=60, \"hour\";q=3;w=3600, \"day\";q=10;w=86400"
        );
    }
    // The minute window has room, the hour window does not.
    let r = emu.get("/v2/pods").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((3_500..=3_600).contains(&retry), "{retry}");
    let rl = r.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(rl.contains("\"hour\";r=0;"), "{rl}");
    let body: Value = r.json().await.unwrap();
    assert_problem(&body, 429);
    assert_eq!(body["detail"], "rate limit exceeded for the hour window");
}

#[tokio::test]
async fn list_returns_every_pod_once_per_call() {
    let emu = start_runpod(config(ExecutionMode::default())).await;
    for i in 0..3 {
        assert_eq!(
            create(&emu, pod_body(&format!("p{i}"), "RTX4090", 1))
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    let names = listed_names(&emu).await;
    assert_eq!(names, ["p0", "p1", "p2"]);
    let c = emu.counters().await;
    assert_eq!(c["create"], 3);
    assert_eq!(c["list"], 1);
    assert_eq!(c["get"], 0);
}

#[tokio::test]
async fn ten_thousand_simulated_pods_are_cheap() {
    let cfg = mock_providers::EmulatorConfig::new(
        KEY,
        vec![mock_providers::GpuStock::new("A100-80GB", 10_000, 1.0)],
    )
    .with_mode(ExecutionMode::simulated(100, 100, Some(60_000)));
    let state = mock_providers::runpod::State::new(cfg);
    let engine = state.engine().clone();
    for i in 0..10_000 {
        engine
            .inject(mock_providers::engine::NewWorkload {
                name: format!("pod-{i}"),
                image: "img".into(),
                gpu_type: "A100-80GB".into(),
                gpu_count: 1,
                ..Default::default()
            })
            .unwrap();
    }
    let (addr, server) = mock_providers::spawn(mock_providers::runpod::router(state))
        .await
        .unwrap();
    let client = client();
    let started = Instant::now();
    let pods: Value = client
        .get(format!("http://{addr}/v2/pods"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pods = pods["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 10_000);
    assert!(pods.iter().all(|p| p["status"] == "RUNNING"));
    assert!(started.elapsed() < Duration::from_secs(20));
    server.abort();
}

#[tokio::test]
async fn logs_stream_as_server_sent_events() {
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, Some(200)))).await;
    let pod: Value = create(&emu, pod_body("logs", "RTX4090", 1))
        .await
        .json()
        .await
        .unwrap();
    let id = pod["id"].as_str().unwrap().to_owned();
    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{id}/logs"),
            json!({"lines": ["epoch 1 loss 0.5", "epoch 2 loss 0.25"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // The stream ends once the pod is stopped.
    let r = emu
        .post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "stop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = emu
        .get(&format!("/v2/pods/{id}/logs?source=container&tail=100"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = tokio::time::timeout(Duration::from_secs(10), r.text())
        .await
        .unwrap()
        .unwrap();
    let data: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let lines: Vec<&str> = data.iter().map(|d| d["line"].as_str().unwrap()).collect();
    assert!(lines.contains(&"epoch 1 loss 0.5"), "{text}");
    assert!(lines.contains(&"epoch 2 loss 0.25"), "{text}");
    assert!(data.iter().all(|d| d["source"] == "container"));
    assert!(data.iter().all(|d| d["ts"].is_string()));
    assert!(text.lines().any(|l| l.starts_with("id: ")));

    let r = emu
        .get(&format!("/v2/pods/{id}/logs?tail=99999"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = emu.get("/v2/pods/nope/logs").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// The realistic profile's starts that never run: every Nth create stays STARTING (with no
/// "container is running" in its log) while the others run; the rest of the lifecycle is intact
/// (a terminate ends it and frees its GPUs).
#[tokio::test]
async fn every_nth_create_stays_starting_when_configured() {
    let cfg = config(ExecutionMode::simulated(0, 0, None)).with_stuck_every(Some(2));
    let emu = start_runpod(cfg).await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let pod: Value = create(&emu, pod_body(name, "RTX4090", 1))
            .await
            .json()
            .await
            .unwrap();
        ids.push(pod["id"].as_str().unwrap().to_owned());
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(status_of(&emu, id).await);
    }
    assert_eq!(statuses, ["RUNNING", "STARTING", "RUNNING", "STARTING"]);
    let r = emu
        .delete(&format!("/v2/pods/{}", ids[1]))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(listed_names(&emu).await, ["a", "c", "d"]);
    // Every third from the first: the 1st, 4th, 7th... stay starting.
    let cfg = config(ExecutionMode::simulated(0, 0, None))
        .with_stuck_every(Some(20))
        .with_first_stuck(2);
    let emu = start_runpod(cfg).await;
    let mut statuses = Vec::new();
    for name in ["a", "b", "c", "d", "e"] {
        let pod: Value = create(&emu, pod_body(name, "RTX4090", 1))
            .await
            .json()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        statuses.push(status_of(&emu, pod["id"].as_str().unwrap()).await);
    }
    assert_eq!(
        statuses,
        ["RUNNING", "STARTING", "RUNNING", "RUNNING", "RUNNING"]
    );
    // Without the setting every start succeeds.
    let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
    for name in ["a", "b"] {
        let pod: Value = create(&emu, pod_body(name, "RTX4090", 1))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            status_of(&emu, pod["id"].as_str().unwrap()).await,
            "RUNNING"
        );
    }
}
