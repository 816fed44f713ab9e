//! Which slices the Services of offloaded pods get, and what is in them.

use super::*;
use serde_json::json;

fn writer() -> Writer {
    Writer {
        node: "gpu-vk".into(),
        owner_tag: "0a1b2c3d".into(),
    }
}

fn pod(name: &str, published: Option<&str>, ready: bool) -> Pod {
    let mut ann = serde_json::Map::new();
    if let Some(p) = published {
        ann.insert(ANN_PUBLISHED.into(), json!(p));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"),
            "labels": {"app": "serve", "pod-template-hash": "abc"}, "annotations": ann},
        "spec": {"containers": [{"name": "model", "image": "m",
            "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap()
}

fn service(name: &str, ports: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}")},
        "spec": {"selector": {"app": "serve"}, "ports": ports}
    }))
    .unwrap()
}

#[test]
fn a_published_pod_gets_one_slice_per_service_at_its_public_ports() {
    let pods = [pod(
        "a",
        Some("8080=203.0.113.7:43210,9090=203.0.113.7:43211"),
        true,
    )];
    let svcs = [
        service(
            "web",
            json!([{"name": "http", "port": 80, "targetPort": "http"},
                              {"name": "m", "port": 9000, "targetPort": 9090}]),
        ),
        service("plain", json!([{"port": 8080}])),
    ];
    let (slices, unreachable) = desired(&svcs, &pods, &writer());
    assert!(unreachable.is_empty(), "{unreachable:?}");
    assert_eq!(slices.len(), 2);
    let web = slices
        .values()
        .find(|s| s.metadata.name.as_ref().unwrap().starts_with("web-gpuvk-"))
        .unwrap();
    assert_eq!(
        serde_json::to_value(web).unwrap()["ports"],
        json!([{"name": "http", "port": 43210, "protocol": "TCP"}, {"name": "m", "port": 43211, "protocol": "TCP"}])
    );
    let e = &web.endpoints.as_ref().unwrap()[0];
    assert_eq!(e.addresses, vec!["203.0.113.7"]);
    assert_eq!(web.address_type, "IPv4");
    assert_eq!(e.target_ref.as_ref().unwrap().name.as_deref(), Some("a"));
    assert_eq!(e.node_name.as_deref(), Some("gpu-vk"));
    let labels = web.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "web");
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        "gpu-vk.io"
    );
    assert_eq!(
        web.metadata.owner_references.as_ref().unwrap()[0].uid,
        "uid-web"
    );
    // An unnamed single port: the slice port's name is empty, as the Service's is.
    let plain = slices
        .values()
        .find(|s| s.metadata.name.as_ref().unwrap().starts_with("plain-"))
        .unwrap();
    let p = &plain.ports.as_ref().unwrap()[0];
    assert_eq!((p.name.as_deref(), p.port), (Some(""), Some(43210)));
}

#[test]
fn conditions_follow_readiness_and_deletion() {
    let svcs = [service(
        "web",
        json!([{"name": "http", "port": 80, "targetPort": 8080}]),
    )];
    let cond = |p: &Pod| {
        let (s, _) = desired(&svcs, std::slice::from_ref(p), &writer());
        s.values().next().unwrap().endpoints.as_ref().unwrap()[0]
            .conditions
            .clone()
            .unwrap()
    };
    let c = cond(&pod("a", Some("8080=198.18.0.9:40001"), true));
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), Some(true), Some(false))
    );
    let c = cond(&pod("a", Some("8080=198.18.0.9:40001"), false));
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(false), Some(false))
    );
    let mut going = pod("a", Some("8080=198.18.0.9:40001"), true);
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(1).unwrap(),
    ));
    let c = cond(&going);
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
}

#[test]
fn no_slice_without_a_match_a_publication_or_a_running_pod() {
    let svc = service(
        "web",
        json!([{"name": "http", "port": 80, "targetPort": 8080}]),
    );
    let w = writer();
    // Not published (the Service controller lists it by its pod IP), or published nothing usable.
    assert!(
        desired(std::slice::from_ref(&svc), &[pod("a", None, true)], &w)
            .0
            .is_empty()
    );
    assert!(
        desired(
            std::slice::from_ref(&svc),
            &[pod("a", Some("8080=127.0.0.1:4"), true)],
            &w
        )
        .0
        .is_empty()
    );
    // Another selector, another namespace, ExternalName, no selector.
    let mut other = svc.clone();
    other.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "other".into())]));
    let mut elsewhere = svc.clone();
    elsewhere.metadata.namespace = Some("dev".into());
    let mut external = svc.clone();
    external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    let mut unselective = svc.clone();
    unselective.spec.as_mut().unwrap().selector = None;
    let p = pod("a", Some("8080=198.18.0.9:40001"), true);
    for s in [other, elsewhere, external, unselective] {
        assert!(desired(&[s], std::slice::from_ref(&p), &w).0.is_empty());
    }
    // A pod that ended.
    let mut done = p.clone();
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert!(
        desired(std::slice::from_ref(&svc), &[done], &w)
            .0
            .is_empty()
    );
    assert_eq!(desired(&[svc], &[p], &w).0.len(), 1);
}

#[test]
fn a_service_port_the_provider_does_not_publish_is_reported() {
    let pods = [pod("a", Some("8080=198.18.0.9:40001"), true)];
    let svcs = [service(
        "web",
        json!([{"name": "http", "port": 80, "targetPort": 8080},
                                      {"name": "metrics", "port": 9090, "targetPort": "metrics"},
                                      {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 8080}]),
    )];
    let (slices, unreachable) = desired(&svcs, &pods, &writer());
    let ports = slices.values().next().unwrap().ports.clone().unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    let names: Vec<&str> = unreachable.iter().map(|u| u.port.as_str()).collect();
    assert_eq!(names, ["metrics", "dns"]);
    assert_eq!(
        (unreachable[0].pod.as_str(), unreachable[0].service.as_str()),
        ("a", "web")
    );
    // None published: no slice, every port reported.
    let svcs = [service(
        "m",
        json!([{"name": "metrics", "port": 9090, "targetPort": 9090}]),
    )];
    let (slices, unreachable) = desired(&svcs, &pods, &writer());
    assert!(slices.is_empty());
    assert_eq!(unreachable.len(), 1);
}

#[test]
fn names_are_stable_distinct_and_valid() {
    let svcs = [service(&"s".repeat(63), json!([{"port": 8080}]))];
    let pods = [
        pod("a", Some("8080=198.18.0.9:40001"), true),
        pod("b", Some("8080=198.18.0.10:40002"), true),
    ];
    let (one, _) = desired(&svcs, &pods, &writer());
    let (two, _) = desired(&svcs, &pods, &writer());
    assert_eq!(
        one.keys().collect::<Vec<_>>(),
        two.keys().collect::<Vec<_>>()
    );
    assert_eq!(one.len(), 2);
    for (_, name) in one.keys() {
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
    }
    // Comparing a slice read back: only what we set counts.
    let s = one.values().next().unwrap().clone();
    let mut back = s.clone();
    back.metadata.resource_version = Some("7".into());
    back.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("someone/else".into(), "x".into());
    assert_eq!(ours(&s), ours(&back));
    back.endpoints.as_mut().unwrap()[0].addresses = vec!["198.18.0.11".into()];
    assert_ne!(ours(&s), ours(&back));
}
