//! Steps of the batch scenarios: a Job whose command ends completes once (RunPod restarts an
//! ended container in place, so the VK must end it), and a pod without GPUs runs.

use std::time::Duration;

use conformance::harness::{gpu_pod, phase, uid, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::Vkw;
use cucumber::{given, then, when};

fn jobs(w: &Vkw) -> Api<Job> {
    Api::namespaced(w.c(), &w.ns)
}

async fn job_pods(w: &Vkw, job: &str) -> Vec<Pod> {
    w.pods()
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
}

#[given(expr = "a Job {string} with restart policy {string} whose pod is Running")]
async fn job_running(w: &mut Vkw, name: String, policy: String) {
    let node = w.node();
    let mut template = serde_json::to_value(gpu_pod(&name, &node, 1, &[])).unwrap();
    template["spec"]["restartPolicy"] = json!(policy);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }))
    .unwrap();
    jobs(w).create(&PostParams::default(), &job).await.unwrap();
    let pod = wait_for(Duration::from_secs(60), "the Job's pod Running", || async {
        job_pods(w, &name)
            .await
            .into_iter()
            .find(|p| phase(p) == "Running")
    })
    .await;
    let live = w.live_of(&uid(&pod)).await;
    assert_eq!(live.len(), 1, "{live:?}");
    w.workloads
        .insert(name.clone(), live[0]["id"].as_str().unwrap().to_owned());
    w.uids.insert(name, uid(&pod));
    // Let the command run a few seconds before it ends, as a real job's would: an exit is
    // seen as the provider's uptime falling short of the time that passed.
    tokio::time::sleep(Duration::from_secs(5)).await;
}

#[when(expr = "the command of Job {string} ends with code {int}")]
async fn job_command_ends(w: &mut Vkw, name: String, code: i32) {
    let id = w.workloads[&name].clone();
    w.obs().act(&id, "exit", json!({"exit_code": code})).await;
}

#[then(expr = "Job {string} completes with exactly one pod")]
async fn job_completes_once(w: &mut Vkw, name: String) {
    wait_for(Duration::from_secs(60), "the Job complete", || async {
        let job = jobs(w).get(&name).await.ok()?;
        (job.status?.succeeded? == 1).then_some(())
    })
    .await;
    let pods = job_pods(w, &name).await;
    assert_eq!(pods.len(), 1, "the Job ran more than one pod");
    assert_eq!(phase(&pods[0]), "Succeeded");
    let cs = pods[0].status.as_ref().unwrap().container_statuses.clone();
    assert_eq!(
        cs.unwrap()[0].restart_count,
        0,
        "the container was restarted"
    );
}

#[then(expr = "the provider no longer runs the workload of Job {string}")]
async fn job_workload_gone(w: &mut Vkw, name: String) {
    let u = w.uids[&name].clone();
    wait_for(
        Duration::from_secs(30),
        "the Job's workload ended",
        // Ended, deleted, or (Vast) a stopped instance: its GPU is released and no longer
        // billed, only its disk is, and the VK keeps it for the pod's logs until the pod goes.
        || async {
            w.live_of(&u)
                .await
                .iter()
                .all(|wl| matches!(wl["state"].as_str(), Some("exited" | "stopped")))
                .then_some(())
        },
    )
    .await;
}

#[when(expr = "I create a CPU-only pod {string}")]
async fn create_cpu_pod(w: &mut Vkw, name: String) {
    let node = w.node();
    let mut pod = gpu_pod(&name, &node, 1, &[]);
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "2", "memory": "1Gi"}})).unwrap());
    w.create_pod(pod).await;
}

#[then(expr = "pod {string} runs on the provider without a GPU")]
async fn runs_without_gpu(w: &mut Vkw, name: String) {
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0]["gpu_count"], 0, "{}", live[0]);
}
