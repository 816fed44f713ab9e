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
//! both streams are closed. A pair not completed within 30 s, a stream of another type, or a
//! missing or invalid port is refused (the stream is closed at once). The connection ends with
//! the client, a frame over the size limit, or the idle timeout.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::debug;

use super::STREAM_CREATION_TIMEOUT;
use super::conn::{self, Event, Writer};
use crate::kubelet_api::exec::SessionLimits;
use crate::kubelet_api::exec::limits::Activity;
use crate::kubelet_api::spdy::goaway;
use crate::provider::Endpoint;

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
}

/// Picks the protocol as the kubelet's handshake does; `Err` is the refusal's message (400
/// without the header, 403 without `portforward.k8s.io` among the offers).
pub fn negotiate(headers: &axum::http::HeaderMap) -> Result<&'static str, (u16, String)> {
    let offered: Vec<String> = headers
        .get_all(super::PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
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

/// A forwarded connection being set up: its two streams as they arrive.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    since: Option<Instant>,
}

/// What the pairing of one new stream decided.
#[derive(Debug, PartialEq, Eq)]
enum Opened {
    /// Waiting for the other stream of its request.
    Waiting,
    /// The pair is complete: forward `port` over `data`, reporting on `error`.
    Complete { error: u32, data: u32, port: u16 },
    /// Not a stream this protocol knows, or a bad port: closed at once.
    Refused(String),
}

/// The request id of a stream: its `requestID` header, or for old clients the error stream's
/// id, or the data stream's id minus 2 (the kubelet's best effort for them).
fn request_id(id: u32, kind: &str, headers: &[(String, String)]) -> String {
    if let Some((_, v)) = headers
        .iter()
        .find(|(k, v)| k.eq_ignore_ascii_case("requestid") && !v.is_empty())
    {
        return v.clone();
    }
    match kind {
        "data" => id.saturating_sub(2).to_string(),
        _ => id.to_string(),
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Files one new stream under its request.
fn pair_stream(
    pairs: &mut HashMap<String, Pair>,
    id: u32,
    kind: &str,
    headers: &[(String, String)],
    now: Instant,
) -> Opened {
    if kind != "error" && kind != "data" {
        return Opened::Refused(format!("invalid stream type {kind:?}"));
    }
    let port = match header(headers, "port").map(str::parse::<u16>) {
        Some(Ok(p)) if p > 0 => p,
        Some(_) => return Opened::Refused("invalid port header".into()),
        None => return Opened::Refused("\"port\" header is required".into()),
    };
    let rid = request_id(id, kind, headers);
    let pair = pairs.entry(rid.clone()).or_default();
    pair.since.get_or_insert(now);
    pair.port = port;
    let slot = if kind == "error" {
        &mut pair.error
    } else {
        &mut pair.data
    };
    if slot.is_some() {
        return Opened::Refused(format!("request {rid} already has a {kind} stream"));
    }
    *slot = Some(id);
    match (pair.error, pair.data) {
        (Some(error), Some(data)) => {
            let port = pair.port;
            pairs.remove(&rid);
            Opened::Complete { error, data, port }
        }
        _ => Opened::Waiting,
    }
}

/// Runs a port-forward session on an upgraded connection until the client goes away.
pub async fn run<IO>(io: IO, setup: Setup)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let Ok(writer) = Writer::new(w) else {
        return;
    };
    let writer = Arc::new(writer);
    let activity = Activity::new();
    let (tx, mut events) = mpsc::channel::<Event>(16);
    let reader = tokio::spawn(conn::read(
        r,
        writer.clone(),
        tx,
        setup.limits.max_message_bytes,
        activity.clone(),
    ));
    let setup = Arc::new(setup);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    // Client data of each forwarded data stream, to its forwarding task.
    let mut inputs: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    // Data that came before its pair was complete.
    let mut early: HashMap<u32, Vec<Bytes>> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut last = 0u32;
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        let event = tokio::select! {
            e = events.recv() => e,
            _ = sweep.tick() => {
                expire(&mut pairs, &writer, Instant::now()).await;
                continue;
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            () = activity.idle(setup.limits.idle_timeout) => {
                debug!(pod = %setup.pod, "port-forward session idle; closing");
                break;
            }
        };
        match event {
            Some(Event::Stream { id, kind, headers }) => {
                debug!(pod = %setup.pod, stream = id, ?headers, "port-forward stream");
                last = last.max(id);
                match pair_stream(&mut pairs, id, &kind, &headers, Instant::now()) {
                    Opened::Waiting => {}
                    Opened::Refused(why) => {
                        debug!(pod = %setup.pod, stream = id, %why, "port-forward stream refused");
                        let _ = writer.data(id, Bytes::new(), true).await;
                    }
                    Opened::Complete { error, data, port } => {
                        let (in_tx, in_rx) = mpsc::channel(8);
                        for chunk in early.remove(&data).unwrap_or_default() {
                            let _ = in_tx.try_send(chunk);
                        }
                        inputs.insert(data, in_tx);
                        tasks.spawn(forward(
                            writer.clone(),
                            setup.clone(),
                            activity.clone(),
                            Streams { error, data, port },
                            in_rx,
                        ));
                    }
                }
            }
            Some(Event::Data { id, data, fin }) => {
                if let Some(tx) = inputs.get(&id) {
                    if !data.is_empty() && tx.send(data).await.is_err() {
                        inputs.remove(&id);
                    }
                    if fin {
                        // Dropping the sender ends the container side's input.
                        inputs.remove(&id);
                    }
                } else if !data.is_empty() {
                    let buffered = early.entry(id).or_default();
                    if buffered.len() < 8 {
                        buffered.push(data);
                    }
                }
            }
            Some(Event::Reset { id }) => {
                inputs.remove(&id);
                early.remove(&id);
            }
            Some(Event::TooBig { size, limit }) => {
                debug!(pod = %setup.pod, size, limit, "port-forward frame over the limit; closing");
                break;
            }
            Some(Event::Gone) | None => {
                debug!(pod = %setup.pod, "port-forward client gone");
                break;
            }
        }
    }
    tasks.abort_all();
    let _ = writer.go_away(last, goaway::OK).await;
    reader.abort();
    writer.shutdown().await;
}

/// Closes the streams of pairs not completed in time (the kubelet's stream creation timeout).
async fn expire<W: AsyncWrite + Unpin + Send>(
    pairs: &mut HashMap<String, Pair>,
    writer: &Writer<W>,
    now: Instant,
) {
    let old: Vec<String> = pairs
        .iter()
        .filter(|(_, p)| {
            p.since
                .is_some_and(|s| now.duration_since(s) >= STREAM_CREATION_TIMEOUT)
        })
        .map(|(k, _)| k.clone())
        .collect();
    for rid in old {
        if let Some(p) = pairs.remove(&rid) {
            for id in [p.error, p.data].into_iter().flatten() {
                let _ = writer.data(id, Bytes::new(), true).await;
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
        let dial = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port));
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

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn streams_pair_by_request_id_in_either_order() {
        let mut pairs = HashMap::new();
        let now = Instant::now();
        let data = h(&[("streamtype", "data"), ("port", "8080"), ("requestid", "7")]);
        let error = h(&[
            ("streamtype", "error"),
            ("port", "8080"),
            ("requestid", "7"),
        ]);
        assert_eq!(
            pair_stream(&mut pairs, 3, "data", &data, now),
            Opened::Waiting
        );
        assert_eq!(
            pair_stream(&mut pairs, 5, "error", &error, now),
            Opened::Complete {
                error: 5,
                data: 3,
                port: 8080
            }
        );
        assert!(pairs.is_empty());
    }

    #[test]
    fn old_clients_pair_by_stream_id() {
        let mut pairs = HashMap::new();
        let now = Instant::now();
        let error = h(&[("streamtype", "error"), ("port", "80")]);
        let data = h(&[("streamtype", "data"), ("port", "80")]);
        assert_eq!(
            pair_stream(&mut pairs, 1, "error", &error, now),
            Opened::Waiting
        );
        // Data stream 5 would pair with error stream 3: not this one.
        assert_eq!(
            pair_stream(&mut pairs, 5, "data", &data, now),
            Opened::Waiting
        );
        assert_eq!(
            pair_stream(&mut pairs, 3, "data", &data, now),
            Opened::Complete {
                error: 1,
                data: 3,
                port: 80
            }
        );
    }

    #[test]
    fn bad_streams_are_refused() {
        let mut pairs = HashMap::new();
        let now = Instant::now();
        let cases = [
            ("stdin", h(&[("port", "80")]), "invalid stream type"),
            ("data", h(&[]), "\"port\" header is required"),
            ("data", h(&[("port", "0")]), "invalid port header"),
            ("data", h(&[("port", "70000")]), "invalid port header"),
            ("data", h(&[("port", "http")]), "invalid port header"),
        ];
        for (i, (kind, headers, want)) in cases.into_iter().enumerate() {
            match pair_stream(&mut pairs, 2 * i as u32 + 1, kind, &headers, now) {
                Opened::Refused(m) => assert!(m.contains(want), "{m}"),
                o => panic!("{kind} {headers:?}: {o:?}"),
            }
        }
        let twice = h(&[("streamtype", "data"), ("port", "80"), ("requestid", "1")]);
        assert_eq!(
            pair_stream(&mut pairs, 21, "data", &twice, now),
            Opened::Waiting
        );
        assert!(matches!(
            pair_stream(&mut pairs, 23, "data", &twice, now),
            Opened::Refused(_)
        ));
    }

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
