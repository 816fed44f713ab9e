//! The hand-off controller's loop: every second, [`super::plan`] on the watched nodes and pods,
//! then its actions, each with an Event saying what happened and why.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource};
use serde_json::json;
use tracing::{info, warn};

use super::{
    Action, DELETION_COST, FOR_ANNOTATION, GATE, Key, LOWEST_COST, REPLACES_ANNOTATION, Settings,
    plan,
};
use crate::telemetry::ErrorChain;

const TICK: Duration = Duration::from_secs(1);

/// Runs until the process ends; a failed action is logged and planned again at the next look.
pub async fn run(
    client: Client,
    settings: Settings,
    nodes: Store<Node>,
    pods: Store<Pod>,
    instance: String,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpu-vk-handoff".into(),
            instance: Some(instance),
        },
    );
    loop {
        tokio::time::sleep(TICK).await;
        if nodes.wait_until_ready().await.is_err() || pods.wait_until_ready().await.is_err() {
            warn!("handoff: the node and pod watches ended");
            return;
        }
        let n: Vec<Node> = nodes.state().iter().map(|x| (**x).clone()).collect();
        let p: Vec<Pod> = pods.state().iter().map(|x| (**x).clone()).collect();
        for action in plan(&n, &p, &settings, jiff::Timestamp::now()) {
            if let Err(e) = carry_out(&client, &recorder, &p, &action).await {
                // The action's key only: a stand-in is a whole pod, env values included.
                warn!(error = %ErrorChain(&e), action = %action.summary(), "handoff: action failed; planning again");
            }
        }
    }
}

/// The pod `k` in `pods`.
fn find<'a>(pods: &'a [Pod], k: &Key) -> Option<&'a Pod> {
    pods.iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(k.0.as_str())
            && p.metadata.name.as_deref() == Some(k.1.as_str())
    })
}

async fn carry_out(
    client: &Client,
    recorder: &Recorder,
    pods: &[Pod],
    action: &Action,
) -> Result<(), kube::Error> {
    let api = |ns: &str| Api::<Pod>::namespaced(client.clone(), ns);
    match action {
        Action::Release {
            pod,
            why,
            timed_out,
        } => {
            let Some(p) = find(pods, pod) else {
                return Ok(());
            };
            release(&api(&pod.0), p, why).await?;
            let (type_, reason) = if *timed_out {
                (EventType::Warning, "HandoffTimedOut")
            } else {
                (EventType::Normal, "HandoffDone")
            };
            event(recorder, p, type_, reason, "Release", why).await;
        }
        Action::Start(standin) => start(client, recorder, pods, standin).await?,
        Action::Adopt {
            standin,
            replaced,
            hash,
        } => {
            let cost = json!({"metadata": {"annotations": {DELETION_COST: LOWEST_COST}}});
            api(&replaced.0)
                .patch(&replaced.1, &PatchParams::default(), &Patch::Merge(&cost))
                .await?;
            let label = json!({"metadata": {"labels": {"pod-template-hash": hash}}});
            api(&standin.0)
                .patch(&standin.1, &PatchParams::default(), &Patch::Merge(&label))
                .await?;
            info!(namespace = %standin.0, standin = %standin.1, replaced = %replaced.1, "handoff: the ReplicaSet adopts the stand-in and lets the replica go");
            if let Some(v) = find(pods, replaced) {
                let note = format!(
                    "stand-in {} is Ready on the virtual node: the ReplicaSet keeps it and deletes \
                     this replica (lowest pod-deletion-cost)",
                    standin.1
                );
                event(
                    recorder,
                    v,
                    EventType::Normal,
                    "HandedOff",
                    "Handoff",
                    &note,
                )
                .await;
            }
        }
        Action::Claim {
            standin,
            for_uid,
            replaces,
        } => {
            let claim = json!({"metadata": {"annotations": {
                FOR_ANNOTATION: for_uid, REPLACES_ANNOTATION: replaces}}});
            api(&standin.0)
                .patch(&standin.1, &PatchParams::default(), &Patch::Merge(&claim))
                .await?;
            info!(namespace = %standin.0, standin = %standin.1, replaces, "handoff: a warm stand-in takes a replica's place");
            if let Some(v) = find(pods, &(standin.0.clone(), replaces.clone())) {
                let note = format!(
                    "a higher-priority pod needs this replica's GPUs: warm stand-in {} on the \
                     virtual node takes its place, and this replica leaves once it is Ready",
                    standin.1
                );
                handoff_started(recorder, v, &note).await;
            }
        }
        Action::Drop(k) => match api(&k.0).delete(&k.1, &DeleteParams::default()).await {
            Ok(_) => {
                info!(namespace = %k.0, pod = %k.1, "handoff: deleted a stand-in no longer needed")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        },
    }
    Ok(())
}

/// Tells replica `v` that a stand-in takes its place (`HandoffStarted`, as `note` says).
async fn handoff_started(recorder: &Recorder, v: &Pod, note: &str) {
    event(
        recorder,
        v,
        EventType::Normal,
        "HandoffStarted",
        "Handoff",
        note,
    )
    .await;
}

/// Creates a stand-in (done already when it exists) and tells the replica it replaces.
async fn start(
    client: &Client,
    recorder: &Recorder,
    pods: &[Pod],
    standin: &Pod,
) -> Result<(), kube::Error> {
    let ns = standin.metadata.namespace.clone().unwrap_or_default();
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    match api.create(&PostParams::default(), standin).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
        Err(e) => return Err(e),
    }
    let name = standin.metadata.name.clone().unwrap_or_default();
    let replaced = standin
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REPLACES_ANNOTATION))
        .cloned();
    info!(namespace = %ns, name, ?replaced, "handoff: started a stand-in on the virtual node");
    if let Some(v) = replaced.and_then(|r| find(pods, &(ns, r))) {
        let note = format!(
            "a higher-priority pod needs this replica's GPUs: its stand-in {name} starts on \
             the virtual node first, and this replica leaves once the stand-in is Ready"
        );
        handoff_started(recorder, v, &note).await;
    }
    Ok(())
}

/// Removes [`GATE`] from `p`'s scheduling gates, keeping any other gate (even one added since
/// `p` was read: the patch tests the list as read).
async fn release(api: &Api<Pod>, p: &Pod, why: &str) -> Result<(), kube::Error> {
    let old = p.spec.as_ref().and_then(|s| s.scheduling_gates.clone());
    let gates: Vec<_> = old
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.name != GATE)
        .collect();
    let ops = json!([
        {"op": "test", "path": "/spec/schedulingGates", "value": old},
        {"op": "replace", "path": "/spec/schedulingGates", "value": gates},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    let name = p.metadata.name.as_deref().unwrap_or_default();
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?;
    info!(namespace = ?p.metadata.namespace, pod = name, why, "handoff: released the scheduling gate");
    Ok(())
}

async fn event(
    recorder: &Recorder,
    p: &Pod,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &p.object_ref(&())).await {
        warn!(error = %ErrorChain(&e), "handoff: failed to record the event");
    }
}
