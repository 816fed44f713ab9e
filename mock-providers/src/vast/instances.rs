//! One instance as `show instance` renders it.

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::offers::*;
use super::reply::*;
use super::{InstanceExtra, State, actual_status};
use crate::engine::{Engine, Extra, Phase, Run, StopReason, Workload};
use crate::inventory::{MACHINE_GPUS, gpu_memory_mb};

// ---- instances ----------------------------------------------------------------------------

pub(super) fn number_or_null(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

pub(super) fn status_msg(w: &Workload, phase: Phase) -> Value {
    let msg = match (&w.run, phase) {
        // The daemon's refusal, as vast-cli's own tests show it in `status_msg`
        // (`tests/cli/test_runtime_diagnostics.py`).
        (_, Phase::Provisioning) if w.pull_error.is_some() => {
            w.pull_error.clone().unwrap_or_default()
        }
        (_, Phase::Provisioning) => format!("Pulling image {}", w.image),
        (_, Phase::Starting) => "Starting container".to_owned(),
        // An offline host sends nothing more: its last message stays.
        (_, Phase::Running | Phase::Offline) => {
            let runtype = match &w.extra {
                Extra::Vast(e) => e.runtype.clone(),
                _ => "ssh".into(),
            };
            format!("success, running {}/{}", w.image, runtype)
        }
        (_, Phase::Exited) => "Container exited".to_owned(),
        (Run::Failed { message, .. }, _) => format!("Error: {message}"),
        (
            Run::Stopped {
                reason: StopReason::Preempted { .. },
                ..
            },
            _,
        ) => "Instance outbid: a higher bid took this machine's GPUs".to_owned(),
        (
            Run::Stopped {
                reason: StopReason::WaitingForGpus,
                ..
            },
            _,
        ) => "Waiting for GPUs on this machine to become free".to_owned(),
        _ => "Instance stopped".to_owned(),
    };
    Value::String(msg)
}

pub(super) fn render_instance(
    engine: &Engine,
    w: &mut Workload,
    now: Instant,
) -> Map<String, Value> {
    let phase = engine.observe(w, now);
    let usage = engine.usage(w, phase, now);
    let extra = match &w.extra {
        Extra::Vast(e) => (**e).clone(),
        _ => InstanceExtra {
            runtype: "ssh".into(),
            disk: 8.0,
            env_pairs: w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..InstanceExtra::default()
        },
    };
    let user_stopped = matches!(
        w.run,
        Run::Stopped {
            reason: StopReason::User,
            ..
        }
    );
    let intended = if user_stopped { "stopped" } else { "running" };
    let cur_state = match phase {
        Phase::Stopped | Phase::Preempted => "stopped",
        _ => "running",
    };
    let n = w.gpu_count;
    let gpu_ram = gpu_memory_mb(&w.gpu_type);
    let dph_base = round4(w.price_per_gpu_hour * f64::from(n));
    let dph_total = w.bid_price.map_or(dph_base, round4);
    let running = phase == Phase::Running;
    let mut extra_env: Vec<Value> = extra.env_pairs.iter().map(|(k, v)| json!([k, v])).collect();
    extra_env.extend(extra.ports.iter().map(|p| json!([format!("-p {p}"), "1"])));
    // Each open internal port is mapped to a *random* external port of the machine's public
    // IP ("Networking & Ports", docs.vast.ai guides/instances/connect/networking): a real
    // listener answers there (`crate::serve`), nothing on the internal port number.
    let ports = if running {
        let mut m = Map::new();
        let tcp: Vec<u16> = extra
            .ports
            .iter()
            .filter_map(|p| {
                let internal = p.split_once(':').map_or(p.as_str(), |(_, c)| c);
                internal
                    .strip_suffix("/tcp")
                    .unwrap_or(internal)
                    .parse()
                    .ok()
            })
            .collect();
        let host = crate::serve::workload_address(w.seq);
        for (internal, external) in engine.served.open(&w.id, &host, &tcp) {
            m.insert(
                format!("{internal}/tcp"),
                json!([{"HostIp": "0.0.0.0", "HostPort": external.to_string()}]),
            );
        }
        if extra.runtype.starts_with("ssh") {
            m.insert(
                "22/tcp".into(),
                json!([{"HostIp": "0.0.0.0", "HostPort": "22"}]),
            );
        }
        Value::Object(m)
    } else {
        engine.served.close(&w.id);
        Value::Null
    };
    let uptime_mins = if running {
        w.running_since.map(|t| {
            jiff::Timestamp::now()
                .duration_since(t)
                .as_secs_f64()
                .max(0.0)
                / 60.0
        })
    } else {
        None
    };
    let start_date = crate::util::unix_f64(w.created_at);
    let id: Value =
        w.id.parse::<u64>()
            .map_or_else(|_| json!(w.id), |n| json!(n));
    let fields = json!({
        "id": id,
        "machine_id": w.machine_id,
        "host_id": 1,
        "actual_status": actual_status(phase),
        "intended_status": intended,
        "cur_state": cur_state,
        "next_state": intended,
        "status_msg": status_msg(w, phase),
        "label": if w.name.is_empty() { Value::Null } else { json!(w.name) },
        "is_bid": w.interruptible,
        "min_bid": round4(dph_base * 0.5),
        "dph_base": dph_base,
        "dph_total": dph_total,
        "gpu_name": w.gpu_type,
        "gpu_arch": "nvidia",
        "num_gpus": n,
        "gpu_ram": gpu_ram,
        "gpu_totalram": gpu_ram * u64::from(n),
        "gpu_frac": f64::from(n) / f64::from(MACHINE_GPUS),
        "gpu_util": if running { json!(0.0) } else { Value::Null },
        "gpu_temp": if running { json!(40.0) } else { Value::Null },
        "cpu_arch": "amd64",
        "cpu_name": "Emulated CPU",
        "cpu_cores": 8 * MACHINE_GPUS,
        "cpu_cores_effective": f64::from(8 * n),
        "cpu_ram": 32_000 * u64::from(n),
        "cpu_util": usage.cpu_millis as f64 / 10.0,
        "mem_usage": number_or_null(running.then(|| usage.memory_bytes as f64 / 1e9)),
        "mem_limit": number_or_null(Some(32.0 * f64::from(n))),
        "vmem_usage": number_or_null(running.then_some(0.0)),
        "disk_space": extra.disk,
        "disk_usage": 0.0,
        "image_uuid": w.image,
        "image_args": extra.args,
        "image_runtype": extra.runtype,
        "extra_env": extra_env,
        // A string in the spec (`onstart`, not nullable): empty when none was given.
        "onstart": extra.onstart.as_deref().unwrap_or_default(),
        "template_id": Value::Null,
        "template_hash_id": Value::Null,
        "template_name": Value::Null,
        "jupyter_token": "emulator",
        "start_date": start_date,
        "end_date": start_date + 30.0 * 86_400.0,
        "duration": 30.0 * 86_400.0,
        "uptime_mins": number_or_null(uptime_mins),
        // Its own address (`serve::workload_address`), never loopback: the VK reports it as
        // the pod IP, which the API server refuses in EndpointSlices when loopback.
        "public_ipaddr": engine.served.listed_address(&crate::serve::workload_address(w.seq)),
        "local_ipaddrs": crate::serve::workload_address(w.seq),
        "ssh_host": "ssh.emulator.invalid",
        "ssh_idx": "1",
        "ssh_port": 22,
        "ports": ports,
        "direct_port_start": 20000,
        "direct_port_end": 20099,
        "geolocation": "Emulator, EM",
        "country_code": "EM",
        "verification": "verified",
        "rentable": true,
        "reliability2": 0.999,
        "cuda_max_good": 12.8,
        "driver_version": "570.86.15",
        "external": false,
        "volume_info": [],
        "time_remaining": "",
        "time_remaining_isbid": "",
    });
    match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

pub(super) async fn show_instance(AxState(s): AxState<State>, Path(id): Path<String>) -> Response {
    if parse_id(&id).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_args",
            "invalid instance id",
        );
    }
    let engine = &s.engine;
    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    let instance = inner
        .seq_of(&id)
        .and_then(|seq| inner.workloads.get_mut(&seq))
        .map(|w| Value::Object(render_instance(engine, w, now)))
        .unwrap_or(Value::Null);
    ok(json!({ "instances": instance }))
}
