//! Where a Slurm job runs: the address of its first node, from slurmrestd's node records
//! (`GET /slurm/<v>/nodes/`: `name`, `address` = the node's `NodeAddr`, `hostname`), fetched
//! at most once a minute and again when a job runs on a node not seen yet, so a list of many
//! jobs costs one call, not one per pod. A `NodeAddr` that is a name is resolved by the VK's
//! resolver; one that resolves to nothing leaves the pod without a provider address.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use tracing::warn;

use super::client::Client;

/// How long node addresses are kept before they are fetched again.
const FRESH: Duration = Duration::from_secs(60);
/// The longest a name lookup may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /slurm/<v>/nodes/` (v0.0.38 and v0.0.41 alike).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct NodeList {
    #[serde(default)]
    pub nodes: Vec<Value>,
}

/// Node name -> the address slurmrestd lists for it (`address`, else `hostname`).
pub(crate) fn addresses_of(list: &NodeList) -> BTreeMap<String, String> {
    list.nodes
        .iter()
        .filter_map(|n| {
            let name = n["name"].as_str()?.trim();
            let addr = [&n["address"], &n["hostname"]]
                .into_iter()
                .filter_map(|v| v.as_str().map(str::trim))
                .find(|s| !s.is_empty())?;
            (!name.is_empty()).then(|| (name.to_owned(), addr.to_owned()))
        })
        .collect()
}

/// The first host of a Slurm hostlist expression: `gpu[07-09,12],cpu1` -> `gpu07`; `None`
/// for an empty list or Slurm's `(null)`/`None assigned`.
pub fn first_host(expr: &str) -> Option<String> {
    let expr = expr.trim();
    if expr.is_empty() || expr.starts_with('(') || expr.contains(' ') {
        return None;
    }
    let mut out = String::new();
    let mut chars = expr.chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                // The first number (with its zero padding) of the first range.
                let first: String = chars
                    .by_ref()
                    .take_while(|c| *c != ']')
                    .collect::<String>()
                    .split([',', '-'])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                out.push_str(&first);
            }
            c => out.push(c),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Node addresses as of an instant (`None`: listed without a usable address, or not listed).
type Known = Option<(Instant, BTreeMap<String, Option<IpAddr>>)>;

/// The adapter's memory of node addresses.
#[derive(Debug, Default)]
pub(super) struct NodeAddresses {
    known: Mutex<Known>,
}

impl NodeAddresses {
    /// The address of each of `hosts` (node names), fetching the node list when the memory is
    /// older than a minute or misses one of them. A failed fetch is logged and gives none.
    pub async fn of(
        &self,
        provider: &str,
        client: &Client,
        hosts: &[String],
    ) -> BTreeMap<String, IpAddr> {
        if hosts.is_empty() {
            return BTreeMap::new();
        }
        let cached = self.lock().clone().filter(|(at, known)| {
            at.elapsed() < FRESH && hosts.iter().all(|h| known.contains_key(h))
        });
        let known = match cached {
            Some((_, known)) => known,
            None => match client.nodes().await {
                Ok(list) => {
                    let mut known = BTreeMap::new();
                    for (name, addr) in addresses_of(&list) {
                        known.insert(name, resolve(&addr).await);
                    }
                    // Hosts slurmrestd did not list are remembered as unknown until the
                    // next fetch, so a list does not fetch again for each.
                    for h in hosts {
                        known.entry(h.clone()).or_insert(None);
                    }
                    *self.lock() = Some((Instant::now(), known.clone()));
                    known
                }
                Err(e) => {
                    warn!(provider, error = %e, "cannot list Slurm nodes: pods get no node address");
                    return BTreeMap::new();
                }
            },
        };
        known
            .into_iter()
            .filter_map(|(name, ip)| Some((name, ip?)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `addr` as an IP: the literal, or the first address the name resolves to.
async fn resolve(addr: &str) -> Option<IpAddr> {
    if let Ok(ip) = addr.parse() {
        return Some(ip);
    }
    let lookup = tokio::net::lookup_host((addr, 0));
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(Ok(mut addrs)) => addrs.next().map(|a| a.ip()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_host_of_hostlists() {
        for (expr, want) in [
            ("node01", Some("node01")),
            ("gpu[07-09,12],cpu1", Some("gpu07")),
            ("gpu[3,5]", Some("gpu3")),
            ("a[01-02]-ib", Some("a01-ib")),
            ("n1,n2", Some("n1")),
            ("", None),
            ("(null)", None),
            ("None assigned", None),
        ] {
            assert_eq!(first_host(expr).as_deref(), want, "{expr}");
        }
    }

    #[test]
    fn addresses_prefer_nodeaddr_then_hostname() {
        let list: NodeList = serde_json::from_value(serde_json::json!({"nodes": [
            {"name": "node01", "address": "198.19.0.1", "hostname": "node01"},
            {"name": "node02", "address": "", "hostname": "host-2"},
            {"name": "node03"},
            {"address": "198.19.0.4"},
        ]}))
        .unwrap();
        let got = addresses_of(&list);
        assert_eq!(got.get("node01").map(String::as_str), Some("198.19.0.1"));
        assert_eq!(got.get("node02").map(String::as_str), Some("host-2"));
        assert_eq!(got.len(), 2);
    }
}
