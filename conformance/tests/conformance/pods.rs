//! Steps on single pods: creating them, their phases, reasons, events and containers, and
//! what the provider does to their workloads (the emulators' admin API).

use super::*;

// ----------------------------------------------------------------------------------------------
// Pods

pub(super) fn with_policy(mut p: Pod, policy: &str) -> Pod {
    p.spec.as_mut().unwrap().restart_policy = Some(policy.into());
    p
}

#[given(expr = "a GPU pod {string} is Running")]
pub(super) async fn pod_running(w: &mut Vkw, name: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1, "pod {name} has {} workloads", live.len());
    w.workloads
        .insert(name, live[0]["id"].as_str().unwrap_or_default().to_owned());
}

#[given(expr = "a GPU pod {string} with restart policy {string} is Running")]
pub(super) async fn pod_running_policy(w: &mut Vkw, name: String, policy: String) {
    let node = w.node();
    w.create_pod(with_policy(gpu_pod(&name, &node, 1, &[]), &policy))
        .await;
    let p = w.wait_phase(&name, "Running").await;
    let live = w.live_of(&uid(&p)).await;
    assert_eq!(live.len(), 1);
    w.workloads
        .insert(name, live[0]["id"].as_str().unwrap_or_default().to_owned());
}

#[when(expr = "I create a GPU pod {string}")]
pub(super) async fn create_pod(w: &mut Vkw, name: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[])).await;
}

#[when(expr = "I create a GPU pod {string} with the annotation {string} set to {string}")]
pub(super) async fn create_annotated(w: &mut Vkw, name: String, k: String, v: String) {
    let node = w.node();
    w.create_pod(gpu_pod(&name, &node, 1, &[(&k, &v)])).await;
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with (a hostPath volume|an nfs volume|a privileged container|hostNetwork|spec.nodeName set and no toleration of the node's taint)$"#
)]
pub(super) async fn create_unsupported(w: &mut Vkw, name: String, what: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    let spec = p.spec.as_mut().unwrap();
    match what.as_str() {
        "a hostPath volume" => {
            spec.volumes = Some(vec![
                serde_json::from_value(json!({"name": "d", "hostPath": {"path": "/data"}}))
                    .unwrap(),
            ]);
        }
        "an nfs volume" => {
            spec.volumes = Some(vec![
                serde_json::from_value(
                    json!({"name": "d", "nfs": {"server": "10.0.0.1", "path": "/export"}}),
                )
                .unwrap(),
            ]);
        }
        "a privileged container" => {
            spec.containers[0].security_context =
                Some(serde_json::from_value(json!({"privileged": true})).unwrap());
        }
        "hostNetwork" => spec.host_network = Some(true),
        _ => {
            // Bound by the user, not the scheduler: the taint check never ran.
            spec.node_selector = None;
            spec.tolerations = None;
            spec.node_name = Some(node.clone());
        }
    }
    w.create_pod(p).await;
}

pub(super) fn env_from(kind: &str, name: &str, optional: bool) -> Value {
    let key = if kind == "Secret" {
        "secretKeyRef"
    } else {
        "configMapKeyRef"
    };
    json!({"name": "FROM_SOURCE", "valueFrom": {key: {"name": name, "key": "value", "optional": optional}}})
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with an env var from the missing (Secret|ConfigMap) "([^"]+)"$"#
)]
pub(super) async fn create_missing_env(w: &mut Vkw, name: String, kind: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from(&kind, &source, false)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(
    regex = r#"^I create a GPU pod "([^"]+)" with an optional env var from the missing (Secret|ConfigMap) "([^"]+)"$"#
)]
pub(super) async fn create_optional_env(w: &mut Vkw, name: String, kind: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from(&kind, &source, true)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(regex = r#"^I create a GPU pod "([^"]+)" with an env var from the Secret "([^"]+)"$"#)]
pub(super) async fn create_secret_env(w: &mut Vkw, name: String, source: String) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    p.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(env_from("Secret", &source, false)).unwrap(),
    ]);
    w.create_pod(p).await;
}

#[when(regex = r#"^the (Secret|ConfigMap) "([^"]+)" is created$"#)]
pub(super) async fn create_source(w: &mut Vkw, kind: String, name: String) {
    let data = BTreeMap::from([("value".to_owned(), "present".to_owned())]);
    if kind == "Secret" {
        let s = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            string_data: Some(data),
            ..Default::default()
        };
        Api::<Secret>::namespaced(w.c(), &w.ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    } else {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(w.c(), &w.ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
}

#[then(expr = "pod {string} becomes Running")]
pub(super) async fn becomes_running(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Running").await;
}

#[then(expr = "pod {string} becomes Succeeded")]
pub(super) async fn becomes_succeeded(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Succeeded").await;
}

#[then(expr = "pod {string} becomes Failed")]
pub(super) async fn becomes_failed(w: &mut Vkw, name: String) {
    w.wait_phase(&name, "Failed").await;
}

#[then(expr = "pod {string} becomes Failed with reason {string}")]
pub(super) async fn failed_with(w: &mut Vkw, name: String, reason: String) {
    let p = w.wait_phase(&name, "Failed").await;
    let st = p.status.unwrap();
    assert_eq!(
        st.reason.as_deref(),
        Some(reason.as_str()),
        "message: {:?}",
        st.message
    );
    assert!(
        st.message.is_some_and(|m| !m.is_empty()),
        "a Failed pod needs a message a user can act on"
    );
}

#[then(expr = "pod {string} is Pending with container reason {string}")]
pub(super) async fn pending_with(w: &mut Vkw, name: String, reason: String) {
    wait_for(wait(), &format!("{name} waiting with {reason}"), || async {
        let p = w.get(&name).await?;
        let cs = p
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        (phase(&p) == "Pending" && cs.state?.waiting?.reason.as_deref() == Some(reason.as_str()))
            .then_some(())
    })
    .await;
}

#[then(expr = "pod {string} has an event {string}")]
pub(super) async fn has_event(w: &mut Vkw, name: String, reason: String) {
    let (c, ns) = (w.c(), w.ns.clone());
    wait_for(
        Duration::from_secs(20),
        &format!("event {reason} on {name}"),
        || async {
            events_for(&c, &ns, &name)
                .await
                .iter()
                .any(|(r, _)| *r == reason)
                .then_some(())
        },
    )
    .await;
}

#[then(expr = "no workload exists for pod {string}")]
pub(super) async fn no_workload(w: &mut Vkw, name: String) {
    w.vk()
        .hold_still("no workload for the pod", 2, Duration::ZERO)
        .await;
    let u = w.uids[&name].clone();
    let all: Vec<Value> = w
        .obs()
        .workloads()
        .await
        .into_iter()
        .filter(|x| x["name"].as_str().is_some_and(|n| n.ends_with(&u)))
        .collect();
    assert!(all.is_empty(), "pod {name} reached the provider: {all:?}");
}

#[then(expr = "pod {string} is Ready with a started container whose id names the provider")]
pub(super) async fn ready_started(w: &mut Vkw, name: String) {
    let p = w.get(&name).await.unwrap();
    let st = p.status.unwrap();
    assert!(
        st.conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.started == Some(true));
    assert!(
        cs.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .is_some()
    );
    let id = cs.container_id.clone().unwrap();
    assert!(id.starts_with(&format!("{}://vk-", target())), "{id}");
    assert!(st.start_time.is_some());
}

#[then(expr = "the container of pod {string} is terminated with a non-zero exit code")]
pub(super) async fn terminated_nonzero(w: &mut Vkw, name: String) {
    let p = w.get(&name).await.unwrap();
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    let t = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .expect("terminated state");
    assert_ne!(t.exit_code, 0);
    assert!(t.reason.is_some() && t.finished_at.is_some());
}

#[then(
    expr = "the container of pod {string} is terminated with exit code {int} and reason {string}"
)]
pub(super) async fn terminated_with(w: &mut Vkw, name: String, code: i32, reason: String) {
    let p = w.get(&name).await.unwrap();
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    let t = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .expect("terminated state");
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (code, Some(reason.as_str()))
    );
}

// ----------------------------------------------------------------------------------------------
// Provider-side events (emulator admin API)

#[when(expr = "the provider fails the workload of pod {string}")]
pub(super) async fn provider_fails(w: &mut Vkw, name: String) {
    let id = w.workloads[&name].clone();
    w.obs().act(&id, "fail", json!({})).await;
}

#[when(expr = "the workload of pod {string} exits with code {int}")]
pub(super) async fn provider_exit(w: &mut Vkw, name: String, code: i32) {
    let id = w.workloads[&name].clone();
    w.obs().act(&id, "exit", json!({"exit_code": code})).await;
}

#[when(expr = "the provider loses the workload of pod {string}")]
pub(super) async fn provider_loses(w: &mut Vkw, name: String) {
    let id = w.workloads[&name].clone();
    w.obs().vanish(&id).await;
}

pub(super) async fn pick_replica(w: &mut Vkw, app: &str) -> String {
    let pods = w.replicas(app).await;
    let victim = pods[0].clone();
    let name = victim.metadata.name.clone().unwrap();
    w.victim = Some((name.clone(), uid(&victim)));
    w.others = pods[1..].iter().map(uid).collect();
    let live = w.live_of(&uid(&victim)).await;
    live[0]["id"].as_str().unwrap().to_owned()
}

#[when(expr = "the provider preempts the workload of one replica of deployment {string}")]
pub(super) async fn preempt_replica(w: &mut Vkw, app: String) {
    let id = pick_replica(w, &app).await;
    w.obs().act(&id, "preempt", json!({})).await;
}

#[when(expr = "the provider loses the workload of one replica of deployment {string}")]
pub(super) async fn lose_replica(w: &mut Vkw, app: String) {
    resilience::mark_incident(w, &app).await;
    let id = pick_replica(w, &app).await;
    w.obs().vanish(&id).await;
}

#[then(expr = "that replica becomes Failed with reason {string}")]
pub(super) async fn victim_failed(w: &mut Vkw, reason: String) {
    let (name, _) = w.victim.clone().unwrap();
    failed_with(w, name.clone(), reason.clone()).await;
    has_event(w, name, reason).await;
}
