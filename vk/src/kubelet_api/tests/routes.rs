//! Router tests of the auth filter in front of every path, the pod list and the stats
//! endpoints.

use super::*;

#[tokio::test]
async fn every_path_needs_credentials_and_authorization() {
    let s = setup(false);
    for path in [
        "/healthz",
        "/pods",
        "/metrics/resource",
        "/containerLogs/ml/train/main",
        "/nope",
    ] {
        let (status, body) = call(&s.app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body.trim(), "Unauthorized");
    }
    let req = Request::get("/healthz")
        .header(header::AUTHORIZATION, "Bearer nobody")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("user=nobody") && body.contains("healthz,proxy"),
        "{body}"
    );

    // A verified client certificate identifies the caller without a token.
    let mut req = Request::get("/healthz").body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo(Peer {
        addr: ([127, 0, 0, 1], 1).into(),
        cert_subject: Some(crate::tls::Subject {
            common_name: "apiserver".into(),
            organizations: vec!["system:masters".into()],
        }),
    }));
    assert_eq!(call(&s.app, req).await, (StatusCode::OK, "ok".into()));
}

#[tokio::test]
async fn pods_lists_the_node_pods() {
    let s = setup(false);
    let (status, body) = call(&s.app, get("/pods")).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PodList");
    assert_eq!(v["apiVersion"], "v1");
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["chart", "model", "pending", "quiet", "shell", "train"]
    );
}

#[tokio::test]
async fn runningpods_lists_the_pods_whose_workload_runs_as_the_runtime_sees_them() {
    let s = setup(false);
    let (status, body) = call(&s.app, get("/runningpods/")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["apiVersion"].as_str()),
        (Some("PodList"), Some("v1"))
    );
    let items = v["items"].as_array().unwrap();
    let names: Vec<&str> = items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    // "pending" and "chart" have no workload: not running, not listed.
    assert_eq!(names, ["model", "quiet", "shell", "train"]);
    let train = &items[3];
    assert!(train["metadata"]["uid"].is_string());
    assert!(train.get("status").is_none(), "{train}");
    let c = &train["spec"]["containers"][0];
    assert!(c["name"].is_string() && c["image"].is_string(), "{c}");
    assert!(
        c.get("env").is_none() && c.get("resources").is_none(),
        "only name and image: {c}"
    );
    // Authorized as /pods is.
    let req = Request::get("/runningpods/")
        .header(header::AUTHORIZATION, "Bearer nobody")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(&s.app, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("pods,proxy"), "{body}");
}

#[tokio::test]
async fn resource_metrics_and_summary_come_from_provider_usage() {
    let s = setup(false);
    let (status, text) = call(&s.app, get("/metrics/resource")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(
            "container_memory_working_set_bytes{container=\"main\",namespace=\"ml\",pod=\"train\"} 1073741824 "
        ),
        "{text}"
    );
    assert!(text.contains(
        "container_cpu_usage_seconds_total{container=\"main\",namespace=\"ml\",pod=\"train\"} 42 "
    ));
    assert!(text.contains("node_memory_working_set_bytes 1073741824 "));
    // The pod whose provider reports no usage gets no samples, never zeros.
    assert!(!text.contains("pod=\"quiet\""), "{text}");

    let (status, body) = call(&s.app, get("/stats/summary")).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["node"]["nodeName"], "vk-node");
    assert_eq!(v["node"]["cpu"]["usageNanoCores"], 700_000_000);
    assert_eq!(v["pods"][0]["podRef"]["name"], "train");
    assert_eq!(
        v["pods"][0]["containers"][0]["memory"]["workingSetBytes"],
        1u64 << 30
    );
    assert_eq!(v["pods"].as_array().unwrap().len(), 1);
}
