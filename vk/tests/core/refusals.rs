//! Bad input on the testbed: pods failed or held with a reason and an Event and nothing created,
//! and a real kubelet's node never taken over.

use super::*;

#[tokio::test]
async fn bad_input_fails_the_pod_with_a_reason_and_an_event_and_creates_nothing() {
    let c = client().await;
    let ns = namespace(&c, "core-bad").await;
    let rp = Emulator::runpod(fast(), gpus()).await;
    let mut vk = Vk::start(&[("runpod", &rp)], VkOptions::default()).await;
    wait_for(Duration::from_secs(15), "node Ready", || {
        node_ready(&c, &vk.node)
    })
    .await;

    let cases: Vec<(&str, Pod, &str)> = vec![
        (
            "unknown-provider",
            gpu_pod(
                "unknown-provider",
                &vk.node,
                1,
                &[("gpu-vk.io/provider", "nimbus")],
            ),
            "UnknownProvider",
        ),
        (
            "bad-annotation",
            gpu_pod(
                "bad-annotation",
                &vk.node,
                1,
                &[("gpu-vk.io/bid-price", "cheap")],
            ),
            "InvalidSpec",
        ),
        (
            "unknown-annotation",
            gpu_pod(
                "unknown-annotation",
                &vk.node,
                1,
                &[("gpu-vk.io/colour", "blue")],
            ),
            "InvalidSpec",
        ),
        (
            "host-path",
            {
                let mut p = gpu_pod("host-path", &vk.node, 1, &[]);
                let spec = p.spec.as_mut().unwrap();
                spec.volumes = Some(vec![
                    serde_json::from_value(json!({"name": "d", "hostPath": {"path": "/data"}}))
                        .unwrap(),
                ]);
                spec.containers[0].volume_mounts = Some(vec![
                    serde_json::from_value(json!({"name": "d", "mountPath": "/data"})).unwrap(),
                ]);
                p
            },
            "InvalidSpec",
        ),
        (
            "privileged",
            {
                let mut p = gpu_pod("privileged", &vk.node, 1, &[]);
                p.spec.as_mut().unwrap().containers[0].security_context =
                    Some(serde_json::from_value(json!({"privileged": true})).unwrap());
                p
            },
            "InvalidSpec",
        ),
    ];
    for (_, pod, _) in &cases {
        create_pod(&c, &ns, pod.clone()).await;
    }
    // A mandatory Secret that does not exist keeps the pod Pending with the kubelet's reason.
    let mut missing = gpu_pod("missing-secret", &vk.node, 1, &[]);
    missing.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({
            "name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}
        }))
        .unwrap(),
    ]);
    create_pod(&c, &ns, missing).await;
    // A good pod next to them still runs: the VK kept going.
    create_pod(&c, &ns, gpu_pod("good", &vk.node, 1, &[])).await;

    for (name, _, reason) in &cases {
        let p = wait_for(
            Duration::from_secs(30),
            &format!("{name} Failed"),
            || async {
                get_pod(&c, &ns, name)
                    .await
                    .filter(|p| phase(p) == "Failed")
            },
        )
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().reason.as_deref(),
            Some(*reason),
            "{name}"
        );
        assert!(
            !p.status
                .as_ref()
                .unwrap()
                .message
                .clone()
                .unwrap_or_default()
                .is_empty(),
            "{name} has no message"
        );
        let events = events_when(&c, &ns, name, |e| e.iter().any(|(r, _)| r == reason)).await;
        assert!(
            events.iter().any(|(r, _)| r == reason),
            "{name}: no {reason} event in {events:?}"
        );
        assert!(
            rp.workloads_of(&uid(&p)).await.is_empty(),
            "{name} leaked a workload"
        );
    }
    let waiting = wait_for(
        Duration::from_secs(30),
        "missing-secret waiting",
        || async {
            let p = get_pod(&c, &ns, "missing-secret").await?;
            let cs = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .clone();
            (cs.state?.waiting?.reason.as_deref() == Some("CreateContainerConfigError"))
                .then_some(p)
        },
    )
    .await;
    assert_eq!(phase(&waiting), "Pending");
    assert!(rp.workloads_of(&uid(&waiting)).await.is_empty());
    wait_running(&c, &ns, "good").await;
    assert_eq!(
        rp.counter("create").await,
        1,
        "only the good pod reached the provider"
    );
    delete_namespace(&c, &ns).await;
    vk.cleanup(&c).await;
}

#[tokio::test]
async fn an_existing_node_of_a_real_kubelet_is_not_taken_over() {
    let c = client().await;
    let name = format!("real-gpu-{}", &uuid::Uuid::new_v4().to_string()[..8]);
    let nodes: Api<Node> = Api::all(c.clone());
    let real: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &real).await.unwrap();
    let rp = Emulator::runpod(fast(), gpus()).await;
    let opts = VkOptions {
        node_name: Some(name.clone()),
        ..Default::default()
    };
    let mut vk = Vk::start(&[("runpod", &rp)], opts).await;
    let status = wait_for(Duration::from_secs(20), "the VK to refuse and exit", || {
        std::future::ready(vk.exited())
    })
    .await;
    assert!(!status.success(), "the VK must fail, not run: {status}");
    let log = vk.log();
    assert!(
        log.contains("was not registered by this virtual kubelet"),
        "the refusal says why: {log}"
    );
    // The Node is untouched: none of the VK's labels, annotations or taints.
    let after = nodes.get(&name).await.unwrap();
    let labels = after.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key("type"), "labels changed: {labels:?}");
    assert!(
        !after
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("gpu-vk.io/owner")
    );
    // (The node lifecycle controller taints a Node without a kubelet not-ready; ours is absent.)
    let taints = after.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .all(|t| t.key != "virtual-kubelet.io/provider"),
        "the VK tainted it: {taints:?}"
    );
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
}
