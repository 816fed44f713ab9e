//! The bench's load: N pods created bound to one node with a fixed number of requests in
//! flight (or paced), the same for the VK's rounds and kwok's, so their figures compare.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;

use crate::cluster::{self, Bind, Tracker};

/// What creating the pods took, as the client saw it.
pub struct Sent {
    /// Time to send every create request.
    pub secs: f64,
    /// Creates that failed for good.
    pub errors: usize,
    /// Create requests sent, retries included (the bench's own API writes).
    pub attempts: usize,
}

/// Creates `names` (pod name, provider annotation) on `node` with `concurrency` requests in
/// flight; with `rate` > 0, pod i is sent at i / rate seconds. Create times go to `tracker`.
pub async fn create_all(
    pods: &Api<Pod>,
    tracker: &Tracker,
    names: Vec<(String, &'static str)>,
    node: &str,
    bind: Bind,
    concurrency: usize,
    rate: f64,
) -> Sent {
    let t_create = Instant::now();
    let attempts = Arc::new(AtomicUsize::new(0));
    let errors =
        futures::stream::iter(names.into_iter().enumerate().map(|(i, (name, provider))| {
            let pods = pods.clone();
            let tracker = tracker.clone();
            let attempts = attempts.clone();
            async move {
                if rate > 0.0 {
                    let due = t_create + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let pod = cluster::pod(&name, node, provider, bind);
                let pp = PostParams::default();
                let r = cluster::with_retries(|| {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    pods.create(&pp, &pod)
                })
                .await;
                let now = Timestamp::now();
                match r {
                    Ok(p) => {
                        tracker.update(&name, |t| {
                            t.created = Some(now);
                            t.uid = p.metadata.uid.clone();
                        });
                        0usize
                    }
                    Err(e) => {
                        crate::log(format!("create {name} failed: {e}"));
                        1
                    }
                }
            }
        }))
        .buffer_unordered(concurrency.max(1))
        .fold(0usize, |acc, e| async move { acc + e })
        .await;
    Sent {
        secs: t_create.elapsed().as_secs_f64(),
        errors,
        attempts: attempts.load(Ordering::Relaxed),
    }
}

/// API writes (every verb but get, list and watch) on pods and events by "VERB resource",
/// per pod, without the bench's own `attempts` creates; `delta` is
/// [`cluster::ApiCounts::until`] over the phase.
pub fn writes_per_pod(
    delta: &std::collections::BTreeMap<String, f64>,
    bench_creates: usize,
    n: usize,
) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for (k, v) in delta {
        let mut parts = k.split_whitespace();
        let (verb, res) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        if matches!(verb, "GET" | "LIST" | "WATCH") {
            continue;
        }
        if !(res.starts_with("pods") || res.starts_with("events")) {
            continue;
        }
        let mut v = *v;
        if verb == "POST" && res == "pods" {
            v -= bench_creates as f64;
        }
        if v > 0.0 {
            out.insert(k.clone(), crate::procs::round3(v / n.max(1) as f64));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_per_pod_leave_out_reads_other_resources_and_the_bench_creates() {
        let delta: std::collections::BTreeMap<String, f64> = [
            ("POST pods", 1010.0),
            ("PATCH pods/status", 1000.0),
            ("POST events.events.k8s.io", 500.0),
            ("LIST pods", 3.0),
            ("WATCH pods", 2.0),
            ("PUT leases.coordination.k8s.io", 40.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let w = writes_per_pod(&delta, 1000, 1000);
        assert_eq!(w.get("POST pods"), Some(&0.01));
        assert_eq!(w.get("PATCH pods/status"), Some(&1.0));
        assert_eq!(w.get("POST events.events.k8s.io"), Some(&0.5));
        assert_eq!(w.len(), 3, "{w:?}");
    }
}
