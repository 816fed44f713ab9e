//! The listener of the kubelet API: accepts connections up to a limit, completes TLS
//! handshakes concurrently under a deadline and hands axum finished connections.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

use super::TlsConfigs;

#[cfg(test)]
mod tests;

/// How often at most the refusals above the connection limit are logged.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Bounds on the connections of the kubelet API.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, handshaking or established; a connection above it is closed
    /// as soon as it is accepted.
    pub max_connections: usize,
    /// A client must finish its TLS handshake within this, or its connection is closed (one
    /// that connects and says nothing holds a slot no longer).
    pub handshake_timeout: Duration,
}

impl Limits {
    /// The handshake deadline: far above a real handshake, even across regions, and short
    /// enough that connections which never send a ClientHello cannot pile up.
    pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn new(max_connections: usize) -> Self {
        Self {
            max_connections,
            handshake_timeout: Self::HANDSHAKE_TIMEOUT,
        }
    }
}

/// One established connection; its slot under [`Limits::max_connections`] is freed when it
/// is dropped (axum drops it when the connection ends).
pub struct TlsConn {
    tls: TlsStream<TcpStream>,
    _slot: OwnedSemaphorePermit,
}

impl TlsConn {
    /// The TLS stream (for the peer's certificate).
    pub fn tls(&self) -> &TlsStream<TcpStream> {
        &self.tls
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }
}

/// Accepts TCP connections and completes TLS handshakes concurrently (a slow client cannot hold
/// up others), handing finished connections to axum. The accept loop never waits for a slot:
/// above the limit it closes the new connection at once and goes on accepting.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsConn, SocketAddr)>,
    local: Option<SocketAddr>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, configs: Arc<TlsConfigs>, limits: Limits) -> Self {
        let local = tcp.local_addr().ok();
        let (tx, rx) = mpsc::channel(64);
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let task = tokio::spawn(async move {
            let mut refused = 0u64;
            let mut logged: Option<Instant> = None;
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    drop(stream);
                    refused += 1;
                    if logged.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL) {
                        warn!(
                            max_connections = limits.max_connections,
                            refused,
                            "kubelet API connection limit reached: closing new connections"
                        );
                        logged = Some(Instant::now());
                        refused = 0;
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let acceptor = TlsAcceptor::from(configs.current());
                let tx = tx.clone();
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream))
                            .await;
                    match handshake {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((TlsConn { tls, _slot: slot }, addr)).await;
                        }
                        Ok(Err(e)) => debug!(peer = %addr, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Self { rx, local, task }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            // The accept task is gone (it only ends with the listener): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| std::io::Error::other("listener has no local address"))
    }
}
