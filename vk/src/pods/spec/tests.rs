//! Unit tests of the pod reading: refusals, annotations, resources and the workload built.

use super::*;
use crate::test_support::PodBuilder;
use k8s_openapi::api::core::v1::Volume;

fn pod_with(ann: &[(&str, &str)], gpus: Option<&str>) -> Pod {
    let mut b = PodBuilder::new()
        .container_name("main")
        .image("busybox")
        .limit("cpu", "1500m")
        .limit("memory", "2Gi");
    if let Some(g) = gpus {
        b = b.gpus(g);
    }
    for (k, v) in ann {
        b = b.annotation(k, v);
    }
    b.build()
}

#[test]
fn reads_gpus_resources_and_options() {
    let r = request(&pod_with(
        &[
            (ANN_PROVIDER, "runpod"),
            (ANN_GPU_TYPE, "A100-80GB"),
            ("gpu-vk.io/bid-price", "0.45"),
            ("other.io/x", "y"),
        ],
        Some("2"),
    ))
    .unwrap();
    assert_eq!(r.pinned_provider.as_deref(), Some("runpod"));
    assert_eq!(
        r.gpu,
        Some(GpuRequest {
            gpu_type: Some("A100-80GB".into()),
            count: 2
        })
    );
    assert_eq!(r.cpu_millis, Some(1500));
    assert_eq!(r.memory_bytes, Some(2 * 1024 * 1024 * 1024));
    assert_eq!(r.options.get("bid_price").map(String::as_str), Some("0.45"));
}

#[test]
fn rejects_bad_annotations_with_the_key_in_the_message() {
    for (ann, needle) in [
        (("gpu-vk.io/bid-price", "cheap"), "bid-price"),
        (("gpu-vk.io/interruptible", "yes"), "interruptible"),
        (
            ("gpu-vk.io/colour", "blue"),
            "unknown annotation gpu-vk.io/colour",
        ),
        ((ANN_PROVIDER, ""), "empty"),
        ((ANN_GPU_TYPE, "A 100"), "gpu-type"),
    ] {
        let err = request(&pod_with(&[ann], Some("1"))).unwrap_err();
        assert!(err.0.contains(needle), "{err}");
    }
    assert!(request(&pod_with(&[], Some("half"))).is_err());
}

#[test]
fn rejects_unsupported_fields() {
    let mut p = pod_with(&[], Some("1"));
    p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "data".into(),
        host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: "/data".into(),
            type_: None,
        }),
        ..Default::default()
    }]);
    assert!(request(&p).unwrap_err().0.contains("hostPath"));
    let mut p = pod_with(&[], Some("1"));
    p.spec.as_mut().unwrap().host_network = Some(true);
    assert!(request(&p).is_err());
    let mut p = pod_with(&[], Some("1"));
    let c2 = p.spec.as_ref().unwrap().containers[0].clone();
    p.spec.as_mut().unwrap().containers.push(c2);
    assert!(
        request(&p)
            .unwrap()
            .steps_only
            .unwrap()
            .contains("2 containers")
    );
    // A privileged second container is refused everywhere.
    let mut c3 = p.spec.as_ref().unwrap().containers[0].clone();
    c3.name = "root".into();
    c3.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
        privileged: Some(true),
        ..Default::default()
    });
    p.spec.as_mut().unwrap().containers.push(c3);
    assert!(request(&p).unwrap_err().0.contains("\"root\": privileged"));
}

#[test]
fn env_names_that_are_not_variable_names_are_refused() {
    // Kubernetes accepts any printable name; Vast would read this one as a docker option.
    for name in ["-v /:/host", "A=B", "1X", "my.var"] {
        let mut p = pod_with(&[], Some("1"));
        p.spec.as_mut().unwrap().containers[0].env =
            Some(vec![k8s_openapi::api::core::v1::EnvVar {
                name: name.into(),
                value: Some("x".into()),
                ..Default::default()
            }]);
        let err = request(&p).unwrap_err().0;
        assert!(
            err.contains("env name") && err.contains(&format!("{name:?}")),
            "{err}"
        );
    }
}

/// A pod whose main container runs `serve --port 8080` in image `img`, with `extra`
/// containers and `inits` init containers added as given.
fn multi(extra: &[Container], inits: &[Container], omit: Option<&str>) -> Pod {
    let ann: Vec<(&str, &str)> = omit.map(|o| (ANN_OMIT_CONTAINERS, o)).into_iter().collect();
    let mut p = pod_with(&ann, Some("1"));
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].image = Some("img".into());
    spec.containers[0].command = Some(vec!["serve".into()]);
    spec.containers[0].args = Some(vec!["--port".into(), "8080".into()]);
    spec.containers.extend(extra.iter().cloned());
    if !inits.is_empty() {
        spec.init_containers = Some(inits.to_vec());
    }
    p
}

fn container(name: &str, image: &str, command: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        command: (!command.is_empty()).then(|| command.iter().map(|c| (*c).to_owned()).collect()),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name, "exporter", &["export"])
    }
}

#[test]
fn a_sidecar_listed_in_omit_containers_is_left_out_and_the_main_container_runs() {
    let exporter = container("metrics", "exporter", &[]);
    let p = multi(
        std::slice::from_ref(&exporter),
        &[sidecar("logs")],
        Some("metrics, logs"),
    );
    request(&p).unwrap();
    assert_eq!(main_container(&p).unwrap().name, "main");
    assert_eq!(omitted(&p), ["metrics", "logs"]);
    // The main container need not be the first.
    let mut p = multi(&[], &[], Some("metrics"));
    p.spec.as_mut().unwrap().containers.insert(0, exporter);
    let w = workload(
        &p,
        &request(&p).unwrap(),
        crate::test_support::workload_id(),
        vec![],
        &BTreeMap::new(),
    );
    assert_eq!(
        (w.container_name.as_str(), w.image.as_str()),
        ("main", "img")
    );
    assert_eq!(w.command, ["serve"]);
    assert_eq!(w.args, ["--port", "8080"]);
}

#[test]
fn containers_a_provider_cannot_run_fail_naming_the_container_and_the_way_out() {
    let exporter = container("metrics", "exporter", &[]);
    // Refused by the one-container policy only: a provider running every container
    // (Slurm) may take these.
    let one_container: Vec<(Pod, Vec<&str>)> = vec![
        (
            multi(std::slice::from_ref(&exporter), &[], None),
            vec![
                "2 containers to run",
                r#""main", "metrics""#,
                ANN_OMIT_CONTAINERS,
            ],
        ),
        (
            multi(&[], &[sidecar("logs")], None),
            vec![r#"init container "logs" is a sidecar"#, ANN_OMIT_CONTAINERS],
        ),
        (
            multi(
                &[],
                &[container("fetch", "curl", &["curl", "-O", "x"])],
                None,
            ),
            vec![r#"init container "fetch" uses image "curl""#, r#""img""#],
        ),
        (
            multi(&[], &[container("fetch", "img", &[])], None),
            vec![r#"init container "fetch" has no command"#],
        ),
    ];
    for (p, needles) in one_container {
        let why = request(&p)
            .unwrap()
            .steps_only
            .expect("refused by the policy");
        for n in needles {
            assert!(why.contains(n), "{why:?} lacks {n:?}");
        }
    }
    // Refused everywhere.
    let cases: Vec<(Pod, Vec<&str>)> = vec![
        (
            multi(&[], &[], Some("nosuch")),
            vec![r#""nosuch""#, "not a container"],
        ),
        (
            multi(&[], &[], Some("main")),
            vec!["leaves out every container"],
        ),
        // A regular init container cannot be left out: the main command may need it.
        (
            multi(&[], &[container("fetch", "img", &["fetch"])], Some("fetch")),
            vec![r#""fetch", which is not a container or a sidecar"#],
        ),
    ];
    for (p, needles) in cases {
        let err = request(&p).unwrap_err().0;
        for n in needles {
            assert!(err.contains(n), "{err:?} lacks {n:?}");
        }
    }
    // With init containers the main command must be known.
    let mut p = multi(&[], &[container("fetch", "img", &["fetch"])], None);
    p.spec.as_mut().unwrap().containers[0].command = None;
    let err = request(&p).unwrap().steps_only.unwrap();
    assert!(err.contains(r#"container "main" has no command"#), "{err}");
    // An init container with an environment of its own.
    let mut init = container("fetch", "img", &["fetch"]);
    init.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: "TOKEN".into(),
        value: Some("x".into()),
        ..Default::default()
    }]);
    let err = request(&multi(&[], &[init], None))
        .unwrap()
        .steps_only
        .unwrap();
    assert!(
        err.contains(r#"init container "fetch" sets an environment of its own"#),
        "{err}"
    );
}

#[test]
fn init_containers_of_the_main_image_run_in_order_before_the_main_command() {
    let mut second = container("warm", "img", &["printf", "%s|%s\\n"]);
    second.args = Some(vec!["it's warm".into()]);
    second.working_dir = Some("/".into());
    let first = container("fetch", "img", &["echo", "fetched", "$HOME"]);
    let p = multi(&[], &[first, second], None);
    let w = workload(
        &p,
        &request(&p).unwrap(),
        crate::test_support::workload_id(),
        vec![],
        &BTreeMap::new(),
    );
    assert_eq!(w.command[..2], ["/bin/sh", "-c"]);
    assert!(w.args.is_empty());
    assert_eq!(
        w.command[2],
        "set -e\n# init container fetch\n'echo' 'fetched' '$HOME'\n# init container warm\n\
         (cd '/' && 'printf' '%s|%s\\n' 'it'\\''s warm')\nexec 'serve' '--port' '8080'\n"
    );
    // The script runs as a shell runs it: in order, words intact, nothing expanded.
    let script = w.command[2].replace("exec 'serve'", "exec 'echo' 'serve'");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "fetched $HOME\nit's warm|\nserve --port 8080\n"
    );
    // The first failure ends the workload with its exit code; the main command never runs.
    let failing = w.command[2].replace("'echo' 'fetched' '$HOME'", "exit 3");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &failing])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
}

#[test]
fn quantities() {
    assert_eq!(parse_cpu("250m").unwrap(), 250);
    assert_eq!(parse_cpu("2").unwrap(), 2000);
    assert_eq!(parse_cpu("0.5").unwrap(), 500);
    assert!(parse_cpu("lots").is_err());
    assert_eq!(parse_memory("512Mi").unwrap(), 512 * 1024 * 1024);
    assert_eq!(parse_memory("1G").unwrap(), 1_000_000_000);
    assert_eq!(parse_memory("1000").unwrap(), 1000);
    assert!(parse_memory("1Xi").is_err());
}

#[test]
fn the_chart_refuses_exactly_the_annotations_the_vk_owns_to_others() {
    let policy = include_str!("../../../../deploy/helm/gpu-vk/templates/annotation-policy.yaml");
    let line = policy
        .lines()
        .find(|l| l.contains("expression: \"['gpu-vk.io/"))
        .expect("the policy's list of owned annotations");
    let listed: Vec<&str> = line
        .split('\'')
        .filter(|s| s.starts_with("gpu-vk.io/"))
        .collect();
    assert_eq!(listed, VK_OWNED, "{line}");
}

#[test]
fn ephemeral_storage_sets_the_container_disk_unless_the_pod_names_one() {
    let with = |q: &str, ann: &[(&str, &str)]| {
        let mut b = PodBuilder::new()
            .container_name("main")
            .image("vllm")
            .gpus("1")
            .limit("ephemeral-storage", q);
        for (k, v) in ann {
            b = b.annotation(k, v);
        }
        request(&b.build())
    };
    let disk = |r: Result<Request, SpecError>| r.unwrap().options.get(EPHEMERAL_OPTION).cloned();
    // 30 GiB is 32.2 GB: rounded up to whole GB, as the providers count disk.
    assert_eq!(disk(with("30Gi", &[])).as_deref(), Some("33"));
    assert_eq!(disk(with("20G", &[])).as_deref(), Some("20"));
    assert_eq!(disk(with("1Ki", &[])).as_deref(), Some("1"));
    // Beside the pod's own disk annotation, which the adapters prefer.
    let both = with("30Gi", &[("gpu-vk.io/disk-gb", "50")]).unwrap();
    assert_eq!(
        (
            both.options.get("disk_gb").map(String::as_str),
            both.options.get(EPHEMERAL_OPTION).map(String::as_str)
        ),
        (Some("50"), Some("33"))
    );
    let forged = request(
        &PodBuilder::new()
            .container_name("main")
            .image("vllm")
            .gpus("1")
            .annotation("gpu-vk.io/ephemeral-storage-gb", "900")
            .build(),
    );
    assert!(forged.is_err(), "not an annotation a pod can write");
    let err = with("lots", &[]).unwrap_err().0;
    assert!(err.contains("ephemeral-storage \"lots\""), "{err}");
    // None asked: the provider's default.
    let none = request(
        &PodBuilder::new()
            .container_name("main")
            .image("vllm")
            .gpus("1")
            .build(),
    );
    assert_eq!(none.unwrap().options.get(EPHEMERAL_OPTION), None);
}

#[test]
fn a_cuda_floor_is_a_major_and_minor_version() {
    let with = |v: &str| {
        request(
            &PodBuilder::new()
                .container_name("main")
                .image("vllm")
                .gpus("1")
                .annotation("gpu-vk.io/min-cuda", v)
                .build(),
        )
    };
    assert_eq!(
        with("12.8")
            .unwrap()
            .options
            .get("min_cuda")
            .map(String::as_str),
        Some("12.8")
    );
    for bad in ["12", "12.", ".8", "twelve.8", "12.8.1", "12,8"] {
        let err = with(bad).unwrap_err().0;
        assert!(err.contains("gpu-vk.io/min-cuda"), "{bad}: {err}");
    }
}

#[test]
fn private_ports_are_declared_but_not_published() {
    let mut p = pod_with(&[("gpu-vk.io/private-ports", "9090, 9100")], Some("1"));
    p.spec.as_mut().unwrap().containers[0].ports = Some(
        [8000, 9090, 9100]
            .into_iter()
            .map(|port| k8s_openapi::api::core::v1::ContainerPort {
                container_port: port,
                ..Default::default()
            })
            .collect(),
    );
    let w = workload(
        &p,
        &request(&p).unwrap(),
        crate::test_support::workload_id(),
        vec![],
        &BTreeMap::new(),
    );
    assert_eq!(w.ports, [8000]);
    let bad = pod_with(&[("gpu-vk.io/private-ports", "9090,http")], Some("1"));
    assert!(request(&bad).unwrap_err().0.contains("private-ports"));
}

#[test]
fn required_node_affinity_on_the_cuda_driver_is_a_floor() {
    let with_affinity = |terms: serde_json::Value, ann: Option<&str>| {
        let mut p = pod_with(
            &ann.map(|a| vec![("gpu-vk.io/min-cuda", a)])
                .unwrap_or_default(),
            Some("1"),
        );
        p.spec.as_mut().unwrap().affinity = Some(
            serde_json::from_value(serde_json::json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}))
            .unwrap(),
        );
        request(&p).unwrap().min_cuda()
    };
    let key = crate::vocab::CUDA_DRIVER_MAJOR;
    let gt = |n: &str| serde_json::json!({"key": key, "operator": "Gt", "values": [n]});
    let within = |ns: &[&str]| serde_json::json!({"key": key, "operator": "In", "values": ns});
    // Gt 11: at least 12.0; In [12, 13]: at least 12.0.
    assert_eq!(
        with_affinity(serde_json::json!([{"matchExpressions": [gt("11")]}]), None),
        Some((12, 0))
    );
    assert_eq!(
        with_affinity(
            serde_json::json!([{"matchExpressions": [within(&["13", "12"])]}]),
            None
        ),
        Some((12, 0))
    );
    // Alternatives: the lowest; a term without the key: no floor.
    assert_eq!(
        with_affinity(
            serde_json::json!([{"matchExpressions": [gt("12")]}, {"matchExpressions": [gt("11")]}]),
            None
        ),
        Some((12, 0))
    );
    assert_eq!(
        with_affinity(
            serde_json::json!([{"matchExpressions": [gt("12")]}, {"matchExpressions": []}]),
            None
        ),
        None
    );
    // The annotation's floor, when higher, stands; a lower one is raised.
    assert_eq!(
        with_affinity(
            serde_json::json!([{"matchExpressions": [gt("11")]}]),
            Some("12.8")
        ),
        Some((12, 8))
    );
    assert_eq!(
        with_affinity(
            serde_json::json!([{"matchExpressions": [gt("12")]}]),
            Some("12.8")
        ),
        Some((13, 0))
    );
}
