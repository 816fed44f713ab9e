//! Private images on the RunPod emulator: registry credentials (`/v2/registries`) as v2
//! documents them, and a pod whose image pulls only with its credential.

use super::*;

const REPO: &str = "registry.example.com/acme/model-server";

async fn system_lines(emu: &Emu, id: &str) -> Vec<String> {
    let mut resp = emu
        .get(&format!("/v2/pods/{id}/logs?source=system&tail=20"))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_millis(300), resp.chunk())
        .await
        .unwrap_or(Ok(None))
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<Value>(d).unwrap()["line"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_private_image_pulls_only_with_its_registry_credential() {
    let emu = start_runpod(config(ExecutionMode::simulated(50, 50, None))).await;
    let r = emu
        .admin_post(
            "/_admin/images",
            json!({"repository": REPO, "username": "robot", "password": "pw-1"}),
        )
        .await;
    assert!(r.status().is_success());
    // Credentials: created (201 {id, name}), listed wrapped, never with a password.
    let created = |name: &str, password: &str| json!({"name": name, "username": "robot", "password": password});
    let r = emu
        .post("/v2/registries")
        .json(&created("good", "pw-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let good: Value = r.json().await.unwrap();
    let r = emu
        .post("/v2/registries")
        .json(&created("good", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "names are unique");
    let r = emu
        .post("/v2/registries")
        .json(&json!({"name": "x"}))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_client_error(),
        "the schema requires username and password"
    );
    let bad: Value = emu
        .post("/v2/registries")
        .json(&created("bad", "wrong"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = emu
        .get("/v2/registries")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        listed.contains("\"registries\"") && listed.contains("good") && !listed.contains("pw-1"),
        "{listed}"
    );

    let pod = |name: &str, registry: Option<&Value>| {
        let mut b = pod_body(name, "A100-80GB", 1);
        b["image"] = json!(format!("{REPO}:2"));
        if let Some(r) = registry {
            b["registry"] = r["id"].clone();
        }
        b
    };
    let mut ids = Vec::new();
    for (name, reg) in [
        ("none", None),
        ("wrong", Some(&bad)),
        ("right", Some(&good)),
    ] {
        let r = create(&emu, pod(name, reg)).await;
        assert_eq!(r.status(), StatusCode::CREATED, "{name}");
        let p: Value = r.json().await.unwrap();
        ids.push(p["id"].as_str().unwrap().to_owned());
    }
    eventually(
        "the right credential's pod runs",
        Duration::from_secs(10),
        || async { (status_of(&emu, &ids[2]).await == "RUNNING").then_some(()) },
    )
    .await;
    for id in &ids[..2] {
        assert_eq!(
            status_of(&emu, id).await,
            "PROVISIONING",
            "a failing pull never starts"
        );
        let lines = system_lines(&emu, id).await;
        assert!(
            lines.iter().any(|l| l.starts_with(&format!(
                "error pulling image: Error response from daemon: pull access denied for {REPO}"
            ))),
            "{lines:?}"
        );
    }
    assert!(
        !system_lines(&emu, &ids[2])
            .await
            .iter()
            .any(|l| l.contains("error pulling"))
    );
    // A credential a pod uses cannot be deleted; an unused one can.
    let r = emu
        .delete(&format!("/v2/registries/{}", good["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = emu
        .delete(&format!("/v2/pods/{}", ids[1]))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = emu
        .delete(&format!("/v2/registries/{}", bad["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // An unknown credential id is refused at create.
    let r = create(&emu, pod("ghost", Some(&json!({"id": "nope"})))).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn an_image_needing_a_newer_cuda_crashes_on_every_start() {
    let emu = start_runpod(config(ExecutionMode::simulated(50, 50, None))).await;
    let r = emu
        .admin_post(
            "/_admin/images",
            json!({"repository": "acme/cuda13", "min_cuda": "13.0"}),
        )
        .await;
    assert!(r.status().is_success());
    let mut body = pod_body("crash", "A100-80GB", 1);
    body["image"] = json!("acme/cuda13:1");
    let p: Value = create(&emu, body).await.json().await.unwrap();
    let id = p["id"].as_str().unwrap().to_owned();
    // RunPod restarts the dying container in place: restarts pile up, the pod stays RUNNING.
    let w = eventually("restarted twice", Duration::from_secs(10), || async {
        emu.workload(&id)
            .await
            .filter(|w| w["restarts"].as_u64() >= Some(2))
    })
    .await;
    assert_eq!(w["exit_code"], 1);
    let logs = emu
        .get(&format!("/v2/pods/{id}/logs?source=container&tail=50"))
        .send()
        .await
        .unwrap();
    let mut logs = logs;
    let mut text = String::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_millis(300), logs.chunk())
        .await
        .unwrap_or(Ok(None))
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains("CUDA driver version is insufficient for CUDA runtime version"),
        "{text}"
    );
}
