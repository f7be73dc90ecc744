//! A limiter's keys and buckets as they are saved across a restart: the
//! hasher's key (so that a key finds its bucket again) and each entry
//! that still matters (a bucket not refilled yet, or a ban in force),
//! with its times on the wall clock, since the monotonic clock the
//! limiter counts in starts again at a restart and a reboot.

use super::{lock, shard_of, vsthrottle, KeyHasher, Limiter, Shard, Shards, Slot, State, Table};
use std::sync::{Arc, Mutex};

/// Which kind of table a [`SavedLimiter`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedKind {
    /// GCRA, counted on this host.
    Gcra,
    /// vmod_vsthrottle's bucket.
    Vsthrottle,
    /// GCRA on a mirror of a site-wide bucket (`shared`).
    Shared,
}

impl SavedKind {
    /// Its byte in a snapshot file.
    pub fn to_byte(self) -> u8 {
        match self {
            SavedKind::Gcra => 1,
            SavedKind::Vsthrottle => 2,
            SavedKind::Shared => 3,
        }
    }

    /// The kind a snapshot's byte names.
    pub fn from_byte(b: u8) -> Option<SavedKind> {
        Some(match b {
            1 => SavedKind::Gcra,
            2 => SavedKind::Vsthrottle,
            3 => SavedKind::Shared,
            _ => return None,
        })
    }
}

/// One saved key: its hash, and its bucket's fields (times in unix ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedEntry {
    /// The key's hash under the saved hasher key.
    pub hash: u64,
    /// GCRA, shared: the theoretical arrival time; vsthrottle: the last use.
    pub t1: u64,
    /// Banned (blocked) until; 0: not banned.
    pub t2: u64,
    /// Shared: the key's site-wide id; 0 otherwise.
    pub id: u64,
    /// vsthrottle: tokens left; shared: the weight (1/65536ths); 0 otherwise.
    pub n: u32,
}

/// A limiter's saved state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedLimiter {
    /// Its kind of table.
    pub kind: SavedKind,
    /// The hasher's key.
    pub keys: (u64, u64),
    /// The entries that still mattered when it was saved.
    pub entries: Vec<SavedEntry>,
}

/// What a restore put back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Keys put back.
    pub keys: usize,
    /// Saved keys left out: refilled or unbanned since, or past the
    /// limiter's bound.
    pub dropped: usize,
}

/// The clocks at one moment: the limiter's (monotonic ns) and the wall
/// clock's (unix ns).
#[derive(Debug, Clone, Copy)]
struct Clocks {
    now: u64,
    unix: u64,
}

impl Clocks {
    fn to_unix(self, t: u64) -> u64 {
        if t == 0 {
            return 0;
        }
        (i128::from(t) - i128::from(self.now) + i128::from(self.unix)).clamp(0, u64::MAX as i128)
            as u64
    }

    fn to_mono(self, t: u64) -> u64 {
        if t == 0 {
            return 0;
        }
        (i128::from(t) - i128::from(self.unix) + i128::from(self.now)).clamp(0, u64::MAX as i128)
            as u64
    }
}

impl Limiter {
    /// Its keys and buckets at `now_ns` (its clock), `unix_ns` being the
    /// wall clock at that moment. Keys whose bucket has refilled and that
    /// are not banned are left out: forgetting them changes nothing.
    pub fn save(&self, now_ns: u64, unix_ns: u64) -> SavedLimiter {
        let c = Clocks {
            now: now_ns,
            unix: unix_ns,
        };
        let mut entries = Vec::new();
        let kind = match (&self.table.shards, &self.params) {
            (Shards::Local(shards), p) => {
                for s in shards {
                    for (&hash, st) in &lock(s).keys {
                        if st.banned_until > now_ns || !st.refilled(now_ns, p) {
                            entries.push(SavedEntry {
                                hash,
                                t1: c.to_unix(st.tat),
                                t2: c.to_unix(st.banned_until),
                                id: 0,
                                n: 0,
                            });
                        }
                    }
                }
                SavedKind::Gcra
            }
            (Shards::Vsthrottle(shards), p) => {
                for s in shards {
                    for (&hash, st) in &lock(s).keys {
                        if st.banned_until() > now_ns || !st.refilled(now_ns, p) {
                            let (last, block, tokens) = st.parts();
                            entries.push(SavedEntry {
                                hash,
                                t1: c.to_unix(last),
                                t2: c.to_unix(block),
                                id: 0,
                                n: tokens,
                            });
                        }
                    }
                }
                SavedKind::Vsthrottle
            }
            (Shards::Shared(t), p) => {
                for s in &t.shards {
                    for (&hash, e) in &lock(s).keys {
                        if e.banned_until() > now_ns || !e.refilled(now_ns, p) {
                            let (st, id, weight) = e.parts();
                            entries.push(SavedEntry {
                                hash,
                                t1: c.to_unix(st.tat),
                                t2: c.to_unix(st.banned_until),
                                id,
                                n: weight,
                            });
                        }
                    }
                }
                SavedKind::Shared
            }
        };
        entries.sort_unstable_by_key(|e| e.hash);
        SavedLimiter {
            kind,
            keys: self.table.hasher.keys(),
            entries,
        }
    }

    /// Puts `saved` back into this limiter, which must not share its state
    /// yet (a fresh one, before it decides anything): its table is replaced
    /// by one under the saved hasher key, holding the saved entries that
    /// still matter at `now_ns` (`unix_ns` on the wall clock), within its
    /// bound. A saved limiter of another kind puts nothing back.
    pub fn restore(&mut self, saved: &SavedLimiter, now_ns: u64, unix_ns: u64) -> Restored {
        let c = Clocks {
            now: now_ns,
            unix: unix_ns,
        };
        let mut out = Restored::default();
        let (k0, k1) = saved.keys;
        let hasher = KeyHasher::with_keys(k0, k1);
        let per = self.per_shard;
        let place = |count: &mut [usize; super::SHARDS], hash: u64| {
            let i = shard_of(hash);
            if count[i] >= per {
                return None;
            }
            count[i] += 1;
            Some(i)
        };
        let mut count = [0usize; super::SHARDS];
        let shards = match (&self.table.shards, &self.params, saved.kind) {
            (Shards::Local(_), p, SavedKind::Gcra) => {
                let shards: Vec<Mutex<Shard<State>>> = super::local_shards();
                for e in &saved.entries {
                    let st = State {
                        tat: c.to_mono(e.t1),
                        banned_until: c.to_mono(e.t2),
                    };
                    let keep = st.banned_until > now_ns || !st.refilled(now_ns, p);
                    match place(&mut count, e.hash).filter(|_| keep) {
                        Some(i) => {
                            lock(&shards[i]).keys.insert(e.hash, st);
                            out.keys += 1;
                        }
                        None => out.dropped += 1,
                    }
                }
                Shards::Local(shards)
            }
            (Shards::Vsthrottle(_), p, SavedKind::Vsthrottle) => {
                let shards: Vec<Mutex<Shard<vsthrottle::State>>> = super::local_shards();
                for e in &saved.entries {
                    let st = vsthrottle::State::from_parts(c.to_mono(e.t1), c.to_mono(e.t2), e.n);
                    let keep = st.banned_until() > now_ns || !st.refilled(now_ns, p);
                    match place(&mut count, e.hash).filter(|_| keep) {
                        Some(i) => {
                            lock(&shards[i]).keys.insert(e.hash, st);
                            out.keys += 1;
                        }
                        None => out.dropped += 1,
                    }
                }
                Shards::Vsthrottle(shards)
            }
            (Shards::Shared(_), p, SavedKind::Shared) => {
                let table = super::shared::SharedTable::default();
                for e in &saved.entries {
                    let st = State {
                        tat: c.to_mono(e.t1),
                        banned_until: c.to_mono(e.t2),
                    };
                    let entry = super::shared::Entry::from_parts(st, e.id, e.n);
                    let keep = entry.banned_until() > now_ns || !entry.refilled(now_ns, p);
                    match place(&mut count, e.hash).filter(|_| keep) {
                        Some(i) => {
                            lock(&table.shards[i]).keys.insert(e.hash, entry);
                            out.keys += 1;
                        }
                        None => out.dropped += 1,
                    }
                }
                Shards::Shared(Box::new(table))
            }
            _ => {
                out.dropped = saved.entries.len();
                return out;
            }
        };
        self.table = Arc::new(Table { hasher, shards });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Outcome;

    const S: u64 = 1_000_000_000;

    /// A limiter saved at one clock and restored into a fresh one whose
    /// clock started elsewhere (a restart) keeps its bans and standing.
    #[test]
    fn bans_and_standing_survive_a_restart_on_the_wall_clock() {
        let l = Limiter::new(1, 60_000, 2, 300_000, 1 << 10);
        // "bad" is banned at 5 s for 300 s; "half" used one of its two at
        // 50 s; "idle" used one at 1 s and has refilled by 62 s.
        for _ in 0..3 {
            let _ = l.hit(b"bad", 5 * S);
        }
        assert_eq!(l.hit(b"half", 50 * S), Outcome::Allowed);
        assert_eq!(l.hit(b"idle", S), Outcome::Allowed);
        let unix = 1_800_000_000 * S;
        let saved = l.save(62 * S, unix);
        assert_eq!(saved.kind, SavedKind::Gcra);
        assert_eq!(saved.entries.len(), 2, "{saved:?}");
        // A new process, 10 s later on the wall clock, its clock at 3 s:
        // the old clock's 72 s.
        let mut fresh = Limiter::new(1, 60_000, 2, 300_000, 1 << 10);
        let r = fresh.restore(&saved, 3 * S, unix + 10 * S);
        assert_eq!(
            r,
            Restored {
                keys: 2,
                dropped: 0
            }
        );
        match fresh.hit(b"bad", 3 * S) {
            Outcome::Limited { retry_after_ns } => assert_eq!(retry_after_ns, 233 * S),
            o => panic!("the ban was lost: {o:?}"),
        }
        // "half" has one hit left; a key never seen has two.
        assert_eq!(fresh.hit(b"half", 3 * S), Outcome::Allowed);
        assert!(matches!(fresh.hit(b"half", 3 * S), Outcome::Limited { .. }));
        assert_eq!(fresh.hit(b"new", 3 * S), Outcome::Allowed);
        assert_eq!(fresh.hit(b"new", 3 * S), Outcome::Allowed);
    }

    #[test]
    fn what_ended_meanwhile_and_what_does_not_fit_are_left_out() {
        let l = Limiter::new(1, 1_000, 1, 10_000, 1 << 10);
        for k in 0..100u32 {
            let _ = l.hit(&k.to_le_bytes(), S);
            let _ = l.hit(&k.to_le_bytes(), S);
        }
        let saved = l.save(S, 0);
        assert_eq!(saved.entries.len(), 100);
        // Restored 20 s later: every ban (10 s) has ended.
        let mut late = Limiter::new(1, 1_000, 1, 10_000, 1 << 10);
        assert_eq!(
            late.restore(&saved, S, 20 * S),
            Restored {
                keys: 0,
                dropped: 100
            }
        );
        // Into a smaller limiter: at most its bound.
        let mut small = Limiter::new(1, 1_000, 1, 10_000, 16);
        let r = small.restore(&saved, S, 0);
        assert!(r.keys <= 16 && r.keys + r.dropped == 100, "{r:?}");
        assert_eq!(small.len(), r.keys);
        // Another kind of table takes nothing.
        let mut other = Limiter::vsthrottle(1, 1_000, 10_000, 1 << 10);
        assert_eq!(other.restore(&saved, S, 0).keys, 0);
    }

    #[test]
    fn vsthrottle_and_shared_tables_round_trip() {
        let v = Limiter::vsthrottle(2, 60_000, 30_000, 1 << 10);
        for _ in 0..3 {
            let _ = v.hit(b"k", S);
        }
        let saved = v.save(2 * S, 100 * S);
        let mut v2 = Limiter::vsthrottle(2, 60_000, 30_000, 1 << 10);
        assert_eq!(v2.restore(&saved, 7 * S, 105 * S).keys, 1);
        assert!(matches!(v2.hit(b"k", 7 * S), Outcome::Limited { .. }));
        let s = Limiter::new_shared(1, 60_000, 1, 60_000, 1 << 10);
        let _ = s.hit(b"k", S);
        let _ = s.hit(b"k", S);
        let saved = s.save(S, 50 * S);
        assert_eq!(saved.kind, SavedKind::Shared);
        let mut s2 = Limiter::new_shared(1, 60_000, 1, 60_000, 1 << 10);
        assert_eq!(s2.restore(&saved, S, 50 * S).keys, 1);
        assert!(matches!(s2.hit(b"k", 2 * S), Outcome::Limited { .. }));
    }
}
