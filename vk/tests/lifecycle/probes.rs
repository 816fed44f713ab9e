//! Readiness and liveness probes of offloaded pods on the testbed: Service membership, restarts, a
//! Never pod ended.

use super::*;

#[tokio::test]
async fn a_failing_readiness_probe_keeps_the_pod_out_of_its_service_until_it_passes() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::ListParams;

    let c = client().await;
    let ns = namespace(&c, "life-probe").await;
    let rp = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 16, 1.89)]).await;
    // The stand-in for the model server answers 503 ("still loading") from the start.
    rp.admin_post("/serve", json!({"httpStatus": 503})).await;
    let vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    ready_node(&c, &vk).await;

    let mut spec = pod_spec(&vk.node, 1);
    spec["containers"][0]["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    spec["containers"][0]["readinessProbe"] = json!({
        "httpGet": {"path": "/ready", "port": "http"},
        "periodSeconds": 1, "failureThreshold": 1,
    });
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "model"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "model"}},
            "template": {"metadata": {"labels": {"app": "model"}}, "spec": spec},
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "model"},
        "spec": {"selector": {"app": "model"}, "ports": [{"port": 80, "targetPort": "http"}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();

    let ready_of = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    let slice_ready = || async {
        let slices = Api::<EndpointSlice>::namespaced(c.clone(), &ns)
            .list(&ListParams::default().labels("kubernetes.io/service-name=model"))
            .await
            .ok()?;
        let e = slices
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .next()?
            .clone();
        Some(e.conditions?.ready)
    };

    // Running, serving 503: not Ready, and listed not ready in the Service's EndpointSlice.
    let pod = wait_for(
        Duration::from_secs(40),
        "pod Running, not Ready",
        || async {
            let p = pods_with_label(&c, &ns, "model").await.into_iter().next()?;
            (phase(&p) == "Running" && ready_of(&p).as_deref() == Some("False")).then_some(p)
        },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "endpoint listed not ready",
        || async { (slice_ready().await? == Some(false)).then_some(()) },
    )
    .await;
    // It stays so while the server says 503 (several probe periods).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = get(&c, &ns, pod.metadata.name.as_deref().unwrap()).await;
    assert_eq!(ready_of(&still).as_deref(), Some("False"));

    // The server is ready: the pod becomes Ready and its endpoint ready.
    rp.admin_post("/serve", json!({"httpStatus": 200})).await;
    wait_for(Duration::from_secs(30), "pod Ready", || async {
        let p = get(&c, &ns, pod.metadata.name.as_deref().unwrap()).await;
        (ready_of(&p).as_deref() == Some("True")).then_some(())
    })
    .await;
    wait_for(Duration::from_secs(30), "endpoint ready", || async {
        (slice_ready().await? == Some(true)).then_some(())
    })
    .await;
    drop(vk);
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container_or_ends_a_never_pod() {
    let c = client().await;
    let ns = namespace(&c, "life-live").await;
    let rp = Emulator::runpod(fast(), vec![GpuStock::new("A100-80GB", 16, 1.89)]).await;
    let vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    ready_node(&c, &vk).await;

    let probed = |name: &str, policy: &str| {
        let mut p = with_restart_policy(gpu_pod(name, &vk.node, 1, &[]), policy);
        let mut spec = serde_json::to_value(p.spec.take().unwrap()).unwrap();
        spec["containers"][0]["ports"] = json!([{"name": "http", "containerPort": 8080}]);
        spec["containers"][0]["livenessProbe"] = json!({
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 1, "failureThreshold": 2,
        });
        p.spec = Some(serde_json::from_value(spec).unwrap());
        p
    };
    create(&c, &ns, probed("always", "Always")).await;
    create(&c, &ns, probed("never", "Never")).await;
    let (always, first) = running_workload(&c, &ns, "always", &rp).await;
    let (_, never_workload) = running_workload(&c, &ns, "never", &rp).await;

    // A live server (200) is left alone: several probe periods, no restart.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = get(&c, &ns, "always").await;
    assert_eq!(
        restart_count_of(&p),
        0,
        "a passing liveness probe restarted it"
    );
    assert_eq!(rp.workloads_of(&uid(&always)).await.len(), 1);

    // The server answers 500: after two failed probes the container is killed and restarted.
    rp.admin_post("/serve", json!({"httpStatus": 500})).await;
    let restarted = wait_for(Duration::from_secs(30), "always restarted", || async {
        let p = get(&c, &ns, "always").await;
        (restart_count_of(&p) >= 1).then_some(p)
    })
    .await;
    let cs = restarted
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone();
    let last = cs.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 137, "{last:?}");
    assert!(
        last.message
            .as_deref()
            .is_some_and(|m| m.contains("HTTP probe failed with statuscode: 500")),
        "{last:?}"
    );
    let events = events_when(&c, &ns, "always", |e| {
        e.iter().any(|(r, _)| r == "Killing") && e.iter().any(|(r, _)| r == "Unhealthy")
    })
    .await;
    assert!(
        events.iter().any(|(r, m)| r == "Unhealthy"
            && m == "Liveness probe failed: HTTP probe failed with statuscode: 500"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Killing" && m.contains("failed liveness probe, will be restarted")),
        "{events:?}"
    );
    assert!(
        rp.workloads_of(&uid(&always))
            .await
            .iter()
            .all(|w| w["id"].as_str() != Some(first.as_str())),
        "the killed workload is gone at the provider"
    );

    // Never: the pod ends Failed with the kill's exit code and its workload is gone.
    let failed = wait_for(Duration::from_secs(30), "never Failed", || async {
        let p = get(&c, &ns, "never").await;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let cs = &failed
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let term = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(term.exit_code, 137, "{term:?}");
    assert_eq!(cs.restart_count, 0);
    wait_for(
        Duration::from_secs(20),
        "never's workload deleted",
        || async {
            let w = rp.workloads_of(&uid(&failed)).await;
            w.iter()
                .all(|w| {
                    w["id"].as_str() != Some(never_workload.as_str()) || w["state"] != "RUNNING"
                })
                .then_some(())
        },
    )
    .await;

    // Healthy again: the restarted container stays up and its restart count stops growing.
    rp.admin_post("/serve", json!({"httpStatus": 200})).await;
    let settled = wait_for(Duration::from_secs(40), "always running again", || async {
        let p = get(&c, &ns, "always").await;
        let cs = p
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        cs.state.as_ref()?.running.as_ref()?;
        Some(cs.restart_count)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = get(&c, &ns, "always").await;
    assert_eq!(
        restart_count_of(&p),
        settled,
        "restarted while its probe passes"
    );
    assert_eq!(phase(&p), "Running");
    drop(vk);
}

fn restart_count_of(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}
