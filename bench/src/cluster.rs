//! The bench's side of the cluster: the marker that says the bench started it, namespaces, the
//! pods it creates and deletes, a watch that timestamps every pod transition, and the
//! apiserver's own request counters.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

/// Namespace and name of the ConfigMap `scripts/bench` creates on the testbed it started.
pub const MARKER_NAMESPACE: &str = "kube-system";
pub const MARKER_NAME: &str = "gpu-vk-bench-testbed";
/// Label on every namespace the bench creates.
pub const NS_LABEL: &str = "gpu-vk.io/bench";

/// Refuses clusters the bench did not start, unless the caller insisted.
pub async fn check_marker(client: &Client, insist: bool) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), MARKER_NAMESPACE);
    match cms.get_opt(MARKER_NAME).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) if insist => {
            eprintln!(
                "[vk-bench] WARNING: no {MARKER_NAMESPACE}/{MARKER_NAME} marker; running anyway \
                 (--i-know-this-cluster). The bench creates and deletes thousands of pods."
            );
            Ok(())
        }
        Ok(None) => bail!(
            "refusing to run: this cluster has no ConfigMap {MARKER_NAMESPACE}/{MARKER_NAME}, so \
             the bench did not start it. Use `make bench` (a dedicated testbed), or pass \
             --i-know-this-cluster to load this cluster with thousands of pods anyway."
        ),
        Err(e) => Err(e).context("failed to read the bench marker ConfigMap"),
    }
}

pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {NS_LABEL: "true"}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("failed to create namespace {name}"))?;
    // Pods are only admitted once the namespace's default ServiceAccount exists.
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sa.get_opt("default").await.ok().flatten().is_none() {
        if Instant::now() > deadline {
            bail!("namespace {name} got no default ServiceAccount within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Force-deletes every pod of the namespace (grace 0: no kubelet may be left to finish them),
/// then the namespace. Errors are reported, not fatal: this is clean-up.
pub async fn remove_namespace(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    if let Err(e) = pods
        .delete_collection(&dp, &ListParams::default())
        .await
        .map(|_| ())
        .or_else(not_found)
    {
        eprintln!("[vk-bench] clean-up: deleting the pods of {name} failed: {e}");
    }
    if let Err(e) = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .map(|_| ())
        .or_else(not_found)
    {
        eprintln!("[vk-bench] clean-up: deleting namespace {name} failed: {e}");
    }
}

/// Waits (up to `limit`) until namespace `name` is gone: the namespace controller's clean-up
/// (listing and deleting what is left in it) loads the API server, and must not overlap the
/// next round's creates (seen: the bench's creates took 4.3 s instead of 1.3 s at N = 1,000).
pub async fn wait_namespace_gone(client: &Client, name: &str, limit: std::time::Duration) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let gone = crate::wait_until(limit, std::time::Duration::from_millis(250), || async {
        matches!(namespaces.get_opt(name).await, Ok(None))
    })
    .await;
    if gone.is_none() {
        eprintln!(
            "[vk-bench] clean-up: namespace {name} still exists after {} s; going on",
            limit.as_secs()
        );
    }
}

pub async fn delete_node(client: &Client, name: &str) {
    if let Err(e) = Api::<Node>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .map(|_| ())
        .or_else(not_found)
    {
        eprintln!("[vk-bench] clean-up: deleting node {name} failed: {e}");
    }
}

fn not_found(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        e => Err(e),
    }
}

/// True when the node exists and reports Ready.
pub async fn node_ready(client: &Client, name: &str) -> bool {
    let Ok(Some(node)) = Api::<Node>::all(client.clone()).get_opt(name).await else {
        return false;
    };
    node.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// How pods reach the VK node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bind {
    /// Created with `spec.nodeName` set: bound at creation, no scheduler involved.
    NodeName,
    /// Created unbound with a node selector and toleration; kube-scheduler binds them.
    Scheduler,
}

/// A minimal GPU pod pinned to one provider.
pub fn pod(name: &str, node: &str, provider: &str, bind: Bind) -> Pod {
    let mut spec = json!({
        "containers": [{
            "name": "main",
            "image": "registry.example/bench:1",
            "command": ["sleep", "infinity"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}
        }],
        "restartPolicy": "Always",
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}]
    });
    match bind {
        Bind::NodeName => spec["nodeName"] = json!(node),
        Bind::Scheduler => spec["nodeSelector"] = json!({"kubernetes.io/hostname": node}),
    }
    let value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "vk-bench"},
            "annotations": {"gpu-vk.io/provider": provider}
        },
        "spec": spec
    });
    // The literal above is a valid Pod; a failure here is a bug in this file.
    serde_json::from_value(value).unwrap_or_default()
}

/// Wall-clock instants of one pod's life as the bench saw them.
#[derive(Debug, Clone, Default)]
pub struct PodTimes {
    pub uid: Option<String>,
    /// Create request answered.
    pub created: Option<Timestamp>,
    /// First seen with `spec.nodeName` (equal to `created` when created bound).
    pub bound: Option<Timestamp>,
    /// First watch event with phase Running.
    pub running: Option<Timestamp>,
    /// Delete request answered.
    pub delete_requested: Option<Timestamp>,
    /// Gone from the API.
    pub gone: Option<Timestamp>,
}

/// Pod times by name, filled by the create/delete calls and the watch.
#[derive(Clone, Default)]
pub struct Tracker {
    inner: Arc<Mutex<HashMap<String, PodTimes>>>,
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodTimes>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn update(&self, name: &str, f: impl FnOnce(&mut PodTimes)) {
        f(self.lock().entry(name.to_owned()).or_default());
    }

    pub fn snapshot(&self) -> HashMap<String, PodTimes> {
        self.lock().clone()
    }

    pub fn count(&self, f: impl Fn(&PodTimes) -> bool) -> usize {
        self.lock().values().filter(|t| f(t)).count()
    }

    fn seen(&self, p: &Pod, now: Timestamp) {
        let Some(name) = p.metadata.name.as_deref() else {
            return;
        };
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        self.update(name, |t| {
            if t.uid.is_none() {
                t.uid = p.metadata.uid.clone();
            }
            if bound && t.bound.is_none() {
                t.bound = Some(now);
            }
            if running && t.running.is_none() {
                t.running = Some(now);
            }
        });
    }

    fn gone(&self, name: &str, now: Timestamp) {
        self.update(name, |t| {
            if t.gone.is_none() {
                t.gone = Some(now);
            }
        });
    }

    /// Watches the namespace until the task is aborted.
    pub fn watch(&self, client: &Client, namespace: &str) -> tokio::task::JoinHandle<()> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let tracker = self.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut relisted: Option<HashSet<String>> = None;
            loop {
                let ev = match stream.try_next().await {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return,
                    Err(e) => {
                        eprintln!("[vk-bench] pod watch error (retrying): {e}");
                        continue;
                    }
                };
                let now = Timestamp::now();
                match ev {
                    watcher::Event::Init => relisted = Some(HashSet::new()),
                    watcher::Event::InitApply(p) => {
                        if let (Some(set), Some(n)) = (relisted.as_mut(), p.metadata.name.clone()) {
                            set.insert(n);
                        }
                        tracker.seen(&p, now);
                    }
                    watcher::Event::InitDone => {
                        // Pods that vanished while the watch was re-listing.
                        if let Some(set) = relisted.take() {
                            let missing: Vec<String> = tracker
                                .lock()
                                .iter()
                                .filter(|(n, t)| t.uid.is_some() && !set.contains(*n))
                                .map(|(n, _)| n.clone())
                                .collect();
                            for n in missing {
                                tracker.gone(&n, now);
                            }
                        }
                    }
                    watcher::Event::Apply(p) => tracker.seen(&p, now),
                    watcher::Event::Delete(p) => {
                        if let Some(n) = p.metadata.name.as_deref() {
                            tracker.gone(n, now);
                        }
                    }
                }
            }
        })
    }
}

/// Runs `op` with retries on throttling and transient server errors.
pub async fn with_retries<T, F, Fut>(mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    for _ in 0..6 {
        match op().await {
            Err(kube::Error::Api(s)) if s.code == 429 || s.code >= 500 => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(3));
            }
            other => return other,
        }
    }
    op().await
}

/// `apiserver_request_total` summed by (verb, group, resource, subresource), in `.0`, and the
/// sum and count of `apiserver_request_duration_seconds` by the same key, in `.1`.
#[derive(Debug, Clone, Default)]
pub struct ApiCounts(pub BTreeMap<String, f64>, pub BTreeMap<String, (f64, f64)>);

impl ApiCounts {
    pub async fn scrape(client: &Client) -> anyhow::Result<Self> {
        let req = kube::core::Request::new("")
            .get("metrics", &Default::default())
            .context("failed to build the /metrics request")?;
        let text = client
            .request_text(req)
            .await
            .context("failed to read the apiserver's /metrics")?;
        Ok(Self::parse(&text))
    }

    pub fn parse(text: &str) -> Self {
        let mut out = BTreeMap::new();
        let mut durations: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for line in text.lines() {
            let (rest, kind) = if let Some(r) = line.strip_prefix("apiserver_request_total{") {
                (r, 0)
            } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
                (r, 1)
            } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_count{") {
                (r, 2)
            } else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(v) = value.trim().parse::<f64>() else {
                continue;
            };
            let labels = parse_labels(labels);
            let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let resource = get("resource");
            if resource.is_empty() {
                continue;
            }
            let mut key = format!("{} {}", get("verb"), resource);
            let sub = get("subresource");
            if !sub.is_empty() {
                key = format!("{key}/{sub}");
            }
            let group = get("group");
            if !group.is_empty() {
                key = format!("{key}.{group}");
            }
            match kind {
                0 => *out.entry(key).or_insert(0.0) += v,
                1 => durations.entry(key).or_default().0 += v,
                _ => durations.entry(key).or_default().1 += v,
            }
        }
        Self(out, durations)
    }

    /// Mean request latency (ms) between `self` and `later`, by key, for keys with requests.
    pub fn mean_latency_ms(&self, later: &ApiCounts) -> BTreeMap<String, f64> {
        later
            .1
            .iter()
            .filter_map(|(k, (sum, count))| {
                let (s0, c0) = self.1.get(k).copied().unwrap_or_default();
                let n = count - c0;
                (n > 0.0).then(|| (k.clone(), ((sum - s0) / n * 1e4).round() / 10.0))
            })
            .collect()
    }

    /// Requests made between `self` and `later`, keeping non-zero entries.
    pub fn until(&self, later: &ApiCounts) -> BTreeMap<String, f64> {
        later
            .0
            .iter()
            .filter_map(|(k, v)| {
                let d = v - self.0.get(k).copied().unwrap_or(0.0);
                (d > 0.0).then(|| (k.clone(), d))
            })
            .collect()
    }
}

fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s;
    while let Some((k, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(k.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    out
}

/// Sums the entries of a delta whose key's resource part is one of `resources`.
pub fn sum_resources(delta: &BTreeMap<String, f64>, resources: &[&str]) -> f64 {
    delta
        .iter()
        .filter(|(k, _)| {
            let res = k.split_whitespace().nth(1).unwrap_or_default();
            let res = res.split(['/', '.']).next().unwrap_or_default();
            resources.contains(&res)
        })
        .map(|(_, v)| v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apiserver_request_counters() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 3
"#;
        let c = ApiCounts::parse(text);
        assert_eq!(c.0["POST pods"], 11.0);
        assert_eq!(c.0["PATCH pods/status"], 4.0);
        assert_eq!(c.0["POST events.events.k8s.io"], 7.0);
        assert_eq!(c.0.len(), 3);
        let d = ApiCounts::parse(
            "apiserver_request_duration_seconds_sum{group=\"\",resource=\"pods\",subresource=\"status\",verb=\"PATCH\"} 2\n\
             apiserver_request_duration_seconds_count{group=\"\",resource=\"pods\",subresource=\"status\",verb=\"PATCH\"} 10\n",
        );
        assert_eq!(c.mean_latency_ms(&d)["PATCH pods/status"], 200.0);
        let zero = ApiCounts::default();
        let d = zero.until(&c);
        assert_eq!(sum_resources(&d, &["pods"]), 15.0);
        assert_eq!(sum_resources(&d, &["events"]), 7.0);
    }

    #[test]
    fn pod_is_bound_and_pinned() {
        let p = pod("p-1", "vk-bench", "vast", Bind::NodeName);
        let spec = p.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("vk-bench"));
        assert_eq!(
            p.metadata.annotations.unwrap()["gpu-vk.io/provider"],
            "vast"
        );
        let p = pod("p-2", "vk-bench", "runpod", Bind::Scheduler);
        assert!(p.spec.unwrap().node_name.is_none());
    }
}
