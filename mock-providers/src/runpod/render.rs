//! The v2 `Pod` object as `GET /v2/pods` renders it: status, actions, published ports and the
//! runtime's utilisation.

use super::*;

pub(super) fn ceil_percent(part: f64, whole: f64) -> u64 {
    if whole <= 0.0 || part <= 0.0 {
        return 0;
    }
    ((part * 100.0 / whole).ceil() as u64).min(100)
}

/// `runtime.ports` of a running pod: each `N/tcp` port published at a public port of the
/// emulator's host, where a real listener answers (see [`crate::serve`]); `http` ports go
/// through RunPod's proxy and have no direct mapping, so they are listed without one.
pub(super) fn published_ports(engine: &Engine, w: &Workload, ports: &[String]) -> Vec<Value> {
    let parse = |p: &String, kind: &str| {
        let (n, k) = p.split_once('/')?;
        (k == kind).then(|| n.parse::<u16>().ok()).flatten()
    };
    let tcp: Vec<u16> = ports.iter().filter_map(|p| parse(p, "tcp")).collect();
    let host = crate::serve::workload_address(w.seq);
    let ip = engine.served.listed_address(&host);
    let mut out: Vec<Value> = engine
        .served
        .open(&w.id, &host, &tcp)
        .into_iter()
        .map(|(private, public)| json!({"private": private, "public": public, "type": "tcp", "ip": ip}))
        .collect();
    out.extend(
        ports
            .iter()
            .filter_map(|p| parse(p, "http"))
            .map(|private| json!({"private": private, "public": null, "type": "http", "ip": null})),
    );
    out
}

/// The v2 `Pod` object.
pub(super) fn render_pod(engine: &Engine, w: &mut Workload, now: Instant) -> Value {
    let phase = engine.observe(w, now);
    let usage = engine.usage(w, phase, now);
    let extra = match &w.extra {
        Extra::RunPod(e) => (**e).clone(),
        _ => PodExtra::defaults(w.gpu_count),
    };
    let actions: Vec<&str> = allowed_actions(phase).iter().map(|a| a.as_str()).collect();
    let cost = if phase.is_active() {
        ((w.price_per_gpu_hour * f64::from(w.gpu_count)) * 10_000.0).round() / 10_000.0
    } else {
        0.0
    };
    let runtime = if phase == Phase::Running {
        let uptime = w
            .running_since
            .map(|t| jiff::Timestamp::now().duration_since(t).as_secs().max(0))
            .unwrap_or(0);
        json!({
            "uptime": uptime,
            "gpus": (0..w.gpu_count).map(|_| json!({"util": 0, "memoryUtil": 0})).collect::<Vec<_>>(),
            "cpu": {"util": ceil_percent(usage.cpu_millis as f64, extra.vcpu_count as f64 * 1000.0)},
            "memory": {"util": ceil_percent(usage.memory_bytes as f64, extra.memory_gb as f64 * 1024.0 * 1024.0 * 1024.0)},
            "ports": published_ports(engine, w, &extra.ports),
        })
    } else {
        engine.served.close(&w.id);
        Value::Null
    };
    // `startedAt` stays at the pod's start while RunPod restarts its container in place;
    // `runtime.uptime` ("seconds since the container started") falls back to zero.
    let started_at = if phase == Phase::Running {
        w.pod_started.or(w.running_since).map(crate::util::rfc3339)
    } else {
        None
    };
    let (gpu, cpu) = match &extra.cpu_flavor {
        Some(flavor) => (
            Value::Null,
            json!({"id": flavor, "vcpuCount": extra.vcpu_count, "memory": extra.memory_gb}),
        ),
        None => (
            // v2 `GpuConfig` is `{id, count}`: the vCPUs and RAM a GPU pod got are not
            // reported ("omitted from GPU pods", `Pod.cpu`), only their utilisation.
            json!({"id": w.gpu_type, "count": w.gpu_count}),
            Value::Null,
        ),
    };
    let mut pod = json!({
        "id": w.id,
        "name": w.name,
        "status": status_name(phase),
        "actions": actions,
        "image": w.image,
        "args": extra.args,
        "disk": extra.disk,
        "mounts": extra.mounts,
        "ports": extra.ports,
        "env": w.env,
        "registry": extra.registry,
        "cloud": extra.cloud,
        "dataCenterId": extra.data_center_id,
        "cudaVersion": CUDA_VERSION,
        "ssh": {
            "proxy": {
                "host": "ssh.emulator.invalid",
                "port": 22,
                "username": format!("{}-emulator", w.id),
                "command": format!("ssh {}-emulator@ssh.emulator.invalid", w.id),
            },
            "direct": Value::Null,
        },
        "template": Value::Null,
        "cost": cost,
        "locked": false,
        "globalNetworking": {"enabled": extra.global_networking},
        "runtime": runtime,
        "createdAt": crate::util::rfc3339(w.created_at),
        "startedAt": started_at,
    });
    // `gpu` is "present for GPU pods; omitted from CPU pods", `cpu` the other way round.
    if let Some(obj) = pod.as_object_mut() {
        if !gpu.is_null() {
            obj.insert("gpu".into(), gpu);
        }
        if !cpu.is_null() {
            obj.insert("cpu".into(), cpu);
        }
    }
    pod
}

pub(super) fn pod_json(engine: &Engine, seq: u64) -> Option<Value> {
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let w = inner.workloads.get_mut(&seq)?;
    Some(render_pod(engine, w, now))
}
