//! Unit tests of the admission rules in `decide` (namespaces, taint).

use super::*;
use crate::test_support::PodBuilder;
use k8s_openapi::api::core::v1::Toleration;

fn admission(namespaces: &[&str]) -> Admission {
    Admission {
        taint: Some(("virtual-kubelet.io/provider".into(), "vk-gpu".into())),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
    }
}

fn tolerating(t: Toleration) -> Pod {
    PodBuilder::new()
        .spec(|s| s.tolerations = Some(vec![t]))
        .build()
}

fn exists(key: Option<&str>, effect: Option<&str>) -> Toleration {
    Toleration {
        key: key.map(str::to_owned),
        operator: Some("Exists".into()),
        effect: effect.map(str::to_owned),
        ..Default::default()
    }
}

#[test]
fn a_pod_must_tolerate_the_nodes_taint() {
    let a = admission(&[]);
    let none = a.check(&PodBuilder::new().build()).unwrap_err();
    assert!(
        none.contains("virtual-kubelet.io/provider=vk-gpu"),
        "{none}"
    );
    let key = Some("virtual-kubelet.io/provider");
    assert_eq!(
        a.check(&tolerating(exists(key, Some("NoSchedule")))),
        Ok(())
    );
    assert_eq!(a.check(&tolerating(exists(key, None))), Ok(()));
    // An empty key with Exists tolerates every taint.
    assert_eq!(a.check(&tolerating(exists(None, None))), Ok(()));
    assert!(
        a.check(&tolerating(exists(key, Some("NoExecute"))))
            .is_err()
    );
    assert!(a.check(&tolerating(exists(Some("other"), None))).is_err());
    let equal = |value: &str| Toleration {
        key: key.map(str::to_owned),
        operator: Some("Equal".into()),
        value: Some(value.into()),
        ..Default::default()
    };
    assert_eq!(a.check(&tolerating(equal("vk-gpu"))), Ok(()));
    assert!(a.check(&tolerating(equal("other-node"))).is_err());
    // An untainted node asks for nothing.
    let untainted = Admission::default();
    assert_eq!(untainted.check(&PodBuilder::new().build()), Ok(()));
}

#[test]
fn only_allowed_namespaces_may_spend_provider_money() {
    let pod = tolerating(exists(Some("virtual-kubelet.io/provider"), None));
    assert_eq!(admission(&[]).check(&pod), Ok(()));
    assert_eq!(admission(&["prod", "research"]).check(&pod), Ok(()));
    let e = admission(&["prod"]).check(&pod).unwrap_err();
    assert!(
        e.contains("\"research\"") && e.contains("allowedNamespaces"),
        "{e}"
    );
}

#[test]
fn a_pod_not_allowed_fails_before_anything_is_created() {
    let owner = crate::test_support::owner();
    let timings = Timings::default();
    let a = admission(&["prod"]);
    let rules = Rules {
        owner: &owner,
        offers: &[],
        timings: &timings,
        admission: &a,
        secret_failover: false,
        standing: &[],
        dispatch: &crate::config::DispatchConfig::default(),
        start_deadlines: &[],
        hold_retry: Duration::from_secs(60),
    };
    let memory = Memory::fresh();
    let pod = PodBuilder::new().gpus("1").build();
    let step = decide(&rules, Some(&pod), None, &memory, Timestamp::now());
    assert!(
        matches!(
            &step,
            Step::Fail {
                reason: "NotAllowed",
                ..
            }
        ),
        "{step:?}"
    );
}

#[test]
fn a_udp_port_goes_only_to_a_provider_that_serves_udp_and_is_refused_where_none_may() {
    let owner = crate::test_support::owner();
    let timings = Timings::default();
    let a = Admission {
        taint: None,
        namespaces: Vec::new(),
    };
    let offer = |name: &str, udp: bool| crate::pods::dispatch::Offer {
        name: name.into(),
        capabilities: crate::provider::Capabilities {
            udp,
            max_gpus_per_workload: 8,
            ..Default::default()
        },
        secret_env: crate::config::SecretEnv::Allow,
        pull_secrets: crate::config::SecretEnv::Allow,
    };
    let offers = [offer("runpod", false), offer("hpc", true)];
    let dispatch = crate::config::DispatchConfig::default();
    macro_rules! rules {
        ($offers:expr) => {
            Rules {
                owner: &owner,
                offers: $offers,
                timings: &timings,
                admission: &a,
                secret_failover: false,
                standing: &[],
                dispatch: &dispatch,
                start_deadlines: &[],
                hold_retry: Duration::from_secs(60),
            }
        };
    }
    let with_port = |protocol: &str, pin: Option<&str>| {
        let mut b = PodBuilder::new().gpus("1");
        if let Some(p) = pin {
            b = b.annotation("gpu-vk.io/provider", p);
        }
        let mut pod = b.build();
        pod.spec.as_mut().unwrap().containers[0].ports = Some(vec![
            serde_json::from_value(
                serde_json::json!({"containerPort": 5353, "protocol": protocol}),
            )
            .unwrap(),
        ]);
        pod
    };
    // A provider that serves UDP may take it: no refusal, and dispatch offers only that one.
    assert_eq!(refusal(&rules!(&offers), &with_port("UDP", None)), None);
    let plan = plan(
        &rules!(&offers),
        &with_port("UDP", None),
        &spec::request(&with_port("UDP", None)).unwrap(),
    )
    .unwrap();
    assert_eq!(plan.providers(), [1], "only hpc serves UDP");
    // Pinned to one that does not, or none that does: refused, naming the port and provider.
    let only_runpod = [offer("runpod", false)];
    for r in [
        refusal(&rules!(&offers), &with_port("UDP", Some("runpod"))),
        refusal(&rules!(&only_runpod), &with_port("UDP", None)),
    ] {
        let (why, message) = r.expect("refused");
        assert_eq!(why, "InvalidSpec");
        assert!(
            message.contains("5353/UDP") && message.contains("provider runpod"),
            "{message}"
        );
    }
    // TCP (the default protocol) goes anywhere.
    assert_eq!(
        refusal(&rules!(&[offer("runpod", false)]), &with_port("TCP", None)),
        None
    );
}

#[test]
fn a_disk_above_every_providers_ceiling_is_refused_and_dispatch_skips_a_small_one() {
    let owner = crate::test_support::owner();
    let timings = Timings::default();
    let a = Admission {
        taint: None,
        namespaces: Vec::new(),
    };
    let offer = |name: &str, max: Option<u32>| crate::pods::dispatch::Offer {
        name: name.into(),
        capabilities: crate::provider::Capabilities {
            max_disk_gb: max,
            max_gpus_per_workload: 8,
            ..Default::default()
        },
        secret_env: crate::config::SecretEnv::Allow,
        pull_secrets: crate::config::SecretEnv::Allow,
    };
    let dispatch = crate::config::DispatchConfig::default();
    let rules = |offers| Rules {
        owner: &owner,
        offers,
        timings: &timings,
        admission: &a,
        secret_failover: false,
        standing: &[],
        dispatch: &dispatch,
        start_deadlines: &[],
        hold_retry: Duration::from_secs(60),
    };
    let asking = |storage: &str| {
        PodBuilder::new()
            .gpus("1")
            .limit("ephemeral-storage", storage)
            .build()
    };
    let both = [offer("runpod", Some(50)), offer("vast", Some(200))];
    // 100 GB: only vast allows it.
    let pod = asking("100G");
    assert_eq!(refusal(&rules(&both), &pod), None);
    let plan = plan(&rules(&both), &pod, &spec::request(&pod).unwrap()).unwrap();
    assert_eq!(plan.providers(), [1]);
    // 300 GB: nobody; refused before the pod exists, naming each ceiling.
    let (why, message) = refusal(&rules(&both), &asking("300G")).expect("refused");
    assert_eq!(why, "InvalidSpec");
    assert!(
        message.contains("300 GB")
            && message.contains("ephemeral-storage")
            && message.contains("runpod at most 50 GB")
            && message.contains("vast at most 200 GB"),
        "{message}"
    );
    // The annotation is read first; a provider without a ceiling takes anything.
    let annotated = PodBuilder::new()
        .gpus("1")
        .annotation("gpu-vk.io/disk-gb", "500")
        .build();
    let (_, message) = refusal(&rules(&both), &annotated).expect("refused");
    assert!(message.contains("gpu-vk.io/disk-gb"), "{message}");
    assert_eq!(refusal(&rules(&[offer("slurm", None)]), &annotated), None);
}

#[test]
fn a_cuda_floor_above_every_providers_hosts_is_refused_and_dispatch_skips_an_old_one() {
    let owner = crate::test_support::owner();
    let timings = Timings::default();
    let a = Admission {
        taint: None,
        namespaces: Vec::new(),
    };
    let offer = |name: &str, cuda: Option<&str>| crate::pods::dispatch::Offer {
        name: name.into(),
        capabilities: crate::provider::Capabilities {
            max_cuda: cuda.map(str::to_owned),
            max_gpus_per_workload: 8,
            ..Default::default()
        },
        secret_env: crate::config::SecretEnv::Allow,
        pull_secrets: crate::config::SecretEnv::Allow,
    };
    let dispatch = crate::config::DispatchConfig::default();
    let rules = |offers| Rules {
        owner: &owner,
        offers,
        timings: &timings,
        admission: &a,
        secret_failover: false,
        standing: &[],
        dispatch: &dispatch,
        start_deadlines: &[],
        hold_retry: Duration::from_secs(60),
    };
    let needing = |v: &str| {
        PodBuilder::new()
            .gpus("1")
            .annotation("gpu-vk.io/min-cuda", v)
            .build()
    };
    let both = [offer("old", Some("12.4")), offer("new", Some("12.10"))];
    // 12.8: 12.10 is newer than 12.8 (by number, not by text), 12.4 older.
    let pod = needing("12.8");
    let plan = plan(&rules(&both), &pod, &spec::request(&pod).unwrap()).unwrap();
    assert_eq!(plan.providers(), [1]);
    let (why, message) = refusal(&rules(&both), &needing("13.0")).expect("refused");
    assert_eq!(why, "InvalidSpec");
    assert!(
        message.contains("CUDA 13.0")
            && message.contains("old at most 12.4")
            && message.contains("new at most 12.10"),
        "{message}"
    );
    // A provider that declares nothing may run it.
    assert_eq!(
        refusal(&rules(&[offer("slurm", None)]), &needing("13.0")),
        None
    );
}
