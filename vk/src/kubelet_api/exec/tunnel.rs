//! The SPDY-over-WebSocket tunnel of `kubectl port-forward` (1.31 and later): the subprotocols
//! its handshake offers, and [`Tunnel`], which turns the WebSocket into the byte stream a
//! SPDY/3.1 session runs on.
//!
//! As the kubelet serves it (`getPortForward` in `pkg/kubelet/server/server.go`, through the
//! API server's `TunnelingHandler`): the client offers `SPDY/3.1+portforward.k8s.io`; once
//! upgraded, the binary messages of each direction carry the bytes of one SPDY/3.1
//! connection, cut anywhere (a frame may span messages, a message may hold several frames).
//! A text message is a protocol error (client-go's `TunnelingConnection` fails the read), a
//! close frame is the end of the stream, pings are answered by the WebSocket layer and carry
//! no data. Our end of the stream is a normal close (1000), which client-go reads as EOF.
//!
//! A client message over the session's size limit ends the stream with a [`TooBig`] error,
//! known from the frame header, so it is never buffered.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::ws::{CloseFrame, Message, close_code};
use axum::http::{HeaderMap, header};
use bytes::{Buf, Bytes};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};

/// What a tunnelling subprotocol starts with (`WebsocketsSPDYTunnelingPrefix`).
pub const PREFIX: &str = "SPDY/3.1+";
/// What it ends with (`KubernetesSuffix`).
const SUFFIX: &str = ".k8s.io";
/// The one tunnelled protocol served: SPDY port forwarding.
pub const PORT_FORWARD: &str = "SPDY/3.1+portforward.k8s.io";

/// The SPDY protocols a WebSocket upgrade offers to tunnel (its `SPDY/3.1+<p>.k8s.io`
/// subprotocols, prefix removed), in the client's order; `None` when the request is no
/// WebSocket upgrade.
pub fn offered(headers: &HeaderMap) -> Option<Vec<String>> {
    let websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    if !websocket {
        return None;
    }
    Some(
        headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|p| p.ends_with(SUFFIX))
            .filter_map(|p| p.strip_prefix(PREFIX))
            .map(str::to_owned)
            .collect(),
    )
}

/// A client message over the size limit.
#[derive(Debug, thiserror::Error)]
#[error("tunnel message of {size} bytes is over the limit of {limit}")]
pub struct TooBig {
    pub size: usize,
    pub limit: usize,
}

/// A WebSocket as a byte stream: binary messages in are bytes read, bytes written go out as
/// binary messages, a close frame (or the socket's end) is EOF.
#[derive(Debug)]
pub struct Tunnel<S> {
    ws: S,
    /// What is left of the last binary message read.
    pending: Bytes,
    eof: bool,
    /// Our close frame is sent (or being sent).
    closing: bool,
}

impl<S> Tunnel<S> {
    pub fn new(ws: S) -> Self {
        Self {
            ws,
            pending: Bytes::new(),
            eof: false,
            closing: false,
        }
    }
}

fn read_error(e: axum::Error) -> io::Error {
    let inner = e.into_inner();
    if let Some(WsError::Capacity(CapacityError::MessageTooLong { size, max_size })) =
        inner.downcast_ref::<WsError>()
    {
        return io::Error::new(
            io::ErrorKind::InvalidData,
            TooBig {
                size: *size,
                limit: *max_size,
            },
        );
    }
    io::Error::other(inner)
}

fn write_error(e: axum::Error) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e.into_inner())
}

impl<S> AsyncRead for Tunnel<S>
where
    S: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => this.pending = b,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => this.eof = true,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "text message in a SPDY tunnel (only binary messages carry it)",
                    )));
                }
                Some(Err(e)) => return Poll::Ready(Err(read_error(e))),
            }
        }
    }
}

impl<S> AsyncWrite for Tunnel<S>
where
    S: Sink<Message, Error = axum::Error> + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(write_error)?;
        Pin::new(&mut this.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(write_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_flush(cx)
            .map_err(write_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(write_error)?;
            // A normal close: client-go reads it as EOF, any other close as an error.
            let close = Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            }));
            Pin::new(&mut this.ws)
                .start_send(close)
                .map_err(write_error)?;
            this.closing = true;
        }
        Pin::new(&mut this.ws).poll_close(cx).map_err(write_error)
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A WebSocket stand-in: messages to read come from `incoming`; messages sent go to
    /// `outgoing`.
    struct Fake {
        incoming: mpsc::UnboundedReceiver<Result<Message, axum::Error>>,
        outgoing: mpsc::UnboundedSender<Message>,
    }

    impl Stream for Fake {
        type Item = Result<Message, axum::Error>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            Pin::new(&mut self.incoming).poll_next(cx)
        }
    }

    impl Sink<Message> for Fake {
        type Error = axum::Error;
        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn start_send(self: Pin<&mut Self>, m: Message) -> Result<(), Self::Error> {
            self.outgoing.unbounded_send(m).map_err(axum::Error::new)
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.outgoing.close_channel();
            Poll::Ready(Ok(()))
        }
    }

    type In = mpsc::UnboundedSender<Result<Message, axum::Error>>;

    fn tunnel() -> (Tunnel<Fake>, In, mpsc::UnboundedReceiver<Message>) {
        let (in_tx, incoming) = mpsc::unbounded();
        let (outgoing, out_rx) = mpsc::unbounded();
        (Tunnel::new(Fake { incoming, outgoing }), in_tx, out_rx)
    }

    fn bin(b: &[u8]) -> Result<Message, axum::Error> {
        Ok(Message::Binary(Bytes::copy_from_slice(b)))
    }

    #[tokio::test]
    async fn messages_read_as_one_byte_stream_whatever_their_cuts() {
        let (mut t, tx, _out) = tunnel();
        // One "frame" split over three messages, then two packed into one, with a ping and
        // an empty message between.
        for m in [
            bin(b"fra"),
            Ok(Message::Ping(Bytes::from_static(b"p"))),
            bin(b""),
            bin(b"me-1|"),
            bin(b"frame-2|frame-3|"),
        ] {
            tx.unbounded_send(m).unwrap();
        }
        tx.unbounded_send(Ok(Message::Close(None))).unwrap();
        // A message after the close is not read.
        tx.unbounded_send(bin(b"late")).unwrap();
        let mut got = Vec::new();
        // Small reads: a message larger than the buffer is handed out over several reads.
        let mut buf = [0u8; 4];
        loop {
            let n = t.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"frame-1|frame-2|frame-3|");
        assert_eq!(t.read(&mut buf).await.unwrap(), 0, "EOF stays EOF");
    }

    #[tokio::test]
    async fn the_end_of_the_socket_is_eof_and_a_text_message_an_error() {
        let (mut t, tx, _out) = tunnel();
        tx.unbounded_send(bin(b"x")).unwrap();
        drop(tx);
        let mut got = Vec::new();
        t.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"x");

        let (mut t, tx, _out) = tunnel();
        tx.unbounded_send(Ok(Message::Text("hello".into())))
            .unwrap();
        let e = t.read(&mut [0u8; 8]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("text message"), "{e}");
    }

    #[tokio::test]
    async fn an_oversized_message_is_a_too_big_error() {
        let (mut t, tx, _out) = tunnel();
        let capacity = WsError::Capacity(CapacityError::MessageTooLong {
            size: 2 << 20,
            max_size: 1 << 20,
        });
        tx.unbounded_send(Err(axum::Error::new(capacity))).unwrap();
        let e = t.read(&mut [0u8; 8]).await.unwrap_err();
        let big = e
            .get_ref()
            .and_then(|e| e.downcast_ref::<TooBig>())
            .expect("a TooBig error");
        assert_eq!((big.size, big.limit), (2 << 20, 1 << 20));
    }

    #[tokio::test]
    async fn writes_are_binary_messages_and_shutdown_a_normal_close() {
        let (mut t, _tx, mut out) = tunnel();
        t.write_all(b"syn-reply").await.unwrap();
        t.write_all(b"data").await.unwrap();
        t.flush().await.unwrap();
        t.shutdown().await.unwrap();
        assert!(t.write(b"more").await.is_err(), "no writes after the close");
        let mut sent = Vec::new();
        while let Ok(m) = out.try_recv() {
            sent.push(m);
        }
        assert_eq!(
            sent,
            vec![
                Message::Binary(Bytes::from_static(b"syn-reply")),
                Message::Binary(Bytes::from_static(b"data")),
                Message::Close(Some(CloseFrame {
                    code: close_code::NORMAL,
                    reason: "".into(),
                })),
            ]
        );
    }

    #[test]
    fn only_kubernetes_spdy_subprotocols_are_tunnelled() {
        let mut h = HeaderMap::new();
        assert_eq!(offered(&h), None);
        h.insert(header::UPGRADE, "WebSocket".parse().unwrap());
        assert_eq!(offered(&h), Some(vec![]));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "v5.channel.k8s.io, SPDY/3.1+portforward.k8s.io"
                .parse()
                .unwrap(),
        );
        h.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            "SPDY/3.1+other.example, SPDY/3.1+v4.channel.k8s.io"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            offered(&h),
            Some(vec![
                "portforward.k8s.io".to_owned(),
                "v4.channel.k8s.io".to_owned()
            ])
        );
    }
}
