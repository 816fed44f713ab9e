//! Renting an offer (`PUT /api/v0/asks/{id}/`): the create body checked and the instance made.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::offers::*;
use super::reply::*;
use super::{InstanceExtra, State, parse_env, query};
use crate::engine::{Engine, Extra, NewWorkload};

// ---- create -------------------------------------------------------------------------------

/// The operation in Vast's published schema.
const CREATE_OPERATION: &str = "PUT /api/v0/asks/{id}";

pub(super) const RUNTYPES: &[&str] = &[
    "ssh",
    "jupyter",
    "args",
    "ssh_proxy",
    "ssh_direct",
    "jupyter_proxy",
    "jupyter_direct",
];

pub(super) async fn create_instance(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    create_inner(&s.engine, &id, &body)
}

pub(super) fn create_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    let Some(ask_id) = parse_id(id) else {
        return invalid_args(
            "error 400/3467: Invalid args: 'id' is required and must be a valid offer ID",
        );
    };
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    // A price out of the spec's bounds is the documented `invalid_price`, answered below.
    let mut unpriced = m.clone();
    unpriced.remove("price");
    let unpriced = serde_json::to_vec(&unpriced).unwrap_or_default();
    if let Some(refused) = schema_refusal(CREATE_OPERATION, "invalid_args", &unpriced) {
        return refused;
    }
    let string = |key: &str| -> Result<Option<String>, Response> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid_args(format!(
                "Invalid args: '{key}' must be a string"
            ))),
        }
    };
    let image = match string("image") {
        Ok(Some(i)) if !i.trim().is_empty() => i,
        Ok(_) => return invalid_args("Invalid args: 'image' is required"),
        Err(r) => return r,
    };
    let label = match string("label") {
        Ok(l) => l.unwrap_or_default(),
        Err(r) => return r,
    };
    let onstart = match string("onstart") {
        Ok(o) => o,
        Err(r) => return r,
    };
    let args_str = match string("args_str") {
        Ok(a) => a,
        Err(r) => return r,
    };
    let disk = match m.get("disk") {
        None | Some(Value::Null) => 8.0,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(d) if d > 0.0 => d,
            _ => return invalid_args("Invalid args: 'disk' must be a positive number"),
        },
        Some(_) => return invalid_args("Invalid args: 'disk' must be a number"),
    };
    let args: Option<Vec<String>> = match m.get("args") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    _ => return invalid_args("Invalid args: 'args' must be a list of strings"),
                }
            }
            Some(out)
        }
        Some(_) => return invalid_args("Invalid args: 'args' must be a list of strings"),
    };
    let runtype = match string("runtype") {
        Ok(Some(r)) if RUNTYPES.contains(&r.as_str()) => r,
        Ok(Some(r)) => return invalid_args(format!("Invalid args: unknown runtype '{r}'")),
        Ok(None) if args.is_some() || args_str.is_some() => "args".to_owned(),
        Ok(None) => "ssh".to_owned(),
        Err(r) => return r,
    };
    let target_state = match string("target_state") {
        Ok(None) => "running".to_owned(),
        Ok(Some(t)) if t == "running" || t == "stopped" => t,
        Ok(Some(_)) => {
            return invalid_args("Invalid args: 'target_state' must be 'running' or 'stopped'");
        }
        Err(r) => return r,
    };
    let price = match m.get("price") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(p) if (0.001..=128.0).contains(&p) => Some(p),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_price",
                    "Bid price must be between 0.001 and 128 $/hour",
                );
            }
        },
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_price",
                "Bid price must be a number",
            );
        }
    };
    for flag in [
        "cancel_unavail",
        "vm",
        "use_jupyter_lab",
        "python_utf8",
        "lang_utf8",
        "force",
    ] {
        if let Some(v) = m.get(flag)
            && !v.is_boolean()
            && !v.is_null()
        {
            return invalid_args(format!("Invalid args: '{flag}' must be a boolean"));
        }
    }
    let login = match super::login::parse(m.get("image_login")) {
        Ok(l) => l,
        Err(msg) => return invalid_args(msg),
    };
    let env = match parse_env(m.get("env").unwrap_or(&Value::Null)) {
        Ok(e) => e,
        Err(msg) => return invalid_args(format!("Invalid args: {msg}")),
    };
    // Input limits: `x-input-validation` of vast-ai/docs
    // `api-reference/openapi/yaml/create_instance.yaml` (image 1024, label 256, args + args_str
    // + onstart 4096, each env entry 256 and 32768 in all, disk >= 8). The spec gives no message
    // text: the documented 400 `invalid_args` shape is used, naming the limit.
    let chars = |s: &str| s.chars().count();
    if chars(&image) > 1024 {
        return invalid_args("Invalid args: 'image' is limited to 1024 characters");
    }
    if chars(&label) > 256 {
        return invalid_args("Invalid args: 'label' is limited to 256 characters");
    }
    let args_len = onstart.as_deref().map_or(0, chars)
        + args_str.as_deref().map_or(0, chars)
        + args.iter().flatten().map(|a| chars(a)).sum::<usize>();
    if args_len > 4096 {
        return invalid_args(
            "Invalid args: args, args_str and onstart are limited to 4096 characters together",
        );
    }
    let mut env_total = 0;
    for (k, v) in env.vars.iter().map(|(k, v)| (k.clone(), v.clone())).chain(
        env.ports
            .iter()
            .map(|p| (format!("-p {p}"), "1".to_owned())),
    ) {
        let entry = chars(&k) + 1 + chars(&v);
        if entry > 256 {
            return invalid_args(format!(
                "Invalid args: env entry '{k}' is limited to 256 characters"
            ));
        }
        env_total += entry;
    }
    if env_total > 32768 {
        return invalid_args("Invalid args: env is limited to 32768 characters in total");
    }
    if disk < 8.0 {
        return invalid_args("Invalid args: 'disk' must be at least 8 GB");
    }
    let args_vec: Vec<String> = match (&args, &args_str) {
        (Some(a), _) => a.clone(),
        (None, Some(s)) => query::split_words(s),
        (None, None) => Vec::new(),
    };
    let (command, keep_alive) = if runtype == "args" {
        let cmd = match (&args, &args_str) {
            (Some(a), _) if !a.is_empty() => Some(crate::util::shell_join(a)),
            (_, Some(s)) if !s.trim().is_empty() => Some(s.clone()),
            _ => None,
        };
        // With runtype `args`, `onstart` is the entrypoint override (vast-ai/vast-cli
        // `vast.py` sends `--entrypoint` as `onstart`: "override the entrypoint to bash ...
        // --onstart-cmd 'bash' --args -c '...'"); the args follow it.
        let cmd = match onstart.as_deref().map(str::trim).filter(|o| !o.is_empty()) {
            Some(entry) => Some(match cmd {
                Some(rest) => format!("{} {rest}", crate::util::shell_join(&[entry])),
                None => crate::util::shell_join(&[entry]),
            }),
            None => cmd,
        };
        (cmd, false)
    } else {
        (onstart.clone().filter(|o| !o.trim().is_empty()), true)
    };

    let now = Instant::now();
    let mut inner = engine.lock();
    engine.settle(&mut inner, now);
    // An offer rented by someone else (or whose machine changed) is refused with 404/410
    // `no_such_ask`, and the client tries the next offer (vast-ai/docs api-reference/openapi.yaml,
    // `PUT /api/v0/asks/{id}/`): a refused call, counted under `create` but not `created`.
    let no_such_ask = |status: StatusCode| {
        (
            status,
            axum::Json(json!({
                "success": false,
                "error": if status == StatusCode::GONE { "no_such_ask" } else { "invalid_args" },
                "msg": if status == StatusCode::GONE {
                    format!("error 410/3907: no_such_ask Instance type {ask_id} is no longer available.")
                } else {
                    format!("error 404/3603: no_such_ask Instance type by id {ask_id} is not available.")
                },
                "ask_id": ask_id,
            })),
        )
            .into_response()
    };
    let Some(key) = inner.vast.offers.get(&ask_id).copied() else {
        return no_such_ask(StatusCode::NOT_FOUND);
    };
    let Some((stock, machine)) = inner.inventory.machine(key.machine_id) else {
        return no_such_ask(StatusCode::NOT_FOUND);
    };
    if machine.epoch != key.epoch || machine.free() < key.num_gpus {
        return no_such_ask(StatusCode::NOT_FOUND);
    }
    let gpu_type = stock.gpu_type.clone();
    let dph = stock.price_per_hour * f64::from(key.num_gpus);
    if let Some(p) = price
        && p < round4(dph * 0.5)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_price",
            format!(
                "Bid price ${p:.4}/hr is below this offer's minimum bid ${:.4}/hr",
                round4(dph * 0.5)
            ),
        );
    }
    let extra = InstanceExtra {
        runtype,
        disk,
        onstart,
        args: args_vec,
        env_pairs: env.vars.clone(),
        ports: env.ports.clone(),
        offer_id: ask_id,
    };
    let new = NewWorkload {
        name: label,
        image,
        env: env.vars.into_iter().collect(),
        gpu_type,
        gpu_count: key.num_gpus,
        command,
        keep_alive,
        interruptible: price.is_some(),
        bid_price: price,
        machine_id: Some(key.machine_id),
        start_stopped: target_state == "stopped",
        login,
        extra: Extra::Vast(Box::new(extra)),
        ..NewWorkload::default()
    };
    match engine.create_locked(&mut inner, new, now) {
        Ok(seq) => {
            inner.gate.note_created();
            let id = inner
                .workloads
                .get(&seq)
                .and_then(|w| parse_id(&w.id))
                .unwrap_or(0);
            ok(json!({"success": true, "new_contract": id}))
        }
        Err(_) => no_such_ask(StatusCode::NOT_FOUND),
    }
}
