//! How rows are printed: aligned columns as `kubectl get` prints them (the default), or JSON or
//! YAML of the same rows for scripts.

use serde::Serialize;

use crate::model::{PodRow, ProviderRow, SpendRow, Why};

/// `-o`: the output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// `rows` as JSON or YAML; `None` for a table (the caller's).
pub fn structured<T: Serialize>(rows: &T, output: Output) -> Option<anyhow::Result<String>> {
    match output {
        Output::Table => None,
        Output::Json => Some(serde_json::to_string_pretty(rows).map_err(Into::into)),
        Output::Yaml => Some(serde_saphyr::to_string(rows).map_err(Into::into)),
    }
}

/// Columns padded to their widest cell, three spaces apart (as `kubectl get`).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            s.push_str(c);
            if i < last {
                s.push_str(&" ".repeat(w - c.chars().count() + 3));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn or_dash(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or("-").to_owned()
}

pub fn providers(rows: &[ProviderRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.node.clone(),
                r.provider.clone(),
                match r.healthy {
                    Some(true) => "healthy".to_owned(),
                    Some(false) => format!("unhealthy ({})", r.reason),
                    None => "unknown".to_owned(),
                },
                r.pods.to_string(),
                r.gpus.to_string(),
                r.spend_per_hour.text("/h"),
                or_dash(Some(&r.message)),
            ]
        })
        .collect();
    table(
        &[
            "NODE", "PROVIDER", "HEALTH", "PODS", "GPUS", "SPEND", "MESSAGE",
        ],
        &cells,
    )
}

pub fn pods(rows: &[PodRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                r.name.clone(),
                or_dash(r.provider.as_deref()),
                r.reason.clone().unwrap_or_else(|| r.phase.clone()),
                r.gpus.to_string(),
                r.price_per_hour
                    .map_or_else(|| "-".to_owned(), |d| d.text("/h")),
                r.cost_so_far.text(""),
                or_dash(r.chosen.as_deref()),
            ]
        })
        .collect();
    table(
        &[
            "NAMESPACE",
            "NAME",
            "PROVIDER",
            "STATUS",
            "GPUS",
            "PRICE",
            "COST",
            "CHOSEN",
        ],
        &cells,
    )
}

pub fn spend(rows: &[SpendRow], period: &str) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                r.pods.to_string(),
                r.spend_per_hour.text("/h"),
                r.cost_in_period.text(""),
                r.unpriced_pods.to_string(),
            ]
        })
        .collect();
    let head = format!("THIS {}", period.to_uppercase());
    table(
        &["NAMESPACE", "LIVE PODS", "SPEND", head.as_str(), "UNPRICED"],
        &cells,
    )
}

pub fn why(w: &Why) -> String {
    let p = &w.pod;
    let mut out = format!("Pod:       {}/{}\n", p.namespace, p.name);
    out.push_str(&format!("Node:      {}\n", or_dash(Some(&p.node))));
    out.push_str(&format!("Provider:  {}\n", or_dash(p.provider.as_deref())));
    out.push_str(&format!("Phase:     {}\n", p.phase));
    if let Some(r) = &p.reason {
        out.push_str(&format!("Reason:    {r}\n"));
    }
    if let Some(m) = &w.message {
        out.push_str(&format!("Message:   {m}\n"));
    }
    out.push_str(&format!("Chosen:    {}\n", or_dash(p.chosen.as_deref())));
    out.push_str(&format!(
        "Cost:      {} at {}\n",
        p.cost_so_far.text(""),
        p.price_per_hour
            .map_or_else(|| "-".to_owned(), |d| d.text("/h"))
    ));
    out.push_str("Events:\n");
    if w.events.is_empty() {
        out.push_str("  (none)\n");
    }
    for e in &w.events {
        out.push_str(&format!("  {e}\n"));
    }
    out
}
