//! The VK's own telemetry: structured `tracing` logs and Prometheus metrics on their own port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::{Router, routing::get};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub provider: String,
    pub op: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FieldLabels {
    pub provider: String,
    pub field: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DispatchLabels {
    pub policy: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodLabels {
    pub provider: String,
    pub phase: String,
}

/// Every metric the VK exports. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// The names registered, in order (an empty family is not in `/metrics` until it has a
    /// series, so this is the list of what the VK can export).
    registered: Arc<Vec<&'static str>>,
    pub reconciles: Family<ResultLabels, Counter>,
    pub provider_calls: Family<CallLabels, Counter>,
    /// Provider answers that broke the provider's schema, by field (`ProviderError::Malformed`).
    pub provider_malformed: Family<FieldLabels, Counter>,
    pub status_writes: Counter,
    pub pod_deletes: Counter,
    pub gc_deletes: Counter,
    /// Events dropped because the API server fell behind (see `crate::pods::events`).
    pub events_dropped: Counter,
    /// Pods held instead of failed because their owner's pods were failing in a storm (see
    /// `crate::pods::storm`).
    pub refusal_storm_held: Counter,
    pub queue_depth: Gauge,
    /// Seconds from start until everything known at start-up was reconciled once; 0 before.
    pub startup_reconcile_seconds: Gauge<f64, AtomicU64>,
    pub pods: Family<PodLabels, Gauge>,
    /// Seconds from the VK's first sight of a pod to the provider accepting its workload: the
    /// latency the VK itself adds on top of the API server's watch.
    pub create_latency: Histogram,
    /// Seconds from a provider list showing a workload's new state to the pod status write
    /// that reports it (not counting the wait for the next poll).
    pub status_latency: Histogram,
    /// 1 while this replica leads (always, without leader election), 0 while it stands by.
    pub leader: Gauge,
    /// `vk overflow`: admissions by outcome (`offload`, `refuse`).
    pub overflow_admissions: Family<OutcomeLabels, Counter>,
    /// `vk overflow`: in-cluster GPUs by state (`allocatable`, `allocated`).
    pub in_cluster_gpus: Family<StateLabels, Gauge>,
    /// `vk overflow`: opted-in replicas on virtual nodes by provider.
    pub offloaded_replicas: Family<ProviderLabels, Gauge>,
    /// `vk overflow`: replicas moved back in-cluster.
    pub reclaim_moves: Counter,
    /// Dollars per hour the live workloads cost, by provider (from the providers' lists).
    pub spend: Family<ProviderLabels, Gauge<f64, AtomicU64>>,
    /// Live workloads by provider (what `maxWorkloads` counts).
    pub workloads: Family<ProviderLabels, Gauge>,
    /// 1 while the provider's circuit breaker lets new pods through, 0 while it is open.
    pub provider_healthy: Family<ProviderLabels, Gauge>,
    /// Workloads created, by the dispatch policy that chose them and the provider.
    pub dispatch_decisions: Family<DispatchLabels, Counter>,
    /// Pods held by a guardrail now.
    pub held_pods: Gauge,
}

/// Latency buckets, seconds: 1 ms to 60 s.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Registers a clone of `metric` (a shared handle) as `name`.
/// A registry being filled, and the names put in it.
struct Registrar {
    registry: Registry,
    names: Vec<&'static str>,
}

impl Registrar {
    fn reg<M: prometheus_client::registry::Metric + Clone>(
        &mut self,
        name: &'static str,
        help: &str,
        metric: &M,
    ) {
        self.registry.register(name, help, metric.clone());
        self.names.push(name);
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut m = Self {
            registry: Arc::default(),
            registered: Arc::default(),
            reconciles: Family::<ResultLabels, Counter>::default(),
            provider_calls: Family::<CallLabels, Counter>::default(),
            provider_malformed: Family::<FieldLabels, Counter>::default(),
            status_writes: Counter::default(),
            pod_deletes: Counter::default(),
            gc_deletes: Counter::default(),
            events_dropped: Counter::default(),
            refusal_storm_held: Counter::default(),
            queue_depth: Gauge::default(),
            startup_reconcile_seconds: Gauge::<f64, AtomicU64>::default(),
            pods: Family::<PodLabels, Gauge>::default(),
            create_latency: Histogram::new(LATENCY_BUCKETS),
            status_latency: Histogram::new(LATENCY_BUCKETS),
            leader: Gauge::default(),
            overflow_admissions: Family::<OutcomeLabels, Counter>::default(),
            in_cluster_gpus: Family::<StateLabels, Gauge>::default(),
            offloaded_replicas: Family::<ProviderLabels, Gauge>::default(),
            reclaim_moves: Counter::default(),
            spend: Family::<ProviderLabels, Gauge<f64, AtomicU64>>::default(),
            workloads: Family::<ProviderLabels, Gauge>::default(),
            provider_healthy: Family::<ProviderLabels, Gauge>::default(),
            dispatch_decisions: Family::<DispatchLabels, Counter>::default(),
            held_pods: Gauge::default(),
        };
        // Registered in this order, which `/metrics` keeps.
        let mut r = Registrar {
            registry: Registry::with_prefix("gpu_vk"),
            names: Vec::new(),
        };
        m.register_pipeline(&mut r);
        m.register_latencies(&mut r);
        m.register_overflow(&mut r);
        m.register_providers(&mut r);
        m.registry = Arc::new(r.registry);
        m.registered = Arc::new(r.names);
        m
    }

    /// Registers the pod pipeline's metrics: reconciles, provider calls, what it wrote to
    /// or removed from the API server, its queue and the pods by phase.
    fn register_pipeline(&self, r: &mut Registrar) {
        r.reg("reconciles", "Pod reconciles by result", &self.reconciles);
        r.reg(
            "provider_calls",
            "Provider API calls by provider, operation and result",
            &self.provider_calls,
        );
        r.reg(
            "provider_malformed_answers",
            "Provider answers that broke the provider's schema, by provider and field",
            &self.provider_malformed,
        );
        r.reg(
            "pod_status_writes",
            "Pod status writes to the API server",
            &self.status_writes,
        );
        r.reg(
            "pod_deletes",
            "Pods removed from the API server after their workload was gone",
            &self.pod_deletes,
        );
        r.reg(
            "gc_deletes",
            "Orphaned provider workloads collected",
            &self.gc_deletes,
        );
        r.reg(
            "events_dropped",
            "Events dropped because the API server fell too far behind",
            &self.events_dropped,
        );
        r.reg(
            "refusal_storm_held",
            "Pods held instead of failed because more pods of their owner failed in a window than refusals.stormThreshold",
            &self.refusal_storm_held,
        );
        r.reg(
            "queue_depth",
            "Pods waiting to be reconciled",
            &self.queue_depth,
        );
        r.reg(
            "startup_reconcile_seconds",
            "Seconds from start until every pod and workload known at start-up was reconciled once (0 until then)",
            &self.startup_reconcile_seconds,
        );
        r.reg(
            "pods",
            "Pods on this node by provider and phase",
            &self.pods,
        );
    }

    /// Registers the latencies the VK adds, and whether this replica leads.
    fn register_latencies(&self, r: &mut Registrar) {
        r.reg(
            "pod_create_latency_seconds",
            "Seconds from the VK first seeing a pod to the provider accepting its workload",
            &self.create_latency,
        );
        r.reg(
            "pod_status_latency_seconds",
            "Seconds from a provider list showing a workload state change to the pod status write reporting it",
            &self.status_latency,
        );
        r.reg(
            "leader",
            "1 while this replica leads its node, 0 while it stands by (leader election)",
            &self.leader,
        );
    }

    /// Registers `vk overflow`'s metrics.
    fn register_overflow(&self, r: &mut Registrar) {
        r.reg(
            "overflow_admissions",
            "Opted-in pods admitted by the overflow webhook, by outcome (offload: may use the virtual node; refuse: stays in-cluster)",
            &self.overflow_admissions,
        );
        r.reg(
            "in_cluster_gpus",
            "GPUs of in-cluster (non-virtual, Ready, schedulable) nodes, allocatable and allocated",
            &self.in_cluster_gpus,
        );
        r.reg(
            "offloaded_replicas",
            "Opted-in replicas running on virtual nodes, by provider",
            &self.offloaded_replicas,
        );
        r.reg(
            "reclaim_moves",
            "Offloaded replicas evicted to move back to in-cluster GPUs",
            &self.reclaim_moves,
        );
    }

    /// Registers what the providers run and cost, their health, the dispatch decisions and
    /// the pods the guardrails hold.
    fn register_providers(&self, r: &mut Registrar) {
        r.reg(
            "spend_dollars_per_hour",
            "Dollars per hour the live workloads cost, by provider, from the providers' own lists",
            &self.spend,
        );
        r.reg(
            "provider_workloads",
            "Live (not finished) workloads by provider",
            &self.workloads,
        );
        r.reg(
            "provider_healthy",
            "1 while the provider's circuit breaker admits new pods, 0 while it is open",
            &self.provider_healthy,
        );
        r.reg(
            "dispatch_decisions",
            "Workloads created, by dispatch policy and provider",
            &self.dispatch_decisions,
        );
        r.reg(
            "held_pods",
            "Pods waiting Pending because a spend or workload guardrail is reached",
            &self.held_pods,
        );
    }

    pub fn call(&self, provider: &str, op: &str, ok: bool) {
        self.provider_calls
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                op: op.to_owned(),
                result: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
    }

    /// One answer of `provider` whose `field` broke its schema.
    pub fn malformed(&self, provider: &str, field: &str) {
        self.provider_malformed
            .get_or_create(&FieldLabels {
                provider: provider.to_owned(),
                field: field.to_owned(),
            })
            .inc();
    }

    /// Every metric the VK can export, by its full name (`gpu_vk_...`), in registration order.
    pub fn names(&self) -> Vec<String> {
        self.registered
            .iter()
            .map(|n| format!("gpu_vk_{n}"))
            .collect()
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// The metrics listener's routes, unauthenticated: `/metrics` (Prometheus text) and
    /// `/healthz` (`ok` while the process serves; the probe of the Helm chart's Deployment,
    /// since the kubelet API's `/healthz` needs TLS and credentials).
    pub fn router(self) -> Router {
        Router::new()
            .route(
                "/metrics",
                get(move || {
                    let m = self.clone();
                    async move {
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "text/plain; version=0.0.4",
                            )],
                            m.encode(),
                        )
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
    }

    /// Serves [`Self::router`] on `addr` until the process ends.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        axum::serve(listener, self.router()).await
    }
}

/// Installs the global tracing subscriber: JSON when `json`, else human-readable; level from
/// `RUST_LOG` (default `info`).
pub fn init_logging(json: bool) {
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: log files and `kubectl logs` get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Shows an error with its sources, `outer: inner: innermost`, for logs: error messages name
/// what failed and leave the cause to their source, so logging only the outer error would lose
/// it. Use as `warn!(error = %ErrorChain(&e), "...")`.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to renew lease")]
    struct Outer(#[source] std::io::Error);

    async fn get(app: Router, path: &str) -> (u16, String) {
        use tower::ServiceExt as _;
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// The Helm chart probes `/healthz` on the metrics listener without credentials.
    #[tokio::test]
    async fn metrics_listener_serves_healthz_and_metrics_without_credentials() {
        let metrics = Metrics::new();
        metrics.status_writes.inc();
        assert_eq!(
            get(metrics.clone().router(), "/healthz").await,
            (200, "ok".to_owned())
        );
        let (status, body) = get(metrics.router(), "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("gpu_vk_pod_status_writes_total 1"), "{body}");
    }

    #[test]
    fn error_chain_shows_every_source() {
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(
            ErrorChain(&e).to_string(),
            "failed to renew lease: connection refused"
        );
        let plain = std::io::Error::other("alone");
        assert_eq!(ErrorChain(&plain).to_string(), "alone");
    }

    #[test]
    fn the_grafana_dashboard_reads_only_metrics_the_vk_exports() {
        let text = include_str!("../../deploy/grafana-dashboard.json");
        let registered = Metrics::new().names();
        assert_eq!(registered.len(), 23, "{registered:?}");
        assert!(
            registered.contains(&"gpu_vk_provider_malformed_answers".to_owned()),
            "{registered:?}"
        );
        let mut names: Vec<&str> = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("gpu_vk_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            names.push(&tail[..end]);
            rest = &tail[end..];
        }
        assert!(names.len() >= 8, "{names:?}");
        for name in names {
            let base = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_total"))
                .unwrap_or(name);
            assert!(
                registered.iter().any(|r| r == base),
                "the dashboard reads {name}, which the VK does not export"
            );
        }
    }
}
