//! Packet and connection limits: GCRA with a ban, exactly as the
//! user-space limiter, on buckets that every CPU updates at once.
//!
//! # Buckets
//! Buckets live in a fixed table, `WAYS` slots per set. A source's bucket
//! is found in its set; a newcomer claims an empty slot, else a slot whose
//! bucket has fully recovered (not banned, theoretical arrival time not
//! ahead of now: forgetting it changes no future decision). When every
//! slot holds a live bucket, the newcomer is counted in its limiter's
//! shared overflow bucket instead: a flood of spoofed sources can neither
//! evict a live bucket (lifting a ban or a client's standing) nor escape
//! the limit.
//!
//! # Concurrency
//! `BUCKETS` is one shared array: on a multi-queue NIC, several CPUs run
//! the program at once, often for the same source. Every change to a slot
//! is a compare-and-swap (`BPF_CMPXCHG`, Linux 5.12+) on its `tat` word,
//! from the value the decision was based on:
//! - an update of a live bucket swaps `tat` from the value it read to the
//!   next one; if another CPU got there first, it decides again on the
//!   new value, up to [`ATTEMPTS`] times, then counts the packet as over
//!   the limit. Contention never lets more through; it can only drop a
//!   packet that a quieter moment would have passed, and only for a key
//!   that several CPUs see within nanoseconds;
//! - a claim swaps `tat` from the value that showed the slot free to
//!   [`CLAIMING`], writes the key, and swaps `tat` to its first value
//!   (another compare-and-swap, so that on every architecture the key is
//!   written before a reader can see the slot as live). A slot being
//!   claimed is neither a match nor free; a source that sees one in its
//!   set goes to the overflow bucket rather than claim a second slot (it
//!   may be its own bucket being made), so no source ever holds two;
//! - `tat` only grows while a slot keeps its key, and a claim sets it
//!   above any value it had (claims take recovered slots, `tat <= now`,
//!   and leave `now + interval`), so a compare-and-swap from a value read
//!   before a claim always fails after it: a decision based on a key that
//!   was replaced is never written;
//! - a ban is set with a compare-and-swap on `banned_until` from the value
//!   read, so that exactly one CPU reports it; a claim re-reads
//!   `banned_until` after it holds the slot and backs off if a ban landed.
//!
//! Admissions are therefore exact: at one instant a key gets exactly its
//! burst, from any number of CPUs (`tests/xdp_race.rs` floods one source
//! and sets of sources from every CPU and counts).
//!
//! The clock is read from [`Clock`]: by default the tick clock, one
//! inlined load (the exact clock is a helper call costing about 33 ns in
//! this VM); everything else is inlined array loads.

use crate::{BUCKETS, CLOCK, LIMITERS};
use aya_log_ebpf::info;
use core::intrinsics::AtomicOrdering;
use rctl_common::{bucket_set, Bucket, Limiter, MAX_BUCKETS, WAYS};

/// `tat` of a slot being claimed: no clock reaches it.
const CLAIMING: u64 = u64::MAX;

/// A compare-and-swap of the word at `p` from `old` to `new` (one
/// `BPF_CMPXCHG`, a full barrier); `Err(actual)` when another CPU changed
/// it first. The target's `core` offers no `compare_exchange` (its spec
/// says `atomic-cas: false`, for older kernels), so this is the intrinsic
/// the standard library's own would call.
#[inline(always)]
fn cas(p: *mut u64, old: u64, new: u64) -> Result<u64, u64> {
    // SAFETY: `p` points into a map value, which lives as long as the
    // program run and is 8-byte aligned (`Bucket` is made of u64 words
    // after two u32s); other CPUs touch it only through this swap or
    // single aligned loads and stores.
    let (actual, ok) = unsafe {
        core::intrinsics::atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            p, old, new,
        )
    };
    if ok {
        Ok(actual)
    } else {
        Err(actual)
    }
}

/// A plain aligned load, which another CPU may change at any time.
#[inline(always)]
fn load(p: *const u64) -> u64 {
    // SAFETY: as for `cell`.
    unsafe { core::ptr::read_volatile(p) }
}

/// The time in ns and the tick clock's widening of the burst tolerance.
#[inline(always)]
fn now() -> Option<(u64, u64)> {
    let c = CLOCK.get(0)?;
    Some(if c.fixed_ns != 0 {
        (c.fixed_ns, 0)
    } else if c.tick_ns != 0 {
        // SAFETY: a helper without arguments or side effects (inlined).
        let j = unsafe { aya_ebpf::helpers::bpf_jiffies64() };
        (
            j.wrapping_sub(c.jiffies_base).wrapping_mul(c.tick_ns),
            c.tick_ns,
        )
    } else {
        // SAFETY: as above (a call).
        (unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() }, 0)
    })
}

/// [`rctl_limit`]: the packet is within the limit.
pub(crate) const UNDER: u32 = 0;
/// [`rctl_limit`]: the packet is over the limit.
pub(crate) const OVER: u32 = 1;
/// [`rctl_limit`]: the packet is over the limit, and put its source under
/// a ban that this CPU set (report it once).
pub(crate) const BANNED: u32 = 2;

/// The masked source `(hi, lo)` that limiter `l` keys a packet on.
#[inline(always)]
fn masked(l: &Limiter, family: u32, hi: u64, lo: u64) -> (u64, u64) {
    let bits = if family == 4 { l.v4_len } else { l.v6_len };
    let mask_hi = if bits == 0 {
        0
    } else if bits >= 64 {
        u64::MAX
    } else {
        u64::MAX << (64 - bits)
    };
    let mask_lo = if bits <= 64 {
        0
    } else if bits >= 128 {
        u64::MAX
    } else {
        u64::MAX << (128 - bits)
    };
    (hi & mask_hi, lo & mask_lo)
}

/// Counts a packet from the source `(hi, lo)` of `family` in limiter
/// `limiter`: [`UNDER`], [`OVER`] or [`BANNED`].
///
/// A global BPF function (exported, never inlined, with only scalar
/// arguments): the verifier checks its body once, on its own, rather
/// than once for every term of the rules loop that may call it, which
/// keeps its walk of the whole program within bounds.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rctl_limit(limiter: u32, family: u32, hi: u64, lo: u64) -> u32 {
    let Some(l) = LIMITERS.get(limiter) else {
        return UNDER;
    };
    let Some((now, slack)) = now() else {
        return UNDER;
    };
    let (hi, lo) = masked(l, family, hi, lo);
    let key = Key {
        limiter,
        family,
        hi,
        lo,
    };
    let first = bucket_set(l.seed, limiter, family, hi, lo) * WAYS;
    let mut free = u32::MAX;
    let mut free_tat = 0;
    let mut found = u32::MAX;
    let mut found_tat = 0;
    let mut busy = false;
    for w in 0..WAYS {
        let Some(b) = BUCKETS.get_ptr_mut(first + w) else {
            break;
        };
        // `tat` first, then the key: a claim for another key after this
        // read moves `tat` on, so the swap from this value fails.
        // SAFETY: a map value pointer, valid during this run.
        let tat = load(unsafe { core::ptr::addr_of!((*b).tat) });
        busy |= tat == CLAIMING;
        if key.is(b) {
            found = first + w;
            found_tat = tat;
            break;
        }
        // SAFETY: as above.
        let banned = load(unsafe { core::ptr::addr_of!((*b).banned_until) });
        if free == u32::MAX && banned <= now && tat <= now {
            free = first + w;
            free_tat = tat;
        }
    }
    if found == u32::MAX && free != u32::MAX && !busy {
        if let Some(b) = BUCKETS.get_ptr_mut(free) {
            if claim(b, &key, free_tat, now, l) {
                // A fresh bucket: the first packet conforms.
                return UNDER;
            }
        }
    }
    let slot = if found != u32::MAX {
        found
    } else {
        MAX_BUCKETS + limiter
    };
    let Some(b) = BUCKETS.get_ptr_mut(slot) else {
        return UNDER;
    };
    if found == u32::MAX {
        // SAFETY: as above.
        found_tat = load(unsafe { core::ptr::addr_of!((*b).tat) });
    }
    let verdict = gcra(b, found_tat, found != u32::MAX, &key, now, slack, l);
    if verdict == BANNED {
        rctl_log_ban(limiter, family, hi, lo, l.ban_ns / 1_000_000);
    }
    verdict
}

/// A bucket's key: the limiter and the masked source.
struct Key {
    limiter: u32,
    family: u32,
    hi: u64,
    lo: u64,
}

impl Key {
    /// Whether the bucket at `b` holds this key, read word by word.
    #[inline(always)]
    fn is(&self, b: *const Bucket) -> bool {
        // SAFETY: a map value pointer, valid during this run.
        unsafe {
            let head = core::ptr::read_volatile(b.cast::<u64>());
            let want = u64::from(self.family) << 32 | u64::from(self.limiter);
            (head ^ want)
                | (load(core::ptr::addr_of!((*b).addr_hi)) ^ self.hi)
                | (load(core::ptr::addr_of!((*b).addr_lo)) ^ self.lo)
                == 0
        }
    }
}

/// Claims the free slot `b`, whose `tat` read `seen`, for `key`, and
/// counts the first packet in it; false if another CPU changed the slot
/// first (or a ban landed on it).
#[inline(always)]
fn claim(b: *mut Bucket, key: &Key, seen: u64, now: u64, l: &Limiter) -> bool {
    // SAFETY: a map value pointer, valid during this run.
    let tat = unsafe { core::ptr::addr_of_mut!((*b).tat) };
    if cas(tat, seen, CLAIMING).is_err() {
        return false;
    }
    // SAFETY: as above; this CPU holds the slot until `tat` leaves
    // CLAIMING, so the key's words are written by it alone.
    unsafe {
        if load(core::ptr::addr_of!((*b).banned_until)) > now {
            // A ban landed between the scan and the claim: the slot is
            // not free after all.
            let _ = cas(tat, CLAIMING, seen);
            return false;
        }
        (*b).limiter = key.limiter;
        (*b).family = key.family;
        (*b).addr_hi = key.hi;
        (*b).addr_lo = key.lo;
        (*b).banned_until = 0;
    }
    let _ = cas(tat, CLAIMING, now + l.interval_ns);
    true
}

/// Compare-and-swaps one packet tries on a contended bucket before it
/// counts as over the limit.
const ATTEMPTS: u32 = 4;

/// GCRA on the bucket at `b` (`key`'s own when `keyed`, else the
/// limiter's overflow bucket), whose `tat` read `t` before its key was
/// compared: [`UNDER`], [`OVER`] or [`BANNED`].
///
/// When another CPU changed the bucket since `t` was read, the swap fails
/// and the decision is made again on the new value, up to [`ATTEMPTS`]
/// times; then the packet counts as over the limit. Contention therefore
/// never lets more through: at worst it drops a packet that a quieter
/// moment would have passed, for a key that several CPUs see within
/// nanoseconds. If the key's bucket was claimed for another key meanwhile
/// (it had recovered), the packet counts in the overflow bucket, where it
/// would have gone a moment later.
#[inline(always)]
fn gcra(
    mut b: *mut Bucket,
    mut t: u64,
    mut keyed: bool,
    key: &Key,
    now: u64,
    slack: u64,
    l: &Limiter,
) -> u32 {
    for _ in 0..ATTEMPTS {
        if t == CLAIMING {
            // Being claimed (for this key, or it would not have matched):
            // wait for the claim to finish.
            // SAFETY: a map value pointer, valid during this run.
            t = load(unsafe { core::ptr::addr_of!((*b).tat) });
            continue;
        }
        // SAFETY (both): as above.
        let tat = unsafe { core::ptr::addr_of_mut!((*b).tat) };
        let banned = unsafe { core::ptr::addr_of_mut!((*b).banned_until) };
        let ban = load(banned);
        if ban > now {
            return OVER;
        }
        let base = if t > now { t } else { now };
        if base - now > l.tolerance_ns + slack {
            if l.ban_ns > 0 && cas(banned, ban, now + l.ban_ns).is_ok() {
                return BANNED;
            }
            return OVER;
        }
        match cas(tat, t, base + l.interval_ns) {
            Ok(_) => return UNDER,
            Err(actual) => t = actual,
        }
        // The swap read `tat` with a full barrier; the key is read after
        // it, so a claim that replaced the key shows here.
        if keyed && t != CLAIMING && !key.is(b) {
            let Some(o) = BUCKETS.get_ptr_mut(MAX_BUCKETS + key.limiter) else {
                return OVER;
            };
            keyed = false;
            b = o;
            // SAFETY: as above.
            t = load(unsafe { core::ptr::addr_of!((*b).tat) });
        }
    }
    OVER
}

/// Reports the source `(hi, lo)` of `family` entering a ban of `ms`
/// under limiter `limiter` (a rare event: once per ban, never per packet)
/// through aya-log's ring buffer; `rctl log` prints them.
///
/// A global BPF function like [`rctl_limit`]: aya-log's formatting is
/// long, and the verifier checks it once rather than at every term.
/// (aya-log-ebpf 0.2 writes to its ring buffer without the context.)
#[no_mangle]
#[inline(never)]
pub extern "C" fn rctl_log_ban(limiter: u32, family: u32, hi: u64, lo: u64, ms: u64) -> u32 {
    if family == 4 {
        let v4 = (hi >> 32) as u32;
        info!((), "ban limiter={} source={:i} for_ms={}", limiter, v4, ms);
    } else {
        let mut a = [0u8; 16];
        a[..8].copy_from_slice(&hi.to_be_bytes());
        a[8..].copy_from_slice(&lo.to_be_bytes());
        info!((), "ban limiter={} source={:i} for_ms={}", limiter, a, ms);
    }
    0
}
