//! Requests per second per rule, for the report's `series`: one time axis
//! for every rule, starting at the capture's first second; and the same
//! per 100 ms for a short capture (`series_100ms`).

use std::collections::VecDeque;

/// The series cover at most this many seconds (a day).
pub(super) const MAX_SECONDS: u64 = 86_400;

const NS: u64 = 1_000_000_000;

/// The fine series' unit: 100 ms.
pub(super) const FINE_NS: u64 = 100_000_000;
/// The fine series cover at most this many units (two minutes); a
/// longer capture has only the per-second series.
pub(super) const FINE_MAX: u64 = 1_200;

/// Matched and enforced requests per second, per rule, on whole seconds
/// of capture time.
///
/// Requests are counted from the first one's second; an earlier one (in a
/// capture out of time order, or a later input that starts earlier) moves
/// the axis back. The counted span never passes [`MAX_SECONDS`]: a request
/// that would stretch it further is left out, so the work and memory stay
/// bounded whatever order the timestamps come in.
pub(super) struct Series {
    /// The length of an entry, ns, and the most entries.
    unit: u64,
    max: u64,
    /// Whether a request fell outside the most entries (and was left out).
    pub exceeded: bool,
    /// Units since the epoch of entry 0, and one past the last counted;
    /// `None` until a request is counted.
    span: Option<(u64, u64)>,
    /// Per rule, from the span's start (shorter ones end in zeros).
    rules: Vec<VecDeque<(u32, u32)>>,
}

impl Series {
    /// Per-second series for `n` rules, at most a day.
    pub fn new(n: usize) -> Self {
        Series::with_unit(n, NS, MAX_SECONDS)
    }

    /// Series for `n` rules of at most `max` entries of `unit` ns.
    pub fn with_unit(n: usize, unit: u64, max: u64) -> Self {
        Series {
            unit,
            max,
            exceeded: false,
            span: None,
            rules: vec![VecDeque::new(); n],
        }
    }

    /// Counts a request matched by `rule` at `time_ns`.
    pub fn tick(&mut self, rule: usize, time_ns: u64, enforced: bool) {
        let sec = time_ns / self.unit;
        let (start, end) = *self.span.get_or_insert((sec, sec + 1));
        if sec < start {
            if end - sec > self.max {
                self.exceeded = true;
                return;
            }
            let lead = (start - sec) as usize;
            for s in self.rules.iter_mut().filter(|s| !s.is_empty()) {
                s.reserve(lead);
                (0..lead).for_each(|_| s.push_front((0, 0)));
            }
            self.span = Some((sec, end));
        } else if sec >= end {
            if sec + 1 - start > self.max {
                self.exceeded = true;
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

    /// Whether the series, started at the unit of `first_ns`, hold every
    /// counted request within the most entries.
    pub fn covers(&self, first_ns: Option<u64>) -> bool {
        let Some((start, end)) = self.span else {
            return !self.exceeded;
        };
        let first = first_ns.map_or(start, |f| (f / self.unit).min(start));
        !self.exceeded && end - first <= self.max
    }

    /// The series, entry 0 being the unit that holds `first_ns` (the
    /// capture's first packet), every rule as long as the longest, at most
    /// the most entries long; empty if no request was counted.
    pub fn finish(self, first_ns: Option<u64>) -> Vec<Vec<(u32, u32)>> {
        let Some((start, end)) = self.span else {
            return vec![Vec::new(); self.rules.len()];
        };
        let first = first_ns.map_or(start, |f| (f / self.unit).min(start));
        let lead = start - first;
        let len = (lead + (end - start)).min(self.max) as usize;
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

    #[test]
    fn the_fine_series_gives_up_past_its_span() {
        let mut s = Series::with_unit(1, FINE_NS, FINE_MAX);
        s.tick(0, 10 * NS + 50_000_000, true);
        s.tick(0, 10 * NS + 350_000_000, false);
        assert!(!s.exceeded);
        let v = s.finish(Some(10 * NS));
        assert_eq!(v[0], [(1, 1), z(), z(), (1, 0)]);
        let mut s = Series::with_unit(1, FINE_NS, FINE_MAX);
        s.tick(0, 10 * NS, true);
        s.tick(0, 10 * NS + FINE_MAX * FINE_NS, false);
        assert!(s.exceeded);
    }

    fn z() -> (u32, u32) {
        (0, 0)
    }
}
