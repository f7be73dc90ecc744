//! Packet and connection limits: GCRA with a ban, exactly as the
//! user-space limiter, on buckets that every CPU updates at once.
//!
//! # Buckets
//! Buckets live in a fixed table of sets of `WAYS` 16-byte slots; a set
//! is one 64-byte value of a page-aligned map, so one cache line. A slot
//! holds a source's tag (a keyed 64-bit hash of its limiter and masked
//! address, [`rctl_common::bucket_tag`], as user space keys its buckets
//! by 64-bit keyed hashes) and its theoretical arrival time (`tat`), in
//! which a ban is a flag and the time it ends (the arrival time the
//! bucket had is kept aside in `BANS`, read only when the ban ends). So
//! a new source reads one cache line, and claims a slot in it.
//!
//! A source's bucket is found in its set; a newcomer claims an empty
//! slot, else a slot whose bucket has fully recovered (not banned,
//! theoretical arrival time not ahead of now: forgetting it changes no
//! future decision). When every slot holds a live bucket, the newcomer is
//! counted in its limiter's shared overflow bucket instead: a flood of
//! spoofed sources can neither evict a live bucket (lifting a ban or a
//! client's standing) nor escape the limit.
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
//!   [`CLAIMING`], writes the tag, and swaps `tat` to its first value
//!   (another compare-and-swap, so that on every architecture the tag is
//!   written before a reader can see the slot as live). A slot being
//!   claimed is neither a match nor free; a source that sees one in its
//!   set goes to the overflow bucket rather than claim a second slot (it
//!   may be its own bucket being made), so no source ever holds two;
//! - a ban swaps `tat` from the value read to [`BANNING`], saves the
//!   arrival time, and stores the flagged end of the ban: exactly one CPU
//!   bans (and reports) a key, and a packet that sees `BANNING` is over
//!   the limit;
//! - `tat` never returns to a value it had while a slot keeps its tag
//!   (arrival times only grow; a ban's end is flagged, and the arrival
//!   time after a ban is later than the one before it), and a claim sets
//!   it above any unflagged value it had (claims take recovered slots,
//!   `tat <= now`, and leave `now + interval`), so a compare-and-swap
//!   from a value read before a claim always fails after it: a decision
//!   based on a tag that was replaced is never written.
//!
//! Admissions are therefore exact: at one instant a key gets exactly its
//! burst, from any number of CPUs (`tests/xdp_race.rs` floods one source
//! and sets of sources from every CPU and counts).
//!
//! The clock is read from [`Clock`]: by default the tick clock, one
//! inlined load (the exact clock is a helper call costing about 33 ns in
//! this VM); everything else is inlined array loads.

use crate::{BANS, BUCKETS, CLOCK, LIMITERS};
use aya_log_ebpf::info;
use core::intrinsics::AtomicOrdering;
use rctl_common::{
    bucket_set, bucket_tag, overflow_slot, Bucket, Limiter, BANNED, BANNING, CLAIMING, WAYS,
};

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
    // SAFETY: as for `cas`.
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

/// The tag of the source `(hi, lo)` under limiter `l` (masked first).
#[inline(always)]
fn tag(l: &Limiter, family: u32, hi: u64, lo: u64) -> u64 {
    let (hi, lo) = masked(l, family, hi, lo);
    bucket_tag(if family == 4 { l.key4 } else { l.key6 }, hi, lo)
}

/// Bucket `slot` (set x `WAYS` + way).
#[inline(always)]
fn bucket(slot: u32) -> Option<*mut Bucket> {
    let set = BUCKETS.get_ptr_mut(slot / WAYS)?;
    // SAFETY: `slot % WAYS` is inside the set.
    Some(unsafe { set.cast::<Bucket>().add((slot % WAYS) as usize) })
}

/// The `tat` word of the bucket at `b`.
#[inline(always)]
fn tat_of(b: *mut Bucket) -> *mut u64 {
    // SAFETY: a map value pointer, valid during this run.
    unsafe { core::ptr::addr_of_mut!((*b).tat) }
}

/// The `tag` word of the bucket at `b`.
#[inline(always)]
fn tag_of(b: *mut Bucket) -> *mut u64 {
    // SAFETY: as above.
    unsafe { core::ptr::addr_of_mut!((*b).tag) }
}

/// When a rate limit applies to every source (`pre` names it, plus one,
/// from `CONFIG[0]`), reads the source's bucket set under it, so that its cache line is on
/// its way while the program looks the source up (the two misses of a
/// new source then overlap: a cold IPv6 lookup and its bucket cost some
/// 100 ns less together). Returns the hint [`rctl_limit`] takes: the
/// source's tag under that limiter, which it then need not compute again,
/// and the limiter plus one (0: none).
#[inline(always)]
pub(crate) fn prefetch(pre: u32, family: u32, hi: u64, lo: u64) -> (u64, u32) {
    if pre == 0 {
        return (0, 0);
    }
    let Some(l) = LIMITERS.get(pre - 1) else {
        return (0, 0);
    };
    let tag = tag(l, family, hi, lo);
    if let Some(b) = BUCKETS.get_ptr(bucket_set(tag)) {
        // SAFETY: a map value pointer; the value read is not used.
        let _ = unsafe { core::ptr::read_volatile(b.cast::<u64>()) };
    }
    (tag, pre)
}

/// [`rctl_limit`]: the packet is within the limit.
pub(crate) const UNDER: u32 = 0;
/// [`rctl_limit`]: the packet is over the limit.
pub(crate) const OVER: u32 = 1;
/// [`rctl_limit`]: the packet is over the limit, and put its source under
/// a ban that this CPU set (report it once).
pub(crate) const BANNED_NOW: u32 = 2;

/// Whether bucket `slot`, whose `tat` read `tat`, may be claimed at `now`:
/// empty, or fully recovered and not banned.
#[inline(always)]
fn free(tat: u64, slot: u32, now: u64) -> bool {
    if tat & BANNED == 0 {
        return tat <= now;
    }
    if tat == CLAIMING || tat == BANNING || tat & !BANNED > now {
        return false;
    }
    // A ban that has ended: the arrival time from before it.
    BANS.get(slot).is_some_and(|&t| t <= now)
}

/// Counts a packet from the source `(hi, lo)` of `family` (bits 0–7 of
/// `family`) in limiter `limiter`: [`UNDER`], [`OVER`] or [`BANNED_NOW`].
/// `hint` is the tag [`prefetch`] computed, for the limiter whose number
/// plus one is in bits 8–15 of `family` (global functions take five
/// arguments at most).
///
/// A global BPF function (exported, never inlined, with only scalar
/// arguments): the verifier checks its body once, on its own, rather
/// than once for every term of the rules loop that may call it, which
/// keeps its walk of the whole program within bounds.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rctl_limit(limiter: u32, family: u32, hi: u64, lo: u64, hint: u64) -> u32 {
    let (family, hinted) = (family & 0xff, family >> 8);
    let Some(l) = LIMITERS.get(limiter) else {
        return UNDER;
    };
    let Some((now, slack)) = now() else {
        return UNDER;
    };
    let key = Key {
        tag: if hinted == limiter + 1 && hint != 0 {
            hint
        } else {
            tag(l, family, hi, lo)
        },
        limiter,
    };
    let first = bucket_set(key.tag) * WAYS;
    let mut free_way = u32::MAX;
    let mut free_tat = 0;
    let mut found = u32::MAX;
    let mut found_tat = 0;
    let mut busy = false;
    for w in 0..WAYS {
        let Some(b) = bucket(first + w) else {
            break;
        };
        // `tat` first, then the tag: a claim for another key after this
        // read moves `tat` on, so the swap from this value fails.
        let tat = load(tat_of(b));
        busy |= tat == CLAIMING;
        if load(tag_of(b)) == key.tag {
            found = first + w;
            found_tat = tat;
            break;
        }
        if free_way == u32::MAX && free(tat, first + w, now) {
            free_way = first + w;
            free_tat = tat;
        }
    }
    if found == u32::MAX && free_way != u32::MAX && !busy {
        if let Some(b) = bucket(free_way) {
            if claim(b, &key, free_tat, now, l) {
                // A fresh bucket: the first packet conforms.
                return UNDER;
            }
        }
    }
    let slot = if found != u32::MAX {
        found
    } else {
        overflow_slot(limiter)
    };
    let Some(b) = bucket(slot) else {
        return UNDER;
    };
    if found == u32::MAX {
        found_tat = load(tat_of(b));
    }
    let verdict = gcra(b, slot, found_tat, found != u32::MAX, &key, now, slack, l);
    if verdict == BANNED_NOW {
        let (hi, lo) = masked(l, family, hi, lo);
        rctl_log_ban(limiter, family, hi, lo, l.ban_ns / 1_000_000);
    }
    verdict
}

/// A bucket's key: its tag, and the limiter (for its overflow bucket).
struct Key {
    tag: u64,
    limiter: u32,
}

/// Claims the free bucket `b`, whose `tat` read `seen`, for `key`, and
/// counts the first packet in it; false if another CPU changed it first.
#[inline(always)]
fn claim(b: *mut Bucket, key: &Key, seen: u64, now: u64, l: &Limiter) -> bool {
    let tat = tat_of(b);
    if cas(tat, seen, CLAIMING).is_err() {
        return false;
    }
    // SAFETY: a map value pointer; this CPU holds the slot until `tat`
    // leaves CLAIMING, so the tag is written by it alone.
    unsafe { core::ptr::write_volatile(tag_of(b), key.tag) };
    let _ = cas(tat, CLAIMING, now + l.interval_ns);
    true
}

/// Compare-and-swaps one packet tries on a contended bucket before it
/// counts as over the limit.
const ATTEMPTS: u32 = 4;

/// GCRA on the bucket at `b` (bucket `slot`: `key`'s own when `keyed`,
/// else the limiter's overflow bucket), whose `tat` read `t` before its
/// tag was compared: [`UNDER`], [`OVER`] or [`BANNED_NOW`].
///
/// When another CPU changed the bucket since `t` was read, the swap fails
/// and the decision is made again on the new value, up to [`ATTEMPTS`]
/// times; then the packet counts as over the limit. Contention therefore
/// never lets more through: at worst it drops a packet that a quieter
/// moment would have passed, for a key that several CPUs see within
/// nanoseconds. If the key's bucket was claimed for another key meanwhile
/// (it had recovered), the packet counts in the overflow bucket, where it
/// would have gone a moment later.
#[expect(clippy::too_many_arguments, reason = "scalars the caller has at hand")]
#[inline(always)]
fn gcra(
    mut b: *mut Bucket,
    mut slot: u32,
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
            t = load(tat_of(b));
            continue;
        }
        if t == BANNING {
            return OVER;
        }
        // The arrival time the decision starts from.
        let mut at = t;
        if t & BANNED != 0 {
            if t & !BANNED > now {
                return OVER;
            }
            // The ban has ended: the bucket as it was when banned.
            at = BANS.get(slot).copied().unwrap_or(0);
        }
        let base = if at > now { at } else { now };
        if base - now > l.tolerance_ns + slack {
            if l.ban_ns > 0 && cas(tat_of(b), t, BANNING).is_ok() {
                if let Some(saved) = BANS.get_ptr_mut(slot) {
                    // SAFETY: a map value pointer; this CPU holds the
                    // bucket until `tat` leaves BANNING.
                    unsafe { core::ptr::write_volatile(saved, at) };
                }
                let _ = cas(tat_of(b), BANNING, BANNED | (now + l.ban_ns));
                return BANNED_NOW;
            }
            return OVER;
        }
        match cas(tat_of(b), t, base + l.interval_ns) {
            Ok(_) => return UNDER,
            Err(actual) => t = actual,
        }
        // The swap read `tat` with a full barrier; the tag is read after
        // it, so a claim that replaced the tag shows here.
        if keyed && t != CLAIMING && load(tag_of(b)) != key.tag {
            slot = overflow_slot(key.limiter);
            let Some(o) = bucket(slot) else {
                return OVER;
            };
            keyed = false;
            b = o;
            t = load(tat_of(b));
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
