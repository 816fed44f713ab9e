//! Requests to a Service from a pod in the cluster (kind only: locally there is no kube-proxy):
//! a client pod asks the Service by name every 200 ms and logs each answer with its time, and
//! steps read that log. The answers name who answered: an emulated workload's id, or the pod
//! name of an in-cluster replica running `mock-providers stand-in`.

use std::time::Duration;

use conformance::harness::*;
use cucumber::then;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::Vkw;

/// One request and what came back (`200 OK <who>`, or an error line, or `none`).
#[derive(Clone, Debug)]
pub struct Answer {
    pub at_ms: i64,
    pub text: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.text.starts_with("200 OK")
    }
}

/// An image of this build (`VK_IMAGE_REPOSITORY`/`MOCK_PROVIDERS_IMAGE`, as `scripts/kind/e2e`
/// loads them).
pub fn image(which: &str) -> String {
    match which {
        "mock-providers" => std::env::var("MOCK_PROVIDERS_IMAGE")
            .unwrap_or_else(|_| "gpu-vk/mock-providers:dev".into()),
        _ => format!(
            "{}:{}",
            std::env::var("VK_IMAGE_REPOSITORY").unwrap_or_else(|_| "gpu-vk/vk".into()),
            std::env::var("VK_IMAGE_TAG").unwrap_or_else(|_| "dev".into())
        ),
    }
}

/// A ClusterIP Service `name` on port 8080 selecting `app: <name>`, to the port named `http`.
pub async fn service(w: &Vkw, name: &str) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}

/// Starts pod `<svc>-client`, which sends `count` requests (for ever without) to Service `svc`
/// on port 8080, one every 200 ms, each given 3 s.
pub async fn start_client(w: &Vkw, svc: &str, count: Option<u32>) -> String {
    let client = format!("{svc}-client");
    let repeat = count.map_or_else(|| "true".to_owned(), |n| format!("[ $i -lt {n} ]"));
    let script = format!(
        "i=0; while {repeat}; do i=$((i+1)); \
           r=$(timeout 3 bash -c 'exec 3<>/dev/tcp/{svc}/8080 && printf \"GET / HTTP/1.0\\r\\nhost: {svc}\\r\\n\\r\\n\" >&3 && cat <&3' 2>&1 | tail -n 1); \
           echo \"$(date +%s%3N) answer: ${{r:-none}}\"; sleep 0.2; done; sleep 3600"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": client},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": image("vk"),
            "imagePullPolicy": "Never", "command": ["bash", "-c", script]}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    client
}

/// The answers the client has logged so far.
pub async fn answers(w: &Vkw, client: &str) -> Vec<Answer> {
    let log = Api::<Pod>::namespaced(w.c(), &w.ns)
        .logs(client, &Default::default())
        .await
        .unwrap_or_default();
    log.lines()
        .filter_map(|l| {
            let (at, text) = l.split_once(" answer: ")?;
            Some(Answer {
                at_ms: at.parse().ok()?,
                text: text.to_owned(),
            })
        })
        .collect()
}

/// Failed requests, and the longest stretch from a failure to the next answer (ms).
pub fn failures(answers: &[Answer]) -> (usize, i64) {
    let failed = answers.iter().filter(|a| !a.ok()).count();
    let (mut longest, mut since) = (0, None);
    for a in answers {
        match (a.ok(), since) {
            (false, None) => since = Some(a.at_ms),
            (true, Some(s)) => {
                longest = longest.max(a.at_ms - s);
                since = None;
            }
            _ => {}
        }
    }
    if let (Some(s), Some(last)) = (since, answers.last()) {
        longest = longest.max(last.at_ms - s);
    }
    (failed, longest)
}

#[then(expr = "Service {string} answers from its replicas on the virtual node")]
async fn answered_from_virtual(w: &mut Vkw, svc: String) {
    let vnode = w.node();
    let mut ids = Vec::new();
    for p in
        w.replicas(&svc).await.iter().filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(vnode.as_str())
        })
    {
        let live = w.live_of(&uid(p)).await;
        ids.push(
            live.first()
                .and_then(|x| x["id"].as_str().map(str::to_owned))
                .expect("a live workload"),
        );
    }
    assert!(!ids.is_empty(), "no replica of {svc} on the virtual node");
    let client = format!("{svc}-client");
    wait_seeing(
        Duration::from_secs(30),
        "an answer from every offloaded replica",
        || async {
            let all = answers(w, &client).await;
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| !all.iter().any(|a| a.text.contains(id.as_str())))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "no answer yet from {missing:?} in {} answers",
                    all.len()
                ))
            }
        },
    )
    .await;
    let all = answers(w, &client).await;
    let (failed, longest) = failures(&all);
    println!(
        "    Service {svc}: {} requests so far, {failed} failed, longest gap {longest} ms",
        all.len()
    );
}

#[then(expr = "Service {string} answers from in-cluster replicas only")]
async fn answered_in_cluster(w: &mut Vkw, svc: String) {
    let names: Vec<String> = w
        .replicas(&svc)
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let client = format!("{svc}-client");
    // The last 20 answers (4 s) come from the replicas there now, none from a provider.
    let recent = wait_seeing(
        Duration::from_secs(30),
        "20 answers from in-cluster replicas",
        || async {
            let all = answers(w, &client).await;
            let recent: Vec<Answer> = all.iter().rev().take(20).cloned().collect();
            let good = recent.len() == 20
                && recent
                    .iter()
                    .all(|a| a.ok() && names.iter().any(|n| a.text.ends_with(n.as_str())));
            if good {
                Ok(all)
            } else {
                Err(format!(
                    "last answers {:?}",
                    recent.iter().map(|a| &a.text).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    let (failed, longest) = failures(&recent);
    println!(
        "    Service {svc}: {} requests over the scenario, {failed} failed, longest gap without an answer {longest} ms",
        recent.len()
    );
}

#[then(expr = "every request to Service {string} was answered")]
async fn every_request_answered(w: &mut Vkw, svc: String) {
    let all = answers(w, &format!("{svc}-client")).await;
    // Counted from the first answer: before it the replicas were still starting.
    let first = all.iter().position(Answer::ok).expect("an answer");
    let failed: Vec<(i64, &str)> = all[first..]
        .iter()
        .filter(|a| !a.ok())
        .map(|a| (a.at_ms, a.text.as_str()))
        .collect();
    if failed.is_empty() {
        return;
    }
    let context = around_failures(w, &all[first..]).await;
    panic!(
        "{} of {} requests to Service {svc} failed (time in ms, answer): {failed:?}\n{context}",
        failed.len(),
        all.len() - first
    );
}

/// What happened around each failed request: the answers just before and after it, and the
/// namespace's Events of the 10 s before and 3 s after (time, reason, object, note), so a
/// failure can be tied to the move that caused it.
async fn around_failures(w: &Vkw, answers: &[Answer]) -> String {
    use k8s_openapi::api::events::v1::Event;
    let events = Api::<Event>::namespaced(w.c(), &w.ns)
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let at_ms = |e: &Event| {
        e.event_time
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .or_else(|| {
                e.deprecated_last_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond())
            })
            .or_else(|| {
                e.deprecated_first_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond())
            })
            .or_else(|| {
                e.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond())
            })
            .unwrap_or_default()
    };
    let mut out = String::new();
    for (i, a) in answers.iter().enumerate().filter(|(_, a)| !a.ok()) {
        let near = &answers[i.saturating_sub(3)..(i + 4).min(answers.len())];
        out.push_str(&format!("around the failure at {}:\n", a.at_ms));
        for n in near {
            out.push_str(&format!(
                "  answer {:+} ms: {}\n",
                n.at_ms - a.at_ms,
                n.text
            ));
        }
        let mut seen: Vec<(i64, String)> = events
            .iter()
            .filter(|e| (-10_000..=3_000).contains(&(at_ms(e) - a.at_ms)))
            .map(|e| {
                let object = e.regarding.as_ref().and_then(|r| r.name.clone());
                (
                    at_ms(e) - a.at_ms,
                    format!(
                        "{} {} {}",
                        e.reason.as_deref().unwrap_or_default(),
                        object.unwrap_or_default(),
                        e.note.as_deref().unwrap_or_default()
                    ),
                )
            })
            .collect();
        seen.sort();
        for (dt, text) in seen {
            out.push_str(&format!("  event {dt:+} ms: {text}\n"));
        }
    }
    out
}
