//! Per-workload log ring buffer (container output and emulator lifecycle lines).

use std::collections::VecDeque;

use jiff::Timestamp;
use serde::Serialize;

/// Most lines kept per workload.
pub const MAX_LINES: usize = 10_000;
/// Most bytes kept per workload.
pub const MAX_BYTES: usize = 2 * 1024 * 1024;
/// Longest single line kept (longer lines are cut).
pub const MAX_LINE: usize = 16 * 1024;

/// Which stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The container's stdout/stderr.
    Container,
    /// Host lifecycle lines written by the emulator (RunPod `system`, Vast daemon logs).
    System,
}

/// One line.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    /// Increasing per workload, never reused.
    pub seq: u64,
    /// When the line was produced.
    pub ts: Timestamp,
    /// Stream.
    pub source: LogSource,
    /// Text without the trailing newline.
    pub line: String,
}

/// Bounded buffer; the oldest lines go first.
#[derive(Debug, Default)]
pub struct LogBuffer {
    lines: VecDeque<LogLine>,
    next_seq: u64,
    bytes: usize,
}

impl LogBuffer {
    /// Append a line.
    pub fn push(&mut self, ts: Timestamp, source: LogSource, line: impl Into<String>) {
        let mut line: String = line.into();
        if line.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        self.next_seq += 1;
        self.bytes += line.len();
        self.lines.push_back(LogLine {
            seq: self.next_seq,
            ts,
            source,
            line,
        });
        while self.lines.len() > MAX_LINES || self.bytes > MAX_BYTES {
            match self.lines.pop_front() {
                Some(old) => self.bytes -= old.line.len(),
                None => break,
            }
        }
    }

    /// Lines with `seq > after`, of the given source (or all), at most the last `tail`.
    pub fn after(
        &self,
        after: u64,
        source: Option<LogSource>,
        tail: Option<usize>,
    ) -> Vec<LogLine> {
        let matching: Vec<&LogLine> = self
            .lines
            .iter()
            .filter(|l| l.seq > after && source.is_none_or(|s| l.source == s))
            .collect();
        let skip = tail.map_or(0, |t| matching.len().saturating_sub(t));
        matching.into_iter().skip(skip).cloned().collect()
    }

    /// Highest sequence number handed out so far.
    pub fn last_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_filtered() {
        let mut b = LogBuffer::default();
        for i in 0..(MAX_LINES + 5) {
            b.push(Timestamp::UNIX_EPOCH, LogSource::Container, format!("l{i}"));
        }
        b.push(Timestamp::UNIX_EPOCH, LogSource::System, "sys");
        let all = b.after(0, None, None);
        assert_eq!(all.len(), MAX_LINES);
        assert_eq!(b.after(0, Some(LogSource::System), None).len(), 1);
        let tail = b.after(0, Some(LogSource::Container), Some(2));
        assert_eq!(
            tail.iter().map(|l| l.line.as_str()).collect::<Vec<_>>(),
            [format!("l{}", MAX_LINES + 3), format!("l{}", MAX_LINES + 4)]
        );
        assert!(b.after(b.last_seq(), None, None).is_empty());
    }
}
