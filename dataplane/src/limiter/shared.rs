//! Shared limiters: one bucket per key for a whole site, counted
//! locally first and reconciled with a backend in the background.
//!
//! # The algorithm
//!
//! Every host runs the ordinary GCRA of its limiter on a **mirror** of the
//! site-wide bucket, so a request never waits for the network. The backend
//! (Redis, in `rctl-fleet`) keeps the site's bucket: its theoretical
//! arrival time `T` (charged one interval per admission anywhere in the
//! site), the site's admissions and hits, and bans. Every sync interval
//! the backend:
//!
//! 1. **drains** each key touched since the last sync ([`Shared::drain`]):
//!    the admissions and hits it counted, and a ban it made;
//! 2. publishes them (the site's `T` moves one interval per admission,
//!    from `max(T, now)`), and reads back, per key, how far `T` runs ahead
//!    of now, the site's totals, and the ban in force;
//! 3. **applies** that ([`Shared::apply`]): the mirror becomes
//!    `now + ahead + pending × w × interval`, where `pending` are the
//!    admissions made since the drain.
//!
//! Between syncs each admission moves the mirror by `w` intervals, where
//! `w` is the host's estimate of how much of the key's traffic the whole
//! site sees for each request it sees itself (site hits / own hits over
//! the last sync, smoothed; at least 1). With traffic spread over `H`
//! hosts, `w ≈ H` and each host admits its share of the refill; with
//! traffic on one host, `w ≈ 1`. A key the host has not synced yet starts
//! with `w` = the number of live hosts the backend reports
//! ([`Shared::set_new_key_weight`]), so a fresh key's burst is split too.
//!
//! **Error bound.** `w ≥ 1`, so a host never charges less than the
//! site's own accounting; what can run over is what hosts admit before
//! they learn of each other's admissions, which takes at most two sync
//! intervals `s` (one to publish, one to fetch) plus the round trips. In
//! that time each of the other `H − 1` hosts admits at most its local
//! refill, `N·2s` for a limit of `N` per second, beyond what the others
//! know, and at a key's first appearance at most its burst `B`. So over
//! any period `T` the site admits at most
//!
//! `B + N·T + (H − 1)·(N·2s + B)`
//!
//! and, once the key is known everywhere (after its first sync),
//! `B + N·T + (H − 1)·N·2s`. Those are worst cases: with the weights
//! right, the mirrors follow the site's bucket and the error is a small
//! fraction of that (measured in `dataplane/fleet/benches/README.md`).
//!
//! **Bans** are shared: a ban made here is handed to the backend at once
//! (the waker, [`Shared::set_waker`]), which publishes it for every host
//! of the site; each host applies the bans it fetches with
//! [`Shared::remote_ban`], so a key banned on one host is banned on all
//! within one sync interval.
//!
//! **Offline** (no backend, or the backend is down or slow:
//! [`Shared::set_online`]): the limiter counts this host's hits alone,
//! each admission one interval (a per-host limit), keeps no deltas, and
//! counts the hits it decided that way ([`SharedStats::offline_hits`]).
//! When the backend comes back, hosts publish again from then on.
//!
//! **Keys across hosts.** A key's id is SipHash-2-4 of its bytes with
//! fixed keys ([`key_id`]), the same on every host and every version of
//! rctl. The table itself is indexed as a local limiter's is, by a
//! per-process random hash of the key's bytes, so a client that can
//! choose key material still cannot aim collisions at the table.
//!
//! **The request path** costs a local limiter's hit and little more: the
//! id is computed once, when a key is first seen, and kept in its entry;
//! an entry holds only the mirror, the id and the key's weight (32
//! bytes, a local entry's 16 plus 16); and a hit appends one
//! tally (id, table hash, admitted) to its shard's log instead of
//! updating counters the sync would have to look up. The sync sums the
//! logs ([`Shared::drain`]) and keeps what it needs between a drain and
//! the next apply (in-flight counts, the site's totals, where each id
//! lives in the table) on its own side. A ban published for a key this
//! host has not drained yet is kept by id until the key shows up (a new
//! entry, or the next drain), or the ban ends. Both the sync's state and
//! the pending bans are bounded by the table's capacity: past it, the
//! sync keeps only keys in flight, and the pending bans that end soonest
//! go first. A remote ban for a key this host holds but has not drained
//! since it came (or forgot as idle) takes hold at its next drain, up to
//! one sync interval later.

use super::{
    lock, shard_of, step, Gcra, Limiter, Outcome, Params, Shard, Slot, State, Step, SHARDS,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

/// The largest weight a host charges an admission with.
const MAX_WEIGHT: f32 = 4096.0;

/// A key's id, the same on every host: SipHash-2-4 of the key's bytes
/// with the reference keys of the SipHash paper (0x00…0x0f).
#[expect(
    deprecated,
    reason = "SipHasher is SipHash-2-4, a fixed algorithm; DefaultHasher's may change between Rust releases, and every host of a site must agree"
)]
pub fn key_id(key: &[u8]) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::hash::SipHasher::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
    h.write(key);
    h.finish()
}

/// A key's mirror of the site's bucket: all a hit reads and writes. What
/// the sync needs besides ([`Cold`]) lives with the backend's handle, and
/// what hits count for it goes to the shard's [`Log`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    st: State,
    /// The key's id ([`key_id`]), computed when the key was first seen.
    id: u64,
    /// The key's weight `w` in 1/65536ths: online, an admission moves
    /// the mirror by `w` intervals (of whichever limiter shares the
    /// table: a new generation may change the rate).
    weight: u32,
}

impl Entry {
    /// Its state, id and weight (for saving).
    pub(super) fn parts(&self) -> (State, u64, u32) {
        (self.st, self.id, self.weight)
    }

    /// The entry saved as [`Entry::parts`].
    pub(super) fn from_parts(st: State, id: u64, weight: u32) -> Entry {
        Entry { st, id, weight }
    }

    fn new(now_ns: u64, id: u64, weight: u32) -> Entry {
        Entry {
            st: State {
                tat: now_ns,
                banned_until: 0,
            },
            id,
            weight,
        }
    }
}

/// A weight of 1 in [`Entry::weight`]'s units.
const ONE: u32 = 1 << 16;

/// `w` in [`Entry::weight`]'s units.
fn q16(w: f32) -> u32 {
    (w.clamp(1.0, MAX_WEIGHT) * ONE as f32) as u32
}

/// [`Entry::weight`] as a number.
fn weight_of(q: u32) -> f32 {
    q as f32 / ONE as f32
}

/// What an admission of weight `q` ([`Entry::weight`]) is charged.
fn charge(g: &Gcra, q: u32) -> u64 {
    u64::try_from((u128::from(g.interval_ns) * u128::from(q)) >> 16).unwrap_or(u64::MAX)
}

impl Slot for Entry {
    fn banned_until(&self) -> u64 {
        self.st.banned_until
    }
    fn refilled(&self, now: u64, params: &Params) -> bool {
        self.st.refilled(now, params)
    }
    fn rank(&self) -> u64 {
        self.st.rank()
    }
}

/// One hit (or, once compacted, several) of one key, for the backend.
#[derive(Debug, Clone, Copy)]
struct Tally {
    id: u64,
    /// Where the key lives in the table.
    h: u64,
    admitted: u32,
    hits: u32,
}

/// A log of shard `i` grows to this many tallies before it is compacted
/// in place (at 100 ms syncs, about 5 million hits a second on one
/// shard).
const LOG_COMPACT: usize = 1 << 15;

/// What the hits of one shard counted for the backend since the last
/// drain: appended to by each hit (no lookup), summed by the drain.
#[derive(Debug)]
pub(super) struct Log {
    tallies: Vec<Tally>,
    /// An emptied buffer the drain hands back, so hits append to memory
    /// already allocated.
    spare: Vec<Tally>,
    /// Bans made here: key id, banned until.
    bans: Vec<(u64, u64)>,
    /// Length at which the tallies are compacted next.
    compact_at: usize,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            tallies: Vec::new(),
            spare: Vec::new(),
            bans: Vec::new(),
            compact_at: LOG_COMPACT,
        }
    }
}

impl Log {
    fn push(&mut self, id: u64, h: u64, admitted: bool) {
        self.tallies.push(Tally {
            id,
            h,
            admitted: u32::from(admitted),
            hits: 1,
        });
        if self.tallies.len() >= self.compact_at {
            self.compact();
        }
    }

    #[cold]
    fn compact(&mut self) {
        sum_tallies(&mut self.tallies);
        self.compact_at = (2 * self.tallies.len()).max(LOG_COMPACT);
    }

    fn clear(&mut self) {
        self.tallies.clear();
        self.bans.clear();
        self.compact_at = LOG_COMPACT;
    }
}

/// Sorts `t` by key and sums each key's tallies into one.
fn sum_tallies(t: &mut Vec<Tally>) {
    t.sort_unstable_by_key(|t| t.id);
    t.dedup_by(|next, kept| {
        if next.id != kept.id {
            return false;
        }
        kept.admitted = kept.admitted.saturating_add(next.admitted);
        kept.hits = kept.hits.saturating_add(next.hits);
        true
    });
}

/// What the sync keeps of one key between a drain and the next apply.
#[derive(Debug, Clone, Copy, Default)]
struct Cold {
    /// Where the key lives in the table.
    h: u64,
    /// Drained, not yet applied.
    inflight: u32,
    inflight_hits: u32,
    /// The site's totals at the last apply, modulo 2^32 (only their
    /// moves between two applies matter; 32 bytes an entry in all).
    seen_admitted: u32,
    seen_hits: u32,
    /// The drain that last handed it over, modulo 2^32.
    drained_at: u32,
    /// Whether an apply has set the totals above.
    synced: bool,
}

/// How far a site total moved from `seen` (modulo 2^32), or `None` when
/// it went back (the backend lost its count).
fn moved(total: u64, seen: u32) -> Option<u32> {
    let d = (total as u32).wrapping_sub(seen);
    (d <= i32::MAX as u32).then_some(d)
}

/// The sync's own state: touched by drains and applies, never by hits.
#[derive(Debug, Default)]
struct SyncState {
    cold: HashMap<u64, Cold>,
    /// Drains so far.
    drains: u64,
}

/// Keys neither drained nor applied for this many drains (up to twice
/// as many: the sync sweeps every this many) are forgotten by the sync;
/// the next apply takes their totals afresh.
const COLD_DRAINS: u64 = 64;

/// How far ahead of now, in bursts, a site's bucket may be taken to be:
/// an honest site stays within a few (each host overshoots by at most
/// what it admits in one sync interval); a backend that says more is
/// taken at this.
const MAX_AHEAD_BURSTS: u64 = 64;

/// A shared limiter's table and its link to the backend.
pub(super) struct SharedTable {
    pub(super) shards: Vec<Mutex<Shard<Entry>>>,
    sync: Mutex<SyncState>,
    /// Bans published for keys this host has not drained: id, banned
    /// until (a clock reading). Locked after a shard's lock, never
    /// before one.
    pending_bans: Mutex<Pending>,
    /// Whether `pending_bans` may hold anything (a new key checks it
    /// only then).
    any_pending: AtomicBool,
    online: AtomicBool,
    /// `w` for keys not synced yet (f32 bits).
    new_key_weight: AtomicU32,
    offline_hits: AtomicU64,
    remote_bans: AtomicU64,
    /// Bans made here while the backend was offline, published at the
    /// next drain: id, banned until. Bounded by the table's capacity.
    offline_bans: Mutex<HashMap<u64, u64>>,
    waker: OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for SharedTable {
    fn default() -> Self {
        SharedTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            sync: Mutex::default(),
            pending_bans: Mutex::default(),
            any_pending: AtomicBool::new(false),
            online: AtomicBool::new(false),
            new_key_weight: AtomicU32::new(1.0f32.to_bits()),
            offline_hits: AtomicU64::new(0),
            remote_bans: AtomicU64::new(0),
            offline_bans: Mutex::default(),
            waker: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for SharedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTable")
            .field("online", &self.online.load(Relaxed))
            .field("offline_hits", &self.offline_hits.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl SharedTable {
    pub(super) fn hit(&self, l: &Limiter, g: &Gcra, key: &[u8], now_ns: u64) -> Outcome {
        let h = l.table.hasher.hash(key);
        let online = self.online.load(Relaxed);
        if !online {
            self.offline_hits.fetch_add(1, Relaxed);
        }
        let mut shard = lock(&self.shards[shard_of(h)]);
        let e = l.entry(&mut shard, h, now_ns, |_| self.fresh(key_id(key), now_ns));
        let charge = if online {
            charge(g, e.weight)
        } else {
            g.interval_ns
        };
        let step = step(g, &mut e.st, now_ns, charge);
        if !online {
            return match step {
                Step::Allowed => Outcome::Allowed,
                Step::Limited(ns) => Outcome::Limited { retry_after_ns: ns },
                Step::Banned(ns) => {
                    let (id, until) = (e.id, e.st.banned_until);
                    drop(shard);
                    self.keep_offline_ban(id, until, now_ns, l.capacity());
                    Outcome::Limited { retry_after_ns: ns }
                }
            };
        }
        let (id, banned_until) = (e.id, e.st.banned_until);
        shard.log.push(id, h, matches!(step, Step::Allowed));
        match step {
            Step::Allowed => Outcome::Allowed,
            Step::Limited(ns) => Outcome::Limited { retry_after_ns: ns },
            Step::Banned(ns) => {
                shard.log.bans.push((id, banned_until));
                drop(shard);
                if let Some(w) = self.waker.get() {
                    w();
                }
                Outcome::Limited { retry_after_ns: ns }
            }
        }
    }

    /// A new entry for key `id`: charged by the weight of keys not synced
    /// yet, under a ban published for it, if any (taken from the pending
    /// bans: the caller holds the shard's lock).
    fn fresh(&self, id: u64, now_ns: u64) -> Entry {
        let mut e = Entry::new(now_ns, id, self.new_key_weight());
        if self.any_pending.load(Relaxed) {
            if let Some(until) = lock(&self.pending_bans).bans.remove(&id) {
                if until > now_ns {
                    e.st.banned_until = until;
                }
            }
        }
        e
    }

    /// The weight of a key not synced yet ([`Entry::weight`]).
    fn new_key_weight(&self) -> u32 {
        if self.online.load(Relaxed) {
            q16(f32::from_bits(self.new_key_weight.load(Relaxed)))
        } else {
            ONE
        }
    }

    /// Keeps a ban made while offline until the next drain publishes it;
    /// past `cap` bans, the ones that have ended, then the one that ends
    /// soonest, go.
    #[cold]
    fn keep_offline_ban(&self, id: u64, until: u64, now_ns: u64, cap: usize) {
        let mut b = lock(&self.offline_bans);
        if b.len() >= cap.max(1) && !b.contains_key(&id) {
            b.retain(|_, &mut u| u > now_ns);
            if b.len() >= cap.max(1) {
                if let Some((&soonest, _)) = b.iter().min_by_key(|(_, &u)| u) {
                    b.remove(&soonest);
                }
            }
        }
        let u = b.entry(id).or_insert(0);
        *u = (*u).max(until);
    }

    /// Keeps a ban for key `id`, not in the table, until it shows up;
    /// whether it ends later than the one kept before.
    fn keep_pending(&self, id: u64, until: u64, now_ns: u64) -> bool {
        let mut p = lock(&self.pending_bans);
        // Ended bans go when the map has doubled since the last sweep:
        // a burst of bans costs amortised constant time each.
        if p.bans.len() >= p.sweep_at {
            p.bans.retain(|_, &mut u| u > now_ns);
            p.sweep_at = (2 * p.bans.len()).max(64);
        }
        let u = p.bans.entry(id).or_insert(0);
        let later = until > *u;
        *u = (*u).max(until);
        self.any_pending.store(true, Relaxed);
        later
    }

    /// Once a sync: ended bans go (so that new keys stop looking), and
    /// past `cap` bans the half that end soonest go too.
    fn sweep_pending(&self, now_ns: u64, cap: usize) {
        if !self.any_pending.load(Relaxed) {
            return;
        }
        let mut p = lock(&self.pending_bans);
        p.bans.retain(|_, &mut u| u > now_ns);
        if p.bans.len() > cap {
            let mut ends: Vec<u64> = p.bans.values().copied().collect();
            let mid = ends.len() / 2;
            let (_, &mut cut, _) = ends.select_nth_unstable(mid);
            p.bans.retain(|_, &mut u| u > cut);
            p.bans.shrink_to_fit();
        }
        self.any_pending.store(!p.bans.is_empty(), Relaxed);
    }

    /// Takes the pending bans of the ids in `ids` (a drain's, sorted).
    fn take_pending(&self, ids: &[SharedDelta]) -> Vec<(u64, u64)> {
        if !self.any_pending.load(Relaxed) {
            return Vec::new();
        }
        let mut p = lock(&self.pending_bans);
        let found = ids
            .iter()
            .filter_map(|d| p.bans.remove(&d.id).map(|u| (d.id, u)))
            .collect();
        self.any_pending.store(!p.bans.is_empty(), Relaxed);
        found
    }
}

/// Bans published for keys this host has not drained.
#[derive(Debug, Default)]
struct Pending {
    /// Key id, banned until.
    bans: HashMap<u64, u64>,
    /// Size at which ended bans are swept out next.
    sweep_at: usize,
}

/// What one key counted here since the last sync, for the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedDelta {
    /// The key's id ([`key_id`]).
    pub id: u64,
    /// Requests admitted.
    pub admitted: u32,
    /// Requests seen (admitted or not).
    pub hits: u32,
    /// A ban made here: how long it has left (0: none).
    pub ban_ns: u64,
}

impl SharedDelta {
    /// Sorts `deltas` by key and makes one delta a key: counts added, the
    /// longer ban kept (deltas of several drains, sent together).
    pub fn merge(deltas: &mut Vec<SharedDelta>) {
        deltas.sort_unstable_by_key(|d| d.id);
        deltas.dedup_by(|next, kept| {
            if next.id != kept.id {
                return false;
            }
            kept.admitted = kept.admitted.saturating_add(next.admitted);
            kept.hits = kept.hits.saturating_add(next.hits);
            kept.ban_ns = kept.ban_ns.max(next.ban_ns);
            true
        });
    }
}

/// What the backend says of one key's site-wide bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedUpdate {
    /// The key's id.
    pub id: u64,
    /// How far the site's theoretical arrival time runs ahead of now (0
    /// when it is behind: the bucket is full).
    pub ahead_ns: u64,
    /// Requests the site has admitted for it (the backend's count).
    pub admitted_total: u64,
    /// Requests the site has seen for it.
    pub hits_total: u64,
    /// The ban in force, how long it has left (0: none).
    pub ban_ns: u64,
}

/// A shared limiter's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharedStats {
    /// Whether the backend is online.
    pub online: bool,
    /// Hits decided by this host alone, with the backend offline.
    pub offline_hits: u64,
    /// Bans made on other hosts and in force here (for a key not seen
    /// here yet, from its first hit).
    pub remote_bans: u64,
}

/// The backend's handle on a shared limiter ([`Limiter::shared`]).
#[derive(Clone, Copy)]
pub struct Shared<'a> {
    limiter: &'a Limiter,
    table: &'a SharedTable,
    gcra: Gcra,
}

impl<'a> Shared<'a> {
    pub(super) fn new(limiter: &'a Limiter, table: &'a SharedTable, gcra: Gcra) -> Self {
        Shared {
            limiter,
            table,
            gcra,
        }
    }

    /// The limiter's GCRA parameters (a shared limiter is always GCRA).
    pub fn gcra(&self) -> Gcra {
        self.gcra
    }

    /// Whether the backend is online (deltas are kept and weights used).
    pub fn is_online(&self) -> bool {
        self.table.online.load(Relaxed)
    }

    /// Sets whether the backend is online. Going offline forgets what was
    /// not published (deltas, weights): the host counts alone from then
    /// on, and publishes afresh when it is back.
    pub fn set_online(&self, online: bool) {
        if self.table.online.swap(online, Relaxed) == online || online {
            return;
        }
        let mut sync = lock(&self.table.sync);
        sync.cold.clear();
        *lock(&self.table.pending_bans) = Pending::default();
        self.table.any_pending.store(false, Relaxed);
        for s in &self.table.shards {
            let mut s = lock(s);
            s.log.clear();
            for e in s.keys.values_mut() {
                e.weight = ONE;
            }
        }
    }

    /// The weight of keys not synced yet: the number of hosts that share
    /// the site's buckets now (at least 1).
    pub fn set_new_key_weight(&self, hosts: u32) {
        let w = (hosts.max(1) as f32).min(MAX_WEIGHT);
        self.table.new_key_weight.store(w.to_bits(), Relaxed);
    }

    /// Calls `wake` when this host bans a key while online, so that the
    /// backend publishes the ban at once (the first waker set stays).
    pub fn set_waker(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        let _ = self.table.waker.set(wake);
    }

    /// Hands over what each key counted since the last drain, and marks
    /// it in flight until [`Shared::apply`] or [`Shared::set_online`].
    pub fn drain(&self, now_ns: u64, out: &mut Vec<SharedDelta>) {
        let t = self.table;
        let mut sync = lock(&t.sync);
        sync.drains += 1;
        let drains = sync.drains;
        for s in &t.shards {
            let (mut tallies, bans) = {
                let mut s = lock(s);
                let spare = std::mem::take(&mut s.log.spare);
                let bans = std::mem::take(&mut s.log.bans);
                s.log.compact_at = LOG_COMPACT;
                (std::mem::replace(&mut s.log.tallies, spare), bans)
            };
            sum_tallies(&mut tallies);
            let first = out.len();
            for tl in &tallies {
                out.push(SharedDelta {
                    id: tl.id,
                    admitted: tl.admitted,
                    hits: tl.hits,
                    ban_ns: 0,
                });
                let c = sync.cold.entry(tl.id).or_default();
                c.h = tl.h;
                c.inflight = c.inflight.saturating_add(tl.admitted);
                c.inflight_hits = c.inflight_hits.saturating_add(tl.hits);
                c.drained_at = drains as u32;
            }
            // A ban is made by a hit, so its key has a delta here.
            let deltas = &mut out[first..];
            for (id, until) in bans {
                if let Ok(i) = deltas.binary_search_by_key(&id, |d| d.id) {
                    deltas[i].ban_ns = deltas[i].ban_ns.max(until.saturating_sub(now_ns));
                }
            }
            // Bans published for keys that showed up since.
            let found = t.take_pending(deltas);
            let mut s = lock(s);
            for (id, until) in found {
                let Some(c) = sync.cold.get(&id) else {
                    continue;
                };
                if let Some(e) = s.keys.get_mut(&c.h) {
                    e.st.banned_until = e.st.banned_until.max(until);
                }
            }
            // Keep the allocation for the hits after the next drain.
            tallies.clear();
            if s.log.spare.capacity() < tallies.capacity() {
                s.log.spare = tallies;
            }
        }
        // What the sync remembers is bounded like the table: idle keys go
        // every COLD_DRAINS drains, and at once when it holds more keys
        // than the table does (then only keys in flight stay).
        let cap = self.limiter.capacity();
        if drains.is_multiple_of(COLD_DRAINS) || sync.cold.len() > cap {
            let keep_idle = sync.cold.len() <= cap;
            sync.cold.retain(|_, c| {
                c.inflight > 0
                    || keep_idle && (drains as u32).wrapping_sub(c.drained_at) < COLD_DRAINS as u32
            });
            let held = sync.cold.len();
            sync.cold.shrink_to(2 * held);
        }
        t.sweep_pending(now_ns, cap);
        // Bans made while the backend was offline, published now.
        let offline = std::mem::take(&mut *lock(&t.offline_bans));
        for (id, until) in offline {
            if until > now_ns {
                out.push(SharedDelta {
                    id,
                    admitted: 0,
                    hits: 0,
                    ban_ns: until - now_ns,
                });
            }
        }
    }

    /// Applies the site's state of the keys in `updates` (the answer to
    /// the last drain): each mirror is set from the site's bucket plus
    /// what was admitted here since the drain, each weight from the
    /// site's hits over this host's.
    pub fn apply(&self, now_ns: u64, updates: &[SharedUpdate]) {
        /// One update, with what the sync knew of its key.
        struct Step<'u> {
            u: &'u SharedUpdate,
            h: u64,
            lost: bool,
            /// The site's hits over this host's since the last apply, if
            /// they make a weight.
            fresh: Option<f32>,
        }
        let (l, t, g) = (self.limiter, self.table, &self.gcra);
        // What the backend says is taken within what an honest site could
        // reach: a ban no longer than the rule's (none where it has none),
        // a bucket at most MAX_AHEAD_BURSTS bursts ahead.
        let max_ahead =
            MAX_AHEAD_BURSTS.saturating_mul(g.tolerance_ns.saturating_add(g.interval_ns));
        let capped: Vec<SharedUpdate> = updates
            .iter()
            .map(|u| SharedUpdate {
                ban_ns: u.ban_ns.min(g.ban_ns),
                ahead_ns: u.ahead_ns.min(max_ahead),
                ..*u
            })
            .collect();
        let updates = &capped[..];
        let mut by_shard: Vec<Vec<Step>> = (0..SHARDS).map(|_| Vec::new()).collect();
        let mut sync = lock(&t.sync);
        let drains = sync.drains;
        for u in updates {
            let Some(c) = sync.cold.get_mut(&u.id) else {
                // Not drained here (or forgotten): only a ban matters.
                if u.ban_ns > 0 {
                    let _ = t.keep_pending(u.id, now_ns.saturating_add(u.ban_ns), now_ns);
                }
                continue;
            };
            let lost = if c.synced {
                moved(u.admitted_total, c.seen_admitted).is_none_or(|m| m < c.inflight)
            } else {
                u.admitted_total < u64::from(c.inflight)
            };
            let site_hits = u64::from(moved(u.hits_total, c.seen_hits).unwrap_or(0));
            let own_hits = u64::from(c.inflight_hits);
            let fresh = (c.synced && !lost && own_hits > 0 && site_hits >= own_hits)
                .then(|| site_hits as f32 / own_hits as f32);
            c.seen_admitted = u.admitted_total as u32;
            c.seen_hits = u.hits_total as u32;
            c.synced = true;
            c.inflight = 0;
            c.inflight_hits = 0;
            c.drained_at = drains as u32;
            by_shard[shard_of(c.h)].push(Step {
                u,
                h: c.h,
                lost,
                fresh,
            });
        }
        for (i, steps) in by_shard.iter().enumerate() {
            if steps.is_empty() {
                continue;
            }
            let mut s = lock(&t.shards[i]);
            // Admissions since the drain, per key: the log holds them.
            let mut since: HashMap<u64, u64> = HashMap::new();
            for tl in &s.log.tallies {
                *since.entry(tl.id).or_insert(0) += u64::from(tl.admitted);
            }
            for st in steps {
                let u = st.u;
                if !s.keys.contains_key(&st.h) && u.ban_ns == 0 && u.ahead_ns == 0 {
                    continue;
                }
                let w0 = t.new_key_weight();
                let e = l.entry(&mut s, st.h, now_ns, |_| Entry::new(now_ns, u.id, w0));
                if let Some(fresh) = st.fresh {
                    e.weight = q16(0.5 * weight_of(e.weight) + 0.5 * fresh);
                }
                let pending = since.get(&u.id).copied().unwrap_or(0);
                let mirror = now_ns
                    .saturating_add(u.ahead_ns)
                    .saturating_add(pending.saturating_mul(charge(g, e.weight)));
                // The site's bucket is the truth, unless the backend lost it
                // (restarted): then keep what this host knew, if more.
                e.st.tat = if st.lost {
                    e.st.tat.max(mirror)
                } else {
                    mirror
                };
                if u.ban_ns > 0 {
                    e.st.banned_until = e.st.banned_until.max(now_ns.saturating_add(u.ban_ns));
                }
            }
        }
    }

    /// Applies a ban another host made on key `id`, with `ban_ns` left:
    /// at most this limiter's own ban length, and none for a limiter
    /// without bans (whoever can write to the backend cannot ban a key
    /// for longer than the rule says, or where it says no ban).
    pub fn remote_ban(&self, id: u64, ban_ns: u64, now_ns: u64) {
        let (l, t) = (self.limiter, self.table);
        let ban_ns = ban_ns.min(self.gcra.ban_ns);
        if ban_ns == 0 {
            return;
        }
        let until = now_ns.saturating_add(ban_ns);
        let sync = lock(&t.sync);
        let Some(h) = sync.cold.get(&id).map(|c| c.h) else {
            // Not seen here yet: in force from the key's first hit here.
            if t.keep_pending(id, until, now_ns) {
                t.remote_bans.fetch_add(1, Relaxed);
            }
            return;
        };
        let mut s = lock(&t.shards[shard_of(h)]);
        let w0 = t.new_key_weight();
        let e = l.entry(&mut s, h, now_ns, |_| Entry::new(now_ns, id, w0));
        if until > e.st.banned_until {
            e.st.banned_until = until;
            t.remote_bans.fetch_add(1, Relaxed);
        }
    }

    /// Its counters.
    pub fn stats(&self) -> SharedStats {
        SharedStats {
            online: self.is_online(),
            offline_hits: self.table.offline_hits.load(Relaxed),
            remote_bans: self.table.remote_bans.load(Relaxed),
        }
    }

    /// The weight key `key` is charged with now (for tests and status).
    pub fn weight(&self, key: &[u8]) -> Option<f32> {
        let l = self.limiter;
        let h = l.table.hasher.hash(key);
        lock(&self.table.shards[shard_of(h)])
            .keys
            .get(&h)
            .map(|e| weight_of(e.weight))
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
