//! Fuzzing the pod side: any pod a user (or a controller) can write, with every field the
//! virtual kubelet reads drawn from valid and invalid values, is refused with a reason or
//! becomes a workload (or a hold), and decide() answers: never a panic.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::pods::spec;

// Mostly valid values, so most pods get past the first check to the ones behind it.
fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[0-9]{1,4}(\\.[0-9]{1,3})?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?",
        1 => "[0-9]{1,3}e[0-9]{1,3}",
        1 => "-?[0-9]{1,25}",
        1 => ".{0,10}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z][a-z0-9-]{0,10}",
        1 => ".{0,24}",
        1 => "-{1,2}[a-z]{1,8}",
    ]
}

fn env_name() -> impl Strategy<Value = String> {
    prop_oneof![8 => "[A-Z_][A-Z0-9_]{0,8}", 1 => "SLURM_[A-Z_]{1,8}", 1 => ".{0,12}"]
}

fn container() -> impl Strategy<Value = Value> {
    (
        text(),
        text(),
        proptest::collection::vec(text(), 0..3),
        proptest::collection::vec((env_name(), text(), proptest::bool::weighted(0.2)), 0..3),
        proptest::collection::vec(
            (
                prop_oneof!["nvidia.com/gpu", "cpu", "memory", "x"],
                quantity(),
            ),
            0..4,
        ),
        proptest::collection::vec(any::<i32>(), 0..2),
        prop_oneof![Just(None), Just(Some("Always")), Just(Some("Never"))],
    )
        .prop_map(|(name, image, command, env, limits, ports, restart)| {
            let env: Vec<Value> = env
                .into_iter()
                .map(|(n, v, secret)| {
                    if secret {
                        json!({"name": n, "valueFrom": {"secretKeyRef": {"name": v, "key": "k"}}})
                    } else {
                        json!({"name": n, "value": v})
                    }
                })
                .collect();
            let limits: serde_json::Map<String, Value> = limits
                .into_iter()
                .map(|(k, q)| (k.to_owned(), json!(q)))
                .collect();
            let ports: Vec<Value> = ports
                .into_iter()
                .map(|p| json!({"containerPort": p}))
                .collect();
            let mut c = json!({"name": name, "image": image, "command": command, "env": env,
                "resources": {"limits": limits.clone(), "requests": limits}, "ports": ports});
            if let Some(r) = restart {
                c["restartPolicy"] = json!(r);
            }
            c
        })
}

fn annotations() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    let key = prop_oneof![
        3 => Just(ANN_PROVIDER.to_owned()),
        3 => Just(ANN_GPU_TYPE.to_owned()),
        2 => Just(spec::ANN_DISPATCH_POLICY.to_owned()),
        2 => Just(spec::ANN_START_DEADLINE.to_owned()),
        1 => Just(spec::ANN_OMIT_CONTAINERS.to_owned()),
        2 => Just("gpu-vk.io/bid-price".to_owned()),
        2 => Just("gpu-vk.io/interruptible".to_owned()),
        1 => "gpu-vk.io/[a-z.-]{0,12}",
    ];
    let value = prop_oneof![text(), quantity(), "[0-9]{1,25}", Just(String::new())];
    proptest::collection::btree_map(key, value, 0..3)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, json!(v))).collect())
}

fn pod() -> impl Strategy<Value = Value> {
    (
        annotations(),
        proptest::collection::vec(container(), 1..3),
        proptest::collection::vec(container(), 0..2),
        proptest::bool::weighted(0.1),
        prop_oneof![
            6 => Just(json!([])),
            1 => Just(json!([{"name": "d", "hostPath": {"path": "/"}}])),
            2 => Just(json!([{"name": "d", "emptyDir": {}}])),
            1 => Just(json!([{"name": "s", "secret": {"secretName": "x"}}])),
        ],
        prop_oneof![
            Just("Always"),
            Just("OnFailure"),
            Just("Never"),
            Just("Sometimes")
        ],
    )
        .prop_map(
            |(annotations, containers, inits, host_network, volumes, restart)| {
                json!({
                    "metadata": {"name": "p", "namespace": "ml", "uid": crate::test_support::UID,
                                 "annotations": annotations},
                    "spec": {"nodeName": "vk", "containers": containers, "initContainers": inits,
                             "hostNetwork": host_network, "volumes": volumes,
                             "restartPolicy": restart}
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::fuzz::cases()))]

    #[test]
    fn any_pod_is_refused_with_a_reason_or_translated(raw in pod()) {
        let Ok(p) = serde_json::from_value::<Pod>(raw) else {
            return Ok(());
        };
        match spec::request(&p) {
            Ok(req) => {
                let id = owner().workload_id(crate::test_support::UID).unwrap();
                let w = spec::workload(&p, &req, id, Vec::new(), &Default::default());
                prop_assert_eq!(w.pod_name, "p");
            }
            Err(e) => prop_assert!(!e.0.is_empty()),
        }
        with_rules(&[], |rules| {
            if let Some((reason, why)) = refusal(rules, &p) {
                assert!(!reason.is_empty() && !why.is_empty());
            }
            let _ = decide(rules, Some(&p), None, &fresh(), ts(NOW));
        });
    }
}
