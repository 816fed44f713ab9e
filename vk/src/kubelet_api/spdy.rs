//! SPDY/3.1 framing (SPDY Protocol draft 3.1), the transport `kubectl exec` and the API server
//! use towards kubelets that do not take WebSockets: every control frame the protocol defines
//! (SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE) and data
//! frames, decoded incrementally from a byte buffer (a frame may arrive split anywhere) and
//! encoded into one.
//!
//! Header blocks stay compressed in [`Frame`]: decoding them needs the connection's single zlib
//! stream per direction ([`headers::Inflater`], [`headers::Deflater`]).
//!
//! A frame whose length field exceeds the decoder's limit is refused from its 8-byte header,
//! before anything of it is buffered; a malformed frame is an error, never a panic. Control
//! frames of an unknown type are skipped, as the protocol asks.
//!
//! Peers seen in practice: client-go and the API server speak it through `moby/spdystream`
//! (`connection.go`), which sends `Upgrade: SPDY/3.1` but neither sends nor honours
//! WINDOW_UPDATE or SETTINGS (it ignores both frame types); the session layer
//! ([`super::exec`]'s SPDY part) copes with that.

pub mod dictionary;
pub mod headers;
#[cfg(test)]
mod tests;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// The largest length a frame header can carry (24 bits).
pub const MAX_LENGTH: usize = (1 << 24) - 1;
/// SPDY/3.1's initial flow-control window, per stream and for the whole connection.
pub const INITIAL_WINDOW: u32 = 64 * 1024;
/// SETTINGS id of the initial per-stream window.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// Control frame types.
pub mod kind {
    pub const SYN_STREAM: u16 = 1;
    pub const SYN_REPLY: u16 = 2;
    pub const RST_STREAM: u16 = 3;
    pub const SETTINGS: u16 = 4;
    pub const PING: u16 = 6;
    pub const GOAWAY: u16 = 7;
    pub const HEADERS: u16 = 8;
    pub const WINDOW_UPDATE: u16 = 9;
}

/// RST_STREAM status codes used here.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const FRAME_TOO_LARGE: u32 = 11;
}

/// GOAWAY status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

const FLAG_FIN: u8 = 0x01;
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const FLAG_CLEAR_SETTINGS: u8 = 0x01;
const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// One SETTINGS entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    /// 24 bits.
    pub id: u32,
    pub value: u32,
}

/// A decoded frame. Header blocks are the compressed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Bytes,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Bytes,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Bytes,
    },
    WindowUpdate {
        /// 0: the connection's window.
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    /// A control frame of a type this implementation does not know (skipped).
    Unknown {
        kind: u16,
    },
}

/// Why bytes are not a valid frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("SPDY frame of {length} bytes exceeds the limit of {limit} bytes")]
    TooLarge { length: usize, limit: usize },
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("malformed SPDY {frame} frame: {why}")]
    Malformed {
        frame: &'static str,
        why: &'static str,
    },
    #[error("malformed SPDY header block: {0}")]
    Header(&'static str),
}

fn malformed(frame: &'static str, why: &'static str) -> FrameError {
    FrameError::Malformed { frame, why }
}

/// Decodes frames from a buffer that fills as bytes arrive.
#[derive(Clone, Copy, Debug)]
pub struct Decoder {
    /// Largest frame payload accepted (the length field), at most [`MAX_LENGTH`].
    pub max_length: usize,
}

impl Decoder {
    pub fn new(max_length: usize) -> Self {
        Self {
            max_length: max_length.min(MAX_LENGTH),
        }
    }

    /// The next whole frame at the front of `buf` (removed from it), `None` while it is
    /// incomplete. After an error the connection cannot be resynchronised.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let length = (usize::from(buf[5]) << 16) | (usize::from(buf[6]) << 8) | usize::from(buf[7]);
        if length > self.max_length {
            return Err(FrameError::TooLarge {
                length,
                limit: self.max_length,
            });
        }
        if buf.len() < 8 + length {
            // Ask for the rest in one allocation.
            buf.reserve(8 + length - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(8 + length).freeze();
        let first = frame.get_u32();
        let flags = frame.get_u8();
        frame.advance(3);
        let body = frame;
        if first & 0x8000_0000 == 0 {
            let stream_id = first & STREAM_ID_MASK;
            if stream_id == 0 {
                return Err(malformed("DATA", "stream id 0"));
            }
            return Ok(Some(Frame::Data {
                stream_id,
                fin: flags & FLAG_FIN != 0,
                data: body,
            }));
        }
        let version = u16::try_from((first >> 16) & 0x7fff).unwrap_or(0);
        let kind = u16::try_from(first & 0xffff).unwrap_or(0);
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        control(kind, flags, body).map(Some)
    }
}

fn stream_id(frame: &'static str, b: &mut Bytes) -> Result<u32, FrameError> {
    let id = b.get_u32() & STREAM_ID_MASK;
    if id == 0 {
        return Err(malformed(frame, "stream id 0"));
    }
    Ok(id)
}

fn exact(frame: &'static str, b: &Bytes, n: usize) -> Result<(), FrameError> {
    if b.len() == n {
        Ok(())
    } else {
        Err(malformed(frame, "wrong length"))
    }
}

fn at_least(frame: &'static str, b: &Bytes, n: usize) -> Result<(), FrameError> {
    if b.len() >= n {
        Ok(())
    } else {
        Err(malformed(frame, "too short"))
    }
}

fn control(kind: u16, flags: u8, mut b: Bytes) -> Result<Frame, FrameError> {
    let fin = flags & FLAG_FIN != 0;
    Ok(match kind {
        kind::SYN_STREAM => {
            at_least("SYN_STREAM", &b, 10)?;
            let stream_id = stream_id("SYN_STREAM", &mut b)?;
            let associated_to = b.get_u32() & STREAM_ID_MASK;
            let priority = b.get_u8() >> 5;
            let _slot = b.get_u8();
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                fin,
                unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                headers: b,
            }
        }
        kind::SYN_REPLY => {
            at_least("SYN_REPLY", &b, 4)?;
            let stream_id = stream_id("SYN_REPLY", &mut b)?;
            Frame::SynReply {
                stream_id,
                fin,
                headers: b,
            }
        }
        kind::HEADERS => {
            at_least("HEADERS", &b, 4)?;
            let stream_id = stream_id("HEADERS", &mut b)?;
            Frame::Headers {
                stream_id,
                fin,
                headers: b,
            }
        }
        kind::RST_STREAM => {
            exact("RST_STREAM", &b, 8)?;
            let stream_id = stream_id("RST_STREAM", &mut b)?;
            Frame::RstStream {
                stream_id,
                status: b.get_u32(),
            }
        }
        kind::SETTINGS => {
            at_least("SETTINGS", &b, 4)?;
            let n = usize::try_from(b.get_u32()).unwrap_or(usize::MAX);
            if b.len() / 8 != n || !b.len().is_multiple_of(8) {
                return Err(malformed(
                    "SETTINGS",
                    "entry count does not match the length",
                ));
            }
            let entries = (0..n)
                .map(|_| {
                    let head = b.get_u32();
                    Setting {
                        flags: u8::try_from(head >> 24).unwrap_or(0),
                        id: head & 0x00ff_ffff,
                        value: b.get_u32(),
                    }
                })
                .collect();
            Frame::Settings {
                clear: flags & FLAG_CLEAR_SETTINGS != 0,
                entries,
            }
        }
        kind::PING => {
            exact("PING", &b, 4)?;
            Frame::Ping { id: b.get_u32() }
        }
        kind::GOAWAY => {
            exact("GOAWAY", &b, 8)?;
            Frame::GoAway {
                last_good_stream_id: b.get_u32() & STREAM_ID_MASK,
                status: b.get_u32(),
            }
        }
        kind::WINDOW_UPDATE => {
            exact("WINDOW_UPDATE", &b, 8)?;
            let stream_id = b.get_u32() & STREAM_ID_MASK;
            let delta = b.get_u32() & STREAM_ID_MASK;
            if delta == 0 {
                return Err(malformed("WINDOW_UPDATE", "delta 0"));
            }
            Frame::WindowUpdate { stream_id, delta }
        }
        other => Frame::Unknown { kind: other },
    })
}

fn put_control(out: &mut BytesMut, kind: u16, flags: u8, body: &[u8]) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    put_flags_length(out, flags, body.len());
    out.put_slice(body);
}

fn put_flags_length(out: &mut BytesMut, flags: u8, len: usize) {
    // Callers keep bodies under 2^24 bytes; a larger one would be a bug, cut to the field.
    let len = u32::try_from(len.min(MAX_LENGTH)).unwrap_or(0);
    out.put_u32((u32::from(flags) << 24) | len);
}

/// Appends `frame` to `out`. Payloads over [`MAX_LENGTH`] are the caller's to split (data) or
/// to avoid (header blocks); stream ids are masked to 31 bits.
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    let fin = |f: bool| if f { FLAG_FIN } else { 0 };
    match frame {
        Frame::Data {
            stream_id,
            fin: f,
            data,
        } => {
            out.put_u32(stream_id & STREAM_ID_MASK);
            put_flags_length(out, fin(*f), data.len());
            out.put_slice(data);
        }
        Frame::SynStream {
            stream_id,
            associated_to,
            priority,
            fin: f,
            unidirectional,
            headers,
        } => {
            let mut b = BytesMut::with_capacity(10 + headers.len());
            b.put_u32(stream_id & STREAM_ID_MASK);
            b.put_u32(associated_to & STREAM_ID_MASK);
            b.put_u8((priority & 0x07) << 5);
            b.put_u8(0);
            b.put_slice(headers);
            let flags = fin(*f)
                | if *unidirectional {
                    FLAG_UNIDIRECTIONAL
                } else {
                    0
                };
            put_control(out, kind::SYN_STREAM, flags, &b);
        }
        Frame::SynReply {
            stream_id,
            fin: f,
            headers,
        }
        | Frame::Headers {
            stream_id,
            fin: f,
            headers,
        } => {
            let k = if matches!(frame, Frame::SynReply { .. }) {
                kind::SYN_REPLY
            } else {
                kind::HEADERS
            };
            let mut b = BytesMut::with_capacity(4 + headers.len());
            b.put_u32(stream_id & STREAM_ID_MASK);
            b.put_slice(headers);
            put_control(out, k, fin(*f), &b);
        }
        Frame::RstStream { stream_id, status } => {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
            b[4..].copy_from_slice(&status.to_be_bytes());
            put_control(out, kind::RST_STREAM, 0, &b);
        }
        Frame::Settings { clear, entries } => {
            let mut b = BytesMut::with_capacity(4 + 8 * entries.len());
            b.put_u32(u32::try_from(entries.len()).unwrap_or(0));
            for e in entries {
                b.put_u32((u32::from(e.flags) << 24) | (e.id & 0x00ff_ffff));
                b.put_u32(e.value);
            }
            let flags = if *clear { FLAG_CLEAR_SETTINGS } else { 0 };
            put_control(out, kind::SETTINGS, flags, &b);
        }
        Frame::Ping { id } => put_control(out, kind::PING, 0, &id.to_be_bytes()),
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&(last_good_stream_id & STREAM_ID_MASK).to_be_bytes());
            b[4..].copy_from_slice(&status.to_be_bytes());
            put_control(out, kind::GOAWAY, 0, &b);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
            b[4..].copy_from_slice(&(delta & STREAM_ID_MASK).to_be_bytes());
            put_control(out, kind::WINDOW_UPDATE, 0, &b);
        }
        Frame::Unknown { kind } => put_control(out, *kind, 0, &[]),
    }
}
