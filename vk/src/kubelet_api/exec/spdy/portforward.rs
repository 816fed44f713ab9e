//! Port forwarding over SPDY/3.1 (`portforward.k8s.io`), as the kubelet serves it
//! (`cri-streaming`'s `pkg/streaming/portforward/httpstream.go`), to where the pod's provider
//! publishes the container port ([`crate::provider::Observed::ports`]).
//!
//! The connection is SPDY/3.1 itself, or the SPDY-over-WebSocket tunnel of kubectl 1.31 and
//! later ([`crate::kubelet_api::exec::tunnel`]), which an API server before 1.36 unwraps into
//! SPDY and a 1.36 one passes through to a node declaring `ExtendWebSocketsToKubelet`; the
//! session is the same over both ([`run`] takes any byte stream). The client opens a pair of
//! streams per forwarded connection, both carrying the headers `port` and `requestID`, one
//! with `streamType: error` and one with `streamType: data`; clients older than the
//! `requestID` header are paired by stream id (the error stream's id, the data stream's id
//! minus 2), as the kubelet does. Once a pair is complete the VK dials the published address
//! and copies bytes both ways until either side ends; a failure is written as text on the
//! error stream (`error forwarding port <port> to pod <ns/pod>, uid <uid>: <why>`), after which
//! both streams are closed. A pair not completed within 30 s, a stream of another type, a
//! missing or invalid port, or a request over the session's bounds ([`pending`]: requests
//! waiting for their pair, data sent before it) is refused (the stream is closed at once). The connection ends with
//! the client, a frame over the size limit, or the idle timeout.

mod pending;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::debug;

use super::conn::{self, Event, Writer};
use crate::kubelet_api::exec::SessionLimits;
use crate::kubelet_api::exec::limits::Activity;
use crate::kubelet_api::spdy::goaway;
use crate::provider::Endpoint;
use pending::{Early, Opened, Pending};

/// The one SPDY port-forward protocol (the kubelet's `SupportedPortForwardProtocols`).
pub const PROTOCOL: &str = "portforward.k8s.io";
/// How long dialling the published address may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read from the container's side per data frame.
const CHUNK: usize = 32 * 1024;

/// What a session forwards to.
#[derive(Clone, Debug)]
pub struct Setup {
    /// `namespace/pod`, for messages and logs.
    pub pod: String,
    pub uid: String,
    pub provider: String,
    /// Where the provider publishes each container port.
    pub ports: BTreeMap<u16, Endpoint>,
    pub limits: SessionLimits,
    /// The cluster's own networks (`clusterNetworks`): never dialled.
    pub cluster_networks: std::sync::Arc<[ipnet::IpNet]>,
}

/// Picks the protocol as the kubelet's handshake does; `Err` is the refusal's message (400
/// without the header, 403 without `portforward.k8s.io` among the offers).
pub fn negotiate(headers: &axum::http::HeaderMap) -> Result<&'static str, (u16, String)> {
    let offered = super::offered(headers);
    if offered.is_empty() {
        return Err((
            400,
            format!(
                "unable to upgrade: header X-Stream-Protocol-Version does not name a protocol \
                 (this kubelet serves {PROTOCOL})"
            ),
        ));
    }
    choose(&offered)
}

/// Picks [`PROTOCOL`] among the SPDY protocols a client offers (its SPDY handshake's header,
/// or those its WebSocket tunnel offers); `Err` is the 403 of the kubelet's handshake.
pub fn choose(offered: &[String]) -> Result<&'static str, (u16, String)> {
    if offered.iter().any(|o| o == PROTOCOL) {
        Ok(PROTOCOL)
    } else {
        Err((
            403,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, \
                 server accepts [\"{PROTOCOL}\"]"
            ),
        ))
    }
}

/// Runs a port-forward session on an upgraded connection until the client goes away.
pub async fn run<IO>(io: IO, setup: Setup)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let Some(conn::Started {
        writer,
        activity,
        mut events,
        reader,
    }) = conn::start(io, setup.limits.max_message_bytes, 16)
    else {
        return;
    };
    let mut s = Session {
        writer,
        setup: Arc::new(setup),
        activity,
        pending: Pending::default(),
        inputs: HashMap::new(),
        tasks: JoinSet::new(),
        last: 0,
    };
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        let event = tokio::select! {
            e = events.recv() => e,
            _ = sweep.tick() => {
                s.expire().await;
                continue;
            }
            Some(_) = s.tasks.join_next(), if !s.tasks.is_empty() => continue,
            () = s.activity.idle(s.setup.limits.idle_timeout) => {
                debug!(pod = %s.setup.pod, "port-forward session idle; closing");
                break;
            }
        };
        match event {
            Some(Event::Stream { id, kind, headers }) => s.stream(id, &kind, &headers).await,
            Some(Event::Data { id, data, fin }) => s.data(id, data, fin).await,
            Some(Event::Reset { id }) => {
                s.inputs.remove(&id);
                s.pending.reset(id);
            }
            Some(Event::TooBig { size, limit }) => {
                debug!(pod = %s.setup.pod, size, limit, "port-forward frame over the limit; closing");
                break;
            }
            Some(Event::Gone) | None => {
                debug!(pod = %s.setup.pod, "port-forward client gone");
                break;
            }
        }
    }
    s.tasks.abort_all();
    let _ = s.writer.go_away(s.last, goaway::OK).await;
    reader.abort();
    s.writer.shutdown().await;
}

/// A session's forwarded connections, and the requests still waiting for their pair.
struct Session<W> {
    writer: Arc<Writer<W>>,
    setup: Arc<Setup>,
    activity: Activity,
    /// Requests waiting for their second stream, and data sent on them meanwhile (bounded).
    pending: Pending,
    /// Client data of each forwarded data stream, to its forwarding task.
    inputs: HashMap<u32, mpsc::Sender<Bytes>>,
    tasks: JoinSet<()>,
    /// The last client stream seen, for GOAWAY.
    last: u32,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Session<W> {
    /// Closes the streams of the requests whose pair did not come in time.
    async fn expire(&mut self) {
        for id in self.pending.expire(Instant::now()) {
            let _ = self.writer.data(id, Bytes::new(), true).await;
        }
    }

    /// A new client stream: waits for its pair, is refused (closed at once), or completes a
    /// pair, whose forwarding starts.
    async fn stream(&mut self, id: u32, kind: &str, headers: &[(String, String)]) {
        debug!(pod = %self.setup.pod, stream = id, ?headers, "port-forward stream");
        self.last = self.last.max(id);
        match self.pending.open(id, kind, headers, Instant::now()) {
            Opened::Waiting => {}
            Opened::Refused(why) => {
                debug!(pod = %self.setup.pod, stream = id, %why, "port-forward stream refused");
                let _ = self.writer.data(id, Bytes::new(), true).await;
            }
            Opened::Complete {
                error,
                data,
                port,
                early,
            } => {
                // Room for what came early (bounded by `pending`) and 8 chunks more.
                let (in_tx, in_rx) = mpsc::channel(early.len() + 8);
                for chunk in early {
                    let _ = in_tx.try_send(chunk);
                }
                self.inputs.insert(data, in_tx);
                self.tasks.spawn(forward(
                    self.writer.clone(),
                    self.setup.clone(),
                    self.activity.clone(),
                    Streams { error, data, port },
                    in_rx,
                ));
            }
        }
    }

    /// Client data: to its forwarding task, or held until its stream's pair is complete.
    async fn data(&mut self, id: u32, data: Bytes, fin: bool) {
        if let Some(tx) = self.inputs.get(&id) {
            if !data.is_empty() && tx.send(data).await.is_err() {
                self.inputs.remove(&id);
            }
            if fin {
                // Dropping the sender ends the container side's input.
                self.inputs.remove(&id);
            }
        } else if !data.is_empty()
            && let Early::Close(ids) = self.pending.data(id, data)
        {
            debug!(pod = %self.setup.pod, stream = id, "port-forward data before its pair over the limit; request closed");
            for i in ids {
                let _ = self.writer.data(i, Bytes::new(), true).await;
            }
        }
    }
}

/// The two streams of one forwarded connection.
#[derive(Clone, Copy, Debug)]
struct Streams {
    error: u32,
    data: u32,
    port: u16,
}

/// Forwards one connection: dials the published address and copies both ways; a failure goes
/// on the error stream. Both streams are closed at the end.
async fn forward<W: AsyncWrite + Unpin + Send>(
    writer: Arc<Writer<W>>,
    setup: Arc<Setup>,
    activity: Activity,
    s: Streams,
    mut input: mpsc::Receiver<Bytes>,
) {
    let outcome = async {
        let Some(endpoint) = setup.ports.get(&s.port) else {
            return Err(format!(
                "provider {} publishes no address for port {}",
                setup.provider, s.port
            ));
        };
        if !setup.limits.dial_local_targets && crate::config::pod_ip::is_local_host(&endpoint.host)
        {
            return Err(format!(
                "provider {} publishes {endpoint} for port {}, a loopback or link-local \
                 address, which the virtual kubelet does not dial",
                setup.provider, s.port
            ));
        }
        if crate::config::pod_ip::in_networks(&endpoint.host, &setup.cluster_networks) {
            return Err(format!(
                "provider {} publishes {endpoint} for port {}, an address of the cluster's own \
                 networks (clusterNetworks), which the virtual kubelet does not dial",
                setup.provider, s.port
            ));
        }
        // Resolved and checked once, then dialled at that address (a name is judged by what it
        // resolves to, not by its text).
        let addr = crate::pods::networks::dial_address(
            &endpoint.host,
            endpoint.port,
            &setup.cluster_networks,
            setup.limits.dial_local_targets,
        )
        .await
        .map_err(|why| {
            format!(
                "provider {} publishes {endpoint} for port {}: {why}",
                setup.provider, s.port
            )
        })?;
        let dial = tokio::net::TcpStream::connect(addr);
        let tcp = match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(format!("dial tcp {endpoint}: {e}")),
            Err(_) => return Err(format!("dial tcp {endpoint}: i/o timeout")),
        };
        debug!(pod = %setup.pod, port = s.port, %endpoint, "port-forward connection open");
        let (mut from, mut to) = tcp.into_split();
        let upstream = async {
            while let Some(chunk) = input.recv().await {
                if to.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            let _ = to.shutdown().await;
        };
        let downstream = async {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        activity.touch();
                        let chunk = Bytes::copy_from_slice(&buf[..n]);
                        if writer.data(s.data, chunk, false).await.is_none() {
                            return;
                        }
                    }
                }
            }
        };
        // The connection is done when the container's side closes; the client's end of input
        // only half-closes it (the answer may still be on its way).
        tokio::pin!(upstream);
        tokio::pin!(downstream);
        let mut input_open = true;
        loop {
            tokio::select! {
                () = &mut downstream => break,
                () = &mut upstream, if input_open => input_open = false,
            }
        }
        Ok(())
    }
    .await;
    if let Err(why) = outcome {
        let msg = format!(
            "error forwarding port {} to pod {}, uid {}: {why}",
            s.port, setup.pod, setup.uid
        );
        debug!(pod = %setup.pod, port = s.port, error = %why, "port-forward failed");
        let _ = writer.data(s.error, Bytes::from(msg), false).await;
    }
    let _ = writer.data(s.data, Bytes::new(), true).await;
    let _ = writer.data(s.error, Bytes::new(), true).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_wants_the_port_forward_protocol() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(negotiate(&headers).unwrap_err().0, 400);
        headers.insert(
            super::super::PROTOCOL_HEADER,
            "v4.channel.k8s.io".parse().unwrap(),
        );
        assert_eq!(negotiate(&headers).unwrap_err().0, 403);
        headers.insert(
            super::super::PROTOCOL_HEADER,
            "foo, portforward.k8s.io".parse().unwrap(),
        );
        assert_eq!(negotiate(&headers), Ok(PROTOCOL));
    }
}
