//! Steps for pods with several containers: sidecars left out by `gpu-vk.io/omit-containers`,
//! init containers run before the main command, and the refusals naming the container; on
//! Slurm, every container a job step with its own log.

use std::time::Duration;

use conformance::harness::*;
use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use kube::api::LogParams;
use serde_json::json;

use mock_providers::config::ExecutionMode;

use crate::{Vkw, target, wait};

/// A GPU pod whose spec also has a `container` container (a metrics exporter) and a `sidecar`
/// native sidecar (a log shipper), as inference charts add them.
fn with_sidecars(mut p: Pod, container: &str, sidecar: &str) -> Pod {
    let spec = p.spec.as_mut().unwrap();
    spec.containers.push(
        serde_json::from_value(json!({
            "name": container, "image": "prom/statsd-exporter:v0.28.0",
            "ports": [{"containerPort": 9102}],
        }))
        .unwrap(),
    );
    spec.init_containers = Some(vec![
        serde_json::from_value(json!({
            "name": sidecar, "image": "fluent/fluent-bit:3.2", "restartPolicy": "Always",
        }))
        .unwrap(),
    ]);
    p
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with a "([^"]+)" container and a "([^"]+)" native sidecar(?:, with the annotation "([^"]+)" set to "([^"]+)")?$"#
)]
async fn create_with_sidecars(
    w: &mut Vkw,
    name: String,
    container: String,
    sidecar: String,
    key: String,
    value: String,
) {
    let node = w.node();
    let ann: Vec<(&str, &str)> = if key.is_empty() {
        Vec::new()
    } else {
        vec![(key.as_str(), value.as_str())]
    };
    let p = with_sidecars(gpu_pod(&name, &node, 1, &ann), &container, &sidecar);
    w.create_pod(p).await;
}

#[when(
    expr = "I create a GPU pod {string} with an init container of its image that prints {string}"
)]
async fn create_with_init(w: &mut Vkw, name: String, text: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    let spec = p.spec.as_mut().unwrap();
    let main = spec.containers[0].clone();
    spec.init_containers = Some(vec![Container {
        name: "fetch".into(),
        command: Some(vec!["sh".into(), "-c".into(), format!("echo {text}")]),
        args: None,
        ..main
    }]);
    w.create_pod(p).await;
}

#[when(expr = "I create a GPU pod {string} with an init container of image {string}")]
async fn create_with_other_init(w: &mut Vkw, name: String, image: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().init_containers = Some(vec![
        serde_json::from_value(json!({
            "name": "fetch", "image": image, "command": ["curl", "-sO", "https://example.invalid/model"],
        }))
        .unwrap(),
    ]);
    w.create_pod(p).await;
}

#[then(expr = "pod {string} becomes Ready")]
async fn becomes_ready(w: &mut Vkw, name: String) {
    wait_for(wait(), &format!("pod {name} Ready"), || async {
        let p = w.get(&name).await?;
        let ready = p
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())
    })
    .await;
}

/// The status of `container` (an init container when `init`), once it is terminated.
async fn terminated(w: &Vkw, pod: &str, container: &str, init: bool) -> ContainerStatus {
    wait_for(
        Duration::from_secs(60),
        &format!("container {container} of pod {pod} terminated"),
        || async {
            let st = w.get(pod).await?.status?;
            let list = if init {
                st.init_container_statuses?
            } else {
                st.container_statuses?
            };
            list.into_iter()
                .find(|c| c.name == container)
                .filter(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
        },
    )
    .await
}

#[then(
    regex = r#"^(init container|container) "([^"]+)" of pod "([^"]+)" is terminated with reason "([^"]+)"$"#
)]
async fn container_terminated(
    w: &mut Vkw,
    kind: String,
    container: String,
    pod: String,
    reason: String,
) {
    let cs = terminated(w, &pod, &container, kind == "init container").await;
    let t = cs.state.clone().unwrap().terminated.unwrap();
    assert_eq!(t.reason.as_deref(), Some(reason.as_str()), "{t:?}");
    assert_eq!(t.exit_code, 0, "{t:?}");
    assert!(
        t.message.as_deref().is_some_and(|m| m.contains(&target())),
        "the message names the provider: {t:?}"
    );
    if reason == "NotRunOnProvider" {
        assert!(!cs.ready, "a container left out is not ready: {cs:?}");
    }
}

#[then(expr = "the workload of pod {string} runs {string} before {string}")]
async fn runs_before(w: &mut Vkw, pod: String, first: String, then: String) {
    let uid = w.uids[&pod].clone();
    let text = match w.obs() {
        // A real Slurm runs the script: its output is the pod's log.
        Observer::Slurm(_) => {
            let pods = w.pods();
            wait_for(
                Duration::from_secs(30),
                &format!("logs of {pod} with {then:?}"),
                || async {
                    pods.logs(&pod, &LogParams::default())
                        .await
                        .ok()
                        .filter(|l| l.contains(&then))
                },
            )
            .await
        }
        // An emulator shows the command line it was given (its images' ENTRYPOINT and CMD).
        obs => {
            let live = obs.workloads_of(&uid).await;
            assert_eq!(live.len(), 1, "one workload for pod {pod}: {live:?}");
            live[0]["command"].as_str().unwrap_or_default().to_owned()
        }
    };
    let (Some(a), Some(b)) = (text.find(&first), text.find(&then)) else {
        panic!("{first:?} and {then:?} are not both in {text:?}");
    };
    assert!(a < b, "{first:?} comes after {then:?} in {text:?}");
}

/// On the Slurm emulator targets: a new emulator in process mode (batch scripts run with bash,
/// job steps through its `srun`) and a new VK on it. A real Slurm runs them already.
#[given("the provider executes the batch scripts")]
async fn runs_batch_scripts(w: &mut Vkw) {
    let dialect = match target().as_str() {
        "slurm" => SlurmDialect::V0038,
        "slurm-v0.0.41" => SlurmDialect::V0041,
        _ => return,
    };
    let c = w.c();
    if let Some(mut vk) = w.vk.take() {
        vk.cleanup(&c).await;
    }
    w.provider = Some(Observer::Emulator(
        Emulator::slurm(ExecutionMode::process(), dialect).await,
    ));
    w.start_vk().await;
}

/// `sh -c SCRIPT` with `ROLE=<role>` as the container's own variable.
fn step(name: &str, role: &str, script: &str) -> serde_json::Value {
    json!({
        "name": name, "image": "busybox:1.36",
        "command": ["sh", "-c", script],
        "env": [{"name": "ROLE", "value": role}],
    })
}

/// A GPU pod for the job-step scenarios: `restartPolicy: Never`, so the job's end is the pod's.
fn steps_pod(w: &Vkw, name: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut p = gpu_pod(name, &w.node(), 1, &[]);
    p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    p
}

/// Makes the main container run `script` ([`step`], role "main"), keeping its GPU request.
fn set_main(spec: &mut k8s_openapi::api::core::v1::PodSpec, script: &str) {
    let main = spec.containers[0].name.clone();
    let mut main_c: Container = serde_json::from_value(step(&main, "main", script)).unwrap();
    main_c.resources = spec.containers[0].resources.clone();
    spec.containers[0] = main_c;
}

#[when(
    expr = "I create a GPU pod {string} with an init container {string}, a native sidecar {string} and a second container {string}"
)]
async fn create_with_steps(
    w: &mut Vkw,
    name: String,
    init: String,
    sidecar: String,
    second: String,
) {
    let mut p = steps_pod(w, &name);
    let spec = p.spec.as_mut().unwrap();
    // The init container leaves a file the main container reads: it ran to its end first.
    let marker = "/tmp/gpu-vk-conformance-steps-$SLURM_JOB_ID";
    let mut sidecar_c = step(
        &sidecar,
        "sidecar",
        &format!("echo \"{sidecar}: $ROLE\"; trap 'exit 0' TERM; while :; do sleep 1; done"),
    );
    sidecar_c["restartPolicy"] = json!("Always");
    spec.init_containers = Some(vec![
        serde_json::from_value(sidecar_c).unwrap(),
        serde_json::from_value(step(
            &init,
            "init",
            &format!("sleep 1; echo {init} > {marker}; echo \"{init}: $ROLE\""),
        ))
        .unwrap(),
    ]);
    let main = spec.containers[0].name.clone();
    set_main(
        spec,
        &format!("echo \"{main}: $ROLE after $(cat {marker})\"; rm -f {marker}; sleep 2"),
    );
    spec.containers.push(
        serde_json::from_value(step(
            &second,
            "second",
            &format!("sleep 1; echo \"{second}: $ROLE\""),
        ))
        .unwrap(),
    );
    w.create_pod(p).await;
}

#[when(
    expr = "I create a GPU pod {string} with an init container {string} and a second container {string} that exits {int}"
)]
async fn create_with_exit_codes(
    w: &mut Vkw,
    name: String,
    init: String,
    second: String,
    code: i32,
) {
    let mut p = steps_pod(w, &name);
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(vec![
        serde_json::from_value(step(&init, "init", "echo fetched")).unwrap(),
    ]);
    // The main container outlives the failing one and succeeds: the job's code is the other's.
    set_main(spec, "sleep 3");
    spec.containers.push(
        serde_json::from_value(step(&second, "second", &format!("sleep 1; exit {code}"))).unwrap(),
    );
    w.create_pod(p).await;
}

#[then(
    regex = r#"^(init container|container) "([^"]+)" of pod "([^"]+)" ended with exit code (\d+)$"#
)]
async fn container_exit_code(w: &mut Vkw, kind: String, container: String, pod: String, code: i32) {
    // The pod's end first: before it, a container may show the end the provider saw so far.
    w.wait_phase(&pod, "Failed").await;
    let cs = terminated(w, &pod, &container, kind == "init container").await;
    let t = cs.state.clone().unwrap().terminated.unwrap();
    let reason = if code == 0 { "Completed" } else { "Error" };
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (code, Some(reason)),
        "{t:?}"
    );
    assert!(!cs.ready, "{cs:?}");
}

/// "begins with": the first line (a real Slurm adds its own line when it stops a sidecar's
/// step, "*** STEP ... CANCELLED ***").
#[then(regex = r#"^the log of container "([^"]+)" of pod "([^"]+)" (is|begins with) "([^"]*)"$"#)]
async fn container_log(w: &mut Vkw, container: String, pod: String, how: String, text: String) {
    let pods = w.pods();
    let params = LogParams {
        container: Some(container.clone()),
        ..LogParams::default()
    };
    wait_for(
        Duration::from_secs(90),
        &format!("log of container {container} of pod {pod} being {text:?}"),
        || {
            let (pods, params, pod, text) =
                (pods.clone(), params.clone(), pod.clone(), text.clone());
            let whole = how == "is";
            async move {
                let log = pods.logs(&pod, &params).await.ok()?;
                let got = if whole {
                    log.trim_end()
                } else {
                    log.lines().next().unwrap_or_default()
                };
                (got == text).then_some(())
            }
        },
    )
    .await;
}
