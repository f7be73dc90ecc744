//! Requests per second per rule, for the report's `series`: one time axis
//! for every rule, starting at the capture's first second.

use std::collections::VecDeque;

/// The series cover at most this many seconds (a day).
pub(super) const MAX_SECONDS: u64 = 86_400;

const NS: u64 = 1_000_000_000;

/// Matched and enforced requests per second, per rule, on whole seconds
/// of capture time.
///
/// Requests are counted from the first one's second; an earlier one (in a
/// capture out of time order, or a later input that starts earlier) moves
/// the axis back. The counted span never passes [`MAX_SECONDS`]: a request
/// that would stretch it further is left out, so the work and memory stay
/// bounded whatever order the timestamps come in.
pub(super) struct Series {
    /// Seconds since the epoch of entry 0, and one past the last counted;
    /// `None` until a request is counted.
    span: Option<(u64, u64)>,
    /// Per rule, from the span's start (shorter ones end in zeros).
    rules: Vec<VecDeque<(u32, u32)>>,
}

impl Series {
    /// Series for `n` rules.
    pub fn new(n: usize) -> Self {
        Series {
            span: None,
            rules: vec![VecDeque::new(); n],
        }
    }

    /// Counts a request matched by `rule` at `time_ns`.
    pub fn tick(&mut self, rule: usize, time_ns: u64, enforced: bool) {
        let sec = time_ns / NS;
        let (start, end) = *self.span.get_or_insert((sec, sec + 1));
        if sec < start {
            if end - sec > MAX_SECONDS {
                return;
            }
            let lead = (start - sec) as usize;
            for s in self.rules.iter_mut().filter(|s| !s.is_empty()) {
                s.reserve(lead);
                (0..lead).for_each(|_| s.push_front((0, 0)));
            }
            self.span = Some((sec, end));
        } else if sec >= end {
            if sec + 1 - start > MAX_SECONDS {
                return;
            }
            self.span = Some((start, sec + 1));
        }
        let start = self.span.map_or(sec, |s| s.0);
        let i = (sec - start) as usize;
        let s = &mut self.rules[rule];
        if s.len() <= i {
            s.resize(i + 1, (0, 0));
        }
        s[i].0 += 1;
        if enforced {
            s[i].1 += 1;
        }
    }

    /// The series, entry 0 being the second that holds `first_ns` (the
    /// capture's first packet), every rule as long as the longest, at most
    /// [`MAX_SECONDS`] long; empty if no request was counted.
    pub fn finish(self, first_ns: Option<u64>) -> Vec<Vec<(u32, u32)>> {
        let Some((start, end)) = self.span else {
            return vec![Vec::new(); self.rules.len()];
        };
        let first = first_ns.map_or(start, |f| (f / NS).min(start));
        let lead = start - first;
        let len = (lead + (end - start)).min(MAX_SECONDS) as usize;
        let lead = (lead as usize).min(len);
        self.rules
            .into_iter()
            .map(|s| {
                let mut v = Vec::with_capacity(len);
                v.resize(lead, (0, 0));
                v.extend(s.into_iter().take(len - lead));
                v.resize(len, (0, 0));
                v
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_to_the_capture_start_whatever_the_order() {
        let mut s = Series::new(2);
        s.tick(0, 105 * NS + 5, true);
        s.tick(1, 103 * NS, false);
        s.tick(0, 107 * NS + 999_999_999, false);
        let v = s.finish(Some(100 * NS + 700_000_000));
        let z = (0, 0);
        assert_eq!(v[0], [z, z, z, z, z, (1, 1), z, (1, 0)]);
        assert_eq!(v[1], [z, z, z, (1, 0), z, z, z, z]);
    }

    #[test]
    fn at_most_a_day_however_the_timestamps_jump() {
        let mut s = Series::new(1);
        for k in 0..1_000u64 {
            s.tick(0, (1 << 60) + k * 40_000 * NS, false);
            s.tick(0, (1 << 60) - k * 40_000 * NS, false);
        }
        let v = s.finish(Some(0));
        assert_eq!(v[0].len(), MAX_SECONDS as usize);
        let v = {
            let mut s = Series::new(1);
            s.tick(0, 10 * NS, false);
            s.tick(0, (10 + MAX_SECONDS) * NS, false);
            s.finish(Some(10 * NS))
        };
        assert_eq!(v[0].iter().map(|p| p.0).sum::<u32>(), 1);
    }
}
