//! The Vast emulator's instance list (pages, filters, label lookups), logs and per-endpoint rate
//! limits.

use super::*;

#[tokio::test]
async fn list_paginates_and_filters() {
    let emu = start_vast(
        mock_providers::EmulatorConfig::new(
            KEY,
            vec![mock_providers::GpuStock::new("RTX 4090", 64, 0.69)],
        )
        .with_mode(ExecutionMode::simulated(0, 0, None)),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let offer = first_offer(&emu, "RTX 4090", 1).await;
        let r = rent(
            &emu,
            offer,
            json!({"image": "img", "label": format!("pod-{}", i % 3)}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK, "rent {i}");
        ids.push(
            r.json::<Value>().await.unwrap()["new_contract"]
                .as_u64()
                .unwrap(),
        );
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let req = match &token {
            Some(t) => emu.get_q("/api/v1/instances/", &[("after_token", t.as_str())]),
            None => emu.get("/api/v1/instances/"),
        };
        let body: Value = req.send().await.unwrap().json().await.unwrap();
        pages += 1;
        assert_eq!(body["success"], true);
        assert_eq!(body["total_instances"], 30);
        assert!(body["instances"].as_array().unwrap().len() <= 25);
        seen.extend(
            body["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_u64().unwrap()),
        );
        match body["next_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, ids);
    let body: Value = emu
        .get_q(
            "/api/v1/instances",
            &[
                ("select_filters", r#"{"label":{"eq":"pod-1"}}"#),
                ("limit", "100"),
            ],
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["total_instances"], 10);
    assert_eq!(body["label_counts"], json!({"pod-1": 10}));
    let body: Value = emu
        .get_q(
            "/api/v1/instances",
            &[("select_cols", r#"["id","actual_status"]"#)],
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first = body["instances"][0].as_object().unwrap();
    assert_eq!(first.len(), 2);
    let r = emu
        .get_q(
            "/api/v1/instances",
            &[("select_filters", r#"{"dph_total":{"lt":1}}"#)],
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu
        .get_q("/api/v1/instances", &[("after_token", "%%%")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // The v0 list is deprecated for new accounts.
    let r = emu.get("/api/v0/instances/").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::GONE);
    assert_eq!(emu.counters().await["list"], 7);
}

#[tokio::test]
async fn logs_through_result_url() {
    let emu = start_vast(vast_config(ExecutionMode::simulated(0, 0, None))).await;
    let offer = first_offer(&emu, "RTX 4090", 1).await;
    let id = rent(&emu, offer, json!({"image": "img"}))
        .await
        .json::<Value>()
        .await
        .unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    let lines: Vec<String> = (0..10).map(|i| format!("step {i}")).collect();
    let r = emu
        .admin_post(
            &format!("/_admin/workloads/{id}/logs"),
            json!({ "lines": lines }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = emu
        .put(&format!("/api/v0/instances/request_logs/{id}/"))
        .json(&json!({"tail": "3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["success"], true);
    let url = body["result_url"].as_str().unwrap();
    let text = emu
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "step 7\nstep 8\nstep 9\n");
    let r = emu
        .put(&format!("/api/v0/instances/request_logs/{id}"))
        .json(&json!({"filter": "step 1"}))
        .send()
        .await
        .unwrap();
    let url = r.json::<Value>().await.unwrap()["result_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        emu.client
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "step 1\n"
    );
    let r = emu
        .put(&format!("/api/v0/instances/request_logs/{id}/"))
        .json(&json!({"daemon_logs": "true"}))
        .send()
        .await
        .unwrap();
    let url = r.json::<Value>().await.unwrap()["result_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let daemon = emu
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(daemon.contains("allocated 1 x RTX 4090"), "{daemon}");
    let r = emu
        .put("/api/v0/instances/request_logs/424242/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// Every page of a filtered instance list (2 a page), without the clock-dependent `uptime_mins`.
async fn filtered_pages(emu: &Emu, filters: &Value) -> Vec<Value> {
    let filters = filters.to_string();
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = vec![("select_filters", filters.as_str()), ("limit", "2")];
        if let Some(t) = &token {
            params.push(("after_token", t.as_str()));
        }
        let r = emu
            .get_q("/api/v1/instances/", &params)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{filters}");
        let mut body: Value = r.json().await.unwrap();
        for inst in body["instances"].as_array_mut().unwrap() {
            inst.as_object_mut().unwrap().remove("uptime_mins");
        }
        token = body["next_token"].as_str().map(str::to_owned);
        pages.push(body);
        if token.is_none() {
            return pages;
        }
    }
}

#[tokio::test]
async fn label_equality_lookup_matches_the_generic_filter() {
    let emu = start_vast(
        mock_providers::EmulatorConfig::new(
            KEY,
            vec![mock_providers::GpuStock::new("RTX 4090", 64, 0.69)],
        )
        .with_mode(ExecutionMode::simulated(0, 0, None)),
    )
    .await;
    for label in [
        Some("pod-a"),
        Some("pod-b"),
        None,
        Some("pod-a"),
        Some("POD-A"),
        Some("pod-b"),
        None,
        Some("pod-a"),
        Some("pod-c"),
    ] {
        let offer = first_offer(&emu, "RTX 4090", 1).await;
        let mut body = json!({"image": "img"});
        if let Some(l) = label {
            body["label"] = json!(l);
        }
        assert_eq!(rent(&emu, offer, body).await.status(), StatusCode::OK);
    }
    for want in [
        json!("pod-a"),
        json!("pod-b"),
        json!("POD-A"),
        json!("pod-c"),
        json!("missing"),
        json!(""),
        Value::Null,
        json!(7),
    ] {
        // `{"label": {"in": [..]}}` takes the generic path; equality and a bare value do not.
        let generic = filtered_pages(&emu, &json!({"label": {"in": [want]}})).await;
        let eq = filtered_pages(&emu, &json!({"label": {"eq": want}})).await;
        let bare = filtered_pages(&emu, &json!({ "label": want })).await;
        assert_eq!(eq, generic, "label eq {want}");
        assert_eq!(bare, generic, "label {want}");
    }
    let pages = filtered_pages(&emu, &json!({"label": {"eq": "pod-a"}})).await;
    assert_eq!(pages.len(), 2);
    assert_eq!(pages[0]["total_instances"], 3);
    assert_eq!(pages[0]["label_counts"], json!({"pod-a": 3}));
    assert_eq!(pages[1]["instances"][0]["label"], "pod-a");
    // Unlabelled instances have a null label.
    let pages = filtered_pages(&emu, &json!({"label": {"eq": null}})).await;
    assert_eq!(pages[0]["total_instances"], 2);
    assert_eq!(pages[0]["label_counts"], json!({"": 2}));
    let pages = filtered_pages(&emu, &json!({"label": {"eq": ""}})).await;
    assert_eq!(pages[0]["total_instances"], 0);
}

/// Vast's documented per-endpoint limits: rent `threshold: 4.5` (`create_instance.yaml`),
/// 429 with `{"detail": "API requests too frequent endpoint threshold=4.5"}` and no
/// `Retry-After` (`rate-limits-and-errors.mdx`).
#[tokio::test]
async fn two_rents_a_second_apart_get_200_then_429_without_retry_after() {
    let emu = start_vast(vast_config(ExecutionMode::default()).with_endpoint_limits(1.0)).await;
    let offers = search(
        &emu,
        json!({"gpu_name": {"eq": "RTX 4090"}, "num_gpus": {"eq": 1}}),
    )
    .await;
    let (a, b) = (
        offers[0]["id"].as_u64().unwrap(),
        offers[1]["id"].as_u64().unwrap(),
    );
    let r = rent(&emu, a, json!({"image": "busybox", "label": "one"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = rent(&emu, b, json!({"image": "busybox", "label": "two"})).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_none());
    assert!(r.headers().get("ratelimit").is_none());
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"detail": "API requests too frequent endpoint threshold=4.5"})
    );
    // The refused rent rented nothing; the endpoints are independent (a list right away is
    // fine), and the refusal is counted.
    assert_eq!(emu.workloads().await.len(), 1);
    let r = emu.get("/api/v1/instances/").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["instances"].as_array().unwrap().len(), 1);
    assert_eq!(emu.counters().await["rate_limited"], 1);
}

#[tokio::test]
async fn endpoint_limits_follow_the_time_scale() {
    // A tenth of the real figures: list 0.1 s, destroy 0.3 s, search 10 in any 6 s.
    let emu = start_vast(vast_config(ExecutionMode::default()).with_endpoint_limits(0.1)).await;
    assert_eq!(
        emu.get("/api/v1/instances/").send().await.unwrap().status(),
        StatusCode::OK
    );
    let r = emu.get("/api/v1/instances/").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["detail"],
        "API requests too frequent endpoint threshold=0.1"
    );
    tokio::time::sleep(Duration::from_millis(110)).await;
    assert_eq!(
        emu.get("/api/v1/instances/").send().await.unwrap().status(),
        StatusCode::OK
    );
    for _ in 0..10 {
        search(&emu, json!({"gpu_name": {"eq": "RTX 4090"}})).await;
    }
    let r = emu
        .post("/api/v0/bundles/")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_none());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, json!({"detail": "API requests too frequent"}));
}

#[tokio::test]
async fn without_endpoint_limits_nothing_is_paced() {
    let emu = start_vast(vast_config(ExecutionMode::default())).await;
    for _ in 0..5 {
        assert_eq!(
            emu.get("/api/v1/instances/").send().await.unwrap().status(),
            StatusCode::OK
        );
    }
}
