//! Putting a log's lines back in time order, within a window.
//!
//! A server writes a request's line when the request ends, with the time
//! it began (HAProxy's `%tr`, webrequest's `dt`): a request that took 30 s
//! is written after those that came in the 30 s after it. The live agent
//! judged it when it came; judged in file order, it comes after them, and
//! a throttle counts it against tokens they already took.
//! [`Reorder`] holds each line until a line a window later has been read,
//! then hands the held lines out earliest first (lines of one time in file
//! order), so that within the window the dry run sees the requests as the
//! agent did. Memory is the lines of one window, bounded in bytes: past
//! the bound the earliest line goes out early.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most bytes held at once by one input, lines and their entries (past
/// it the earliest line goes out).
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// Buffers of lines handed out kept for the next lines, and the largest
/// kept.
const SPARE: usize = 64;
const SPARE_BYTES: usize = 4096;

/// Lines held back for up to a window of time.
#[derive(Debug)]
pub struct Reorder {
    window_ns: u64,
    held: BinaryHeap<Reverse<Held>>,
    bytes: usize,
    max_bytes: usize,
    latest_ns: u64,
    seq: u64,
    /// Buffers of lines handed out, for the next lines held.
    spare: Vec<Vec<u8>>,
}

/// The memory a held line takes: its buffer and its entry.
fn cost(line: &Vec<u8>) -> usize {
    line.capacity() + std::mem::size_of::<Held>()
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    time_ns: u64,
    seq: u64,
    line: Vec<u8>,
}

impl Reorder {
    /// Holds lines for `window_ns` of their time, at most `max_bytes` of
    /// them.
    pub fn new(window_ns: u64, max_bytes: usize) -> Self {
        Reorder {
            window_ns,
            held: BinaryHeap::new(),
            bytes: 0,
            max_bytes: max_bytes.max(1),
            latest_ns: 0,
            seq: 0,
            spare: Vec::new(),
        }
    }

    /// Holds `line`, whose time is `time_ns`.
    pub fn push(&mut self, time_ns: u64, line: &[u8]) {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(line);
        self.bytes += cost(&buf);
        self.latest_ns = self.latest_ns.max(time_ns);
        self.seq += 1;
        self.held.push(Reverse(Held {
            time_ns,
            seq: self.seq,
            line: buf,
        }));
    }

    /// The earliest line held, if it is due: a line a window later was
    /// read, or the held lines are over their bound, or `all` (the input
    /// has ended). Hand its buffer back with [`Reorder::recycle`].
    pub fn pop_due(&mut self, all: bool) -> Option<Vec<u8>> {
        let Reverse(first) = self.held.peek()?;
        let due = all
            || first.time_ns.saturating_add(self.window_ns) <= self.latest_ns
            || self.bytes > self.max_bytes;
        if !due {
            return None;
        }
        let Reverse(h) = self.held.pop()?;
        self.bytes -= cost(&h.line);
        Some(h.line)
    }

    /// Takes back the buffer of a line handed out (a few small ones are
    /// kept for the next lines).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE && buf.capacity() <= SPARE_BYTES {
            self.spare.push(buf);
        }
    }

    /// Drops every line held, and the memory that held them (the input
    /// is closed, to be read again from its start, or has ended).
    pub fn clear(&mut self) {
        *self = Reorder::new(self.window_ns, self.max_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut Reorder, all: bool) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = r.pop_due(all) {
            out.push(String::from_utf8(l).unwrap());
        }
        out
    }

    /// Lines a window apart go out in time order, ties in the order read;
    /// a line later than the window behind is not waited for.
    #[test]
    fn lines_go_out_in_time_order_within_the_window() {
        let s = 1_000_000_000;
        let mut r = Reorder::new(10 * s, MAX_HELD_BYTES);
        r.push(5 * s, b"b@5");
        r.push(2 * s, b"a@2");
        r.push(5 * s, b"c@5");
        assert!(drain(&mut r, false).is_empty(), "nothing a window old yet");
        r.push(12 * s, b"d@12");
        assert_eq!(drain(&mut r, false), ["a@2"]);
        r.push(16 * s, b"e@16");
        assert_eq!(drain(&mut r, false), ["b@5", "c@5"]);
        // Older than the window: it goes out at once, out of order.
        r.push(3 * s, b"late@3");
        assert_eq!(drain(&mut r, false), ["late@3"]);
        assert_eq!(drain(&mut r, true), ["d@12", "e@16"]);
        assert!(r.pop_due(true).is_none());
    }

    /// Over its bound, the earliest line goes out before its window.
    #[test]
    fn held_bytes_are_bounded() {
        let mut r = Reorder::new(u64::MAX, usize::MAX);
        r.push(3, b"xxxx");
        r.push(1, b"yyyy");
        // Two lines' buffers and entries fit, not three.
        r.max_bytes = r.bytes;
        assert!(r.pop_due(false).is_none());
        r.push(2, b"zzzz");
        assert_eq!(r.pop_due(false).as_deref(), Some(&b"yyyy"[..]));
        assert!(r.pop_due(false).is_none(), "two lines held: within");
        r.clear();
        assert!(r.pop_due(true).is_none());
    }
}
