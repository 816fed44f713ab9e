//! Serving the router over the [`TlsListener`]'s connections with deadlines a client cannot
//! stretch (the reason this is ours and not `axum::serve`, which sets none): a request's
//! headers must arrive within [`Deadlines::header`] (HTTP/1.1; hyper's own timer, which also
//! runs while a kept-alive connection waits for its next request), and a connection with no
//! request in flight for [`Deadlines::idle`] is closed gracefully (HTTP/1.1 and HTTP/2; a
//! streamed response, a followed log for example, is in flight until its body ends). Upgraded
//! connections (exec, attach, port-forward) leave hyper and keep their own idle timeout.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::serve::Listener;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::debug;

use super::{Peer, TlsConn, TlsListener};

/// How long a client may take over the parts of a connection it controls.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Request headers, from the first byte the server waits for to the end of the head.
    pub header: Duration,
    /// A connection with no request in flight this long is closed.
    pub idle: Duration,
}

impl Default for Deadlines {
    /// Headers within 10 s, far above any real client; idle connections kept 90 s, long enough
    /// for the API server to reuse one between its calls.
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(90),
        }
    }
}

/// Serves `router` on every connection `listener` hands over, until the listener ends; each
/// request carries `ConnectInfo<Peer>` (its client's address and certificate identity).
pub async fn serve(mut listener: TlsListener, router: Router, deadlines: Deadlines) {
    loop {
        let (conn, addr) = listener.accept().await;
        let peer = Peer::of(&conn, addr);
        let router = router.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(conn, peer, router, deadlines).await {
                debug!(peer = %addr, error = %e, "kubelet API connection ended with an error");
            }
        });
    }
}

async fn connection(
    conn: TlsConn,
    peer: Peer,
    router: Router,
    deadlines: Deadlines,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let activity = Arc::new(Activity::default());
    let tracked = activity.clone();
    let service = tower::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer.clone()));
        let guard = tracked.begin();
        let router = router.clone();
        async move {
            let res = router.oneshot(req.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(res.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    _guard: guard,
                })
            }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(deadlines.header);
    builder.http2().timer(TokioTimer::new());
    let serving = builder
        .serve_connection_with_upgrades(TokioIo::new(conn), TowerToHyperService::new(service));
    tokio::pin!(serving);
    let mut closing = false;
    loop {
        tokio::select! {
            r = serving.as_mut() => return r,
            () = activity.idle_for(deadlines.idle), if !closing => {
                debug!("closing an idle kubelet API connection");
                serving.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// Requests in flight on one connection and when the last one ended.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    last_end: std::sync::Mutex<Instant>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            last_end: std::sync::Mutex::new(Instant::now()),
        }
    }
}

impl Activity {
    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Resolves once no request has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let since = *self.last_end.lock().unwrap_or_else(|e| e.into_inner());
            let due = since + idle;
            if self.in_flight.load(Ordering::SeqCst) == 0 && Instant::now() >= due {
                return;
            }
            // Busy: look again a deadline later (a request ending restarts the count).
            let next = if self.in_flight.load(Ordering::SeqCst) == 0 {
                due
            } else {
                Instant::now() + idle
            };
            tokio::time::sleep_until(next).await;
        }
    }
}

/// One request in flight: ends when its response body is finished or dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_end.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request in flight until it is done.
struct Tracked {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "serve/tests.rs"]
mod tests;
