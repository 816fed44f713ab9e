//! Bounds on one exec session: the largest message a client may send, and how long a session
//! may go without traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};

/// The kubelet's default `streamingConnectionIdleTimeout` (`--streaming-connection-idle-timeout`,
/// KubeletConfiguration; 4 hours, the value the CIS Kubernetes benchmark's check 4.2.5 quotes).
pub const KUBELET_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);
/// The largest client message (and frame): 1 MiB. Client messages are stdin chunks and
/// resizes; kubectl sends stdin as it reads it, in chunks of a few KiB (`io.Copy`'s 32 KiB
/// buffer at most), so only a misbehaving client comes near.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Bounds on one exec session.
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    /// A session without a data message in either direction for this long is closed (`None`:
    /// never). As on the kubelet, whose WebSocket streams push their deadline forward on each
    /// message read or written, control frames (pings) do not count as traffic.
    pub idle_timeout: Option<Duration>,
    /// Largest WebSocket message or frame accepted from the client; a larger one ends the
    /// session (its size is known from the frame header, so it is never buffered).
    pub max_message_bytes: usize,
    /// Whether port-forward may dial a loopback, link-local or unspecified address a provider
    /// publishes. Off: such an address would let a pod's forward reach the VK's own host (its
    /// metrics port, a local API server, the cloud's metadata service), as probes may not
    /// either (`crate::pods::probe_target`); tests forwarding to loopback listeners turn it on.
    pub dial_local_targets: bool,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            idle_timeout: Some(KUBELET_IDLE_TIMEOUT),
            max_message_bytes: MAX_MESSAGE_BYTES,
            dial_local_targets: false,
        }
    }
}

/// When a session last carried data, shared by its two halves.
#[derive(Clone)]
pub(super) struct Activity {
    since: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            since: Instant::now(),
            last_ms: Arc::default(),
        }
    }

    /// Data went one way or the other just now.
    pub(super) fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once no data moved for `timeout`; never without one.
    pub(super) async fn idle(&self, timeout: Option<Duration>) {
        let Some(timeout) = timeout else {
            return std::future::pending().await;
        };
        loop {
            let deadline = self.last() + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// `(size, limit)` when a read failed because the client's message was over the limit.
pub(super) fn too_big(e: axum::Error) -> Option<(usize, usize)> {
    match *e.into_inner().downcast::<WsError>().ok()? {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            Some((size, max_size))
        }
        _ => None,
    }
}
