//! Property tests: random JSON bodies thrown at the create endpoints always get a 4xx with the
//! provider's documented error shape (or a success), never a 5xx or a dropped connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use helpers::*;
use mock_providers::ExecutionMode;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-zA-Z0-9 _.:/-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("A100-80GB"),
            Just("RTX4090"),
            Just("stop"),
            Just("running"),
            Just("SECURE")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("image".to_owned()),
                    Just("gpu".to_owned()),
                    Just("id".to_owned()),
                    Just("count".to_owned()),
                    Just("env".to_owned()),
                    Just("args".to_owned()),
                    Just("disk".to_owned()),
                    Just("price".to_owned()),
                    Just("runtype".to_owned()),
                    Just("mounts".to_owned()),
                    Just("cpu".to_owned()),
                    "[a-z]{1,8}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Mostly-plausible create bodies: a valid skeleton with random replacements.
fn arb_pod_body() -> impl Strategy<Value = Value> {
    (arb_json(), arb_json(), any::<bool>(), arb_json()).prop_map(|(a, b, whole, c)| {
        if whole {
            return a;
        }
        let mut body = json!({"name": "p", "image": "i", "gpu": {"id": "RTX4090", "count": 1}});
        body["gpu"]["count"] = b;
        if let Value::Object(extra) = c {
            for (k, v) in extra {
                body[k] = v;
            }
        }
        body
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn check_runpod(status: u16, body: &Value) -> Result<(), TestCaseError> {
    prop_assert!(status < 500, "5xx {status}: {body}");
    if status >= 400 {
        prop_assert!(matches!(status, 400 | 404 | 422), "status {status}: {body}");
        prop_assert_eq!(&body["status"], &json!(status));
        prop_assert!(body["title"].is_string(), "{}", body);
        prop_assert!(body["detail"].is_string(), "{}", body);
        if let Some(errors) = body.get("errors") {
            prop_assert!(
                errors
                    .as_array()
                    .is_some_and(|e| e.iter().all(Value::is_string))
            );
        }
    } else {
        prop_assert_eq!(status, 201);
        prop_assert!(body["id"].is_string());
    }
    Ok(())
}

fn check_vast(status: u16, body: &Value) -> Result<(), TestCaseError> {
    prop_assert!(status < 500, "5xx {status}: {body}");
    if status >= 400 {
        prop_assert!(matches!(status, 400 | 404 | 410), "status {status}: {body}");
        prop_assert_eq!(&body["success"], &json!(false));
        prop_assert!(body["error"].is_string(), "{}", body);
        prop_assert!(body["msg"].is_string(), "{}", body);
    } else {
        prop_assert_eq!(status, 200);
        prop_assert_eq!(&body["success"], &json!(true));
        prop_assert!(body["new_contract"].is_u64());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn runpod_create_never_5xx(bodies in prop::collection::vec(arb_pod_body(), 1..8)) {
        let rt = runtime();
        rt.block_on(async {
            let emu = start_runpod(config(ExecutionMode::simulated(0, 0, None))).await;
            for body in bodies {
                let r = emu.post("/v2/pods").json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                let parsed: Value = serde_json::from_str(&text)
                    .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {text}")))?;
                check_runpod(status, &parsed)?;
                // Actions with random bodies too.
                let r = emu.post("/v2/pods/anything/action").json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                let parsed: Value = r.json().await.unwrap();
                prop_assert!(matches!(status, 404 | 422), "action {status}: {parsed}");
                prop_assert_eq!(&parsed["status"], &json!(status));
            }
            Ok(())
        })?;
    }

    #[test]
    fn vast_create_never_5xx(bodies in prop::collection::vec(arb_json(), 1..8), offer_idx in 0usize..12) {
        let rt = runtime();
        rt.block_on(async {
            let emu = start_vast(config(ExecutionMode::simulated(0, 0, None))).await;
            for body in bodies {
                let offers: Value = emu.post("/api/v0/bundles/").json(&json!({})).send().await.unwrap().json().await.unwrap();
                let offers = offers["offers"].as_array().unwrap().clone();
                let offer = offers.get(offer_idx % offers.len().max(1)).map_or(1, |o| o["id"].as_u64().unwrap());
                let r = emu.put(&format!("/api/v0/asks/{offer}/")).json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                let parsed: Value = serde_json::from_str(&text)
                    .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {text}")))?;
                check_vast(status, &parsed)?;
                // Searching and managing with random bodies are client errors at worst.
                let r = emu.post("/api/v0/bundles/").json(&body).send().await.unwrap();
                prop_assert!(r.status().as_u16() < 500);
                let r = emu.put("/api/v0/instances/1000001/").json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                let parsed: Value = r.json().await.unwrap();
                prop_assert!(status == 200 || (400..500).contains(&status), "manage {status}: {parsed}");
            }
            Ok(())
        })?;
    }
}
