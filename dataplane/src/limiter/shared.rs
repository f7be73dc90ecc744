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
//! fraction of that (measured in the README).
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
//! rctl; the table itself is indexed by a per-process random hash of the
//! id, so a client that can choose key material still cannot aim
//! collisions at the table.

use super::{
    lock, shard_of, step, Gcra, Limiter, Outcome, Params, Shard, Slot, State, Step, SHARDS,
};
use std::hash::BuildHasher as _;
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

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    st: State,
    id: u64,
    /// Intervals an admission moves the mirror by between syncs.
    weight: f32,
    /// Admissions and hits since the last drain.
    pending: u32,
    pending_hits: u32,
    /// Drained, not yet applied.
    inflight: u32,
    inflight_hits: u32,
    /// The site's totals at the last apply.
    seen_admitted: u64,
    seen_hits: u64,
    /// Whether an apply has set the totals above.
    synced: bool,
    /// On the shard's dirty list.
    dirty: bool,
    /// A ban made here, not yet drained.
    ban_out: bool,
}

impl Entry {
    fn new(id: u64, now_ns: u64, weight: f32) -> Entry {
        Entry {
            st: State {
                tat: now_ns,
                banned_until: 0,
            },
            id,
            weight,
            pending: 0,
            pending_hits: 0,
            inflight: 0,
            inflight_hits: 0,
            seen_admitted: 0,
            seen_hits: 0,
            synced: false,
            dirty: false,
            ban_out: false,
        }
    }
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
    fn busy(&self) -> bool {
        self.dirty || self.inflight > 0
    }
}

/// A shared limiter's table and its link to the backend.
pub(super) struct SharedTable {
    pub(super) shards: Vec<Mutex<Shard<Entry>>>,
    online: AtomicBool,
    /// `w` for keys not synced yet (f32 bits).
    new_key_weight: AtomicU32,
    offline_hits: AtomicU64,
    remote_bans: AtomicU64,
    waker: OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for SharedTable {
    fn default() -> Self {
        SharedTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            online: AtomicBool::new(false),
            new_key_weight: AtomicU32::new(1.0f32.to_bits()),
            offline_hits: AtomicU64::new(0),
            remote_bans: AtomicU64::new(0),
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
        let id = key_id(key);
        let h = l.table.hasher.hash_one(id);
        let online = self.online.load(Relaxed);
        let w0 = if online {
            f32::from_bits(self.new_key_weight.load(Relaxed))
        } else {
            self.offline_hits.fetch_add(1, Relaxed);
            1.0
        };
        let mut shard = lock(&self.shards[shard_of(h)]);
        let e = l.entry(&mut shard, h, now_ns, |_| Entry::new(id, now_ns, w0));
        let w = if online { e.weight } else { 1.0 };
        let charge = (g.interval_ns as f64 * f64::from(w)) as u64;
        let step = step(g, &mut e.st, now_ns, charge);
        let mut wake = false;
        let out = match step {
            Step::Allowed => {
                if online {
                    e.pending = e.pending.saturating_add(1);
                }
                Outcome::Allowed
            }
            Step::Limited(ns) => Outcome::Limited { retry_after_ns: ns },
            Step::Banned(ns) => {
                wake = online;
                e.ban_out = online;
                Outcome::Limited { retry_after_ns: ns }
            }
        };
        let mut newly_dirty = false;
        if online {
            e.pending_hits = e.pending_hits.saturating_add(1);
            newly_dirty = !e.dirty;
            e.dirty = true;
        }
        if newly_dirty {
            shard.dirty.push(h);
        }
        drop(shard);
        if wake {
            if let Some(w) = self.waker.get() {
                w();
            }
        }
        out
    }
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
    /// Bans made on other hosts and applied here.
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
        for s in &self.table.shards {
            let mut s = lock(s);
            s.dirty.clear();
            for e in s.keys.values_mut() {
                let id = e.id;
                let st = e.st;
                *e = Entry::new(id, 0, 1.0);
                e.st = st;
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
        for s in &self.table.shards {
            let mut s = lock(s);
            let dirty = std::mem::take(&mut s.dirty);
            for h in &dirty {
                let Some(e) = s.keys.get_mut(h) else { continue };
                if !e.dirty {
                    continue;
                }
                out.push(SharedDelta {
                    id: e.id,
                    admitted: e.pending,
                    hits: e.pending_hits,
                    ban_ns: if e.ban_out {
                        e.st.banned_until.saturating_sub(now_ns)
                    } else {
                        0
                    },
                });
                e.inflight = e.inflight.saturating_add(e.pending);
                e.inflight_hits = e.inflight_hits.saturating_add(e.pending_hits);
                e.pending = 0;
                e.pending_hits = 0;
                e.ban_out = false;
                e.dirty = false;
            }
            // Keep the allocation for the next round.
            let mut dirty = dirty;
            dirty.clear();
            if s.dirty.is_empty() {
                s.dirty = dirty;
            }
        }
    }

    /// Applies the site's state of the keys in `updates` (the answer to
    /// the last drain): each mirror is set from the site's bucket plus
    /// what was admitted here since the drain, each weight from the
    /// site's hits over this host's.
    pub fn apply(&self, now_ns: u64, updates: &[SharedUpdate]) {
        let l = self.limiter;
        let interval = self.gcra.interval_ns as f64;
        for u in updates {
            let h = l.table.hasher.hash_one(u.id);
            let mut s = lock(&self.table.shards[shard_of(h)]);
            if !s.keys.contains_key(&h) && u.ban_ns == 0 && u.ahead_ns == 0 {
                continue;
            }
            let w0 = f32::from_bits(self.table.new_key_weight.load(Relaxed));
            let e = l.entry(&mut s, h, now_ns, |_| Entry::new(u.id, now_ns, w0));
            let lost = u.admitted_total < e.seen_admitted + u64::from(e.inflight);
            let site_hits = u.hits_total.saturating_sub(e.seen_hits);
            let own_hits = u64::from(e.inflight_hits);
            if e.synced && !lost && own_hits > 0 && site_hits >= own_hits {
                let fresh = site_hits as f32 / own_hits as f32;
                e.weight = (0.5 * e.weight + 0.5 * fresh).clamp(1.0, MAX_WEIGHT);
            }
            let mirror = now_ns
                .saturating_add(u.ahead_ns)
                .saturating_add((f64::from(e.pending) * f64::from(e.weight) * interval) as u64);
            // The site's bucket is the truth, unless the backend lost it
            // (restarted): then keep what this host knew, if more.
            e.st.tat = if lost { e.st.tat.max(mirror) } else { mirror };
            e.seen_admitted = u.admitted_total;
            e.seen_hits = u.hits_total;
            e.synced = true;
            e.inflight = 0;
            e.inflight_hits = 0;
            if u.ban_ns > 0 {
                e.st.banned_until = e.st.banned_until.max(now_ns.saturating_add(u.ban_ns));
            }
        }
    }

    /// Applies a ban another host made on key `id`, with `ban_ns` left.
    pub fn remote_ban(&self, id: u64, ban_ns: u64, now_ns: u64) {
        let l = self.limiter;
        let h = l.table.hasher.hash_one(id);
        let mut s = lock(&self.table.shards[shard_of(h)]);
        let w0 = f32::from_bits(self.table.new_key_weight.load(Relaxed));
        let e = l.entry(&mut s, h, now_ns, |_| Entry::new(id, now_ns, w0));
        let until = now_ns.saturating_add(ban_ns);
        if until > e.st.banned_until {
            e.st.banned_until = until;
            self.table.remote_bans.fetch_add(1, Relaxed);
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
        let h = l.table.hasher.hash_one(key_id(key));
        lock(&self.table.shards[shard_of(h)])
            .keys
            .get(&h)
            .map(|e| e.weight)
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
