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
//!
//! A log followed live ([`Reorder::set_live`]) may go quiet with lines held
//! that no later line will push out. There the window is also waited in
//! wall time: a line of time `t` read at wall time `a` (a server writes
//! it once its request has ended, so `a` is at or after `t`) is followed
//! by every line of an earlier time by `a` + window, if requests take
//! less than a window, as the window assumes. So once a window of wall
//! time has passed since a line was read, every line up to its time is
//! due, as if a line a window later had come.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// Most bytes held at once by one input, lines and their entries (past
/// it the earliest line goes out).
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// Buffers of lines handed out kept for the next lines, and the largest
/// kept.
const SPARE: usize = 64;
const SPARE_BYTES: usize = 4096;

/// Lines read within this much wall time of each other share one mark,
/// or within a thousandth of the window if that is longer: a followed
/// log keeps at most about a thousand marks a window, not one a line.
/// (A mark lets its lines go a window after the last of them was read:
/// sharing one only waits longer.)
const MARK: Duration = Duration::from_millis(10);

/// When lines were read, in a followed log: the latest time read by the
/// last of them.
#[derive(Debug, Clone, Copy)]
struct Mark {
    first_read: Instant,
    last_read: Instant,
    latest_ns: u64,
}

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
    /// In a followed log, when lines were read, oldest first (`None`:
    /// a whole log, read as fast as it can be).
    marks: Option<VecDeque<Mark>>,
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
            marks: None,
        }
    }

    /// Makes it wait as for a followed log (then [`Reorder::wait`] also
    /// makes lines due once a window of wall time has passed since they
    /// were read), or, at the end of following, as for a whole log again.
    pub fn set_live(&mut self, live: bool) {
        match (live, &self.marks) {
            (true, None) => self.marks = Some(VecDeque::new()),
            (false, Some(_)) => self.marks = None,
            _ => {}
        }
    }

    /// Whether it is waiting as for a followed log.
    pub fn is_live(&self) -> bool {
        self.marks.is_some()
    }

    /// Whether the earliest line held is due (see [`Reorder::pop_due`]).
    pub fn is_due(&self, all: bool) -> bool {
        self.held.peek().is_some_and(|Reverse(first)| {
            all || first.time_ns.saturating_add(self.window_ns) <= self.latest_ns
                || self.bytes > self.max_bytes
        })
    }

    /// In a followed log, at `now`: the lines read a window of wall time
    /// ago or earlier make every line up to their time due (see the
    /// module's documentation). Nothing in a whole log.
    pub fn wait(&mut self, now: Instant) {
        let Some(marks) = &mut self.marks else {
            return;
        };
        let window = Duration::from_nanos(self.window_ns);
        while let Some(m) = marks.front() {
            if now.saturating_duration_since(m.last_read) < window {
                break;
            }
            self.latest_ns = self
                .latest_ns
                .max(m.latest_ns.saturating_add(self.window_ns));
            marks.pop_front();
        }
    }

    /// Holds `line`, whose time is `time_ns`.
    pub fn push(&mut self, time_ns: u64, line: &[u8]) {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(line);
        self.bytes += cost(&buf);
        self.latest_ns = self.latest_ns.max(time_ns);
        if let Some(marks) = &mut self.marks {
            let now = Instant::now();
            match marks.back_mut() {
                Some(m)
                    if now.saturating_duration_since(m.first_read)
                        < MARK.max(Duration::from_nanos(self.window_ns / 1000)) =>
                {
                    m.last_read = now;
                    m.latest_ns = self.latest_ns;
                }
                _ => marks.push_back(Mark {
                    first_read: now,
                    last_read: now,
                    latest_ns: self.latest_ns,
                }),
            }
        }
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
        if !self.is_due(all) {
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
        let live = self.is_live();
        *self = Reorder::new(self.window_ns, self.max_bytes);
        self.set_live(live);
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

    /// Followed live, a quiet log's held lines go out once a window of
    /// wall time has passed since they were read, up to their time; a
    /// whole log's wait nothing.
    #[test]
    fn a_quiet_followed_log_lets_its_lines_go_after_a_window_of_wall_time() {
        let s = 1_000_000_000;
        let mut r = Reorder::new(10 * s, MAX_HELD_BYTES);
        r.set_live(true);
        r.push(100 * s, b"b@100");
        r.push(95 * s, b"a@95");
        let read = Instant::now();
        // Read later (a mark of its own): due only a window after that.
        std::thread::sleep(MARK * 2);
        r.push(104 * s, b"c@104");
        r.wait(read + Duration::from_secs(9));
        assert!(drain(&mut r, false).is_empty(), "within the window");
        // A window after the first two were read: up to their latest
        // time (100), not c@104, read later.
        r.wait(read + Duration::from_millis(10_005));
        assert_eq!(drain(&mut r, false), ["a@95", "b@100"]);
        r.wait(Instant::now() + Duration::from_secs(10));
        assert_eq!(drain(&mut r, false), ["c@104"]);
        assert!(r.held.is_empty() && r.marks.as_ref().is_some_and(|m| m.is_empty()));
        // Cleared, it stays live.
        r.clear();
        r.push(1, b"x");
        r.wait(Instant::now() + Duration::from_secs(10));
        assert_eq!(drain(&mut r, false), ["x"]);
        // A whole log's lines wait for later lines, whatever the clock.
        let mut w = Reorder::new(10 * s, MAX_HELD_BYTES);
        w.push(5 * s, b"y");
        w.wait(Instant::now() + Duration::from_secs(60));
        assert!(drain(&mut w, false).is_empty());
    }
}
