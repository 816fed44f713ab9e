//! Steps of the pod-storm and admission scenarios (features/pod_storms.feature,
//! features/admission.feature): a Deployment whose pods the VK refuses keeps its two pods,
//! held Pending with the reason, instead of a stream of Failed pods that its ReplicaSet keeps
//! replacing; fixing the cause lets it roll out with nothing deleted by hand.

use std::time::{Duration, Instant};

use conformance::harness::{phase, wait_seeing};
use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Vkw, env_from, has_event};

/// How long a Deployment's pod count must stay put: a storm made about 9 pods a second.
const QUIET: Duration = Duration::from_secs(10);

#[given("the provider under test may receive Secret values")]
async fn allows_secrets(w: &mut Vkw) {
    // Every target's provider entry allows them (the real Slurm by its kind's default).
    let config = w.vk().config().to_owned();
    assert!(
        !config.contains("secretEnv: deny"),
        "the provider under test should allow Secret values: {config}"
    );
}

#[given(expr = "the virtual kubelet allows only the namespace {string}")]
async fn only_namespace(w: &mut Vkw, ns: String) {
    // The chart reads Secrets through a Role in each allowed namespace, which must exist.
    if conformance::harness::pod::pod_mode() {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(w.c());
        if namespaces.get_opt(&ns).await.unwrap().is_none() {
            let body = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            match namespaces.create(&PostParams::default(), &body).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating namespace {ns}: {e}"),
            }
        }
    }
    w.vk()
        .reconfigure(|c| format!("{c}allowedNamespaces: [{ns}]\n"))
        .await;
}

#[when(regex = r#"^I create a deployment "([^"]+)" of (\d+) GPU replicas with (.+)$"#)]
async fn create_refused(w: &mut Vkw, name: String, n: i32, problem: String) {
    let mut spec = super::pod_spec(&w.node(), 1);
    match problem.as_str() {
        "an env var from the Secret \"creds\"" => {
            super::create_source(w, "Secret".into(), "creds".into()).await;
            spec["containers"][0]["env"] = json!([env_from("Secret", "creds", false)]);
        }
        "a hostPath volume" => {
            spec["volumes"] = json!([{"name": "d", "hostPath": {"path": "/data"}}]);
        }
        "64 GPUs each" => {
            spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("64");
        }
        "nothing wrong" => {}
        other => panic!("unknown problem {other:?}"),
    }
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// The container's waiting reason.
fn waiting(p: &Pod) -> Option<&str> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

#[then(
    expr = "deployment {string} has {int} pods held Pending with container reason {string}, and no more for a while"
)]
async fn held(w: &mut Vkw, app: String, n: usize, reason: String) {
    let describe = |pods: &[Pod]| -> String {
        pods.iter()
            .map(|p| {
                format!(
                    "{} {} {:?}",
                    p.metadata.name.clone().unwrap_or_default(),
                    phase(p),
                    waiting(p)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    wait_seeing(
        Duration::from_secs(60),
        &format!("{n} pods of {app} held Pending with {reason}"),
        || async {
            let pods = w.replicas(&app).await;
            let held = pods
                .iter()
                .filter(|p| phase(p) == "Pending" && waiting(p) == Some(reason.as_str()))
                .count();
            if held == n {
                Ok(())
            } else {
                Err(describe(&pods))
            }
        },
    )
    .await;
    // A storm shows as more pods (each Failed one replaced): the count must not move.
    let until = Instant::now() + QUIET;
    while Instant::now() < until {
        let pods = w.replicas(&app).await;
        assert!(
            pods.len() <= n && pods.iter().all(|p| phase(p) != "Failed"),
            "deployment {app} should keep its {n} held pods, it has {}: {}",
            pods.len(),
            describe(&pods)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for p in w.replicas(&app).await {
        let name = p.metadata.name.clone().unwrap();
        has_event(w, name, reason.clone()).await;
        assert!(
            w.live_of(&p.metadata.uid.clone().unwrap()).await.is_empty(),
            "held pod has a workload"
        );
    }
}

#[when(regex = r#"^the cause is fixed: (.+)$"#)]
async fn fix(w: &mut Vkw, how: String) {
    let deployments: Api<Deployment> = Api::namespaced(w.c(), &w.ns);
    let patch = |p: serde_json::Value| async {
        deployments
            .patch("storm", &PatchParams::default(), &Patch::Strategic(p))
            .await
            .unwrap();
    };
    match how.as_str() {
        "the provider may receive Secret values" => {
            w.vk()
                .reconfigure(|c| c.replace("secretEnv: deny", "secretEnv: allow"))
                .await;
        }
        "the namespace is allowed" => {
            let ns = w.ns.clone();
            w.vk()
                .reconfigure(|c| {
                    c.replace(
                        "allowedNamespaces: [",
                        &format!("allowedNamespaces: [{ns}, "),
                    )
                })
                .await;
        }
        "the deployment drops the hostPath volume" => {
            patch(json!({"spec": {"template": {"spec": {"volumes": null}}}})).await;
        }
        "the deployment asks for 1 GPU" => {
            patch(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]}}}}))
            .await;
        }
        other => panic!("unknown fix {other:?}"),
    }
}

#[then(expr = "no pod of deployment {string} ever failed")]
async fn never_failed(w: &mut Vkw, app: String) {
    let failed: Vec<String> = w
        .replicas(&app)
        .await
        .iter()
        .filter(|p| phase(p) == "Failed")
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(failed.is_empty(), "failed pods of {app}: {failed:?}");
}

#[given("the virtual kubelet checks pods at admission")]
async fn admission_on(w: &mut Vkw) {
    // A VK pod has it from the Helm chart (admission.enabled); a VK process is given a URL.
    if !conformance::harness::pod::pod_mode() {
        let port = conformance::harness::free_port();
        w.vk()
            .reconfigure(|c| {
                format!(
                    "{c}admission: {{enabled: true, addr: \"127.0.0.1:{port}\", url: \"https://127.0.0.1:{port}/validate\"}}\n"
                )
            })
            .await;
    }
    // Registered once the node exists; the API server then calls it within moments. A dry-run
    // create of a pod the VK refuses shows when it does.
    let node = w.node();
    let mut probe = super::gpu_pod("admission-probe", &node, 1, &[]);
    probe.spec.as_mut().unwrap().host_network = Some(true);
    let pods: Api<Pod> = Api::namespaced(w.c(), &w.ns);
    wait_seeing(
        Duration::from_secs(30),
        "the admission webhook to refuse a hostNetwork pod",
        || async {
            let dry = PostParams {
                dry_run: true,
                ..Default::default()
            };
            match pods.create(&dry, &probe).await {
                Err(kube::Error::Api(e)) if e.message.contains("admission check") => Ok(()),
                Err(e) => Err(format!("error {e}")),
                Ok(_) => Err("admitted".into()),
            }
        },
    )
    .await;
}

#[then(expr = "deployment {string} has no pod, and its ReplicaSet cannot create one: {string}")]
async fn refused_at_admission(w: &mut Vkw, app: String, reason: String) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.c(), &w.ns);
    let want = format!("{reason}: ");
    wait_seeing(
        Duration::from_secs(60),
        &format!("a FailedCreate event of deployment {app}'s ReplicaSet naming {reason}"),
        || async {
            let list = events.list(&Default::default()).await.unwrap().items;
            let seen: Vec<String> = list
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.reason.clone().unwrap_or_default(),
                        e.note.clone().unwrap_or_default()
                    )
                })
                .collect();
            let found = list.iter().any(|e| {
                e.reason.as_deref() == Some("FailedCreate")
                    && e.note.as_deref().is_some_and(|n| n.contains(&want))
            });
            if found { Ok(()) } else { Err(seen.join(" | ")) }
        },
    )
    .await;
    // Refused at create time: nothing exists to fail, to hold, or to replace.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let pods = w.replicas(&app).await;
        assert!(pods.is_empty(), "{} pods of {app} exist", pods.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
