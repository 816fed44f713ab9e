//! Contract tests of the kubernetes provider: a remote pod evicted or deleted by someone else, and
//! usage from the remote metrics API.

use super::*;

/// Holds a remote pod after its deletion (a finalizer, as any controller may set), so what the
/// adapter lists for a pod being deleted can be looked at without racing the remote node.
async fn hold(pods: &Api<Pod>, name: &str, on: bool) {
    let finalizers = if on {
        json!(["test.gpu-vk.io/hold"])
    } else {
        serde_json::Value::Null
    };
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_evicted_remote_pod_is_preempted_and_one_deleted_by_someone_else_is_not_listed() {
    let r = Remote::start().await;
    let me = owner();
    let k = adapter(r.settings(), &me);
    let evicted = WorkloadBuilder::fresh(&me)
        .command(["/bin/sh", "-c", "sleep 300"])
        .build();
    let deleted = WorkloadBuilder::fresh(&me)
        .command(["/bin/sh", "-c", "sleep 300"])
        .build();
    for w in [&evicted, &deleted] {
        k.create(w).await.unwrap();
        hold(&r.pods(), w.id.as_str(), true).await;
    }
    let running = wait_listed(&k, evicted.id.as_str(), "the remote pod to run", |o| {
        o.state == WorkloadState::Running
    })
    .await;
    wait_listed(&k, deleted.id.as_str(), "the other to run", |o| {
        o.state == WorkloadState::Running
    })
    .await;

    // Exec reaches the remote node, whose provider (Slurm without srun) has none: it answers
    // 501 through the remote API server, and the adapter says so.
    let req = vk::provider::ExecRequest {
        command: vec!["true".into()],
        stdin: false,
        tty: false,
    };
    let e = tokio::time::timeout(WAIT, k.exec(&running.provider_id, req))
        .await
        .expect("exec answers")
        .unwrap_err();
    assert!(
        matches!(&e, ProviderError::Unsupported { what, .. } if what.contains("not supported by provider hpc")),
        "{e:?}"
    );

    // The Eviction API (a drain, the descheduler): the remote cluster took it away.
    r.pods()
        .evict(evicted.id.as_str(), &EvictParams::default())
        .await
        .unwrap();
    let preempted = wait_listed(&k, evicted.id.as_str(), "the eviction to show", |o| {
        o.state.is_terminal()
    })
    .await;
    assert_eq!(preempted.state, WorkloadState::Preempted, "{preempted:?}");
    let pod = r.pods().get(evicted.id.as_str()).await.unwrap();
    let disruption = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("the Eviction API records a DisruptionTarget condition");
    assert_eq!(disruption.reason.as_deref(), Some("EvictionByEvictionAPI"));

    // A plain delete by someone else: still there (held), but no longer listed.
    r.pods()
        .delete(deleted.id.as_str(), &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        WAIT,
        "the deleted remote pod to drop out of the list",
        || async {
            let l = k.list().await.ok()?;
            (!l.iter().any(|o| o.id == deleted.id)).then_some(())
        },
    )
    .await;
    assert!(
        r.pods()
            .get_opt(deleted.id.as_str())
            .await
            .unwrap()
            .is_some()
    );

    for w in [&evicted, &deleted] {
        hold(&r.pods(), w.id.as_str(), false).await;
    }
    r.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_comes_from_the_remote_metrics_api() {
    // A RunPod emulator under the remote node: it reports CPU and memory use, which the
    // remote metrics-server scrapes from our VK's kubelet API.
    let emu = Emulator::runpod(
        ExecutionMode::simulated(100, 100, None),
        vec![GpuStock::new("A100-80GB", 8, 1.89)],
    )
    .await;
    let r = Remote::start_on(emu).await;
    let me = owner();
    let k = adapter(r.settings(), &me);
    let w = WorkloadBuilder::fresh(&me)
        .command(["/bin/sh", "-c", "sleep 300"])
        .gpu("A100-80GB", 1)
        .build();
    k.create(&w).await.unwrap();
    wait_listed(&k, w.id.as_str(), "the remote pod to run", |o| {
        o.state == WorkloadState::Running
    })
    .await;
    let remote_uid = r
        .pods()
        .get(w.id.as_str())
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let at_runpod = wait_for(WAIT, "the RunPod workload of the remote pod", || async {
        r.emu.workloads_of(&remote_uid).await.into_iter().next()
    })
    .await;
    let id = at_runpod["id"].as_str().unwrap().to_owned();
    r.emu
        .admin_post(
            &format!("/workloads/{id}/usage"),
            json!({"cpu_millis": 400, "memory_bytes": 512u64 << 20}),
        )
        .await;
    // metrics-server computes CPU from two scrapes (15 s apart on the testbed).
    let with_usage = wait_listed(&k, w.id.as_str(), "usage from metrics.k8s.io", |o| {
        o.usage.as_ref().is_some_and(|u| u.cpu_millis > 0)
    })
    .await;
    let u = with_usage.usage.unwrap();
    assert!((300..=500).contains(&u.cpu_millis), "{u:?}");
    assert!(u.memory_bytes >= 256 << 20, "{u:?}");
    r.finish().await;
}
