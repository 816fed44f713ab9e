//! What the reader task does with each client frame: the answers the connection layer gives
//! itself (SYN_REPLY, PING, RST_STREAM for streams over the bound or never opened, window
//! updates) and the [`Event`]s it passes on to the session.

use std::collections::HashSet;
use std::io;

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;

use super::{Event, MAX_OPEN_STREAMS, Writer};
use crate::kubelet_api::exec::limits::Activity;
use crate::kubelet_api::exec::tunnel::TooBig;
use crate::kubelet_api::spdy::headers::Inflater;
use crate::kubelet_api::spdy::{Frame, SETTINGS_INITIAL_WINDOW_SIZE, goaway, rst};

/// What the reader does after a frame (or a failed read).
pub(super) enum Step {
    /// Nothing for the session: on to the next frame.
    Next,
    /// An event for the session; the reader stops when the session is gone, or after
    /// [`Event::Gone`].
    Emit(Event),
    /// The last event for the session: the reader stops after it, delivered or not.
    Last(Event),
    /// The reader stops without a word (the session is gone).
    Stop,
}

/// The event a failed read of the connection ends with.
pub(super) fn read_failed(e: &io::Error) -> Event {
    // A tunnel message over the limit (see `exec::tunnel`) is one.
    match e.get_ref().and_then(|e| e.downcast_ref::<TooBig>()) {
        Some(big) => Event::TooBig {
            size: big.size,
            limit: big.limit,
        },
        None => Event::Gone,
    }
}

/// The reader task's state between frames.
pub(super) struct Reader<'a, W> {
    pub writer: &'a Writer<W>,
    pub events: mpsc::Sender<Event>,
    pub activity: Activity,
    pub inflater: Inflater,
    /// The highest client stream id seen, for GOAWAY.
    pub last_stream: u32,
    /// Client streams that may still send data.
    pub open: HashSet<u32>,
}

impl<W: AsyncWrite + Unpin + Send> Reader<'_, W> {
    /// Carries `step` out: whether the reader goes on.
    pub(super) async fn carry_out(&self, step: Step) -> bool {
        match step {
            Step::Next => true,
            Step::Emit(e) => {
                let gone = matches!(e, Event::Gone);
                self.events.send(e).await.is_ok() && !gone
            }
            Step::Last(e) => {
                let _ = self.events.send(e).await;
                false
            }
            Step::Stop => false,
        }
    }

    /// The client broke the protocol: GOAWAY, and the session hears it is gone.
    pub(super) async fn protocol_error(&self) -> Step {
        let _ = self
            .writer
            .go_away(self.last_stream, goaway::PROTOCOL_ERROR)
            .await;
        Step::Last(Event::Gone)
    }

    /// Answers one frame of the client's.
    pub(super) async fn frame(&mut self, frame: Frame) -> Step {
        match frame {
            Frame::SynStream {
                stream_id,
                headers,
                fin,
                ..
            } => self.syn_stream(stream_id, &headers, fin).await,
            Frame::Data {
                stream_id,
                fin,
                data,
            } => self.data(stream_id, fin, data).await,
            Frame::RstStream { stream_id, .. } => {
                self.open.remove(&stream_id);
                Step::Emit(Event::Reset { id: stream_id })
            }
            Frame::Ping { id } => {
                // Echo the client's pings (odd ids); even ids would be answers to ours, and
                // this side sends none.
                if id % 2 == 1 && self.writer.send(&Frame::Ping { id }).await.is_none() {
                    return Step::Last(Event::Gone);
                }
                Step::Next
            }
            Frame::GoAway { .. } => Step::Emit(Event::Gone),
            Frame::WindowUpdate { stream_id, delta } => {
                self.writer.window_update(stream_id, delta);
                Step::Next
            }
            Frame::Settings { entries, .. } => {
                for e in entries {
                    if e.id == SETTINGS_INITIAL_WINDOW_SIZE {
                        self.writer.initial_window(e.value);
                    }
                }
                Step::Next
            }
            // Header blocks after SYN_STREAM must still go through the decompressor, or the
            // next block would not decode.
            Frame::Headers { headers, .. } => {
                if self.inflater.decompress(&headers).is_err() {
                    return self.protocol_error().await;
                }
                Step::Next
            }
            Frame::SynReply { headers, .. } => {
                let _ = self.inflater.decompress(&headers);
                Step::Next
            }
            Frame::Unknown { .. } => Step::Next,
        }
    }

    /// Resets `stream_id` with `code` and goes on, unless the connection is gone.
    async fn reset(&mut self, stream_id: u32, code: u32) -> Step {
        if self.writer.reset(stream_id, code).await.is_none() {
            return Step::Last(Event::Gone);
        }
        Step::Next
    }

    /// A new client stream: refused over [`MAX_OPEN_STREAMS`], else replied to and passed on
    /// with its `streamtype`.
    async fn syn_stream(&mut self, stream_id: u32, headers: &[u8], fin: bool) -> Step {
        let Ok(headers) = self.inflater.decompress(headers) else {
            return self.protocol_error().await;
        };
        self.last_stream = self.last_stream.max(stream_id);
        if self.open.len() >= MAX_OPEN_STREAMS {
            return self.reset(stream_id, rst::REFUSED_STREAM).await;
        }
        // A stream opened half-closed carries no data.
        if !fin {
            self.open.insert(stream_id);
        }
        if self.writer.reply(stream_id).await.is_none() {
            return Step::Last(Event::Gone);
        }
        let kind = headers
            .iter()
            .find(|(k, _)| k == "streamtype")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Step::Emit(Event::Stream {
            id: stream_id,
            kind,
            headers,
        })
    }

    /// Data on a client stream: reset when the stream is not open, else passed on and its
    /// window granted back once the session took it.
    async fn data(&mut self, stream_id: u32, fin: bool, data: Bytes) -> Step {
        if !self.open.contains(&stream_id) {
            return self.reset(stream_id, rst::INVALID_STREAM).await;
        }
        if fin {
            self.open.remove(&stream_id);
        }
        if !data.is_empty() {
            self.activity.touch();
        }
        let n = data.len();
        let sent = self
            .events
            .send(Event::Data {
                id: stream_id,
                data,
                fin,
            })
            .await;
        if sent.is_err() || self.writer.grant(stream_id, n).await.is_none() {
            return Step::Stop;
        }
        Step::Next
    }
}
