//! Binding a listening address that may still be held for a moment: by the previous process of
//! this VK (a restarted process, or a `hostNetwork` pod whose predecessor is still terminating).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::warn;

/// How long a listener waits for its address to be released before giving up.
pub const BIND_PATIENCE: Duration = Duration::from_secs(30);

/// Binds `addr`; while it is in use, tries again every half second for up to `patience`, then
/// returns the last error. Other errors (no such address, no permission) return at once.
pub async fn bind_when_free(addr: SocketAddr, patience: Duration) -> std::io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut warned = false;
    loop {
        match TcpListener::bind(addr).await {
            Err(e)
                if e.kind() == ErrorKind::AddrInUse && tokio::time::Instant::now() < deadline =>
            {
                if !warned {
                    warn!(%addr, "address in use; waiting for it to be released");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_in_use_is_bound_once_released_and_refused_after_the_patience() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        // Still held past the patience: the error, not a listener.
        let e = bind_when_free(addr, Duration::from_millis(700))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse);
        // Released while waiting: bound.
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            drop(held);
        });
        let l = bind_when_free(addr, Duration::from_secs(10)).await.unwrap();
        assert_eq!(l.local_addr().unwrap(), addr);
        release.await.unwrap();
    }
}
