//! vmod_vsthrottle's token bucket (varnish-modules, `vsthrottle.is_denied(key,
//! limit, period, block)`), the bucket requestctl's VCL throttles with,
//! reproduced step for step so that an imported requestctl action admits
//! and bans exactly as Varnish did (`throttle … bucket vsthrottle`).
//!
//! For one key, with `capacity = limit`:
//! 1. A new bucket is full: `limit` tokens, last used now, not blocked.
//! 2. Refill: `tokens += floor((now - last_used) / period * capacity)`, at
//!    most `capacity`. `last_used` moves only when a token is taken (or
//!    while blocked), so the fraction of a token earned since then is lost
//!    at every hit that takes one: a key hitting faster than
//!    `period / limit` apart earns nothing until it pauses that long.
//! 3. Blocked (`block > 0` and now before the block's end): the hit is
//!    denied and `last_used` moves to now.
//! 4. If a token is left it is taken (**even when blocked**) and
//!    `last_used` moves to now; the hit is allowed unless blocked.
//! 5. Otherwise the hit is denied, and if `block > 0` and not already
//!    blocked, the block starts: it ends `block` from now. Hits during it do
//!    not extend it; one that finds the bucket empty after it ends starts
//!    another.
//! 6. An allowed hit clears the block.
//!
//! Varnish computes in seconds as doubles; this computes the same in whole
//! nanoseconds, so refills differ only where a double would round a whole
//! token down (never for periods and limits of whole seconds and tokens
//! until 2^53 ns of idleness). The VMOD's garbage collector drops buckets
//! idle for a period and not blocked: such a bucket is full again anyway,
//! so forgetting it changes nothing (and eviction here prefers exactly
//! those).

use super::{Outcome, Slot};

/// A vsthrottle limiter's parameters, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Tokens in a full bucket, and per period.
    pub capacity: u32,
    /// The period.
    pub period_ns: u64,
    /// How long a key is refused once it finds the bucket empty (0: not
    /// at all).
    pub block_ns: u64,
}

/// One key's bucket.
#[derive(Debug, Clone, Copy)]
pub(super) struct State {
    last_used: u64,
    block_until: u64,
    tokens: u32,
}

impl State {
    /// Last use, blocked until, tokens left (for saving).
    pub(super) fn parts(&self) -> (u64, u64, u32) {
        (self.last_used, self.block_until, self.tokens)
    }

    /// The state saved as [`State::parts`].
    pub(super) fn from_parts(last_used: u64, block_until: u64, tokens: u32) -> State {
        State {
            last_used,
            block_until,
            tokens,
        }
    }
}

impl Params {
    /// `limit` per `period_ms`, block `ban_ms`.
    pub fn new(limit: u32, period_ms: u64, ban_ms: u64) -> Params {
        Params {
            capacity: limit.max(1),
            period_ns: period_ms.saturating_mul(1_000_000).max(1),
            block_ns: ban_ms.saturating_mul(1_000_000),
        }
    }

    /// The tokens earned over `delta` nanoseconds (whole tokens, floor).
    pub fn earned(&self, delta: u64) -> u64 {
        let t = u128::from(delta) * u128::from(self.capacity) / u128::from(self.period_ns);
        t.min(u128::from(u64::MAX)) as u64
    }

    pub(super) fn fresh(&self, now: u64) -> State {
        State {
            last_used: now,
            block_until: 0,
            tokens: self.capacity,
        }
    }

    pub(super) fn hit(&self, b: &mut State, now: u64) -> Outcome {
        let delta = now.saturating_sub(b.last_used);
        let tokens = u64::from(b.tokens).saturating_add(self.earned(delta));
        b.tokens = tokens.min(u64::from(self.capacity)) as u32;
        let blocked = self.block_ns > 0 && now < b.block_until;
        if blocked {
            b.last_used = now;
        }
        let mut denied = true;
        if b.tokens > 0 {
            b.tokens -= 1;
            denied = blocked;
            b.last_used = now;
        } else if self.block_ns > 0 && !blocked {
            b.block_until = now.saturating_add(self.block_ns);
        }
        if self.block_ns > 0 && !denied {
            b.block_until = 0;
        }
        if !denied {
            return Outcome::Allowed;
        }
        let retry_after_ns = if self.block_ns > 0 {
            super::ban_left(b.block_until, now, self.block_ns).max(1)
        } else {
            // The bucket is empty and nothing was taken: the next whole
            // token is earned `period / capacity` after the last take.
            let one = self.period_ns.div_ceil(u64::from(self.capacity));
            one.saturating_sub(now.saturating_sub(b.last_used)).max(1)
        };
        Outcome::Limited { retry_after_ns }
    }
}

impl Slot for State {
    fn banned_until(&self) -> u64 {
        self.block_until
    }
    fn refilled(&self, now: u64, params: &super::Params) -> bool {
        let super::Params::Vsthrottle(p) = params else {
            return false;
        };
        u64::from(self.tokens).saturating_add(p.earned(now.saturating_sub(self.last_used)))
            >= u64::from(p.capacity)
    }
    fn rank(&self) -> u64 {
        self.last_used
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Limiter, Outcome};

    const S: u64 = 1_000_000_000;

    fn allowed(l: &Limiter, at: u64) -> bool {
        l.hit(b"k", at) == Outcome::Allowed
    }

    // The expectations below are worked out by hand from
    // vmod_vsthrottle.c's is_denied(), step by step (see the module doc).

    #[test]
    fn a_full_bucket_then_whole_tokens_per_slice_of_the_period() {
        // 3 per 3 s: one token a second.
        let l = Limiter::vsthrottle(3, 3_000, 0, 100);
        assert!(allowed(&l, 0) && allowed(&l, 0) && allowed(&l, 0));
        assert!(!allowed(&l, 0), "empty");
        assert_eq!(
            l.hit(b"k", S / 2),
            Outcome::Limited {
                retry_after_ns: S / 2
            },
            "half a second earns nothing; a whole one is due at 1 s"
        );
        assert!(allowed(&l, S), "1 s since the last take: one token");
        assert!(!allowed(&l, S));
    }

    #[test]
    fn taking_a_token_loses_the_fraction_earned() {
        // 1 per second; hits every 0.9 s. GCRA would admit one a second
        // once the burst is spent; vsthrottle admits only after a whole
        // second since the last take, and denied hits do not move it.
        let l = Limiter::vsthrottle(1, 1_000, 0, 100);
        let ms = 1_000_000;
        let got: Vec<bool> = (0..8).map(|i| allowed(&l, i * 900 * ms)).collect();
        // t=0 take (full); 0.9 s: 0 earned, deny; 1.8 s: 1.8 s since the
        // take, 1 earned, take; 2.7 s: 0.9 s, deny; 3.6 s: take; …
        assert_eq!(
            got,
            [true, false, true, false, true, false, true, false],
            "{got:?}"
        );
    }

    #[test]
    fn the_block_starts_at_the_first_empty_hit_and_knocking_postpones_refill() {
        // 2 per 10 s (a token every 5 s), block 4 s.
        let l = Limiter::vsthrottle(2, 10_000, 4_000, 100);
        assert!(allowed(&l, 0) && allowed(&l, 0));
        assert_eq!(
            l.hit(b"k", S),
            Outcome::Limited {
                retry_after_ns: 4 * S
            },
            "empty at 1 s: blocked until 5 s"
        );
        // 4.9 s: blocked, and the blocked hit moves last_used to 4.9 s.
        assert!(!allowed(&l, 4 * S + 9 * S / 10));
        // 5 s: the block is over, but 0.1 s since 4.9 s earns nothing:
        // empty, so a new block until 9 s.
        assert_eq!(
            l.hit(b"k", 5 * S),
            Outcome::Limited {
                retry_after_ns: 4 * S
            }
        );
        // 8 s: blocked (last_used stays 4.9 s until now, then moves to 8 s).
        assert!(!allowed(&l, 8 * S));
        // 13 s: 5 s since 8 s earns a token, not blocked: allowed.
        assert!(allowed(&l, 13 * S));
    }

    #[test]
    fn hits_while_blocked_take_the_tokens_earned() {
        // 4 per 4 s (one a second), block 2 s.
        let l = Limiter::vsthrottle(4, 4_000, 2_000, 100);
        for _ in 0..4 {
            assert!(allowed(&l, 0));
        }
        assert!(!allowed(&l, 0), "empty: blocked until 2 s");
        // 1.5 s: earns one token, which this blocked hit takes.
        assert!(!allowed(&l, 3 * S / 2));
        // 2.5 s: 1 s since 1.5 s earns one token. Had the blocked hit not
        // taken one, 2.5 s since 0 s would have earned two.
        let got = (0..3).filter(|_| allowed(&l, 5 * S / 2)).count();
        assert_eq!(got, 1);
    }
}
