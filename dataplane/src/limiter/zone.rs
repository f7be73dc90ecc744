//! GCRA buckets in memory that several processes share: nginx's workers
//! count one key's hits in one bucket, whichever worker a request
//! reaches, as `limit_req` does with its zone.
//!
//! The memory is the caller's (an nginx shared memory zone, mapped at the
//! same place in every worker): a [`ZoneHeader`] and an array of
//! [`ZoneSlot`]s, nothing but 64-bit atomics, so that every operation is
//! lock-free and no process can leave a lock held by dying. This module
//! is the whole of the logic over them, in safe code; the caller only
//! turns the mapped bytes into references.
//!
//! **One table for every limiter.** A slot's key is the hash of the
//! limiter's identity ([`identity`]: the rule's name, unit, keys and kind
//! of bucket) with the request's key bytes, under the zone's own random
//! SipHash key. So a new ruleset's rule that has the same name, unit and
//! keys finds its buckets and bans where the old one left them, and a
//! rule whose keys changed, or that was renamed, starts afresh, as
//! [`crate::carry`] decides for the agent, with no directory to keep.
//!
//! **The GCRA step** is the in-process limiter's arithmetic
//! ([`super::Gcra`]): the theoretical arrival time moves with one
//! compare-and-swap, a ban with one `fetch_max`. A hit that races another
//! on the same bucket retries with what the other wrote, so none is lost.
//!
//! **Bounds.** A slot is 24 bytes; a key is looked for in
//! [`PROBE`] consecutive slots from its hash. A new key takes an empty
//! slot there, else a slot whose bucket has refilled and that is not
//! banned (forgetting it changes nothing), else the unbanned bucket
//! closest to full (counted as `evicted`); when all of them are banned
//! the hit is not counted at all: it is allowed, and counted as `full`
//! (a flood of new keys can neither lift a ban nor grow memory). A hit
//! that races the eviction of its own key's slot may be counted against
//! the key that took the slot: only when the zone is full, and once.

use super::{Gcra, KeyHasher, Outcome};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many consecutive slots a key may be in.
pub const PROBE: usize = 16;

/// What an initialised zone's header starts with ("rctlzon1").
pub const MAGIC: u64 = u64::from_le_bytes(*b"rctlzon1");

/// The zone's header, at the start of its memory.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ZoneHeader {
    magic: AtomicU64,
    k0: AtomicU64,
    k1: AtomicU64,
    slots: AtomicU64,
    full: AtomicU64,
    evicted: AtomicU64,
}

/// One bucket: its key's hash (0: empty), the theoretical arrival time of
/// its next conforming hit, and the end of its ban (nanoseconds on the
/// host's monotonic clock; 0: never).
#[repr(C)]
#[derive(Debug, Default)]
pub struct ZoneSlot {
    key: AtomicU64,
    tat: AtomicU64,
    banned_until: AtomicU64,
}

/// A zone: its header and slots, in memory that stays mapped for as long
/// as anything decides with it.
#[derive(Debug, Clone, Copy)]
pub struct Zone {
    header: &'static ZoneHeader,
    slots: &'static [ZoneSlot],
}

/// How full a zone is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZoneStats {
    /// Slots.
    pub slots: u64,
    /// Slots holding a key whose bucket has not refilled, or is banned.
    pub live: u64,
    /// Keys banned now.
    pub banned: u64,
    /// Hits not counted because every slot a key could take was banned.
    pub full: u64,
    /// Buckets forgotten before they had refilled, to make room.
    pub evicted: u64,
}

/// Why memory cannot be a zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneError {
    /// Fewer slots than one key's probe window.
    TooSmall(usize),
    /// The header says it was made for another number of slots.
    Mismatch {
        /// What the header says.
        header: u64,
        /// What the memory holds.
        slots: usize,
    },
}

impl std::fmt::Display for ZoneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZoneError::TooSmall(n) => write!(f, "{n} slots: a zone needs at least {PROBE}"),
            ZoneError::Mismatch { header, slots } => write!(
                f,
                "the zone's header says {header} slots, its memory holds {slots}"
            ),
        }
    }
}

impl std::error::Error for ZoneError {}

/// The bytes of one slot.
pub const SLOT_BYTES: usize = std::mem::size_of::<ZoneSlot>();

/// The identity of rule `name`'s limiter, as a zone keys its buckets:
/// `what` describes what the buckets count (unit, keys, kind of bucket),
/// so that a rule whose keys changed gets other buckets.
pub fn identity(name: &str, what: &str) -> u64 {
    let mut b = Vec::with_capacity(name.len() + what.len() + 1);
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    b.extend_from_slice(what.as_bytes());
    KeyHasher::with_keys(0x7263_746c, 0x7a6f_6e65).hash(&b)
}

impl Zone {
    /// The zone in `header` and `slots`. Memory that is all zeros (a new
    /// zone) is initialised with a random SipHash key; memory that holds
    /// a zone already (nginx hands a reloaded configuration the zone of
    /// the same name and size) is used as it is.
    pub fn attach(
        header: &'static ZoneHeader,
        slots: &'static [ZoneSlot],
    ) -> Result<Zone, ZoneError> {
        if slots.len() < PROBE {
            return Err(ZoneError::TooSmall(slots.len()));
        }
        let z = Zone { header, slots };
        if header.magic.load(Ordering::Acquire) != MAGIC {
            let (k0, k1) = KeyHasher::random().keys();
            header.k0.store(k0, Ordering::Relaxed);
            header.k1.store(k1, Ordering::Relaxed);
            header.slots.store(slots.len() as u64, Ordering::Relaxed);
            header.magic.store(MAGIC, Ordering::Release);
        }
        let n = header.slots.load(Ordering::Relaxed);
        if n != slots.len() as u64 {
            return Err(ZoneError::Mismatch {
                header: n,
                slots: slots.len(),
            });
        }
        Ok(z)
    }

    /// Slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    fn hash(&self, limiter: u64, key: &[u8]) -> u64 {
        let k0 = self.header.k0.load(Ordering::Relaxed) ^ limiter;
        let k1 = self.header.k1.load(Ordering::Relaxed);
        match KeyHasher::with_keys(k0, k1).hash(key) {
            0 => 1,
            h => h,
        }
    }

    /// Records one hit for `key` of limiter `limiter` (its [`identity`])
    /// at `now_ns` (the host's monotonic clock, the same in every
    /// process), with `g`'s rate, burst and ban.
    pub fn hit(&self, limiter: u64, key: &[u8], g: &Gcra, now_ns: u64) -> Outcome {
        let h = self.hash(limiter, key);
        match self.slot(h, now_ns) {
            Some(s) => step(g, s, now_ns),
            None => {
                self.header.full.fetch_add(1, Ordering::Relaxed);
                Outcome::Allowed
            }
        }
    }

    /// The slot of key hash `h`, taking one for it if it has none.
    fn slot(&self, h: u64, now: u64) -> Option<&'static ZoneSlot> {
        let n = self.slots.len();
        let start = (h % n as u64) as usize;
        let window = || (0..PROBE).map(move |i| &self.slots[(start + i) % n]);
        for s in window() {
            match s.key.load(Ordering::Acquire) {
                k if k == h => return Some(s),
                0 => match s
                    .key
                    .compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(s),
                    Err(k) if k == h => return Some(s),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        // No empty slot: a refilled one first (its state is a fresh
        // bucket's), else the unbanned one closest to full.
        let victim = window()
            .map(|s| {
                let banned = s.banned_until.load(Ordering::Acquire) > now;
                let tat = s.tat.load(Ordering::Acquire);
                (s, banned, tat)
            })
            .filter(|(_, banned, _)| !banned)
            .min_by_key(|(_, _, tat)| *tat)?;
        let (s, _, tat) = victim;
        let old = s.key.load(Ordering::Acquire);
        if old == h {
            return Some(s);
        }
        s.key
            .compare_exchange(old, h, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        if tat > now {
            s.tat.store(now, Ordering::Release);
            self.header.evicted.fetch_add(1, Ordering::Relaxed);
        }
        Some(s)
    }

    /// How full the zone is at `now_ns` (one pass over every slot).
    pub fn stats(&self, now_ns: u64) -> ZoneStats {
        let mut st = ZoneStats {
            slots: self.slots.len() as u64,
            full: self.header.full.load(Ordering::Relaxed),
            evicted: self.header.evicted.load(Ordering::Relaxed),
            ..ZoneStats::default()
        };
        for s in self.slots {
            if s.key.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let banned = s.banned_until.load(Ordering::Relaxed) > now_ns;
            if banned || s.tat.load(Ordering::Relaxed) > now_ns {
                st.live += 1;
            }
            st.banned += u64::from(banned);
        }
        st
    }
}

/// One GCRA step on a shared slot: [`super::step`]'s arithmetic, with the
/// arrival time moved by compare-and-swap.
fn step(g: &Gcra, s: &ZoneSlot, now: u64) -> Outcome {
    loop {
        let until = s.banned_until.load(Ordering::Acquire);
        if until > now {
            return Outcome::Limited {
                retry_after_ns: super::ban_left(until, now, g.ban_ns),
            };
        }
        let seen = s.tat.load(Ordering::Acquire);
        let tat = seen.max(now);
        if tat - now > g.tolerance_ns {
            if g.ban_ns > 0 {
                s.banned_until
                    .fetch_max(now.saturating_add(g.ban_ns), Ordering::AcqRel);
                return Outcome::Limited {
                    retry_after_ns: g.ban_ns,
                };
            }
            return Outcome::Limited {
                retry_after_ns: tat - now - g.tolerance_ns,
            };
        }
        let next = tat.saturating_add(g.interval_ns);
        if s.tat
            .compare_exchange_weak(seen, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Outcome::Allowed;
        }
    }
}

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
