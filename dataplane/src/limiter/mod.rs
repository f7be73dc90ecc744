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
//! **Memory.** Keys are stored as 64-bit hashes (SipHash-1-3 with a
//! random key of the limiter's, so clients cannot aim collisions at each
//! other; the key is saved with the buckets, see [`SavedLimiter`]) in
//! `SHARDS` independently locked tables, each holding at most
//! `max_keys / SHARDS` keys: 24 bytes of state a key, plus the table's
//! overhead (measured in `dataplane/benches/README.md`). **When a shard is full**, a new key
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
//!
//! **Two kinds of bucket.** `throttle … bucket vsthrottle` keeps
//! vmod_vsthrottle's token bucket instead of GCRA ([`vsthrottle`]), in
//! tables of its own (local only: a `shared` throttle is GCRA).
//!
//! **Shared limiters** (`throttle … shared`) keep the same GCRA, on a
//! mirror of a site-wide bucket that a backend (Redis, in `rctl-fleet`)
//! reconciles in the background: see [`Shared`]. This crate has no
//! network client; the backend drains deltas and applies the site's
//! state through [`Limiter::shared`].

mod keyhash;
mod shared;
mod snapshot;
pub mod vsthrottle;
pub mod zone;

pub use shared::{Shared, SharedDelta, SharedStats, SharedUpdate};
pub use snapshot::{Restored, SavedEntry, SavedKind, SavedLimiter};

use keyhash::KeyHasher;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

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

/// What eviction needs to know of a table entry: a GCRA state, a
/// vsthrottle bucket, or a shared limiter's entry.
trait Slot {
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
struct Shard<B> {
    keys: HashMap<u64, B, NoHash>,
    /// What hits counted for the backend since the last drain (shared
    /// limiters only; empty otherwise).
    log: shared::Log,
}

impl<B> Default for Shard<B> {
    fn default() -> Self {
        Shard {
            keys: HashMap::default(),
            log: shared::Log::default(),
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

/// The shard tables of a limiter.
#[derive(Debug)]
enum Shards {
    Local(Vec<Mutex<Shard<State>>>),
    Vsthrottle(Vec<Mutex<Shard<vsthrottle::State>>>),
    Shared(Box<shared::SharedTable>),
}

fn local_shards<S>() -> Vec<Mutex<Shard<S>>> {
    (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect()
}

/// The keys and buckets of a limiter: what a new generation's limiter
/// shares with the old one's.
#[derive(Debug)]
struct Table {
    /// Keys are stored as this hasher's 64-bit hashes.
    hasher: KeyHasher,
    shards: Shards,
}

/// One limiter: the buckets of one throttle rule.
#[derive(Debug)]
pub struct Limiter {
    params: Params,
    per_shard: usize,
    table: Arc<Table>,
    /// Counted in a zone that several processes share instead of
    /// `table` (GCRA only), under this limiter's identity.
    zone: Option<(zone::Zone, u64)>,
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

/// What one GCRA step decided.
enum Step {
    Allowed,
    /// Over the limit (already banned, or not banning).
    Limited(u64),
    /// Over the limit, and banned from now on for this long.
    Banned(u64),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of
    // plain integers; the state is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shard a key hash lives in.
fn shard_of(h: u64) -> usize {
    (h >> 60) as usize % SHARDS
}

impl Limiter {
    /// `limit` per `period_ms`, bucket size `burst`, ban `ban_ms` (0: none),
    /// tracking at most `max_keys` keys (rounded up to a multiple of the
    /// shard count).
    pub fn new(limit: u32, period_ms: u64, burst: u32, ban_ms: u64, max_keys: usize) -> Self {
        let gcra = Params::Gcra(Gcra::new(limit, period_ms, burst, ban_ms));
        Self::with(gcra, max_keys, Shards::Local(local_shards()))
    }

    /// vmod_vsthrottle's bucket (`bucket vsthrottle`): `limit` tokens per
    /// `period_ms`, ban `ban_ms` (0: none), admitting exactly as
    /// `vsthrottle.is_denied(key, limit, period, ban)` does (see
    /// [`vsthrottle`]); at most `max_keys` keys.
    pub fn vsthrottle(limit: u32, period_ms: u64, ban_ms: u64, max_keys: usize) -> Self {
        let params = Params::Vsthrottle(vsthrottle::Params::new(limit, period_ms, ban_ms));
        Self::with(params, max_keys, Shards::Vsthrottle(local_shards()))
    }

    /// Like [`Limiter::new`], for a `shared` throttle: the same limits,
    /// counted on a mirror of the site-wide bucket that a backend keeps in
    /// step through [`Limiter::shared`]. Until the backend says it is
    /// online, it counts this host's hits alone, as [`Limiter::new`] does.
    pub fn new_shared(
        limit: u32,
        period_ms: u64,
        burst: u32,
        ban_ms: u64,
        max_keys: usize,
    ) -> Self {
        let gcra = Params::Gcra(Gcra::new(limit, period_ms, burst, ban_ms));
        Self::with(gcra, max_keys, Shards::Shared(Box::default()))
    }

    /// `params` must pair with `shards`: GCRA with local or shared
    /// tables, vsthrottle with vsthrottle tables.
    fn with(params: Params, max_keys: usize, shards: Shards) -> Self {
        Limiter {
            params,
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            table: Arc::new(Table {
                hasher: KeyHasher::random(),
                shards,
            }),
            zone: None,
        }
    }

    /// Counts this limiter's hits in `zone` from now on, under `identity`
    /// (see [`zone::identity`]), instead of in its own tables: every
    /// process that maps the zone then shares its buckets. Only GCRA
    /// buckets can be: a vsthrottle limiter returns false and keeps its
    /// own.
    pub fn count_in_zone(&mut self, zone: zone::Zone, identity: u64) -> bool {
        if !matches!(self.params, Params::Gcra(_)) {
            return false;
        }
        self.zone = Some((zone, identity));
        true
    }

    /// Whether its hits are counted in a shared zone.
    pub fn in_zone(&self) -> bool {
        self.zone.is_some()
    }

    /// Whether this limiter's buckets are vsthrottle's.
    pub fn is_vsthrottle(&self) -> bool {
        matches!(self.params, Params::Vsthrottle(_))
    }

    /// Whether it is a `shared` limiter.
    pub fn is_shared(&self) -> bool {
        matches!(self.table.shards, Shards::Shared(_))
    }

    /// The backend's handle on a shared limiter (`None` for a local one).
    pub fn shared(&self) -> Option<Shared<'_>> {
        match (&self.table.shards, self.params) {
            (Shards::Shared(t), Params::Gcra(g)) => Some(Shared::new(self, t, g)),
            _ => None,
        }
    }

    /// Takes over `old`'s keys and buckets: from now on both limiters
    /// update the same state (shared, not copied, so hits `old` still
    /// takes are not lost), each with its own rate, burst, ban and key
    /// bound. What this limiter had before is dropped. Bans carry with the
    /// end they were given; the new ban length applies to new bans.
    /// Limiters of different kinds of table (local GCRA, vsthrottle,
    /// shared) share nothing: this returns false and changes nothing.
    pub fn share_state(&mut self, old: &Limiter) -> bool {
        let same = matches!(
            (&self.table.shards, &old.table.shards),
            (Shards::Local(_), Shards::Local(_))
                | (Shards::Vsthrottle(_), Shards::Vsthrottle(_))
                | (Shards::Shared(_), Shards::Shared(_))
        );
        if same {
            self.table = Arc::clone(&old.table);
        }
        same
    }

    /// Whether the two limiters update the same keys and buckets.
    pub fn shares_state_with(&self, other: &Limiter) -> bool {
        Arc::ptr_eq(&self.table, &other.table)
    }

    /// Number of keys tracked now.
    pub fn len(&self) -> usize {
        self.fill(0).keys
    }

    /// Keys tracked, keys banned at `now_ns`, and the bound (one pass
    /// over the shards, each locked in turn).
    pub fn fill(&self, now_ns: u64) -> Fill {
        fn count<S: Slot>(shards: &[Mutex<Shard<S>>], now_ns: u64) -> (usize, usize) {
            shards.iter().fold((0, 0), |(k, b), s| {
                let s = lock(s);
                let banned = s
                    .keys
                    .values()
                    .filter(|e| e.banned_until() > now_ns)
                    .count();
                (k + s.keys.len(), b + banned)
            })
        }
        let (keys, banned) = match &self.table.shards {
            Shards::Local(s) => count(s, now_ns),
            Shards::Vsthrottle(s) => count(s, now_ns),
            Shards::Shared(t) => count(&t.shards, now_ns),
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
        fn bytes<B>(shards: &[Mutex<Shard<B>>]) -> usize {
            let entry = std::mem::size_of::<(u64, B)>() + 1;
            shards.iter().map(|s| lock(s).keys.capacity() * entry).sum()
        }
        match &self.table.shards {
            Shards::Local(s) => bytes(s),
            Shards::Vsthrottle(s) => bytes(s),
            Shards::Shared(t) => bytes(&t.shards),
        }
    }

    /// Records one hit for `key` at `now_ns`.
    pub fn hit(&self, key: &[u8], now_ns: u64) -> Outcome {
        if let (Some((z, id)), Params::Gcra(g)) = (&self.zone, &self.params) {
            return z.hit(*id, key, g, now_ns);
        }
        match (&self.table.shards, &self.params) {
            (Shards::Local(shards), Params::Gcra(g)) => {
                let h = self.table.hasher.hash(key);
                let mut shard = lock(&shards[shard_of(h)]);
                let st = self.entry(&mut shard, h, now_ns, |_| State {
                    tat: now_ns,
                    banned_until: 0,
                });
                match step(g, st, now_ns, g.interval_ns) {
                    Step::Allowed => Outcome::Allowed,
                    Step::Limited(ns) | Step::Banned(ns) => Outcome::Limited { retry_after_ns: ns },
                }
            }
            (Shards::Vsthrottle(shards), Params::Vsthrottle(v)) => {
                let h = self.table.hasher.hash(key);
                let mut shard = lock(&shards[shard_of(h)]);
                v.hit(
                    self.entry(&mut shard, h, now_ns, |_| v.fresh(now_ns)),
                    now_ns,
                )
            }
            (Shards::Shared(t), Params::Gcra(g)) => t.hit(self, g, key, now_ns),
            // The constructors pair each kind of table with its parameters.
            _ => Outcome::Allowed,
        }
    }

    /// The entry for `h` in `shard`, made by `new` if absent (evicting one
    /// when the shard is full). Inlined: it is the hit's lookup.
    #[inline(always)]
    fn entry<'s, S: Slot>(
        &self,
        shard: &'s mut Shard<S>,
        h: u64,
        now_ns: u64,
        new: impl FnOnce(u64) -> S,
    ) -> &'s mut S {
        if shard.keys.len() >= self.per_shard && !shard.keys.contains_key(&h) {
            self.make_room(&mut shard.keys, now_ns);
        }
        shard.keys.entry(h).or_insert_with(|| new(h))
    }
}

impl Limiter {
    /// Evicts one key of a full shard (out of the hit's inlined path).
    #[inline(never)]
    fn make_room<S: Slot>(&self, keys: &mut HashMap<u64, S, NoHash>, now_ns: u64) {
        evict(keys, now_ns, &self.params);
    }
}

/// One GCRA step on `st`: a conforming hit moves it `charge_ns` on.
fn step(g: &Gcra, st: &mut State, now_ns: u64, charge_ns: u64) -> Step {
    if st.banned_until > now_ns {
        return Step::Limited(ban_left(st.banned_until, now_ns, g.ban_ns));
    }
    let tat = st.tat.max(now_ns);
    if tat - now_ns > g.tolerance_ns {
        if g.ban_ns > 0 {
            st.banned_until = now_ns.saturating_add(g.ban_ns);
            return Step::Banned(g.ban_ns);
        }
        return Step::Limited(tat - now_ns - g.tolerance_ns);
    }
    st.tat = tat.saturating_add(charge_ns);
    Step::Allowed
}

/// What is left of a ban ending at `until`, seen at `now_ns`: never more
/// than the ban's length `ban_ns` (when the rule has one). A request whose
/// time was read just before a concurrent request set the ban reaches the
/// key after it, at a time earlier than the ban's start; the ban ends no
/// later than `ban_ns` after that request is answered. (A ban carried from
/// an earlier ruleset with a longer ban is told at most the new length.)
pub(super) fn ban_left(until: u64, now_ns: u64, ban_ns: u64) -> u64 {
    let left = until.saturating_sub(now_ns);
    if ban_ns > 0 {
        left.min(ban_ns)
    } else {
        left
    }
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
mod tests;
