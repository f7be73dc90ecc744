//! Keyed rate limiting: GCRA (a token bucket kept as one timestamp) plus an
//! optional ban, sharded for concurrency, with bounded memory.
//!
//! Semantics, matching requestctl's vsthrottle ("`limit` per `period`, then
//! deny for `ban`"):
//! - each key gets `burst` hits at once, refilling at `limit` per `period`;
//! - a hit that finds the bucket empty is limited; with a `ban`, the key is
//!   then limited for the whole ban from that moment, whatever it sends;
//! - limited hits do not consume the allowance.
//!
//! Time is injected (nanoseconds on any monotonic clock), so replays of
//! captured traffic see exactly what would have happened live.
//!
//! **Memory.** Keys are stored as 64-bit hashes (SipHash with a per-process
//! random key, so clients cannot aim collisions at each other) in
//! `SHARDS` independently locked tables, each holding at most
//! `max_keys / SHARDS` keys: 24 bytes of state a key, plus the table's
//! overhead (measured in the README). **When a shard is full**, a new key
//! evicts one of 16 sampled entries: first one whose bucket has refilled
//! and that is not banned (forgetting it changes nothing), else the
//! unbanned key closest to full; a banned key only when all 16 are banned.
//! A flood of spoofed sources can thus reset partial buckets, but cannot
//! lift a ban or grow memory past the bound. Exempted (allowed) traffic
//! never reaches a limiter, so it has no standing to lose.
//!
//! **Carrying state.** The keys and buckets (the hasher and the shard
//! tables) live apart from the parameters, behind a shared pointer, so a
//! limiter of a new ruleset can take over those of the old one
//! ([`Limiter::share_state`]): both then update the same buckets, so no
//! hit is lost while the two coexist, and each applies its own rate,
//! burst and ban to them.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

pub mod vsthrottle;

/// Number of independently locked shards per limiter.
pub const SHARDS: usize = 16;
const SAMPLE: usize = 16;

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

/// One key's GCRA state.
#[derive(Debug, Clone, Copy)]
struct State {
    /// Theoretical arrival time of the next conforming hit.
    tat: u64,
    /// Banned until (0: not banned).
    banned_until: u64,
}

/// What eviction needs to know of a key's state.
trait Slot: Copy {
    /// Banned until (0 or past: not banned).
    fn banned_until(&self) -> u64;
    /// Whether forgetting the key would change nothing at `now`.
    fn refilled(&self, now: u64, params: &Params) -> bool;
    /// Among keys alike in being banned and refilled, the one to evict
    /// first has the smallest rank.
    fn rank(&self) -> u64;
}

impl Slot for State {
    fn banned_until(&self) -> u64 {
        self.banned_until
    }
    fn refilled(&self, now: u64, _: &Params) -> bool {
        self.tat <= now
    }
    fn rank(&self) -> u64 {
        self.tat
    }
}

#[derive(Debug)]
struct Shard<S> {
    keys: HashMap<u64, S, NoHash>,
}

impl<S> Default for Shard<S> {
    fn default() -> Self {
        Shard {
            keys: HashMap::default(),
        }
    }
}

/// Keys are already hashes: the table uses them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct NoHash;

impl BuildHasher for NoHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug, Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// GCRA parameters in nanoseconds. The user-space limiter and the XDP
/// program both take them from here, so their arithmetic is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Time between conforming hits.
    pub interval_ns: u64,
    /// How far ahead of time a key may run (`burst - 1` intervals).
    pub tolerance_ns: u64,
    /// Ban after an excess (0: none).
    pub ban_ns: u64,
}

impl Gcra {
    /// `limit` per `period_ms`, bucket size `burst`, ban `ban_ms`.
    pub fn new(limit: u32, period_ms: u64, burst: u32, ban_ms: u64) -> Self {
        let period_ns = u128::from(period_ms) * 1_000_000;
        let interval_ns = (period_ns / u128::from(limit.max(1))).max(1) as u64;
        Gcra {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(u64::from(burst.max(1)) - 1),
            ban_ns: ban_ms.saturating_mul(1_000_000),
        }
    }
}

/// A limiter's parameters: GCRA's, or vsthrottle's.
#[derive(Debug, Clone, Copy)]
enum Params {
    Gcra(Gcra),
    Vsthrottle(vsthrottle::Params),
}

/// The keys and buckets of a limiter: what a new generation's limiter
/// shares with the old one's.
#[derive(Debug)]
struct Table<S> {
    /// Keys are stored as this hasher's 64-bit hashes.
    hasher: RandomState,
    shards: Vec<Mutex<Shard<S>>>,
}

impl<S: Slot> Table<S> {
    fn new() -> Arc<Self> {
        Arc::new(Table {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        })
    }

    /// Runs `f` on `key`'s state, made fresh by `fresh` if the key is new,
    /// evicting one of a sample of keys first if its shard is full.
    fn with<R>(
        &self,
        key: &[u8],
        now: u64,
        per_shard: usize,
        params: &Params,
        fresh: impl FnOnce() -> S,
        f: impl FnOnce(&mut S) -> R,
    ) -> R {
        let h = self.hasher.hash_one(key);
        let shard = &self.shards[(h >> 60) as usize % SHARDS];
        // A poisoned lock only means another thread panicked mid-update of
        // plain integers; the state is still usable.
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        if shard.keys.len() >= per_shard && !shard.keys.contains_key(&h) {
            evict(&mut shard.keys, now, params);
        }
        f(shard.keys.entry(h).or_insert_with(fresh))
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.keys.len()))
            .sum()
    }

    fn fill(&self, now_ns: u64) -> (usize, usize) {
        let (mut keys, mut banned) = (0, 0);
        for s in &self.shards {
            let s = s.lock().unwrap_or_else(|p| p.into_inner());
            keys += s.keys.len();
            banned += s
                .keys
                .values()
                .filter(|k| k.banned_until() > now_ns)
                .count();
        }
        (keys, banned)
    }

    fn bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, S)>() + 1;
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.keys.capacity() * entry))
            .sum()
    }
}

/// The tables of one of the two kinds of bucket.
#[derive(Debug, Clone)]
enum Tables {
    Gcra(Arc<Table<State>>),
    Vsthrottle(Arc<Table<vsthrottle::State>>),
}

/// One limiter: the buckets of one throttle rule.
#[derive(Debug)]
pub struct Limiter {
    params: Params,
    per_shard: usize,
    table: Tables,
}

/// How full a limiter is, for status pages and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fill {
    /// Keys tracked.
    pub keys: usize,
    /// Keys banned at the time asked.
    pub banned: usize,
    /// The most keys it holds.
    pub capacity: usize,
}

impl Limiter {
    /// `limit` per `period_ms`, bucket size `burst`, ban `ban_ms` (0: none),
    /// tracking at most `max_keys` keys (rounded up to a multiple of the
    /// shard count).
    pub fn new(limit: u32, period_ms: u64, burst: u32, ban_ms: u64, max_keys: usize) -> Self {
        Limiter {
            params: Params::Gcra(Gcra::new(limit, period_ms, burst, ban_ms)),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            table: Tables::Gcra(Table::new()),
        }
    }

    /// vmod_vsthrottle's bucket (`bucket vsthrottle`): `limit` tokens per
    /// `period_ms`, ban `ban_ms` (0: none), admitting exactly as
    /// `vsthrottle.is_denied(key, limit, period, ban)` does (see
    /// [`vsthrottle`]); at most `max_keys` keys.
    pub fn vsthrottle(limit: u32, period_ms: u64, ban_ms: u64, max_keys: usize) -> Self {
        Limiter {
            params: Params::Vsthrottle(vsthrottle::Params::new(limit, period_ms, ban_ms)),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            table: Tables::Vsthrottle(Table::new()),
        }
    }

    /// Whether this limiter's buckets are vsthrottle's.
    pub fn is_vsthrottle(&self) -> bool {
        matches!(self.params, Params::Vsthrottle(_))
    }

    /// Takes over `old`'s keys and buckets: from now on both limiters
    /// update the same state (shared, not copied, so hits `old` still
    /// takes are not lost), each with its own rate, burst, ban and key
    /// bound. What this limiter had before is dropped. Bans carry with the
    /// end they were given; the new ban length applies to new bans. Limiters
    /// of different kinds of bucket share nothing: this returns false and
    /// changes nothing.
    pub fn share_state(&mut self, old: &Limiter) -> bool {
        match (&mut self.table, &old.table) {
            (Tables::Gcra(a), Tables::Gcra(b)) => *a = Arc::clone(b),
            (Tables::Vsthrottle(a), Tables::Vsthrottle(b)) => *a = Arc::clone(b),
            _ => return false,
        }
        true
    }

    /// Whether the two limiters update the same keys and buckets.
    pub fn shares_state_with(&self, other: &Limiter) -> bool {
        match (&self.table, &other.table) {
            (Tables::Gcra(a), Tables::Gcra(b)) => Arc::ptr_eq(a, b),
            (Tables::Vsthrottle(a), Tables::Vsthrottle(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Number of keys tracked now.
    pub fn len(&self) -> usize {
        match &self.table {
            Tables::Gcra(t) => t.len(),
            Tables::Vsthrottle(t) => t.len(),
        }
    }

    /// Keys tracked, keys banned at `now_ns`, and the bound (one pass
    /// over the shards, each locked in turn).
    pub fn fill(&self, now_ns: u64) -> Fill {
        let (keys, banned) = match &self.table {
            Tables::Gcra(t) => t.fill(now_ns),
            Tables::Vsthrottle(t) => t.fill(now_ns),
        };
        Fill {
            keys,
            banned,
            capacity: self.capacity(),
        }
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this limiter holds.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// Bytes of table memory now allocated (entries and control bytes).
    pub fn table_bytes(&self) -> usize {
        match &self.table {
            Tables::Gcra(t) => t.bytes(),
            Tables::Vsthrottle(t) => t.bytes(),
        }
    }

    /// Records one hit for `key` at `now_ns`.
    pub fn hit(&self, key: &[u8], now_ns: u64) -> Outcome {
        let params = &self.params;
        match (&self.table, params) {
            (Tables::Gcra(t), Params::Gcra(g)) => t.with(
                key,
                now_ns,
                self.per_shard,
                params,
                || State {
                    tat: now_ns,
                    banned_until: 0,
                },
                |st| gcra_hit(st, g, now_ns),
            ),
            (Tables::Vsthrottle(t), Params::Vsthrottle(v)) => t.with(
                key,
                now_ns,
                self.per_shard,
                params,
                || v.fresh(now_ns),
                |st| v.hit(st, now_ns),
            ),
            // The constructors pair each kind of table with its parameters.
            _ => Outcome::Allowed,
        }
    }
}

fn gcra_hit(st: &mut State, g: &Gcra, now_ns: u64) -> Outcome {
    if st.banned_until > now_ns {
        return Outcome::Limited {
            retry_after_ns: st.banned_until - now_ns,
        };
    }
    let tat = st.tat.max(now_ns);
    if tat - now_ns > g.tolerance_ns {
        if g.ban_ns > 0 {
            st.banned_until = now_ns.saturating_add(g.ban_ns);
            return Outcome::Limited {
                retry_after_ns: g.ban_ns,
            };
        }
        return Outcome::Limited {
            retry_after_ns: tat - now_ns - g.tolerance_ns,
        };
    }
    st.tat = tat.saturating_add(g.interval_ns);
    Outcome::Allowed
}

fn evict<S: Slot>(keys: &mut HashMap<u64, S, NoHash>, now: u64, params: &Params) {
    // Sample from a position that moves with time, so eviction does not
    // keep hitting the same part of the table.
    let skip = (now as usize / 1_000) % keys.len().max(1);
    let skip = skip.min(keys.len().saturating_sub(SAMPLE));
    let victim = keys
        .iter()
        .skip(skip)
        .take(SAMPLE)
        .min_by_key(|(_, s)| {
            let banned = s.banned_until() > now;
            (
                banned,
                !s.refilled(now, params),
                if banned { s.banned_until() } else { s.rank() },
            )
        })
        .map(|(k, _)| *k);
    if let Some(k) = victim {
        keys.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn burst_then_steady_rate() {
        let l = Limiter::new(10, 1_000, 10, 0, 100);
        for _ in 0..10 {
            assert_eq!(l.hit(b"k", 0), Outcome::Allowed);
        }
        let Outcome::Limited { retry_after_ns } = l.hit(b"k", 0) else {
            panic!()
        };
        assert_eq!(retry_after_ns, S / 10);
        assert_eq!(l.hit(b"k", S / 10), Outcome::Allowed);
        assert!(matches!(l.hit(b"k", S / 10), Outcome::Limited { .. }));
        assert_eq!(l.hit(b"other", 0), Outcome::Allowed);
    }

    #[test]
    fn ban_holds_for_its_duration() {
        let l = Limiter::new(1, 1_000, 1, 60_000, 100);
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
    fn a_million_spoofed_sources_neither_grow_memory_nor_lift_bans() {
        let l = Limiter::new(1, 60_000, 1, 600_000, 4_096);
        // 100 abusers get banned.
        for i in 0..100u32 {
            let k = format!("bad{i}");
            l.hit(k.as_bytes(), 0);
            assert!(matches!(l.hit(k.as_bytes(), 1), Outcome::Limited { .. }));
        }
        let mut peak_bytes = 0;
        for i in 0..1_000_000u32 {
            l.hit(&i.to_le_bytes(), 2 + u64::from(i) * 100);
            if i % 65_536 == 0 {
                peak_bytes = peak_bytes.max(l.table_bytes());
            }
        }
        assert!(l.len() <= l.capacity(), "{} > {}", l.len(), l.capacity());
        // 24 bytes of state a key; under churn the tables settle at about 3.5x
        // their fill (tombstones force one doubling), and never grow past it.
        assert!(peak_bytes <= 4_096 * 90, "table grew to {peak_bytes} bytes");
        for i in 0..100u32 {
            let k = format!("bad{i}");
            assert!(
                matches!(l.hit(k.as_bytes(), 200_000_000), Outcome::Limited { .. }),
                "ban of bad{i} was lifted"
            );
        }
    }

    #[test]
    fn shared_state_keeps_bans_and_hits_and_takes_new_parameters() {
        let old = Limiter::new(1, 1_000, 1, 60_000, 100);
        assert_eq!(old.hit(b"banned", 0), Outcome::Allowed);
        assert!(matches!(old.hit(b"banned", 1), Outcome::Limited { .. }));
        // A faster rate, no ban, a bigger burst.
        let mut new = Limiter::new(100, 1_000, 5, 0, 100);
        assert_eq!(new.hit(b"banned", 2), Outcome::Allowed, "fresh before");
        new.share_state(&old);
        assert!(
            new.shares_state_with(&old) && !old.shares_state_with(&Limiter::new(1, 1, 1, 0, 1))
        );
        assert!(
            matches!(new.hit(b"banned", 30 * S), Outcome::Limited { .. }),
            "the ban carries to its end"
        );
        // A hit the old limiter takes after the swap is seen by the new one.
        assert_eq!(old.hit(b"late", 0), Outcome::Allowed);
        assert_eq!(new.fill(S).keys, 2);
        // Its standing carries: the old limiter's hit put it a second
        // ahead, which the new rate still counts.
        assert!(matches!(new.hit(b"late", S / 2), Outcome::Limited { .. }));
        // Once that has passed, the new burst (5, where the old one had 1)
        // applies to the carried key.
        for _ in 0..5 {
            assert_eq!(new.hit(b"late", 2 * S), Outcome::Allowed);
        }
        assert!(matches!(new.hit(b"late", 2 * S), Outcome::Limited { .. }));
        let f = new.fill(S);
        assert_eq!((f.keys, f.banned, f.capacity), (2, 1, 112));
    }

    /// `fill` counts a key as banned exactly while `hit` refuses it for
    /// its ban, and never a key that was not banned; `is_empty` follows
    /// the keys.
    #[test]
    fn fill_counts_bans_as_hit_enforces_them() {
        let l = Limiter::new(1, 1_000, 1, 60_000, 100);
        assert!(l.is_empty());
        assert_eq!(
            l.fill(0),
            Fill {
                keys: 0,
                banned: 0,
                capacity: 112
            }
        );
        assert_eq!(l.hit(b"calm", 0), Outcome::Allowed);
        assert!(!l.is_empty());
        assert_eq!(l.fill(0).banned, 0, "a key that was never banned");
        assert_eq!(l.hit(b"bad", 0), Outcome::Allowed);
        assert!(matches!(l.hit(b"bad", 1), Outcome::Limited { .. }));
        // Banned from 1 ns to 1 ns + 60 s.
        let end = 1 + 60 * S;
        assert_eq!(
            l.fill(end - 1),
            Fill {
                keys: 2,
                banned: 1,
                capacity: 112
            }
        );
        assert_eq!(l.fill(end).banned, 0, "the ban is over at its end");
        // While banned, the wait is what is left of the ban.
        assert_eq!(
            l.hit(b"bad", 30 * S),
            Outcome::Limited {
                retry_after_ns: 30 * S + 1
            }
        );
        assert_eq!(
            l.hit(b"bad", end - 1),
            Outcome::Limited { retry_after_ns: 1 }
        );
        assert_eq!(l.hit(b"bad", end), Outcome::Allowed);
    }

    /// A full shard forgets a key whose bucket has refilled (it would be
    /// allowed anyway) before a key still in debt: churn through new keys
    /// does not hand a limited client a fresh burst.
    #[test]
    fn eviction_keeps_keys_in_debt_over_refilled_ones() {
        // 32 keys: two per shard.
        let l = Limiter::new(1, 1_000, 2, 0, 32);
        let Tables::Gcra(table) = &l.table else {
            panic!("Limiter::new makes a GCRA limiter")
        };
        let shard = |k: &[u8]| (table.hasher.hash_one(k) >> 60) as usize % SHARDS;
        // Three keys of one shard.
        let keys: Vec<[u8; 4]> = (0u32..)
            .map(u32::to_le_bytes)
            .filter(|k| shard(k) == 0)
            .take(3)
            .collect();
        let (idle, debtor, newcomer) = (&keys[0], &keys[1], &keys[2]);
        // `idle` hits once at 0 and has refilled by 10 s; `debtor` spends
        // its burst of 2 at 10 s and is limited.
        assert_eq!(l.hit(idle, 0), Outcome::Allowed);
        let t = 10 * S;
        assert_eq!(l.hit(debtor, t), Outcome::Allowed);
        assert_eq!(l.hit(debtor, t), Outcome::Allowed);
        assert!(matches!(l.hit(debtor, t), Outcome::Limited { .. }));
        // The newcomer fills the shard: `idle` goes, `debtor` stays limited.
        assert_eq!(l.hit(newcomer, t), Outcome::Allowed);
        assert!(matches!(l.hit(debtor, t), Outcome::Limited { .. }));
        assert_eq!(l.len(), 2);
    }

    /// The table's memory: nothing before the first key, then at least a
    /// (key, state) entry and a control byte per key held, and not more
    /// than the table's growth can explain (4x).
    #[test]
    fn table_bytes_follow_the_keys_held() {
        let l = Limiter::new(1, 1_000, 1, 0, 1 << 16);
        assert_eq!(l.table_bytes(), 0);
        for i in 0..10_000u32 {
            l.hit(&i.to_le_bytes(), 0);
        }
        let per_key = std::mem::size_of::<(u64, State)>() + 1;
        let bytes = l.table_bytes();
        assert_eq!(l.len(), 10_000);
        assert!(bytes >= 10_000 * per_key, "{bytes}");
        assert!(bytes <= 4 * 10_000 * per_key, "{bytes}");
    }

    #[test]
    fn shared_across_threads() {
        let l = std::sync::Arc::new(Limiter::new(1_000, 1_000, 1_000, 0, 1 << 16));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let l = l.clone();
                std::thread::spawn(move || {
                    (0..1_000)
                        .filter(|i| l.hit(b"shared", t * 10 + i % 3) == Outcome::Allowed)
                        .count()
                })
            })
            .collect();
        let allowed: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(
            allowed, 1_000,
            "exactly the burst is allowed, whatever the interleaving"
        );
    }
}
