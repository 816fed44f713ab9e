//! `GET /slurm/<v>/nodes/`: the emulated cluster's node records, with the fields a client
//! reads to find where a job runs (`name`, `hostname`, `address` = the node's `NodeAddr`).
//! Each node has an address of its own (`serve::node_address`), unless the admin API makes
//! the emulator list another text for every node (`POST /_admin/addresses`).

use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::{Dialect, Reply, State, admit, json_response, meta};
use crate::engine::gate::RouteKind;

/// The name of node `i` (from 0), as jobs list it in `nodes`.
pub(crate) fn name(i: u32) -> String {
    format!("node{:02}", i + 1)
}

/// The address slurmrestd lists for node `i`, given the admin API's override `listed`.
pub(crate) fn address(listed: Option<&str>, i: u32) -> String {
    listed.map_or_else(
        || crate::serve::node_address(u64::from(i) + 1),
        str::to_owned,
    )
}

/// The route; counted and faulted as `search` (the cluster's inventory).
pub(super) async fn list(
    AxState(s): AxState<State>,
    Path(version): Path<String>,
    headers: HeaderMap,
) -> Reply {
    let emu = &s.emulator;
    let dialect = admit(emu, &version, RouteKind::Search, &headers).await?;
    let listed = emu.lock().listed.clone();
    let nodes: Vec<Value> = (0..emu.cfg.nodes)
        .map(|i| {
            let addr = address(listed.as_deref(), i);
            render(dialect, &name(i), &addr, emu.cfg.gpus_per_node)
        })
        .collect();
    let mut body = json!({"meta": meta(dialect), "errors": [], "nodes": nodes});
    if dialect == Dialect::V0041 {
        body["warnings"] = json!([]);
        body["last_update"] = json!({"set": true, "infinite": false,
            "number": jiff::Timestamp::now().as_second()});
    }
    Ok(json_response(StatusCode::OK, body))
}

fn render(dialect: Dialect, name: &str, address: &str, gpus: u32) -> Value {
    let state = match dialect {
        Dialect::V0038 => json!("idle"),
        Dialect::V0041 => json!(["IDLE"]),
    };
    json!({
        "name": name,
        "hostname": name,
        "address": address,
        "state": state,
        "gres": format!("gpu:{gpus}"),
        "partitions": ["debug"],
    })
}
