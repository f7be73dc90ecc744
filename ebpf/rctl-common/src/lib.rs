//! The kernel/user-space ABI of the rctl XDP program: `#[repr(C)]`, `Copy`,
//! no `bool`, no implicit padding (sizes are checked at compile time).

#![no_std]

/// Map names, as the program declares them.
pub mod maps {
    /// `Array<Term>`: the packet plane's rules as DNF terms, in order.
    pub const TERMS: &str = "RCTL_TERMS";
    /// `Array<u32>`: `[0]` is the number of terms in use
    /// ([`super::CONFIG_TERMS`]), with [`super::CONFIG_SETS_ONLY`] and
    /// [`super::CONFIG_USES_DST`]; `[1]` and `[2]` the IPv4 and IPv6 index
    /// shifts (see [`V4_INDEX`]); `[3]` stays 0 (the program reads it as a
    /// zero the verifier cannot see through).
    pub const CONFIG: &str = "RCTL_CONFIG";
    /// `LpmTrie<[u8; 4], u64>`: IPv4 prefixes to ip-set membership bits
    /// (read only by the `rctl_lpm` baseline program).
    pub const V4: &str = "RCTL_V4";
    /// `Array<Range4>`: the IPv4 space cut into intervals, sorted by start,
    /// each with its membership bits; sized at load time.
    pub const V4_RANGES: &str = "RCTL_V4_RANGES";
    /// `Array<u64>` indexed by an address's top `k` bits (the address
    /// shifted right by `CONFIG[1]`; `k` from 8 to 16 grows with the table,
    /// so that a small table's index stays small and cached): the index
    /// of the interval holding the block's first address (low 32 bits),
    /// and how many intervals start inside the block (high 32 bits).
    pub const V4_INDEX: &str = "RCTL_V4_INDEX";
    /// `LpmTrie<[u8; 16], u64>`: IPv6 prefixes to ip-set membership bits
    /// (read only by the `rctl_lpm` baseline program).
    pub const V6: &str = "RCTL_V6";
    /// `Array<Range6>`: the IPv6 space cut into intervals, as
    /// [`V4_RANGES`] for IPv4.
    pub const V6_RANGES: &str = "RCTL_V6_RANGES";
    /// `Array<u64>` indexed by an address's top `k` bits (the first half
    /// shifted right by `CONFIG[2]`), as [`V4_INDEX`].
    pub const V6_INDEX: &str = "RCTL_V6_INDEX";
    /// `Array<u64>` indexed by destination port: port-predicate bits.
    pub const PORTS: &str = "RCTL_PORTS";
    /// `Array<u32>` indexed by [`super::PROTO_TCP`] etc.: protocol bits.
    pub const PROTOS: &str = "RCTL_PROTOS";
    /// `PerCpuArray<Counters>` indexed by rule.
    pub const COUNTERS: &str = "RCTL_COUNTERS";
    /// `Array<Limiter>`: rate-limit settings, indexed by [`super::Term::limiter`].
    pub const LIMITERS: &str = "RCTL_LIMITERS";
    /// `Array<Bucket>`: rate-limit buckets, [`super::WAYS`]-way set
    /// associative, then one overflow bucket per limiter.
    pub const BUCKETS: &str = "RCTL_BUCKETS";
    /// `Array<Clock>`, one entry: how the program reads the time (see
    /// [`super::Clock`]).
    pub const CLOCK: &str = "RCTL_CLOCK";
}

/// The term count's bits in `CONFIG[0]` (with [`CONFIG_SETS_ONLY`] and
/// [`CONFIG_USES_DST`] above them).
pub const CONFIG_TERMS: u32 = 0xffff;
/// Set in `CONFIG[0]` when every term needs the source in some ip set: a
/// source in none passes as soon as it is looked up (most traffic, for a
/// ruleset of address blocks), without reading the terms.
pub const CONFIG_SETS_ONLY: u32 = 1 << 31;

/// Set in `CONFIG[0]` when some term reads the destination address: the
/// program then looks it up too.
pub const CONFIG_USES_DST: u32 = 1 << 30;

/// Index of TCP in the protocol table.
pub const PROTO_TCP: u32 = 0;
/// Index of UDP in the protocol table.
pub const PROTO_UDP: u32 = 1;
/// Index of ICMP (and ICMPv6) in the protocol table.
pub const PROTO_ICMP: u32 = 2;
/// Index of any other protocol.
pub const PROTO_OTHER: u32 = 3;

/// Most terms the program evaluates.
pub const MAX_TERMS: u32 = 64;
/// Most rules that can have counters.
pub const MAX_RULES: u32 = 1024;

/// Term kinds.
pub mod kind {
    /// An L3/L4 allow: pass.
    pub const ALLOW: u32 = 0;
    /// The address projection of an allow with HTTP parts: pass.
    pub const EXEMPT: u32 = 1;
    /// Drop.
    pub const DROP: u32 = 2;
    /// Rate limit: drop over the limit, else go on to the next rule.
    pub const THROTTLE: u32 = 3;
}

/// Rate-limit buckets tracked per source (the table's fixed size).
pub const MAX_BUCKETS: u32 = 1 << 18;
/// Ways per set of the bucket table: a source's bucket is one of the
/// `WAYS` slots of the set its key hashes to.
pub const WAYS: u32 = 4;
/// Entries of the bucket map: the sets, then one overflow bucket per
/// limiter, shared by sources that find their set full of live buckets.
pub const BUCKET_ENTRIES: u32 = MAX_BUCKETS + MAX_TERMS;
/// Entries of the index of either family (its largest size, 16 bits).
pub const V4_INDEX_ENTRIES: u32 = 1 << 16;
/// Most IPv6 intervals (the binary search's step bound covers them all
/// in one /16).
pub const MAX_V6_RANGES: u32 = 1 << 22;

/// One DNF term of a packet-plane rule: it matches when every `*_pos` bit
/// is set and no `*_neg` bit is set in the packet's bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Term {
    /// Ip-set bits that must be set.
    pub set_pos: u64,
    /// Ip-set bits that must be clear.
    pub set_neg: u64,
    /// Ip-set bits the destination address must be in.
    pub dst_pos: u64,
    /// Ip-set bits the destination address must not be in.
    pub dst_neg: u64,
    /// Port-predicate bits that must be set.
    pub port_pos: u64,
    /// Port-predicate bits that must be clear.
    pub port_neg: u64,
    /// Protocol-predicate bits that must be set.
    pub proto_pos: u32,
    /// Protocol-predicate bits that must be clear.
    pub proto_neg: u32,
    /// Rule index (for counters and verdicts).
    pub rule: u32,
    /// One of [`kind`].
    pub kind: u32,
    /// For [`kind::THROTTLE`]: the limiter's index.
    pub limiter: u32,
    /// Zero.
    pub pad: u32,
}

/// A packet or connection rate limit: GCRA with a ban, as in user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limiter {
    /// Nanoseconds between conforming packets.
    pub interval_ns: u64,
    /// How far ahead of time a key may run (the burst).
    pub tolerance_ns: u64,
    /// Ban after an excess, in ns (0: none).
    pub ban_ns: u64,
    /// IPv4 prefix length of the key (32: per address).
    pub v4_len: u32,
    /// IPv6 prefix length of the key.
    pub v6_len: u32,
    /// 1: count only TCP SYNs without ACK (connections).
    pub syn_only: u32,
    /// Seed of the bucket table's hash (random per load, so that senders
    /// cannot aim their sources at one set).
    pub seed: u32,
}

/// One interval of the IPv4 space: it runs from `start` to the next
/// interval's start; every address in it is in the ip sets of `bits`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range4 {
    /// First address (host order).
    pub start: u32,
    /// Zero.
    pub pad: u32,
    /// Ip-set membership bits.
    pub bits: u64,
}

/// One interval of the IPv6 space, as [`Range4`] (the start's two
/// big-endian halves).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range6 {
    /// The first address's first 8 bytes.
    pub start_hi: u64,
    /// Its last 8 bytes.
    pub start_lo: u64,
    /// Ip-set membership bits.
    pub bits: u64,
}

/// One slot of the bucket table: a limiter and masked source address, and
/// its GCRA state. `family` 0 marks an empty slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Limiter index.
    pub limiter: u32,
    /// 4 or 6 (0: empty).
    pub family: u32,
    /// The masked address's first 8 bytes (IPv4 in the first 4).
    pub addr_hi: u64,
    /// The masked address's last 8 bytes.
    pub addr_lo: u64,
    /// Theoretical arrival time of the next conforming packet.
    pub tat: u64,
    /// Banned until (0: not banned).
    pub banned_until: u64,
}

/// A bucket key's set in the table (its first slot is the set times
/// [`WAYS`]): a seeded multiply-xorshift hash, so that senders cannot aim
/// their sources at one set. The program and user space (which carries
/// buckets from one generation to the next) share it.
#[inline(always)]
pub fn bucket_set(seed: u32, limiter: u32, family: u32, hi: u64, lo: u64) -> u32 {
    let seed = u64::from(seed).wrapping_mul(0x0100_0000_01b3);
    let mut h = (seed ^ hi ^ (u64::from(limiter) << 8 | u64::from(family)))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 29) ^ lo).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    (h as u32) & (MAX_BUCKETS / WAYS - 1)
}

/// How the program reads the time, in ns of CLOCK_MONOTONIC.
///
/// - `fixed_ns` not zero: that time (tests replay time through it).
/// - else `tick_ns` not zero: the tick clock, `(jiffies - jiffies_base) *
///   tick_ns`. `bpf_jiffies64` is inlined by the verifier into one load,
///   where the exact clock is a helper call (about 33 ns in a VM). Time
///   then moves in ticks (1/HZ), so the program widens every limiter's
///   burst tolerance by one tick: within a tick it cannot tell packets
///   apart, and a tolerance under a tick would cap any rate at
///   `burst + 1` per tick. The average rate stays exact; a burst may
///   exceed the configured one by at most `rate x tick` packets.
/// - else the exact clock, `bpf_ktime_get_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// When not zero, the time.
    pub fixed_ns: u64,
    /// The kernel's tick in ns (`TICK_NSEC`), or 0 for the exact clock.
    pub tick_ns: u64,
    /// The jiffies value at which the tick clock reads 0, chosen so that
    /// it follows CLOCK_MONOTONIC (about the value at boot).
    pub jiffies_base: u64,
}

/// Per-rule counters (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets the rule decided.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

const _: () = assert!(core::mem::size_of::<Term>() == 72);
const _: () = assert!(core::mem::size_of::<Limiter>() == 40);
const _: () = assert!(core::mem::size_of::<Counters>() == 16);
const _: () = assert!(core::mem::size_of::<Range4>() == 16);
const _: () = assert!(core::mem::size_of::<Range6>() == 24);
const _: () = assert!(core::mem::size_of::<Bucket>() == 40);
const _: () = assert!(core::mem::size_of::<Clock>() == 24);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data: repr(C), Copy, no padding (sizes asserted).
    unsafe impl aya::Pod for super::Term {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Counters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Limiter {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Range4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Range6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Bucket {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Clock {}
}
