//! The one decorator around every provider call: a timeout, the call metrics and a tracing
//! span, applied once when the adapters are built (in the spirit of a tower layer), so no
//! caller wraps a provider call by hand.
//!
//! A call that outlives its timeout becomes [`ProviderError::Transient`], which the pipeline
//! retries with back-off. Streams handed back by `logs` and `exec` are not bounded by the
//! timeout: it covers opening them, not reading them. Every outcome also feeds the provider's
//! circuit breaker ([`super::health`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::health::Breaker;
use super::{
    BoxFuture, Capabilities, DynProvider, ExecRequest, ExecSession, Inventory, LogOptions,
    LogStream, Observed, ProviderError, Workload,
};
use crate::telemetry::Metrics;

/// Timeout of a single provider call unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A provider with the timeout, metrics and tracing of every call applied.
pub struct Layered {
    inner: Arc<dyn DynProvider>,
    metrics: Metrics,
    timeout: Duration,
    breaker: Arc<Breaker>,
}

/// Wraps `inner` so each call is bounded by `timeout`, counted in `metrics`, traced and fed
/// to `breaker`.
pub fn layer(
    inner: Arc<dyn DynProvider>,
    metrics: Metrics,
    timeout: Duration,
    breaker: Arc<Breaker>,
) -> Arc<Layered> {
    Arc::new(Layered {
        inner,
        metrics,
        timeout,
        breaker,
    })
}

/// Whether a call outcome counts as a success in the metrics: `NotFound` from a delete means
/// the workload is gone, which is what the delete was for.
fn succeeded<T>(op: &str, r: &Result<T, ProviderError>) -> bool {
    match r {
        Ok(_) => true,
        Err(ProviderError::NotFound) => op == "delete",
        Err(_) => false,
    }
}

impl Layered {
    /// Runs one call of `op` under the timeout, a span and the metrics.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: BoxFuture<'_, Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let name = self.inner.name();
        let span = tracing::debug_span!("provider_call", provider = %name, op);
        let started = Instant::now();
        let result = match tokio::time::timeout(self.timeout, fut.instrument(span)).await {
            Ok(r) => r,
            Err(_) => Err(ProviderError::transient(format!(
                "{op} timed out after {}s",
                self.timeout.as_secs()
            ))),
        };
        self.metrics.call(name, op, succeeded(op, &result));
        if let Err(ProviderError::Malformed { field, .. }) = &result {
            self.metrics.malformed(name, field);
        }
        // Streams (logs, exec) report only on opening; `Unsupported` says nothing of health.
        if !matches!(result, Err(ProviderError::Unsupported { .. })) {
            self.breaker
                .record(&result, started.elapsed(), Instant::now());
        }
        result
    }
}

impl DynProvider for Layered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn create<'a>(&'a self, w: &'a Workload) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(self.call("create", self.inner.create(w)))
    }

    fn delete<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(self.call("delete", self.inner.delete(provider_id)))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Observed>, ProviderError>> {
        Box::pin(self.call("list", self.inner.list()))
    }

    fn inventory(&self) -> BoxFuture<'_, Result<Inventory, ProviderError>> {
        Box::pin(self.call("inventory", self.inner.inventory()))
    }

    fn vanished_cause(&self) -> Option<super::Vanished> {
        self.inner.vanished_cause()
    }

    fn logs<'a>(
        &'a self,
        provider_id: &'a str,
        opts: &'a LogOptions,
    ) -> BoxFuture<'a, Result<LogStream, ProviderError>> {
        Box::pin(self.call("logs", self.inner.logs(provider_id, opts)))
    }

    fn exec<'a>(
        &'a self,
        provider_id: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, Result<ExecSession, ProviderError>> {
        Box::pin(self.call("exec", self.inner.exec(provider_id, req)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Provider;

    /// An adapter whose calls take `delay` and answer `answer`.
    struct Slow {
        delay: Duration,
        answer: Result<(), ProviderError>,
    }

    impl Provider for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn create(&self, _w: &Workload) -> Result<(), ProviderError> {
            tokio::time::sleep(self.delay).await;
            self.answer.clone()
        }
        async fn delete(&self, _id: &str) -> Result<(), ProviderError> {
            tokio::time::sleep(self.delay).await;
            self.answer.clone()
        }
        async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
            tokio::time::sleep(self.delay).await;
            self.answer.clone().map(|()| Vec::new())
        }
    }

    fn layered(delay: Duration, answer: Result<(), ProviderError>) -> (Arc<Layered>, Metrics) {
        let metrics = Metrics::new();
        let p = layer(
            Arc::new(Slow { delay, answer }),
            metrics.clone(),
            Duration::from_millis(50),
            Arc::new(Breaker::new(Default::default())),
        );
        (p, metrics)
    }

    fn count(m: &Metrics, op: &str, result: &str) -> u64 {
        m.provider_calls
            .get_or_create(&crate::telemetry::CallLabels {
                provider: "slow".into(),
                op: op.into(),
                result: result.into(),
            })
            .get()
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_the_timeout_is_transient_and_counted_as_an_error() {
        let (p, m) = layered(Duration::from_secs(5), Ok(()));
        let err = p.list().await.err();
        assert!(
            matches!(&err, Some(ProviderError::Transient { message, .. }) if message.contains("list timed out")),
            "{err:?}"
        );
        assert_eq!(count(&m, "list", "error"), 1);
        assert_eq!(count(&m, "list", "ok"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn not_found_is_success_for_delete_only() {
        let (p, m) = layered(Duration::ZERO, Err(ProviderError::NotFound));
        assert_eq!(p.delete("x").await, Err(ProviderError::NotFound));
        assert_eq!(count(&m, "delete", "ok"), 1);
        let w = crate::test_support::workload();
        assert_eq!(p.create(&w).await, Err(ProviderError::NotFound));
        assert_eq!(count(&m, "create", "error"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timely_answer_passes_through() {
        let (p, m) = layered(Duration::ZERO, Ok(()));
        assert_eq!(p.list().await.map(|l| l.len()), Ok(0));
        assert_eq!(count(&m, "list", "ok"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_malformed_answer_is_counted_by_provider_and_field() {
        let malformed = ProviderError::Malformed {
            provider: "slow".into(),
            field: "Pod.id".into(),
            message: "no id".into(),
        };
        let (p, m) = layered(Duration::ZERO, Err(malformed.clone()));
        assert_eq!(p.list().await, Err(malformed));
        assert_eq!(count(&m, "list", "error"), 1);
        let text = m.encode();
        assert!(
            text.contains(
                r#"gpu_vk_provider_malformed_answers_total{provider="slow",field="Pod.id"} 1"#
            ),
            "{text}"
        );
    }
}
