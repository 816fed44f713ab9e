//! Steps of `pod_ip.feature`: a Running pod is reached where its provider serves it (its pod
//! IP, or the published ports of a provider that maps them elsewhere), or gets the provider's
//! fallback with a condition and an Event saying why; its Service's EndpointSlices list it
//! there, and answer there.

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

/// How long a step waits for what takes a fast run up to a minute (longer on the realistic
/// profile: [`conformance::harness::lab::patience`]).
fn wait() -> Duration {
    conformance::harness::lab::patience(Duration::from_secs(60))
}
const ROUTABLE: &str = "gpu-vk.io/PodIPRoutable";
/// Where the VK says a pod's ports are published (docs/providers.md, "Pod IPs"):
/// `8080=198.18.0.7:43210,...`.
const PUBLISHED: &str = "gpu-vk.io/published-ports";

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

/// Targets whose provider publishes container ports at other port numbers (RunPod's public
/// ports, Vast's port mappings; the kubernetes target's remote cluster runs its pods on the
/// RunPod emulator): their pods have no IP and the published ports in an annotation.
fn publishes_elsewhere() -> bool {
    matches!(target().as_str(), "runpod" | "vast" | "kubernetes")
}

/// Where a pod is reached on container port `port`: its pod IP and that port, or the published
/// address and port of its annotation.
fn reached_at(p: &Pod, port: u16) -> Option<(String, u16)> {
    if let Some(ip) = pod_ip(p) {
        return Some((ip, port));
    }
    let text = p.metadata.annotations.as_ref()?.get(PUBLISHED)?;
    text.split(',').find_map(|entry| {
        let (container, at) = entry.split_once('=')?;
        let at: std::net::SocketAddr = at.parse().ok()?;
        (container.parse() == Ok(port)).then(|| (at.ip().to_string(), at.port()))
    })
}

#[then(
    expr = "pods {string} and {string} are Running with the addresses their provider gives their workloads"
)]
async fn provider_ips(w: &mut Vkw, a: String, b: String) {
    let host = node_ip(w).await;
    let elsewhere = publishes_elsewhere();
    for name in [&a, &b] {
        // Running, reached where the provider says the pod's workload is.
        let what = format!("pod {name} Running where its workload is published");
        let (p, at) = wait_seeing(wait(), &what, || async {
            let p = w.get(name).await.ok_or("no pod")?;
            let live = w.live_of(&uid(&p)).await;
            let listed = live
                .first()
                .and_then(|x| x["address"].as_str().map(str::to_owned));
            let at = reached_at(&p, 8080);
            let seen = format!(
                "phase {}, podIP {:?}, published {:?}, workload address {listed:?}",
                phase(&p),
                pod_ip(&p),
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PUBLISHED)),
            );
            match (&at, elsewhere) {
                _ if phase(&p) != "Running" => Err(seen),
                // Another port of the workload's address (on the kubernetes target, of the
                // remote pod's own published address, which lists no pod IP).
                (Some((h, port)), true)
                    if pod_ip(&p).is_none()
                        && *port != 8080
                        && (listed.as_deref() == Some(h.as_str()) || target() == "kubernetes") =>
                {
                    Ok((p, at.unwrap()))
                }
                (Some((h, 8080)), false) if listed.as_deref() == Some(h.as_str()) => {
                    Ok((p, at.unwrap()))
                }
                _ => Err(seen),
            }
        })
        .await;
        let ip: IpAddr =
            at.0.parse()
                .unwrap_or_else(|e| panic!("{name}: {at:?}: {e}"));
        assert!(
            !ip.is_loopback() && !ip.is_unspecified() && at.0 != host,
            "pod {name}: reached at {ip}, loopback, unspecified or the node's address {host}"
        );
        if let IpAddr::V4(v4) = ip {
            assert!(
                !v4.is_link_local(),
                "pod {name}: reached at {ip}, link-local"
            );
        }
        let st = p.status.clone().unwrap();
        let ips: Vec<String> = st
            .pod_ips
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.ip)
            .collect();
        let want: Vec<String> = if elsewhere {
            vec![]
        } else {
            vec![at.0.clone()]
        };
        assert_eq!(ips, want, "pod {name}: podIPs");
        assert_eq!(
            st.host_ip.as_deref(),
            Some(host.as_str()),
            "pod {name}: hostIP"
        );
        let routable = st
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == ROUTABLE)
            .map(|c| {
                (
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default(),
                )
            });
        let (status, reason, message) = routable.unwrap_or_default();
        if elsewhere {
            assert_eq!(
                (status.as_str(), reason.as_str()),
                ("False", "PortsPublishedElsewhere"),
                "pod {name}: condition {ROUTABLE}: {message}"
            );
            let said = format!("8080 at {}:{}", at.0, at.1);
            assert!(
                message.contains(&said),
                "pod {name}: {ROUTABLE} does not say {said:?}: {message}"
            );
        } else {
            assert_eq!(
                status, "True",
                "pod {name}: condition {ROUTABLE}: {message}"
            );
        }
    }
}

#[then(expr = "pods {string} and {string} have different addresses")]
async fn distinct(w: &mut Vkw, a: String, b: String) {
    // RunPod and Vast emulators (and the remote cluster, on RunPod) give each workload an
    // address of its own where the test range is routed here (the scenario's gates).
    let (pa, pb) = (w.get(&a).await.unwrap(), w.get(&b).await.unwrap());
    let (at_a, at_b) = (reached_at(&pa, 8080), reached_at(&pb, 8080));
    assert!(
        at_a.is_some() && at_b.is_some(),
        "{a} at {at_a:?}, {b} at {at_b:?}"
    );
    assert_ne!(
        at_a.map(|x| x.0),
        at_b.map(|x| x.0),
        "pods {a} and {b} share an address"
    );
}

/// Where pods `names` are reached on port 8080, as (pod, address, port), sorted: what their
/// Service's EndpointSlices should list.
pub(crate) async fn reached(w: &Vkw, names: &[&str]) -> Vec<(String, String, u16)> {
    let mut want = Vec::new();
    for name in names {
        let p = w.get(name).await.unwrap();
        let (host, port) = reached_at(&p, 8080).expect("an address");
        want.push((name.to_string(), host, port));
    }
    want.sort();
    want
}

/// Every ready endpoint of Service `svc`'s EndpointSlices, as (pod, address, port of the
/// Service's only port), sorted.
pub(crate) async fn ready_endpoints(w: &Vkw, svc: &str) -> Vec<(String, String, u16)> {
    let api = Api::<EndpointSlice>::namespaced(w.c(), &w.ns);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
    let slices = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
    let mut ready: Vec<(String, String, u16)> = Vec::new();
    for s in &slices {
        let port = s.ports.iter().flatten().find_map(|p| p.port).unwrap_or(0) as u16;
        for e in s.endpoints.iter().flatten() {
            if e.conditions.as_ref().and_then(|c| c.ready) != Some(true) {
                continue;
            }
            let pod = e
                .target_ref
                .as_ref()
                .and_then(|t| t.name.clone())
                .unwrap_or_default();
            for addr in &e.addresses {
                ready.push((pod.clone(), addr.clone(), port));
            }
        }
    }
    ready.sort();
    ready
}

#[then(
    expr = "the EndpointSlices of Service {string} list {string} and {string} where they are reached"
)]
async fn endpoint_slice(w: &mut Vkw, svc: String, a: String, b: String) {
    let want = reached(w, &[&a, &b]).await;
    wait_seeing(
        wait(),
        &format!("EndpointSlices of {svc} listing {want:?}"),
        || async {
            // Every ready endpoint, with the port of the Service's only port: none where nothing
            // answers (a pod IP with the container port of a pod published elsewhere).
            let ready = ready_endpoints(w, &svc).await;
            if ready == want {
                Ok(())
            } else {
                Err(format!("ready endpoints {ready:?}"))
            }
        },
    )
    .await;
}

#[then(expr = "Service {string} answers from {string} and {string}")]
async fn service_answers(w: &mut Vkw, svc: String, a: String, b: String) {
    // Only targets whose workloads serve their ports run this step (the scenario's gate): none
    // of the Slurm emulator or the real Slurms listens on a job's port.
    assert!(
        publishes_elsewhere(),
        "{} has \"serving its workloads' ports\" in conformance/plan.toml but publishes nothing",
        target()
    );
    let mut ids = Vec::new();
    for name in [&a, &b] {
        let p = w.get(name).await.unwrap();
        let (host, port) = reached_at(&p, 8080).expect("an address");
        // What kube-proxy does for the Service: connect to the endpoint.
        let answer = http_get(&host, port).await;
        assert!(
            answer.starts_with("200 OK"),
            "{name} at {host}:{port} answered {answer:?}"
        );
        if target() != "kubernetes" {
            let id = w
                .live_of(&uid(&p))
                .await
                .first()
                .and_then(|x| x["id"].as_str().map(str::to_owned));
            let id = id.expect("a live workload");
            assert!(
                answer.contains(&id),
                "{name} at {host}:{port}: {answer:?} is not workload {id}'s"
            );
            ids.push(id);
        }
    }
    if conformance::harness::pod::pod_mode() {
        through_cluster_ip(w, &svc, &ids).await;
    }
}

/// One HTTP GET to `host:port`; the response's body.
async fn http_get(host: &str, port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let go = async {
        let mut c = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        c.write_all(b"GET / HTTP/1.0\r\nhost: x\r\n\r\n")
            .await
            .ok()?;
        let mut s = String::new();
        c.read_to_string(&mut s).await.ok()?;
        s.split("\r\n\r\n").nth(1).map(str::to_owned)
    };
    tokio::time::timeout(Duration::from_secs(5), go)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// On kind: a pod on a worker asks the Service by name (CoreDNS, then kube-proxy's rules for
/// the ClusterIP) 60 times; each of `ids` answers, and from the first answer on every request is
/// answered (kube-proxy programs the rules a moment after the slices change).
async fn through_cluster_ip(w: &mut Vkw, svc: &str, ids: &[String]) {
    let client = super::traffic::start_client(w, svc, Some(60)).await;
    let answers = wait_seeing(
        Duration::from_secs(150),
        "60 requests through the Service",
        || async {
            let a = super::traffic::answers(w, &client).await;
            if a.len() >= 60 {
                Ok(a)
            } else {
                Err(format!("{} answers so far", a.len()))
            }
        },
    )
    .await;
    let first = answers.iter().position(|a| a.ok());
    let texts: Vec<&String> = answers.iter().map(|a| &a.text).collect();
    assert!(
        first.is_some_and(|i| i < 15),
        "Service {svc} did not answer within 15 requests: {texts:?}"
    );
    let failed: Vec<&String> = answers
        .iter()
        .skip(first.unwrap_or(0))
        .filter(|a| !a.ok())
        .map(|a| &a.text)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests through Service {svc} failed: {failed:?}",
        failed.len(),
        answers.len()
    );
    for id in ids {
        assert!(
            texts.iter().any(|a| a.contains(id.as_str())),
            "workload {id} never answered through Service {svc}"
        );
    }
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
    let value = address_named(w, &value).await;
    let e = w
        .obs()
        .emulator()
        .expect("an emulator sets the addresses it lists");
    e.admin_post("/addresses", json!({"listed": value})).await;
}

/// An address as a scenario names it: a literal, or "the API server's Service address" (the
/// `kubernetes` Service's ClusterIP, inside the cluster's Service range, which differs between
/// the local testbed and kind).
async fn address_named(w: &Vkw, value: &str) -> String {
    if value != "the API server's Service address" {
        return value.to_owned();
    }
    api_server_service_ip(w).await
}

/// The `kubernetes` Service's ClusterIP: inside the cluster's Service range.
pub(crate) async fn api_server_service_ip(w: &Vkw) -> String {
    Api::<Service>::namespaced(w.c(), "default")
        .get("kubernetes")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("the kubernetes Service has a ClusterIP")
}

#[then(expr = "pod {string} is Running with pod IP {string}, not routable: {string}")]
async fn fallback_ip(w: &mut Vkw, name: String, ip: String, reason: String) {
    let what = format!("pod {name} Running with pod IP {ip}, {ROUTABLE} False");
    wait_seeing(wait(), &what, || async {
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
    let value = address_named(w, &value).await;
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
