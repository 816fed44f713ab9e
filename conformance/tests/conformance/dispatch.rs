//! Steps of the dispatch scenarios: a RunPod and a Vast emulator at different prices behind
//! one VK with the `cheapest` policy; the breaker keeping a failing provider out; a spend limit
//! holding a pod; a restart keeping every decision.

use std::collections::BTreeMap;
use std::time::Duration;

use conformance::harness::*;
use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::DeleteParams;
use mock_providers::config::{ExecutionMode, GpuStock};
use serde_json::json;

use super::{Vkw, wait_node_ready};

const GPU: &str = "A100-80GB";
/// How long a step waits for what takes a fast run up to a minute (longer on the realistic
/// profile: [`conformance::harness::lab::patience`]).
fn wait() -> Duration {
    conformance::harness::lab::patience(Duration::from_secs(60))
}

/// Per pod: its provider and its decision annotation.
type Decisions = BTreeMap<String, (String, String)>;

/// The providers of a dispatch scenario, by name, and what the steps remember.
#[derive(Default)]
pub struct Dispatch {
    emulators: BTreeMap<String, Emulator>,
    limits: String,
    /// `create` calls a provider had seen when it began failing.
    creates_when_failing: BTreeMap<String, u64>,
    /// Per pod: its provider and decision before the VK restart; creates before it.
    before_restart: Option<(Decisions, u64)>,
}

fn d(w: &mut Vkw) -> &mut Dispatch {
    w.dispatch.get_or_insert_with(Dispatch::default)
}

fn emu<'a>(w: &'a Vkw, name: &str) -> &'a Emulator {
    &w.dispatch.as_ref().expect("dispatch providers").emulators[name]
}

fn annotation(p: &Pod, key: &str) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(key).cloned()
}

#[given(expr = "a spend limit of {float} dollars per hour")]
async fn spend_limit(w: &mut Vkw, dollars: f64) {
    d(w).limits = format!("limits: {{maxSpendPerHour: {dollars}}}\n");
}

#[given(
    expr = "a virtual kubelet dispatching to {string} at {float} and {string} at {float} dollars per GPU-hour, cheapest first"
)]
async fn dispatching_vk(w: &mut Vkw, rp: String, rp_price: f64, vast: String, vast_price: f64) {
    let c = client().await;
    w.client = Some(c.clone());
    w.ns = namespace(&c, "dispatch").await;
    let mode = ExecutionMode::simulated(100, 100, None);
    let rp_emu = Emulator::runpod(mode.clone(), vec![GpuStock::new(GPU, 16, rp_price)]).await;
    let vast_emu = Emulator::vast(mode, vec![GpuStock::new(GPU, 16, vast_price)]).await;
    let providers = format!(
        "{}{}",
        rp_emu.provider_yaml(&rp),
        vast_emu.provider_yaml(&vast)
    );
    let limits = d(w).limits.clone();
    d(w).emulators.insert(rp.clone(), rp_emu);
    d(w).emulators.insert(vast.clone(), vast_emu);
    // Fast inventory and a short open period, so the scenario's minute holds every phase.
    let opts = VkOptions {
        extra_config: format!(
            "dispatch:\n  policy: cheapest\n  inventoryIntervalMs: {}\n  capacityMemoryMs: 2000\n  \
             breaker: {{failures: 3, openMs: 10000}}\n{limits}",
            lab::inventory_interval_ms()
        ),
        ..VkOptions::default()
    };
    w.vk = Some(Vk::start_with(providers, opts).await);
    wait_node_ready(w).await;
    // Dispatch by price needs both inventories once.
    let vk = w.vk.as_ref().unwrap();
    for name in [&rp, &vast] {
        let m = format!(
            "gpu_vk_provider_calls_total{{provider=\"{name}\",op=\"inventory\",result=\"ok\"}}"
        );
        wait_for(wait(), &format!("{name}'s inventory"), || async {
            (vk.metric(&m).await >= 1.0).then_some(())
        })
        .await;
    }
}

#[when(expr = "I create a dispatched pod {string}")]
async fn create_dispatched(w: &mut Vkw, name: String) {
    let pod = gpu_pod(&name, &w.node(), 1, &[("gpu-vk.io/gpu-type", GPU)]);
    w.create_pod(pod).await;
}

#[when(expr = "I create a dispatched pod {string} pinned to {string}")]
async fn create_pinned(w: &mut Vkw, name: String, provider: String) {
    let pod = gpu_pod(
        &name,
        &w.node(),
        1,
        &[
            ("gpu-vk.io/gpu-type", GPU),
            ("gpu-vk.io/provider", &provider),
        ],
    );
    w.create_pod(pod).await;
}

#[then(expr = "pod {string} runs on provider {string}")]
async fn runs_on(w: &mut Vkw, name: String, provider: String) {
    let pod = w.wait_phase(&name, "Running").await;
    assert_eq!(
        annotation(&pod, "gpu-vk.io/assigned-provider").as_deref(),
        Some(provider.as_str()),
        "pod {name} runs elsewhere"
    );
    let id = uid(&pod);
    for (other, e) in &w.dispatch.as_ref().unwrap().emulators {
        let n = e.workloads_of(&id).await.len();
        let want = usize::from(*other == provider);
        assert_eq!(n, want, "{other} holds {n} workloads of pod {name}");
    }
}

#[then(expr = "pod {string} records the decision: {string} at {string}, {string} at {string}")]
async fn records_decision(w: &mut Vkw, name: String, a: String, pa: String, b: String, pb: String) {
    let pod = w.get(&name).await.unwrap();
    let decision = annotation(&pod, "gpu-vk.io/dispatch").expect("a decision annotation");
    assert!(
        decision.starts_with(&format!("policy cheapest: chose {a} {GPU} {pa}")),
        "{decision}"
    );
    assert!(decision.contains(&format!("{b} {GPU} {pb}")), "{decision}");
    let events = events_when(&w.c(), &w.ns, &name, |e| {
        e.iter().any(|(r, _)| r == "Dispatched")
    })
    .await;
    // One Event tells the decision and the workload it created.
    let (_, note) = events.iter().find(|(r, _)| r == "Dispatched").unwrap();
    let created = note
        .strip_prefix(&format!("{decision}; created workload "))
        .unwrap_or_else(|| panic!("{note:?} does not tell the decision and the workload"));
    assert!(created.contains(&uid(&pod)), "{note}");
}

#[when(expr = "provider {string} fails every call")]
async fn fails_every_call(w: &mut Vkw, provider: String) {
    let e = emu(w, &provider);
    e.admin_post(
        "/faults",
        json!({"route": "any", "status": 503, "error_rate": 1.0}),
    )
    .await;
    let creates = e.counter("create").await;
    d(w).creates_when_failing.insert(provider, creates);
}

#[when(expr = "provider {string} recovers")]
async fn recovers(w: &mut Vkw, provider: String) {
    let e = emu(w, &provider);
    let r = reqwest::Client::new()
        .delete(format!("http://{}/_admin/faults", e.addr))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

async fn node_condition(w: &Vkw, provider: &str) -> Option<(String, String)> {
    let node = Api::<Node>::all(w.c()).get(&w.node()).await.ok()?;
    let t = format!("gpu-vk.io/provider.{provider}");
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

#[then(expr = "the node reports provider {string} unhealthy")]
async fn reported_unhealthy(w: &mut Vkw, provider: String) {
    let got = wait_for(wait(), "the provider's condition False", || async {
        node_condition(w, &provider)
            .await
            .filter(|(s, _)| s == "False")
    })
    .await;
    assert_eq!(got.1, "CircuitOpen");
    let m = format!("gpu_vk_provider_healthy{{provider=\"{provider}\"}}");
    let vk = w.vk.as_ref().unwrap();
    wait_for(wait(), "the health metric 0", || async {
        (vk.metric(&m).await == 0.0).then_some(())
    })
    .await;
}

#[then(expr = "the node reports provider {string} healthy")]
async fn reported_healthy(w: &mut Vkw, provider: String) {
    wait_for(wait(), "the provider's condition True", || async {
        node_condition(w, &provider)
            .await
            .filter(|(s, _)| s == "True")
    })
    .await;
}

#[then(expr = "provider {string} saw no create while it was failing")]
async fn no_create_while_failing(w: &mut Vkw, provider: String) {
    let before = w.dispatch.as_ref().unwrap().creates_when_failing[&provider];
    assert_eq!(emu(w, &provider).counter("create").await, before);
}

#[then(expr = "pod {string} waits Pending with reason {string} naming {string}")]
async fn waits_pending(w: &mut Vkw, name: String, reason: String, limit: String) {
    let pod = wait_for(
        wait(),
        &format!("pod {name} waiting for {reason}"),
        || async {
            let p = w.get(&name).await?;
            let waiting = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .state
                .as_ref()?
                .waiting
                .clone()?;
            (waiting.reason.as_deref() == Some(reason.as_str())).then_some((p, waiting))
        },
    )
    .await;
    assert_eq!(phase(&pod.0), "Pending");
    let message = pod.1.message.unwrap_or_default();
    assert!(message.contains(&limit), "{message}");
    let events = events_when(&w.c(), &w.ns, &name, |e| {
        e.iter().any(|(r, _)| r == &reason)
    })
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == &reason && n.contains(&limit)),
        "{events:?}"
    );
    // Held, not retried in a loop: it stays so (and uncreated) for a few polls.
    w.vk()
        .hold_still("the held pod to stay Pending", 6, Duration::ZERO)
        .await;
    assert_eq!(phase(&w.get(&name).await.unwrap()), "Pending");
}

#[then(expr = "no provider saw a create for pod {string}")]
async fn no_create_for(w: &mut Vkw, name: String) {
    let id = w.uids[&name].clone();
    for (p, e) in &w.dispatch.as_ref().unwrap().emulators {
        assert!(
            e.workloads_of(&id).await.is_empty(),
            "{p} has a workload of {name}"
        );
    }
}

#[when(expr = "pod {string} is deleted")]
async fn pod_deleted(w: &mut Vkw, name: String) {
    w.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(wait(), &format!("pod {name} gone"), || async {
        w.get(&name).await.is_none().then_some(())
    })
    .await;
}

#[when("the dispatching virtual kubelet is killed and started again")]
async fn restart(w: &mut Vkw) {
    let mut before = BTreeMap::new();
    for name in ["one", "two"] {
        let p = w.get(name).await.unwrap();
        before.insert(
            name.to_owned(),
            (
                annotation(&p, "gpu-vk.io/assigned-provider").unwrap_or_default(),
                annotation(&p, "gpu-vk.io/dispatch").unwrap_or_default(),
            ),
        );
    }
    let mut creates = 0;
    for e in w.dispatch.as_ref().unwrap().emulators.values() {
        creates += e.counter("create").await;
    }
    d(w).before_restart = Some((before, creates));
    w.vk().replace().await;
}

/// A metric of a VK process that may not be serving yet (just restarted).
async fn try_metric(vk: &Vk, name: &str) -> Option<f64> {
    let text = reqwest::get(vk.metrics_url())
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

#[then("after it has reconciled, it made no create and no pod status write")]
async fn no_writes_after_restart(w: &mut Vkw) {
    let vk = w.vk.as_ref().unwrap();
    wait_for(
        wait(),
        "the restarted VK to reconcile everything",
        || async {
            try_metric(vk, "gpu_vk_startup_reconcile_seconds")
                .await
                .filter(|s| *s > 0.0)
        },
    )
    .await;
    // A few polls more, for anything late.
    vk.hold_still("no status write after the restart", 6, Duration::ZERO)
        .await;
    assert_eq!(vk.metric("gpu_vk_pod_status_writes_total").await, 0.0);
    let mut creates = 0;
    for e in w.dispatch.as_ref().unwrap().emulators.values() {
        creates += e.counter("create").await;
    }
    assert_eq!(
        creates,
        w.dispatch
            .as_ref()
            .unwrap()
            .before_restart
            .as_ref()
            .unwrap()
            .1
    );
}

#[then(expr = "pods {string} and {string} keep their provider and their decision")]
async fn keep_decisions(w: &mut Vkw, a: String, b: String) {
    let before = w
        .dispatch
        .as_ref()
        .unwrap()
        .before_restart
        .clone()
        .unwrap()
        .0;
    for name in [a, b] {
        let p = w.get(&name).await.unwrap();
        assert_eq!(phase(&p), "Running");
        let now = (
            annotation(&p, "gpu-vk.io/assigned-provider").unwrap_or_default(),
            annotation(&p, "gpu-vk.io/dispatch").unwrap_or_default(),
        );
        assert_eq!(now, before[&name], "pod {name}");
        assert!(!now.1.is_empty());
    }
}
