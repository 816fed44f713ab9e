//! SPDY/3 header blocks: the name/value block (a 32-bit count, then each name and value as a
//! 32-bit length and its bytes; several values of one name joined by NUL), compressed with zlib
//! primed with [`DICTIONARY`](super::dictionary::DICTIONARY).
//!
//! Each direction of a connection is **one** zlib stream: every block a side sends continues the
//! stream of the previous one (ended by a sync flush so the peer can decode it at once), and the
//! receiver keeps one decompressor for all blocks it reads. Resetting either per frame breaks
//! the second block.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::FrameError;
use super::dictionary::DICTIONARY;

/// Decoded headers: lower-case names and their values (NUL-joined when repeated).
pub type Headers = Vec<(String, String)>;

/// Writes the uncompressed name/value block of `headers` (names lower-cased, as SPDY/3 wants).
pub fn encode_block(headers: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len(headers.len()));
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        out.extend_from_slice(&len(name.len()));
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&len(value.len()));
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Reads an uncompressed name/value block. Names must be non-empty; a block that ends early,
/// or has bytes after its last pair, is malformed.
pub fn decode_block(raw: &[u8]) -> Result<Headers, FrameError> {
    let bad = |why| FrameError::Header(why);
    let mut rest = raw;
    let mut take = |n: usize| -> Result<&[u8], FrameError> {
        if rest.len() < n {
            return Err(bad("header block ends early"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let read_len = |b: &[u8]| -> usize {
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        usize::try_from(u32::from_be_bytes(a)).unwrap_or(usize::MAX)
    };
    let count = read_len(take(4)?);
    // Each pair takes at least 8 bytes: a count larger than that is a lie, not a reason to
    // reserve memory.
    if count > raw.len() / 8 {
        return Err(bad("header count larger than the block"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let n = read_len(take(4)?);
        let name = take(n)?;
        if name.is_empty() {
            return Err(bad("empty header name"));
        }
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let n = read_len(take(4)?);
        let value = String::from_utf8_lossy(take(n)?).into_owned();
        headers.push((name, value));
    }
    if !rest.is_empty() {
        return Err(bad("bytes after the last header"));
    }
    Ok(headers)
}

/// The compressing side of a connection's header stream.
pub struct Deflater {
    z: Compress,
}

impl Deflater {
    pub fn new() -> Result<Self, FrameError> {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(&DICTIONARY)
            .map_err(|_| FrameError::Header("cannot prime the header compressor"))?;
        Ok(Self { z })
    }

    /// Compresses `headers` as the next block of this connection's stream.
    pub fn compress(&mut self, headers: &[(String, String)]) -> Result<Vec<u8>, FrameError> {
        let raw = encode_block(headers);
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut used = 0usize;
        loop {
            if out.len() == out.capacity() {
                out.reserve(256);
            }
            let before = self.z.total_in();
            self.z
                .compress_vec(&raw[used..], &mut out, FlushCompress::Sync)
                .map_err(|_| FrameError::Header("header compression failed"))?;
            used += usize::try_from(self.z.total_in() - before).unwrap_or(usize::MAX);
            // Done once all input is in and the flush left room to spare.
            if used >= raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The decompressing side of a connection's header stream.
pub struct Inflater {
    z: Decompress,
    /// Largest decompressed block accepted (a small compressed block may expand a lot).
    max: usize,
}

impl Inflater {
    pub fn new(max: usize) -> Self {
        Self {
            z: Decompress::new(true),
            max,
        }
    }

    /// Decompresses the next block of this connection's stream and decodes its headers.
    pub fn decompress(&mut self, block: &[u8]) -> Result<Headers, FrameError> {
        let mut out: Vec<u8> = Vec::with_capacity(block.len().saturating_mul(4).min(self.max) + 64);
        let mut used = 0usize;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= self.max {
                    return Err(FrameError::Header("decompressed header block too large"));
                }
                out.reserve((out.len().max(256)).min(self.max - out.len()).max(1));
            }
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let r = self
                .z
                .decompress_vec(&block[used..], &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            let produced = self.z.total_out() - out0;
            used = used.saturating_add(consumed);
            match r {
                Ok(Status::StreamEnd) => {
                    return Err(FrameError::Header("header stream ended"));
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(&DICTIONARY)
                        .map_err(|_| FrameError::Header("header block uses another dictionary"))?;
                    continue;
                }
                Err(_) => return Err(FrameError::Header("corrupt compressed header block")),
            }
            if used >= block.len() && out.len() < out.capacity() {
                break;
            }
            if consumed == 0 && produced == 0 && out.len() < out.capacity() {
                return Err(FrameError::Header("truncated compressed header block"));
            }
        }
        decode_block(&out)
    }
}
