//! Keyed rate limiting: GCRA (a token bucket in one timestamp) plus an
//! optional ban, with a bounded number of tracked keys.
//!
//! Semantics, matching requestctl's vsthrottle ("`limit` per `period`, then
//! deny for `ban`"):
//! - each key gets `burst` hits at once, refilling at `limit` per `period`;
//! - a hit that finds the bucket empty is limited, and if `ban` is set the
//!   key is then limited for `ban` from that moment, whatever it sends;
//! - limited hits do not consume the allowance.
//!
//! Time is injected (nanoseconds on any monotonic clock), so replays of
//! captured traffic see exactly what would have happened live.

use std::collections::HashMap;

/// What the limiter says about one hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Within the allowance.
    Allowed,
    /// Over it; retry after this many nanoseconds.
    Limited {
        /// Time until a hit would be allowed again.
        retry_after_ns: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct State {
    /// Theoretical arrival time of the next conforming hit.
    tat: u64,
    /// Banned until (0: not banned).
    banned_until: u64,
}

/// One limiter: the buckets of one throttle rule.
#[derive(Debug)]
pub struct Limiter {
    interval_ns: u64,
    tolerance_ns: u64,
    ban_ns: u64,
    max_keys: usize,
    keys: HashMap<Vec<u8>, State>,
}

impl Limiter {
    /// `limit` per `period_ms`, bucket size `burst`, ban `ban_ms` (0: none),
    /// tracking at most `max_keys` keys.
    pub fn new(limit: u32, period_ms: u64, burst: u32, ban_ms: u64, max_keys: usize) -> Self {
        let period_ns = u128::from(period_ms) * 1_000_000;
        let interval_ns = (period_ns / u128::from(limit.max(1))).max(1) as u64;
        Limiter {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(u64::from(burst.max(1)) - 1),
            ban_ns: ban_ms.saturating_mul(1_000_000),
            max_keys: max_keys.max(1),
            keys: HashMap::new(),
        }
    }

    /// Number of keys tracked now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Records one hit for `key` at `now_ns`.
    pub fn hit(&mut self, key: &[u8], now_ns: u64) -> Outcome {
        if !self.keys.contains_key(key) && self.keys.len() >= self.max_keys {
            self.evict(now_ns);
        }
        let st = self.keys.entry(key.to_vec()).or_insert(State {
            tat: now_ns,
            banned_until: 0,
        });
        if st.banned_until > now_ns {
            return Outcome::Limited {
                retry_after_ns: st.banned_until - now_ns,
            };
        }
        let tat = st.tat.max(now_ns);
        if tat - now_ns > self.tolerance_ns {
            if self.ban_ns > 0 {
                st.banned_until = now_ns.saturating_add(self.ban_ns);
                return Outcome::Limited {
                    retry_after_ns: self.ban_ns,
                };
            }
            return Outcome::Limited {
                retry_after_ns: tat - now_ns - self.tolerance_ns,
            };
        }
        st.tat = tat.saturating_add(self.interval_ns);
        Outcome::Allowed
    }

    /// Makes room: first drops every key whose bucket is full again and that
    /// is not banned (forgetting it changes nothing), then, if still full,
    /// the key closest to full. Banned keys go last.
    fn evict(&mut self, now_ns: u64) {
        self.keys
            .retain(|_, s| s.tat > now_ns || s.banned_until > now_ns);
        if self.keys.len() >= self.max_keys {
            let victim = self
                .keys
                .iter()
                .min_by_key(|(_, s)| (s.banned_until > now_ns, s.tat))
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                self.keys.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn burst_then_steady_rate() {
        let mut l = Limiter::new(10, 1_000, 10, 0, 100);
        for _ in 0..10 {
            assert_eq!(l.hit(b"k", 0), Outcome::Allowed);
        }
        let Outcome::Limited { retry_after_ns } = l.hit(b"k", 0) else {
            panic!()
        };
        assert_eq!(retry_after_ns, S / 10);
        assert_eq!(l.hit(b"k", S / 10), Outcome::Allowed);
        assert!(matches!(l.hit(b"k", S / 10), Outcome::Limited { .. }));
        // Another key has its own bucket.
        assert_eq!(l.hit(b"other", 0), Outcome::Allowed);
    }

    #[test]
    fn ban_holds_for_its_duration() {
        let mut l = Limiter::new(1, 1_000, 1, 60_000, 100);
        assert_eq!(l.hit(b"k", 0), Outcome::Allowed);
        assert_eq!(
            l.hit(b"k", 1),
            Outcome::Limited {
                retry_after_ns: 60 * S
            }
        );
        assert!(matches!(l.hit(b"k", 30 * S), Outcome::Limited { .. }));
        assert_eq!(l.hit(b"k", 60 * S + 2), Outcome::Allowed);
    }

    #[test]
    fn bounded_keys_and_banned_keys_survive_eviction() {
        let mut l = Limiter::new(1, 60_000, 1, 600_000, 4);
        l.hit(b"bad", 0);
        l.hit(b"bad", 1);
        for i in 0..10_000u32 {
            l.hit(&i.to_le_bytes(), 2 + u64::from(i));
            assert!(l.len() <= 4);
        }
        assert!(matches!(l.hit(b"bad", 20_000), Outcome::Limited { .. }));
    }
}
