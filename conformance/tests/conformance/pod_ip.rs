//! Steps of `pod_ip.feature`: a Running pod's IP is the address its provider lists for the
//! workload (or the provider's fallback, with a condition and an Event saying why), and a
//! Service's EndpointSlice lists the pods by it.

use std::net::IpAddr;
use std::time::Duration;

use conformance::harness::{events_for, gpu_pod, phase, uid, wait_for, wait_seeing};
use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::{Vkw, target};

const WAIT: Duration = Duration::from_secs(60);
const ROUTABLE: &str = "gpu-vk.io/PodIPRoutable";

/// A GPU pod publishing TCP `port` (RunPod gives a pod a public IP only with a `tcp` port),
/// labelled `ips: <group>`.
fn publishing(w: &Vkw, name: &str, port: i32, group: &str) -> Pod {
    let mut p = gpu_pod(name, &w.node(), 1, &[]);
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("ips".into(), group.into());
    p.spec.as_mut().unwrap().containers[0].ports = Some(vec![
        serde_json::from_value(json!({"containerPort": port, "protocol": "TCP"})).unwrap(),
    ]);
    p
}

#[when(
    expr = "I create GPU pods {string} and {string} publishing port {int}, selected by a Service {string}"
)]
async fn create_with_service(w: &mut Vkw, a: String, b: String, port: i32, svc: String) {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": svc},
        "spec": {"selector": {"ips": svc}, "ports": [{"port": port, "targetPort": port}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    for name in [&a, &b] {
        let p = publishing(w, name, port, &svc);
        w.create_pod(p).await;
    }
}

#[when(expr = "I create a GPU pod {string} publishing port {int}")]
async fn create_one(w: &mut Vkw, name: String, port: i32) {
    let p = publishing(w, &name, port, &name);
    w.create_pod(p).await;
}

/// The node's InternalIP, the pods' hostIP.
async fn node_ip(w: &Vkw) -> String {
    let node = Api::<Node>::all(w.c()).get(&w.node()).await.unwrap();
    node.status
        .and_then(|s| s.addresses)
        .into_iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
        .expect("the node has an InternalIP")
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.pod_ip.clone())
}

#[then(
    expr = "pods {string} and {string} are Running with the pod IPs their provider lists for their workloads"
)]
async fn provider_ips(w: &mut Vkw, a: String, b: String) {
    let host = node_ip(w).await;
    for name in [&a, &b] {
        // Running, with the address the provider lists for the pod's workload.
        let what = format!("pod {name} Running with its workload's address");
        let (p, listed) = wait_seeing(WAIT, &what, || async {
            let p = w.get(name).await.ok_or("no pod")?;
            let live = w.live_of(&uid(&p)).await;
            let listed = live
                .first()
                .and_then(|x| x["address"].as_str().map(str::to_owned));
            match listed {
                Some(l) if phase(&p) == "Running" && pod_ip(&p).as_deref() == Some(l.as_str()) => {
                    Ok((p, l))
                }
                l => Err(format!(
                    "phase {}, podIP {:?}, workload address {l:?}",
                    phase(&p),
                    pod_ip(&p)
                )),
            }
        })
        .await;
        let ip: IpAddr = listed
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {listed:?}: {e}"));
        assert!(
            !ip.is_loopback() && !ip.is_unspecified() && listed != host,
            "pod {name}: pod IP {ip} is loopback, unspecified or the node's address {host}"
        );
        if let IpAddr::V4(v4) = ip {
            assert!(!v4.is_link_local(), "pod {name}: pod IP {ip} is link-local");
        }
        let st = p.status.clone().unwrap();
        let ips: Vec<String> = st
            .pod_ips
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.ip)
            .collect();
        assert_eq!(ips, vec![listed.clone()], "pod {name}: podIPs");
        assert_eq!(
            st.host_ip.as_deref(),
            Some(host.as_str()),
            "pod {name}: hostIP"
        );
        let routable = st
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == ROUTABLE);
        assert_eq!(
            routable.map(|c| c.status),
            Some("True".to_owned()),
            "pod {name}: condition {ROUTABLE}"
        );
    }
}

#[then(
    expr = "pods {string} and {string} have different pod IPs where the provider gives each workload its own"
)]
async fn distinct(w: &mut Vkw, a: String, b: String) {
    // RunPod and Vast emulators (and the remote cluster, on RunPod) give each workload an
    // address of its own where the test range is routed here; a Slurm job has its node's.
    let own = matches!(target().as_str(), "runpod" | "vast" | "kubernetes")
        && mock_providers::serve::range_is_local();
    let (pa, pb) = (w.get(&a).await.unwrap(), w.get(&b).await.unwrap());
    if own {
        assert_ne!(pod_ip(&pa), pod_ip(&pb), "pods {a} and {b} share a pod IP");
    }
}

#[then(expr = "the EndpointSlice of Service {string} lists the pod IPs of {string} and {string}")]
async fn endpoint_slice(w: &mut Vkw, svc: String, a: String, b: String) {
    let mut want = Vec::new();
    for name in [&a, &b] {
        want.push(pod_ip(&w.get(name).await.unwrap()).expect("a pod IP"));
    }
    want.sort();
    want.dedup();
    let api = Api::<EndpointSlice>::namespaced(w.c(), &w.ns);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
    wait_seeing(
        WAIT,
        &format!("EndpointSlice of {svc} listing {want:?}"),
        || async {
            let slices = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
            let mut ready: Vec<String> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses.clone())
                .collect();
            ready.sort();
            ready.dedup();
            if ready == want {
                Ok(())
            } else {
                Err(format!("ready endpoints {ready:?}"))
            }
        },
    )
    .await;
}

#[given(expr = "the provider under test has the podIpFallback {string}")]
async fn fallback(w: &mut Vkw, ip: String) {
    let c = w.c();
    if let Some(mut vk) = w.vk.take() {
        vk.cleanup(&c).await;
    }
    let providers = w.obs().provider_yaml(&target()) + &format!("  podIpFallback: {ip}\n");
    w.start_vk_with(providers).await;
}

#[given(expr = "the provider lists {string} as every workload's address")]
async fn listed(w: &mut Vkw, value: String) {
    let e = w
        .obs()
        .emulator()
        .expect("an emulator sets the addresses it lists");
    e.admin_post("/addresses", json!({"listed": value})).await;
}

#[then(expr = "pod {string} is Running with pod IP {string}, not routable: {string}")]
async fn fallback_ip(w: &mut Vkw, name: String, ip: String, reason: String) {
    let what = format!("pod {name} Running with pod IP {ip}, {ROUTABLE} False");
    wait_seeing(WAIT, &what, || async {
        let p = w.get(&name).await.ok_or("no pod")?;
        let cond = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == ROUTABLE).cloned());
        let seen = format!(
            "phase {}, podIP {:?}, condition {cond:?}",
            phase(&p),
            pod_ip(&p)
        );
        let ok = phase(&p) == "Running"
            && pod_ip(&p).as_deref() == Some(ip.as_str())
            && cond.is_some_and(|c| {
                c.status == "False" && c.reason.as_deref() == Some(reason.as_str())
            });
        if ok { Ok(()) } else { Err(seen) }
    })
    .await;
}

#[then(expr = "pod {string} has {word} {string} event naming {string}")]
async fn refused_event(w: &mut Vkw, name: String, count: String, reason: String, value: String) {
    let (c, ns) = (w.c(), w.ns.clone());
    let matching = || async {
        events_for(&c, &ns, &name)
            .await
            .into_iter()
            .filter(|(r, _)| *r == reason)
            .collect::<Vec<_>>()
    };
    match count.as_str() {
        "one" => {
            let events = wait_for(
                Duration::from_secs(20),
                &format!("event {reason} on {name}"),
                || async {
                    let e = matching().await;
                    (!e.is_empty()).then_some(e)
                },
            )
            .await;
            let provider = target();
            assert!(
                events
                    .iter()
                    .all(|(_, m)| m.contains(&format!("{value:?}")) && m.contains(&provider)),
                "{reason} events name neither the provider {provider} nor {value:?}: {events:?}"
            );
            // Seen once, told once: the status writes that follow do not repeat it.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(
                matching().await.len(),
                1,
                "{reason} on {name} more than once"
            );
        }
        "no" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let e = matching().await;
            assert!(e.is_empty(), "unexpected {reason} events on {name}: {e:?}");
        }
        other => panic!("{other:?}: one or no"),
    }
}
