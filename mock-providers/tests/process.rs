//! Process execution mode: commands really run, with real exit codes, output, CPU and memory,
//! and terminating a workload kills its process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::*;
use mock_providers::ExecutionMode;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn process_mode() -> ExecutionMode {
    ExecutionMode::Process {
        provision_ms: 50,
        start_ms: 50,
    }
}

async fn create_pod(emu: &Emu, args: &str) -> String {
    let r = emu
        .post("/v2/pods")
        .json(&json!({
            "name": "proc", "image": "busybox", "args": args,
            "gpu": {"id": "RTX4090", "count": 1},
            "env": {"GREETING": "hi from env"}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn exited(emu: &Emu, id: &str) -> Value {
    eventually("exit", Duration::from_secs(20), || async {
        emu.workload(id).await.filter(|w| w["phase"] == "exited")
    })
    .await
}

#[tokio::test]
async fn runpod_process_exit_restarts_in_place_with_real_exit_code_and_output() {
    let emu = start_runpod(config(process_mode())).await;
    let id = create_pod(&emu, "echo hi; echo \"$GREETING\"; echo oops >&2; exit 3").await;
    // RunPod restarts a container whose command ended (runpodctl#149, dstack#1142): the
    // command runs again and the pod stays RUNNING on its GPUs.
    let log = eventually("two runs", Duration::from_secs(20), || async {
        let w = emu.workload(&id).await?;
        (w["exit_code"] == 3 && w["restarts"].as_u64() >= Some(2)).then_some(w)
    })
    .await;
    assert_eq!(log["state"], "RUNNING");
    let pod: Value = emu
        .get(&format!("/v2/pods/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pod["status"], "RUNNING");
    assert!(pod.get("exitCode").is_none(), "no exit code in the schema");
    // EXITED follows a stop; then the log stream ends.
    let r = emu
        .post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "stop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Output through the logs endpoint.
    let text = emu
        .get(&format!("/v2/pods/{id}/logs?source=container"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<Value>(d).unwrap()["line"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(lines.contains(&"hi".to_owned()), "{text}");
    assert!(lines.contains(&"hi from env".to_owned()), "{text}");
    assert!(lines.contains(&"oops".to_owned()), "{text}");
    assert!(
        lines.iter().filter(|l| *l == "hi").count() >= 2,
        "ran again after its exit: {text}"
    );
    // GPUs were released by the stop.
    let inv = emu.admin_get("/_admin/inventory").await;
    assert_eq!(inv["gpus"][1]["free"], 16);
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn runpod_process_usage_is_measured_and_terminate_kills() {
    let emu = start_runpod(config(process_mode())).await;
    // Burn CPU in a child of the shell, then sleep forever.
    let id = create_pod(
        &emu,
        "sh -c 'while :; do :; done' & echo started; exec sleep 1000",
    )
    .await;
    let w = eventually("cpu use", Duration::from_secs(20), || async {
        emu.workload(&id)
            .await
            .filter(|w| w["phase"] == "running" && w["cpu_millis"].as_u64().unwrap() > 100)
    })
    .await;
    assert!(w["memory_bytes"].as_u64().unwrap() > 0);
    let pod: Value = emu
        .get(&format!("/v2/pods/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(pod["runtime"]["cpu"]["util"].as_u64().unwrap() >= 1);

    let pid = w["pid"].as_u64().unwrap();
    assert!(alive(pid));

    let r = emu
        .post(&format!("/v2/pods/{id}/action"))
        .json(&json!({"action": "terminate"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    eventually("process killed", Duration::from_secs(10), || async {
        (!alive(pid)).then_some(())
    })
    .await;
    // The busy loop (same process group) is gone too: no process of the group survives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let survivors = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()))
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let (_, rest) = s.rsplit_once(')')?;
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    Some(f.get(2)? == &pid.to_string().as_str() && f.first()? != &"Z")
                })
                .unwrap_or(false)
        })
        .count();
    assert_eq!(survivors, 0);
}

#[tokio::test]
async fn vast_args_runtype_exits_and_ssh_onstart_keeps_running() {
    let emu = start_vast(config(process_mode())).await;
    let offers: Value = emu
        .post("/api/v0/bundles/")
        .json(&json!({"gpu_name": {"eq": "RTX4090"}, "num_gpus": {"eq": 1}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let offer = offers["offers"][0]["id"].as_u64().unwrap();
    let r = emu
        .put(&format!("/api/v0/asks/{offer}/"))
        .json(&json!({
            "image": "busybox", "runtype": "args",
            "args": ["sh", "-c", "echo \"arg: $1\"; exit 7", "sh", "it's quoted"],
            "env": "-e FOO=bar"
        }))
        .send()
        .await
        .unwrap();
    let id = r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    let w = exited(&emu, &id.to_string()).await;
    assert_eq!(w["exit_code"], 7);
    let inst: Value = emu
        .get(&format!("/api/v0/instances/{id}/"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(inst["instances"]["actual_status"], "exited");
    let url = emu
        .put(&format!("/api/v0/instances/request_logs/{id}/"))
        .json(&json!({"tail": "10"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["result_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = emu
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "arg: it's quoted\n");

    // ssh runtype: onstart runs beside the provider's entrypoint; the instance stays running.
    let offers: Value = emu
        .post("/api/v0/bundles/")
        .json(&json!({"gpu_name": {"eq": "RTX4090"}, "num_gpus": {"eq": 1}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let offer = offers["offers"][0]["id"].as_u64().unwrap();
    let r = emu
        .put(&format!("/api/v0/asks/{offer}/"))
        .json(&json!({"image": "busybox", "runtype": "ssh", "onstart": "echo setup done; exit 1"}))
        .send()
        .await
        .unwrap();
    let id = r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap();
    eventually("onstart output", Duration::from_secs(20), || async {
        let url = emu
            .put(&format!("/api/v0/instances/request_logs/{id}/"))
            .json(&json!({"daemon_logs": "true"}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()["result_url"]
            .as_str()
            .unwrap()
            .to_owned();
        let text = emu
            .client
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.contains("onstart exited with code 1").then_some(())
    })
    .await;
    let w = emu.workload(&id.to_string()).await.unwrap();
    assert_eq!(w["phase"], "running");
    assert_eq!(w["exit_code"], Value::Null);
}

#[tokio::test]
async fn injected_workloads_run_at_once_in_process_mode() {
    let emu = start_runpod(config(ExecutionMode::Process {
        provision_ms: 5_000,
        start_ms: 5_000,
    }))
    .await;
    let r = emu
        .admin_post(
            "/_admin/workloads",
            json!({"name": "orphan", "gpu_type": "RTX4090"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let w = emu.workload(&id).await.unwrap();
    assert_eq!(w["state"], "RUNNING");
    // A normal create waits for provisioning.
    let created = create_pod(&emu, "sleep 100").await;
    assert_eq!(
        emu.workload(&created).await.unwrap()["state"],
        "PROVISIONING"
    );
    assert_eq!(emu.workload(&created).await.unwrap()["pid"], Value::Null);
}
