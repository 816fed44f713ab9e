//! The port-forward streams waiting for their pair, and the client data that came before
//! them, bounded per session: at most [`MAX_PENDING`] requests waiting for their second
//! stream (a stream beyond is refused) and [`MAX_EARLY_BYTES`] of data held for streams not
//! yet paired (the request that would pass it is closed). Data for a stream this session is
//! not holding is not kept.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;

use super::super::STREAM_CREATION_TIMEOUT;

/// Requests waiting for their second stream (kubectl opens the two streams of one request
/// back to back; each forwarded TCP connection is one request).
pub const MAX_PENDING: usize = 64;
/// Client data held for streams whose pair is not complete, over the session.
pub const MAX_EARLY_BYTES: usize = 256 * 1024;

/// A forwarded connection being set up: its two streams as they arrive.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    since: Option<Instant>,
}

impl Pair {
    fn ids(&self) -> impl Iterator<Item = u32> {
        [self.error, self.data].into_iter().flatten()
    }
}

/// What the pairing of one new stream decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Waiting for the other stream of its request.
    Waiting,
    /// The pair is complete: forward `port` over `data`, reporting on `error`; `early` is
    /// what the client sent on `data` before.
    Complete {
        error: u32,
        data: u32,
        port: u16,
        early: Vec<Bytes>,
    },
    /// Not a stream this protocol knows, a bad port, or too many waiting: closed at once.
    Refused(String),
}

/// What became of client data on a stream not forwarded yet.
#[derive(Debug, PartialEq, Eq)]
pub enum Early {
    /// Held until the stream's pair is complete.
    Held,
    /// No waiting request has this stream: dropped.
    Unknown,
    /// Over [`MAX_EARLY_BYTES`]: the request is given up; close these streams.
    Close(Vec<u32>),
}

/// The session's waiting requests and their early data.
#[derive(Default)]
pub struct Pending {
    pairs: HashMap<String, Pair>,
    /// Stream id -> its request.
    members: HashMap<u32, String>,
    early: HashMap<u32, Vec<Bytes>>,
    early_bytes: usize,
}

impl Pending {
    /// Files one new stream under its request.
    pub fn open(
        &mut self,
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
        if !self.pairs.contains_key(&rid) && self.pairs.len() >= MAX_PENDING {
            return Opened::Refused(format!(
                "{MAX_PENDING} port-forward requests are already waiting for their second stream"
            ));
        }
        let pair = self.pairs.entry(rid.clone()).or_default();
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
                self.forget(&rid);
                let early = self.take_early(data);
                Opened::Complete {
                    error,
                    data,
                    port,
                    early,
                }
            }
            _ => {
                self.members.insert(id, rid);
                Opened::Waiting
            }
        }
    }

    /// Client data on stream `id`, which is not forwarded yet.
    pub fn data(&mut self, id: u32, data: Bytes) -> Early {
        let Some(rid) = self.members.get(&id).cloned() else {
            return Early::Unknown;
        };
        if self.early_bytes + data.len() > MAX_EARLY_BYTES {
            let ids = self.forget(&rid);
            for i in &ids {
                self.take_early(*i);
            }
            return Early::Close(ids);
        }
        self.early_bytes += data.len();
        self.early.entry(id).or_default().push(data);
        Early::Held
    }

    /// The client reset stream `id`: its request waits no more.
    pub fn reset(&mut self, id: u32) {
        if let Some(rid) = self.members.get(&id).cloned() {
            for i in self.forget(&rid) {
                self.take_early(i);
            }
        }
    }

    /// Gives up the requests not completed within the stream creation timeout (the
    /// kubelet's); returns their streams, to close.
    pub fn expire(&mut self, now: Instant) -> Vec<u32> {
        let old: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| {
                p.since
                    .is_some_and(|s| now.duration_since(s) >= STREAM_CREATION_TIMEOUT)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut ids = Vec::new();
        for rid in old {
            for i in self.forget(&rid) {
                self.take_early(i);
                ids.push(i);
            }
        }
        ids
    }

    /// Removes request `rid`; returns its streams.
    fn forget(&mut self, rid: &str) -> Vec<u32> {
        let ids: Vec<u32> = self
            .pairs
            .remove(rid)
            .map(|p| p.ids().collect())
            .unwrap_or_default();
        for i in &ids {
            self.members.remove(i);
        }
        ids
    }

    fn take_early(&mut self, id: u32) -> Vec<Bytes> {
        let chunks = self.early.remove(&id).unwrap_or_default();
        self.early_bytes -= chunks.iter().map(Bytes::len).sum::<usize>();
        chunks
    }

    /// Bytes held for streams not yet paired.
    #[cfg(test)]
    pub fn early_bytes(&self) -> usize {
        self.early_bytes
    }

    /// Requests waiting for their second stream.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.pairs.len()
    }
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

#[cfg(test)]
mod tests;
