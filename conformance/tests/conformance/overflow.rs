//! Steps for overflow and reclaim (`features/overflow.feature`), on kind: in-cluster GPUs are the
//! workers' fake GPUs (scripts/kind/fake-gpu), the overflow companion is installed with the
//! scenario's VK release (`overflow.enabled`), and the scenario measures what a production team
//! would see: how long production ran short, how long the way back took.

use std::time::{Duration, Instant};

use conformance::harness::*;
use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::Vkw;

/// The step that gates the feature: registered only for runs with VKs as pods on kind (and once
/// per run: the scenario exercises the cluster's scheduling, not the provider).
pub const IN_CLUSTER_GPUS_SENTENCE: &str = "the cluster has in-cluster GPU nodes";

/// What the scenario measured, printed for the record.
#[derive(Debug, Default)]
pub struct Overflow {
    research: String,
    production_pc: String,
    research_pc: String,
    started: Option<Instant>,
    ended: Option<Instant>,
    /// Seconds with fewer ready replicas than the PDB's minimum.
    short: Duration,
    lowest_ready: usize,
}

/// Nodes a scenario's pods may use: the fake-GPU workers, and this scenario's virtual node only
/// (other scenarios' virtual nodes run side by side).
pub fn placement(vnode: &str) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-vk.io/fake-gpu", "operator": "In", "values": ["true"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [vnode]}]}
    ]}}})
}

fn asks_gpus(p: &Pod) -> bool {
    p.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| {
            let r = c.resources.as_ref();
            [
                r.and_then(|r| r.limits.as_ref()),
                r.and_then(|r| r.requests.as_ref()),
            ]
            .into_iter()
            .flatten()
            .any(|m| m.get("nvidia.com/gpu").is_some_and(|q| q.0 != "0"))
        })
    })
}

fn on_virtual(p: &Pod, vnode: &str) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(vnode)
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[given(
    expr = "a virtual kubelet with the provider under test and the overflow companion, settling for {int} seconds"
)]
async fn vk_with_overflow(w: &mut Vkw, settle: u64) {
    crate::setup_provider(w).await;
    overflow_vk(w, settle, 0, None).await;
}

/// The scenario's VK with the overflow companion; `start_deadline`: its provider's
/// `startDeadlineSeconds`.
pub async fn overflow_vk(w: &mut Vkw, settle: u64, max_delay: u64, start_deadline: Option<u64>) {
    let ns = w.ns.clone();
    let mut providers = w.obs().provider_yaml(&crate::target());
    if let Some(d) = start_deadline {
        providers.push_str(&format!("  startDeadlineSeconds: {d}\n"));
    }
    let vk = Vk::start_with(
        providers,
        VkOptions {
            // Overflow spends provider money: the chart wants the namespaces that may.
            extra_config: format!("allowedNamespaces: [{ns}]\n"),
            chart_values: format!(
                "overflow: {{enabled: true, handoff: {{maxResearchDelaySeconds: {max_delay}, researchNamespaces: [{ns}], researchPriorityClasses: [{research}]}}, reclaim: {{settleSeconds: {settle}, intervalSeconds: 2}}}}\n",
                research = research_class(&ns)
            ),
            ..VkOptions::default()
        },
    )
    .await;
    w.vk = Some(vk);
    crate::wait_node_ready(w).await;
    w.vk.as_ref().unwrap().wait_overflow();
    // The companion is Available before the API server reaches it through its Service (and a
    // webhook it cannot reach is skipped: failurePolicy Ignore): wait until a dry-run pod that
    // opts in comes back mutated.
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "probe-", "labels": {"gpu-vk.io/overflow": "true"}},
        "spec": {"containers": [{"name": "c", "image": crate::traffic::image("vk"),
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap();
    let pods = w.pods();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        Duration::from_secs(60),
        "the overflow webhook to answer",
        || async {
            let p = pods.create(&dry, &probe).await.ok()?;
            p.metadata
                .annotations?
                .contains_key("overflow.gpu-vk.io/decision")
                .then_some(())
        },
    )
    .await;
}

/// The research PriorityClass of the scenario in namespace `ns`: the operator names it in
/// `overflow.handoff.researchPriorityClasses` when the companion is installed, before the
/// scenario creates it.
fn research_class(ns: &str) -> String {
    format!("{ns}-research")
}

async fn priority_class(w: &Vkw, name: &str, value: i32) {
    let pc: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "value": value,
        "description": "overflow scenario"
    }))
    .unwrap();
    Api::<PriorityClass>::all(w.c())
        .create(&PostParams::default(), &pc)
        .await
        .unwrap();
}

/// Waits until no live pod on the fake-GPU workers asks for a GPU.
pub async fn gpus_free(w: &Vkw) {
    let all_pods: Api<Pod> = Api::all(w.c());
    let gpu_nodes: Vec<String> = Api::<k8s_openapi::api::core::v1::Node>::all(w.c())
        .list(&kube::api::ListParams::default().labels("gpu-vk.io/fake-gpu=true"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    wait_for(
        Duration::from_secs(120),
        "every in-cluster GPU free",
        || async {
            let pods = all_pods.list(&Default::default()).await.ok()?;
            let busy = pods.items.iter().any(|p| {
                let on_gpu_node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| gpu_nodes.contains(n));
                let done = matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
                on_gpu_node && !done && asks_gpus(p)
            });
            (!busy).then_some(())
        },
    )
    .await;
}

#[given(
    expr = "a production deployment {string} of {int} GPU replicas with an HPA and a PodDisruptionBudget of {int}, Running in-cluster"
)]
async fn production(w: &mut Vkw, app: String, n: i32, min: i32) {
    let vnode = w.node();
    let o = Overflow {
        production_pc: unique("production"),
        research_pc: research_class(&w.ns),
        ..Default::default()
    };
    // A scenario before this one may still be letting go of the in-cluster GPUs.
    gpus_free(w).await;
    priority_class(w, &o.production_pc, 100).await;
    priority_class(w, &o.research_pc, 1000).await;
    let labels = json!({"app": app, "gpu-vk.io/overflow": "true", "gpu-vk.io/reclaim": "true"});
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": labels}, "spec": {
                "priorityClassName": o.production_pc,
                // As a new user writes it: no preStop hook (the companion's webhook adds the
                // drain), a short grace period so reclaim's moves do not wait long.
                "terminationGracePeriodSeconds": 5,
                "affinity": placement(&vnode),
                // A model server as the stand-in of its emulated replicas answers: by name.
                "containers": [{"name": "model", "image": crate::traffic::image("mock-providers"),
                    "imagePullPolicy": "Never", "args": ["stand-in"],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}
    }))
    .unwrap();
    let api = |_: ()| Api::<Deployment>::namespaced(w.c(), &w.ns);
    api(()).create(&PostParams::default(), &d).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": app}, "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
            "minReplicas": n, "maxReplicas": n + 2,
            // Far above what the replicas use: the HPA acts, and holds them at its minimum.
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "AverageValue", "averageValue": "8"}}}]}
    }))
    .unwrap();
    Api::<HorizontalPodAutoscaler>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &hpa)
        .await
        .unwrap();
    // Its Service, asked by a client in the cluster every 200 ms for the whole scenario.
    crate::traffic::service(w, &app).await;
    crate::traffic::start_client(w, &app, None).await;
    w.wait_replicas(&app, n as usize).await;
    // Running is not serving: every replica Ready (its readiness probe passed) before research.
    let pods = wait_seeing(Duration::from_secs(60), "every replica Ready", || async {
        let pods = w.replicas(&app).await;
        let ready_n = pods.iter().filter(|p| ready(p)).count();
        if ready_n == n as usize {
            Ok(pods)
        } else {
            Err(format!("{ready_n} of {n} Ready"))
        }
    })
    .await;
    for p in &pods {
        assert!(
            !on_virtual(p, &vnode),
            "{:?} went to the virtual node while in-cluster GPUs were free",
            p.metadata.name
        );
        let decision = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("overflow.gpu-vk.io/decision"));
        assert_eq!(
            decision.map(String::as_str),
            Some("offload"),
            "the webhook did not admit {:?}",
            p.metadata.name
        );
        // The drain the user did not write: a preStop sleep within the 5 s grace period.
        let sleep = p.spec.as_ref().and_then(|s| {
            let hook = s.containers[0].lifecycle.as_ref()?.pre_stop.as_ref()?;
            hook.sleep.as_ref().map(|s| s.seconds)
        });
        assert_eq!(sleep, Some(4), "no drain on {:?}", p.metadata.name);
    }
    w.overflow = Some(o);
}

#[when(expr = "a research job of higher priority takes every in-cluster GPU for {int} seconds")]
async fn research(w: &mut Vkw, secs: u32) {
    let mut o = w.overflow.take().expect("a production deployment");
    // Every fake GPU of the workers: 2 per worker.
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(w.c())
        .list(&kube::api::ListParams::default().labels("gpu-vk.io/fake-gpu=true"))
        .await
        .unwrap();
    let gpus: i64 = nodes
        .items
        .iter()
        .filter_map(|n| {
            n.status
                .as_ref()?
                .allocatable
                .as_ref()?
                .get("nvidia.com/gpu")?
                .0
                .parse::<i64>()
                .ok()
        })
        .sum();
    assert!(gpus > 0, "no in-cluster GPUs");
    o.research = unique("research");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": o.research},
        "spec": {"parallelism": gpus, "completions": gpus, "backoffLimit": 0,
            // Research as its users write it: a higher PriorityClass, no label of ours (the
            // operator named the class once, in the chart).
            "template": {"metadata": {"labels": {"app": o.research}}, "spec": {
                "restartPolicy": "Never",
                "priorityClassName": o.research_pc,
                "nodeSelector": {"gpu-vk.io/fake-gpu": "true"},
                "containers": [{"name": "train", "image": crate::traffic::image("vk"), "imagePullPolicy": "Never",
                    "command": ["sleep", secs.to_string()],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
    }))
    .unwrap();
    o.started = Some(Instant::now());
    Api::<Job>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    w.overflow = Some(o);
}

#[then(
    expr = "every replica of {string} runs again within {int} seconds, the preempted ones on the virtual node"
)]
async fn overflowed(w: &mut Vkw, app: String, secs: u64) {
    let vnode = w.node();
    let mut o = w.overflow.take().unwrap();
    let started = o.started.unwrap();
    let want = 4;
    let min = 3;
    o.lowest_ready = want;
    let mut last = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    // Poll until the research job runs on every GPU and every replica is ready, on the virtual
    // node: the ready count is sampled every 250 ms for the shortfall figure.
    loop {
        let pods = w.replicas(&app).await;
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let ready_n = live.iter().filter(|p| ready(p)).count();
        let now = Instant::now();
        if ready_n < min {
            o.short += now - last;
        }
        last = now;
        o.lowest_ready = o.lowest_ready.min(ready_n);
        let offloaded = live.iter().filter(|p| on_virtual(p, &vnode)).count();
        let research_running = Api::<Pod>::namespaced(w.c(), &w.ns)
            .list(&kube::api::ListParams::default().labels(&format!("app={}", o.research)))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if ready_n == want && offloaded > 0 && research_running > 0 && live.len() == want {
            println!(
                "    overflow: {offloaded} replica(s) preempted in-cluster run on the virtual node {:.1?} after the research job was created; lowest ready count {}, below the PDB's minimum of {min} for {:.1?}",
                now - started,
                o.lowest_ready,
                o.short
            );
            break;
        }
        if now >= deadline {
            let failed = pods
                .iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"));
            let why = failed
                .and_then(|p| p.status.as_ref())
                .map(|s| format!("{:?}: {:?}", s.reason, s.message));
            panic!(
                "after {secs} s: {ready_n}/{want} ready, {offloaded} on the virtual node, {research_running} research pods running; a failed replica: {why:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Every offloaded replica has exactly one workload at the provider.
    for p in w
        .replicas(&app)
        .await
        .iter()
        .filter(|p| on_virtual(p, &vnode))
    {
        // A stand-in bound a moment ago has its workload created on the VK's next pass: wait
        // for it, then there must be exactly one.
        let n = wait_for(
            crate::wait(),
            "one workload for an offloaded replica",
            || async {
                let n = w.live_of(&uid(p)).await.len();
                (n >= 1).then_some(n)
            },
        )
        .await;
        assert_eq!(n, 1, "{:?}", p.metadata.name);
    }
    w.overflow = Some(o);
}

#[then(expr = "{string} had fewer than {int} ready replicas for less than {int} seconds")]
async fn shortfall(w: &mut Vkw, _app: String, _min: usize, secs: u64) {
    let o = w.overflow.as_ref().unwrap();
    assert!(
        o.short < Duration::from_secs(secs),
        "production was short for {:.1?}",
        o.short
    );
}

#[then(expr = "{string} never had fewer than {int} ready replicas")]
async fn never_short(w: &mut Vkw, app: String, min: usize) {
    let o = w.overflow.as_ref().unwrap();
    assert!(
        o.lowest_ready >= min,
        "{app} had {} ready replicas at its lowest",
        o.lowest_ready
    );
}

#[when("the research job has completed")]
async fn research_done(w: &mut Vkw) {
    let mut o = w.overflow.take().unwrap();
    let jobs = Api::<Job>::namespaced(w.c(), &w.ns);
    let name = o.research.clone();
    wait_for(
        Duration::from_secs(180),
        "the research job to complete",
        || async {
            let j = jobs.get(&name).await.ok()?;
            (j.status?.succeeded? >= j.spec?.completions?).then_some(())
        },
    )
    .await;
    o.ended = Some(Instant::now());
    w.overflow = Some(o);
}

#[then(
    expr = "within {int} seconds every replica of {string} is back in-cluster, each move with a {string} event"
)]
async fn reclaimed(w: &mut Vkw, secs: u64, app: String, reason: String) {
    let vnode = w.node();
    let o = w.overflow.take().unwrap();
    let ended = o.ended.unwrap();
    let want = 4;
    wait_for(
        Duration::from_secs(secs),
        "every replica back in-cluster",
        || async {
            let pods = w.replicas(&app).await;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            (live.len() == want && live.iter().all(|p| ready(p) && !on_virtual(p, &vnode)))
                .then_some(())
        },
    )
    .await;
    let moves = crate::namespace_event_reasons(w)
        .await
        .iter()
        .filter(|r| **r == reason)
        .count();
    let offloaded_for = ended - o.started.unwrap();
    println!(
        "    reclaim: every replica in-cluster {:.1?} after the research job completed, {moves} move(s); provider time about {:.3} GPU-hours",
        ended.elapsed(),
        offloaded_for.as_secs_f64() * moves as f64 / 3600.0
    );
    assert!(moves >= 1, "no {reason} event");
    w.overflow = Some(o);
}

#[then(expr = "the moves were at least {int} seconds apart")]
async fn moves_apart(w: &mut Vkw, secs: i64) {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.c(), &w.ns);
    let mut times: Vec<i64> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Reclaimed"))
        .filter_map(|e| e.event_time.map(|t| t.0.as_millisecond()))
        .collect();
    times.sort();
    for pair in times.windows(2) {
        let gap = (pair[1] - pair[0]) / 1000;
        assert!(
            gap >= secs,
            "two moves {gap} s apart (event times, ms): {times:?}"
        );
    }
}

/// Removes the cluster-scoped PriorityClasses of the scenario.
pub async fn cleanup(w: &Vkw) {
    if let (Some(o), Some(c)) = (&w.overflow, &w.client) {
        for pc in [&o.production_pc, &o.research_pc] {
            let _ = Api::<PriorityClass>::all(c.clone())
                .delete(pc, &DeleteParams::default())
                .await;
        }
    }
}
