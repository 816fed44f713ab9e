//! srun's own task reports (`srun: error: <node>: task 0: Exited with exit code 7`) taken out
//! of an exec session's stderr, which keeps everything else.

use bytes::{Bytes, BytesMut};

/// Removes srun's task reports (`srun: error: <node>: task 0: Exited with exit code 7`) from
/// its stderr, passing everything else through. Bytes that might begin such a report are held
/// back until the line is complete (at most [`SrunStderr::MAX_HELD`]).
#[derive(Debug, Default)]
pub(crate) struct SrunStderr {
    held: BytesMut,
}

impl SrunStderr {
    const MARK: &'static [u8] = b"srun: error: ";
    const MAX_HELD: usize = 4096;

    /// Feeds a chunk; returns what can be passed on now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.held.extend_from_slice(chunk);
        let mut out = BytesMut::new();
        loop {
            match find(&self.held, Self::MARK) {
                Some(i) => {
                    out.extend_from_slice(&self.held.split_to(i));
                    match self.held.iter().position(|b| *b == b'\n') {
                        Some(nl) => {
                            let line = self.held.split_to(nl + 1);
                            if !is_task_report(&line) {
                                out.extend_from_slice(&line);
                            }
                        }
                        None => {
                            if self.held.len() > Self::MAX_HELD {
                                out.extend_from_slice(&self.held.split());
                            }
                            break;
                        }
                    }
                }
                None => {
                    let keep = partial_suffix(&self.held, Self::MARK);
                    let emit = self.held.len() - keep;
                    out.extend_from_slice(&self.held.split_to(emit));
                    break;
                }
            }
        }
        out.freeze()
    }

    /// At end of stream: whatever is still held.
    pub(crate) fn finish(&mut self) -> Bytes {
        let rest = self.held.split().freeze();
        if is_task_report(&rest) {
            return Bytes::new();
        }
        rest
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of the longest end of `hay` that is a proper start of `mark`.
fn partial_suffix(hay: &[u8], mark: &[u8]) -> usize {
    (1..mark.len().min(hay.len() + 1))
        .rev()
        .find(|&n| hay.ends_with(&mark[..n]))
        .unwrap_or(0)
}

/// `srun: error: <node>: task[s] <ids>: <what>` (with or without the final newline).
fn is_task_report(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let Some(rest) = text.strip_prefix("srun: error: ") else {
        return false;
    };
    let Some((node, rest)) = rest.split_once(": ") else {
        return false;
    };
    if node.is_empty() || node.contains(char::is_whitespace) {
        return false;
    }
    let Some(rest) = rest
        .strip_prefix("tasks ")
        .or_else(|| rest.strip_prefix("task "))
    else {
        return false;
    };
    let Some((ids, what)) = rest.split_once(": ") else {
        return false;
    };
    !ids.is_empty()
        && ids
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ',' | '-' | '[' | ']'))
        && !what.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = SrunStderr::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&f.push(c));
        }
        out.extend_from_slice(&f.finish());
        out
    }

    #[test]
    fn task_reports_leave_stderr_and_everything_else_stays() {
        assert_eq!(
            run(&[b"err\nsrun: error: vm: task 0: Exited with exit code 7\n"]),
            b"err\n"
        );
        // The task's stderr does not end with a newline: the report follows on the same line.
        assert_eq!(
            run(&[b"partial", b"srun: error: vm: task 0: Terminated\n"]),
            b"partial"
        );
        assert_eq!(run(&[b"srun: error: node-7: tasks 0-1: Killed\n"]), b"");
        // On a terminal lines end with \r\n.
        assert_eq!(
            run(&[b"30 100\r\nsrun: error: vm: task 0: Exited with exit code 4\r\n"]),
            b"30 100\r\n"
        );
        // Split anywhere, even inside the marker.
        let all = b"a\nsrun: error: vm: task 0: Exited with exit code 3\nb".as_slice();
        for cut in 0..all.len() {
            assert_eq!(run(&[&all[..cut], &all[cut..]]), b"a\nb", "cut at {cut}");
        }
        // srun's other messages explain failures: they stay.
        let keep = b"srun: error: Unable to create step for job 15: Access/permission denied\n";
        assert_eq!(run(&[keep]), keep);
        assert_eq!(run(&[b"srun: error: x\n"]), b"srun: error: x\n");
        assert_eq!(run(&[b"plain sr", b"un text\n"]), b"plain srun text\n");
        assert_eq!(run(&[b"ends with s"]), b"ends with s");
    }

    #[test]
    fn nothing_is_held_longer_than_needed() {
        let mut f = SrunStderr::default();
        assert_eq!(&f.push(b"hello\n")[..], b"hello\n");
        assert_eq!(
            &f.push(b"line without newline")[..],
            b"line without newline"
        );
        // A possible marker start is held, then released when it turns out not to be one.
        assert_eq!(&f.push(b"x srun")[..], b"x ");
        assert_eq!(&f.push(b"ning\n")[..], b"srunning\n");
        // An unfinished report-looking line is held, but not without bound.
        let mut long = b"srun: error: ".to_vec();
        long.extend(std::iter::repeat_n(b'z', SrunStderr::MAX_HELD));
        assert_eq!(f.push(&long).len(), long.len());
    }
}
