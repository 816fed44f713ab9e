//! The instance list (`/api/v1/instances/`): filters, pages, label counts; the deprecated v0 list.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use axum::extract::{Query, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::instances::*;
use super::reply::*;
use super::{State, actual_status, query};
use crate::engine::{Engine, Phase, Run, StopReason, Workload};

/// `GET /api/v0/instances/` is deprecated: accounts created after 2 June 2026 get 410.
pub(super) async fn list_instances_v0(AxState(_s): AxState<State>) -> Response {
    error(
        StatusCode::GONE,
        "deprecated",
        "Endpoint deprecated: /api/v0/instances/ is deprecated. Use /api/v1/instances/ instead.",
    )
}

pub(super) const FILTER_COLUMNS: &[&str] = &[
    "id",
    "label",
    "actual_status",
    "intended_status",
    "cur_state",
    "next_state",
    "gpu_name",
    "machine_id",
    "is_bid",
    "image_uuid",
];

pub(super) fn page_token(id: u64) -> String {
    crate::util::base64_encode(format!("{{\"values\": {{\"id\": {id}}}}}").as_bytes())
}

pub(super) fn parse_page_token(token: &str) -> Option<u64> {
    let bytes = crate::util::base64_decode(token)?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("values")?.get("id")?.as_u64()
}

pub(super) async fn list_instances(
    AxState(s): AxState<State>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_inner(&s.engine, &q)
}

/// The value of instance-list filter column `field` (one of [`FILTER_COLUMNS`]) for `w`.
pub(super) fn filter_column(w: &Workload, num: u64, phase: Phase, field: &str) -> Option<Value> {
    let intended = || {
        let user_stopped = matches!(
            w.run,
            Run::Stopped {
                reason: StopReason::User,
                ..
            }
        );
        json!(if user_stopped { "stopped" } else { "running" })
    };
    Some(match field {
        "id" => json!(num),
        "label" if w.name.is_empty() => Value::Null,
        "label" => json!(w.name),
        "actual_status" => json!(actual_status(phase)),
        "intended_status" | "next_state" => intended(),
        "cur_state" => json!(if matches!(phase, Phase::Stopped | Phase::Preempted) {
            "stopped"
        } else {
            "running"
        }),
        "gpu_name" => json!(w.gpu_type),
        "machine_id" => json!(w.machine_id),
        "is_bid" => json!(w.interruptible),
        "image_uuid" => json!(w.image),
        _ => return None,
    })
}

/// `query::record_matches` (strict) on the instance's filter columns, computing only the
/// columns filtered on.
pub(super) fn instance_matches(
    w: &Workload,
    num: u64,
    phase: Phase,
    filters: &Map<String, Value>,
) -> Result<bool, String> {
    for (field, cond) in filters {
        let Some(actual) = filter_column(w, num, phase, field) else {
            return Err(format!("{field} is not a valid search key"));
        };
        if !query::matches(field, &actual, cond)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The wanted label when the only filter is an equality on `label` (`{"label": {"eq": v}}` or
/// `{"label": v}`), which is answered without building filter columns.
pub(super) fn label_equality(filters: &Map<String, Value>) -> Option<&Value> {
    if filters.len() != 1 {
        return None;
    }
    match filters.get("label")? {
        Value::Object(ops) if ops.len() == 1 => ops.get("eq"),
        Value::Object(_) => None,
        bare => Some(bare),
    }
}

/// Whether a label (null when empty) equals `want` as `query::matches` compares them.
pub(super) fn label_is(name: &str, want: &Value) -> bool {
    match want {
        Value::String(s) => !name.is_empty() && name == s,
        Value::Null => name.is_empty(),
        _ => false,
    }
}

pub(super) fn list_inner(engine: &Engine, q: &HashMap<String, String>) -> Response {
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, "invalid_request", msg);
    let limit = match q.get("limit").map(|l| l.parse::<i64>()) {
        None => 25,
        Some(Ok(n)) if n <= 0 => 5,
        Some(Ok(n)) => n.min(25) as usize,
        Some(Err(_)) => return bad("Error in query parameters: limit must be an integer".into()),
    };
    let after = match q.get("after_token") {
        None => None,
        Some(t) => match parse_page_token(t) {
            Some(id) => Some(id),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_token",
                    "Invalid pagination token",
                );
            }
        },
    };
    let filters: Map<String, Value> = match q.get("select_filters").map(|f| serde_json::from_str(f))
    {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return bad("Error in query parameters: select_filters must be a JSON object".into());
        }
    };
    if let Some(col) = filters
        .keys()
        .find(|k| !FILTER_COLUMNS.contains(&k.as_str()))
    {
        return bad(format!(
            "Error in query parameters: {col} is not a valid search key"
        ));
    }
    let descending = match q.get("order_by").map(|o| serde_json::from_str::<Value>(o)) {
        None => false,
        Some(Ok(Value::Array(items))) => {
            let mut desc = false;
            for item in &items {
                let col = item.get("col").and_then(Value::as_str).unwrap_or("");
                if col != "id" && col != "start_date" {
                    return bad(format!(
                        "Error in query parameters: order_by column {col} is not supported"
                    ));
                }
                desc = item.get("dir").and_then(Value::as_str) == Some("desc");
            }
            desc
        }
        Some(_) => return bad("Error in query parameters: order_by must be a JSON array".into()),
    };
    let select_cols: Option<Vec<String>> = match q
        .get("select_cols")
        .map(|c| serde_json::from_str::<Vec<String>>(c))
    {
        None => None,
        Some(Ok(cols)) if cols.iter().any(|c| c == "*") => None,
        Some(Ok(cols)) => Some(cols),
        Some(Err(_)) => {
            return bad("Error in query parameters: select_cols must be a JSON array".into());
        }
    };

    let now = Instant::now();
    let mut guard = engine.lock();
    engine.settle(&mut guard, now);
    let inner = &mut *guard;
    let crate::engine::Inner {
        workloads,
        vast: book,
        gate,
        ..
    } = inner;
    let mask = gate.list_mask();
    // Matching instances in id order, and their labels counted (as JSON).
    let mut matching: Vec<(u64, u64)> = Vec::new(); // (numeric id, seq)
    let label_counts: Cow<'_, str> = if filters.is_empty() {
        let mut current: Vec<(u64, &str)> = Vec::with_capacity(workloads.len());
        for w in workloads.values().filter(|w| !mask.hides(&w.id)) {
            if let Some(num) = parse_id(&w.id) {
                matching.push((num, w.seq));
                current.push((w.seq, w.name.as_str()));
            }
        }
        book.label_counts.sync(&current)
    } else {
        let label_eq = label_equality(&filters);
        for w in workloads.values_mut().filter(|w| !mask.hides(&w.id)) {
            let Some(num) = parse_id(&w.id) else {
                continue;
            };
            let phase = engine.observe(w, now);
            let keep = match label_eq {
                Some(want) => Ok(label_is(&w.name, want)),
                None => instance_matches(w, num, phase, &filters),
            };
            match keep {
                Ok(true) => matching.push((num, w.seq)),
                Ok(false) => {}
                Err(msg) => return bad(format!("Error in query parameters: {msg}")),
            }
        }
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, seq) in &matching {
            if let Some(w) = workloads.get(seq) {
                *counts.entry(w.name.as_str()).or_default() += 1;
            }
        }
        Cow::Owned(serde_json::to_string(&counts).unwrap_or_else(|_| "{}".to_owned()))
    };
    if descending {
        matching.reverse();
    }
    let total = matching.len();
    let start = match after {
        None => 0,
        Some(a) => matching
            .iter()
            .position(|(num, _)| if descending { *num < a } else { *num > a })
            .unwrap_or(total),
    };
    let page = &matching[start.min(total)..(start + limit).min(total)];
    let next_token = if start + page.len() < total {
        page.last().map(|(num, _)| page_token(*num))
    } else {
        None
    };
    let mut instances = Vec::with_capacity(page.len());
    for (_, seq) in page {
        if let Some(w) = workloads.get_mut(seq) {
            let mut obj = render_instance(engine, w, now);
            if let Some(cols) = &select_cols {
                obj = cols
                    .iter()
                    .map(|c| (c.clone(), obj.get(c).cloned().unwrap_or(Value::Null)))
                    .collect();
            }
            instances.push(Value::Object(obj));
        }
    }
    instance_page(&instances, total, &label_counts, next_token.as_deref())
}

/// One instance-list page, byte for byte what `axum::Json` writes for the JSON object (keys in
/// order), around `label_counts` already rendered.
pub(super) fn instance_page(
    instances: &[Value],
    total: usize,
    label_counts: &str,
    next_token: Option<&str>,
) -> Response {
    let mut body: Vec<u8> = Vec::with_capacity(label_counts.len() + 2048 * instances.len() + 256);
    body.extend_from_slice(br#"{"instances":"#);
    let rendered = serde_json::to_writer(&mut body, instances);
    body.extend_from_slice(br#","instances_found":"#);
    body.extend_from_slice(instances.len().to_string().as_bytes());
    body.extend_from_slice(br#","label_counts":"#);
    body.extend_from_slice(label_counts.as_bytes());
    body.extend_from_slice(br#","next_token":"#);
    let token = serde_json::to_writer(&mut body, &next_token);
    body.extend_from_slice(br#","success":true,"total_instances":"#);
    body.extend_from_slice(total.to_string().as_bytes());
    body.push(b'}');
    if let Err(e) = rendered.and(token) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
