//! One server-side SPDY/3.1 connection: a reader task turning the client's frames into
//! [`Event`]s (answering SYN_STREAM with SYN_REPLY at once, and PING with PING), and a
//! [`Writer`] that sends replies and data under SPDY/3.1 flow control.
//!
//! Flow control, both ways:
//! - Receiving: each data frame the session has taken is granted back at once with
//!   WINDOW_UPDATE for its stream and for the connection, so a peer that honours windows never
//!   stalls. Client frames beyond the window are not refused: `moby/spdystream`, which every
//!   Go client uses, never looks at windows.
//! - Sending: a peer that does flow control shows it by sending WINDOW_UPDATE or SETTINGS;
//!   from then on data waits for window (64 KiB initial per stream and per connection, or the
//!   peer's `SETTINGS_INITIAL_WINDOW_SIZE`). A peer that never sent either is not held to it:
//!   `moby/spdystream` announces SPDY/3.1 but never sends WINDOW_UPDATE (it ignores the frame
//!   type, `connection.go`), so waiting for its window would stall every output over 64 KiB.
//!
//! Memory per connection is bounded whatever the client sends: a header block inflates to at
//! most [`MAX_HEADER_BLOCK`], at most [`MAX_OPEN_STREAMS`] client streams are open at once
//! (more are refused with RST_STREAM `REFUSED_STREAM`), and DATA on a stream the client never
//! opened, or already ended or reset, is answered with RST_STREAM `INVALID_STREAM` and
//! dropped, never passed on. The event queue to the session holds a few frames, each within
//! the frame limit.

mod reader;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use super::super::limits::Activity;
use crate::kubelet_api::spdy::headers::{Deflater, Inflater};
use crate::kubelet_api::spdy::{Decoder, Frame, FrameError, INITIAL_WINDOW, encode};
use reader::{Reader, Step};

/// The largest header block a client may send, inflated (kubectl's are a few hundred bytes;
/// 1 KiB of deflate can inflate to 1 MiB).
pub(super) const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Client streams open at once (port-forward opens two per forwarded connection).
pub(super) const MAX_OPEN_STREAMS: usize = 256;

/// What the client did.
#[derive(Debug)]
pub(super) enum Event {
    /// A new stream (already replied to), with its `streamtype` header and every header.
    Stream {
        id: u32,
        kind: String,
        headers: Vec<(String, String)>,
    },
    Data {
        id: u32,
        data: Bytes,
        fin: bool,
    },
    Reset {
        id: u32,
    },
    /// A frame (or tunnel message) over the size limit: the connection cannot go on.
    TooBig {
        size: usize,
        limit: usize,
    },
    /// The client closed the connection, sent GOAWAY, or broke the protocol.
    Gone,
}

#[derive(Default)]
struct Flow {
    /// The peer has shown it does flow control.
    enforced: bool,
    connection: i64,
    initial: i64,
    streams: HashMap<u32, i64>,
}

struct Out<W> {
    w: W,
    deflater: Deflater,
    buf: BytesMut,
}

/// The sending half, shared by the reader task and the session.
pub(super) struct Writer<W> {
    out: tokio::sync::Mutex<Out<W>>,
    flow: Mutex<Flow>,
    window: Notify,
}

impl<W: AsyncWrite + Unpin + Send> Writer<W> {
    pub(super) fn new(w: W) -> Result<Self, FrameError> {
        Ok(Self {
            out: tokio::sync::Mutex::new(Out {
                w,
                deflater: Deflater::new()?,
                buf: BytesMut::new(),
            }),
            flow: Mutex::new(Flow {
                enforced: false,
                connection: i64::from(INITIAL_WINDOW),
                initial: i64::from(INITIAL_WINDOW),
                streams: HashMap::new(),
            }),
            window: Notify::new(),
        })
    }

    async fn send(&self, frame: &Frame) -> Option<()> {
        let mut out = self.out.lock().await;
        let Out { w, buf, .. } = &mut *out;
        buf.clear();
        encode(frame, buf);
        w.write_all(buf).await.ok()?;
        w.flush().await.ok()
    }

    /// SYN_REPLY (no headers) for a client stream.
    async fn reply(&self, id: u32) -> Option<()> {
        let mut out = self.out.lock().await;
        let Out { w, deflater, buf } = &mut *out;
        let headers = Bytes::from(deflater.compress(&[]).ok()?);
        buf.clear();
        encode(
            &Frame::SynReply {
                stream_id: id,
                fin: false,
                headers,
            },
            buf,
        );
        w.write_all(buf).await.ok()?;
        w.flush().await.ok()
    }

    /// Sends `data` on stream `id` (in as many frames as the peer's window asks for), with FIN
    /// on the last one when `fin`. `None` when the connection is gone.
    pub(super) async fn data(&self, id: u32, data: Bytes, fin: bool) -> Option<()> {
        let mut rest = data;
        loop {
            let n = self.take_window(id, rest.len()).await;
            let chunk = rest.split_to(n);
            let last = rest.is_empty();
            self.send(&Frame::Data {
                stream_id: id,
                fin: fin && last,
                data: chunk,
            })
            .await?;
            if last {
                return Some(());
            }
        }
    }

    /// Waits for window to send up to `want` bytes on `id` (at least one, unless `want` is 0)
    /// and takes it.
    async fn take_window(&self, id: u32, want: usize) -> usize {
        let want_i = i64::try_from(want).unwrap_or(i64::MAX);
        loop {
            let notified = self.window.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut f = self.flow.lock().unwrap_or_else(|p| p.into_inner());
                if !f.enforced || want == 0 {
                    return want;
                }
                let initial = f.initial;
                let stream = *f.streams.entry(id).or_insert(initial);
                let n = want_i.min(stream).min(f.connection);
                if n > 0 {
                    f.connection -= n;
                    f.streams.insert(id, stream - n);
                    return usize::try_from(n).unwrap_or(0);
                }
            }
            notified.await;
        }
    }

    fn window_update(&self, id: u32, delta: u32) {
        let mut f = self.flow.lock().unwrap_or_else(|p| p.into_inner());
        f.enforced = true;
        let initial = f.initial;
        if id == 0 {
            f.connection += i64::from(delta);
        } else {
            *f.streams.entry(id).or_insert(initial) += i64::from(delta);
        }
        drop(f);
        self.window.notify_waiters();
    }

    fn initial_window(&self, value: u32) {
        let mut f = self.flow.lock().unwrap_or_else(|p| p.into_inner());
        f.enforced = true;
        let delta = i64::from(value) - f.initial;
        f.initial = i64::from(value);
        for w in f.streams.values_mut() {
            *w += delta;
        }
        drop(f);
        self.window.notify_waiters();
    }

    /// Gives the client back `n` bytes of window on `id` and on the connection.
    pub(super) async fn grant(&self, id: u32, n: usize) -> Option<()> {
        let Ok(delta) = u32::try_from(n) else {
            return Some(());
        };
        if delta == 0 {
            return Some(());
        }
        self.send(&Frame::WindowUpdate {
            stream_id: id,
            delta,
        })
        .await?;
        self.send(&Frame::WindowUpdate {
            stream_id: 0,
            delta,
        })
        .await
    }

    /// RST_STREAM on `id` with `status`.
    async fn reset(&self, id: u32, status: u32) -> Option<()> {
        self.send(&Frame::RstStream {
            stream_id: id,
            status,
        })
        .await
    }

    /// GOAWAY: no new streams; `last` is the last client stream seen.
    pub(super) async fn go_away(&self, last: u32, status: u32) -> Option<()> {
        self.send(&Frame::GoAway {
            last_good_stream_id: last,
            status,
        })
        .await
    }

    /// Closes the sending direction.
    pub(super) async fn shutdown(&self) {
        let mut out = self.out.lock().await;
        let _ = out.w.shutdown().await;
    }
}

/// A connection whose reader runs: the writer, the activity clock, the reader's events and
/// its task (aborted when the session ends).
pub(super) struct Started<IO> {
    pub writer: std::sync::Arc<Writer<tokio::io::WriteHalf<IO>>>,
    pub activity: Activity,
    pub events: mpsc::Receiver<Event>,
    pub reader: tokio::task::JoinHandle<()>,
}

/// Splits `io` and starts its reader, with frames of at most `max` bytes and at most `queue`
/// events waiting for the session. `None` when the connection cannot be set up.
pub(super) fn start<IO>(io: IO, max: usize, queue: usize) -> Option<Started<IO>>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let writer = std::sync::Arc::new(Writer::new(w).ok()?);
    let activity = Activity::new();
    let (tx, events) = mpsc::channel(queue);
    let reader = tokio::spawn(read(r, writer.clone(), tx, max, activity.clone()));
    Some(Started {
        writer,
        activity,
        events,
        reader,
    })
}

/// Reads the client's frames until the connection ends, answering what the connection layer
/// answers itself and passing the rest on as events. `max` bounds frames and decompressed
/// header blocks.
pub(super) async fn read<R, W>(
    mut r: R,
    writer: std::sync::Arc<Writer<W>>,
    events: mpsc::Sender<Event>,
    max: usize,
    activity: Activity,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let decoder = Decoder::new(max);
    let mut reader = Reader {
        writer: &writer,
        events,
        activity,
        inflater: Inflater::new(max.min(MAX_HEADER_BLOCK)),
        last_stream: 0,
        open: HashSet::new(),
    };
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        let step = match decoder.decode(&mut buf) {
            Ok(Some(frame)) => reader.frame(frame).await,
            Ok(None) => match r.read_buf(&mut buf).await {
                Ok(0) => Step::Last(Event::Gone),
                Err(e) => Step::Last(reader::read_failed(&e)),
                Ok(_) => Step::Next,
            },
            Err(FrameError::TooLarge { length, limit }) => Step::Last(Event::TooBig {
                size: length,
                limit,
            }),
            Err(_) => reader.protocol_error().await,
        };
        if !reader.carry_out(step).await {
            return;
        }
    }
}
