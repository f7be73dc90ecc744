//! The kernel/user-space ABI of the rctl XDP program: `#[repr(C)]`, `Copy`,
//! no `bool`, no implicit padding (sizes are checked at compile time).

#![no_std]

pub mod dir;

pub use dir::Range;

/// Map names, as the program declares them.
pub mod maps {
    /// `Array<Term>`: the packet plane's rules as DNF terms, in order.
    pub const TERMS: &str = "RCTL_TERMS";
    /// `Array<u32>`: `[0]` is the number of terms in use
    /// ([`super::CONFIG_TERMS`]), with [`super::CONFIG_PREFETCH`],
    /// [`super::CONFIG_SETS_ONLY`] and [`super::CONFIG_USES_DST`]; `[1]` is
    /// unused; `[2]` is the size of the benchmark's probe table
    /// (`RCTL_TOUCH`); `[3]` stays 0 (the program reads it as a zero the
    /// verifier cannot see through).
    pub const CONFIG: &str = "RCTL_CONFIG";
    /// `LpmTrie<[u8; 4], u64>`: IPv4 prefixes to ip-set membership bits
    /// (read only by the `rctl_lpm` baseline program).
    pub const V4: &str = "RCTL_V4";
    /// `LpmTrie<[u8; 16], u64>`: IPv6 prefixes to ip-set membership bits
    /// (read only by the `rctl_lpm` baseline program).
    pub const V6: &str = "RCTL_V6";
    /// `Array<[u64; ENTRY_CHUNK]>`: the direct tables' entries (see
    /// [`super::dir`]); entry 0 is the IPv4 root, entry 1 the IPv6 root,
    /// entries 2 and 3 describe their filters.
    pub const ENTRIES: &str = "RCTL_ENTRIES";
    /// `Array<[u64; FILTER_CHUNK]>`: the direct tables' filter bitmaps.
    pub const FILTER: &str = "RCTL_FILTER";
    /// `Array<[u16; NODE_CHUNK]>`: the direct tables' nodes.
    pub const NODES: &str = "RCTL_NODES";
    /// `Array<[u64; CLASS_CHUNK]>`: each class's ip-set membership bits.
    pub const CLASSES: &str = "RCTL_CLASSES";
    /// `Array<[Range; RANGE_CHUNK]>`: the intervals of the blocks looked up
    /// by binary search (the fallback layout).
    pub const RANGES: &str = "RCTL_RANGES";
    /// `Array<u64>` indexed by destination port: port-predicate bits.
    pub const PORTS: &str = "RCTL_PORTS";
    /// `Array<u32>` indexed by [`super::PROTO_TCP`] etc.: protocol bits.
    pub const PROTOS: &str = "RCTL_PROTOS";
    /// `PerCpuArray<Counters>` indexed by rule.
    pub const COUNTERS: &str = "RCTL_COUNTERS";
    /// `Array<Limiter>`: rate-limit settings, indexed by [`super::Term::limiter`].
    pub const LIMITERS: &str = "RCTL_LIMITERS";
    /// `Array<[Bucket; WAYS]>`: rate-limit buckets, one set of
    /// [`super::WAYS`] per 64-byte value (one cache line: the map is
    /// page-aligned), then the limiters' overflow buckets.
    pub const BUCKETS: &str = "RCTL_BUCKETS";
    /// `Array<u64>` indexed by bucket (set x [`super::WAYS`] + way): the
    /// theoretical arrival time a bucket had when it was banned, read when
    /// the ban ends.
    pub const BANS: &str = "RCTL_BANS";
    /// `Array<u32>`: the sources the benchmark's traffic generator
    /// (`rctl_gen`) writes into its frames, in turn; `[0]` is how many
    /// follow (0: random sources).
    pub const GEN_SOURCES: &str = "RCTL_GEN_SOURCES";
    /// `Array<[u64; ENTRY_CHUNK]>`: the benchmark's probe of one cold
    /// memory access (`rctl_touch`); one chunk unless the benchmark sizes it.
    pub const TOUCH: &str = "RCTL_TOUCH";
    /// `Array<Clock>`, one entry: how the program reads the time (see
    /// [`super::Clock`]).
    pub const CLOCK: &str = "RCTL_CLOCK";
}

/// The term count's bits in `CONFIG[0]` (with [`CONFIG_PREFETCH`],
/// [`CONFIG_SETS_ONLY`] and [`CONFIG_USES_DST`] above them).
pub const CONFIG_TERMS: u32 = 0xff;
/// The bits of `CONFIG[0]` (from [`CONFIG_PREFETCH_SHIFT`]) that name the
/// rate limit every source reaches, plus one (0: none): the program reads
/// the source's bucket set under it before the source lookup, so that
/// their cache misses overlap.
pub const CONFIG_PREFETCH: u32 = 0xff << CONFIG_PREFETCH_SHIFT;
/// See [`CONFIG_PREFETCH`].
pub const CONFIG_PREFETCH_SHIFT: u32 = 8;
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
const _: () = assert!(MAX_TERMS <= CONFIG_TERMS && MAX_TERMS < 0xff);
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
/// `WAYS` slots of the set its key hashes to; a set is one 64-byte cache
/// line.
pub const WAYS: u32 = 4;
/// Sets of the bucket table.
pub const SETS: u32 = MAX_BUCKETS / WAYS;
/// Values of the bucket map: the sets, then the limiters' overflow
/// buckets (see [`overflow_slot`]), shared by sources that find their set
/// full of live buckets.
pub const BUCKET_SETS: u32 = SETS + MAX_TERMS / WAYS;
/// Buckets in the table, overflow buckets included (entries of
/// [`maps::BANS`]).
pub const BUCKET_ENTRIES: u32 = BUCKET_SETS * WAYS;

/// The bucket (set x [`WAYS`] + way) of limiter `l`'s overflow bucket.
pub const fn overflow_slot(l: u32) -> u32 {
    MAX_BUCKETS + l
}

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
    /// Zero.
    pub pad: u32,
    /// The key of IPv4 sources' bucket hash ([`bucket_key`]).
    pub key4: u64,
    /// The key of IPv6 sources' bucket hash.
    pub key6: u64,
    /// The bucket table's seed (random when a table is made, kept when
    /// buckets are carried to a new generation); the program reads only
    /// `key4` and `key6`, derived from it.
    pub seed: u64,
}

/// One bucket of the rate-limit table: a source's key (a keyed hash of
/// the limiter and its masked address) and its GCRA state. `tag` 0 marks
/// an empty slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// [`bucket_tag`] of the key (never 0 for a key).
    pub tag: u64,
    /// The theoretical arrival time of the next conforming packet; with
    /// [`BANNED`] set, the time the key's ban ends instead (its arrival
    /// time is kept in [`maps::BANS`]); or [`CLAIMING`] or [`BANNING`].
    pub tat: u64,
}

/// Set in [`Bucket::tat`] while the key is banned: the rest is the time
/// the ban ends.
pub const BANNED: u64 = 1 << 63;
/// [`Bucket::tat`] of a bucket being claimed for a new key.
pub const CLAIMING: u64 = u64::MAX;
/// [`Bucket::tat`] of a bucket whose key is being banned (its arrival
/// time is being saved).
pub const BANNING: u64 = u64::MAX - 1;

/// A set of the bucket table: one 64-byte cache line.
pub type BucketSet = [Bucket; WAYS as usize];

/// MurmurHash3's 64-bit finalizer: a bijection that mixes every bit into
/// every other.
#[inline(always)]
pub const fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The key of one limiter's bucket hash for one family, from the table's
/// secret `seed` and the limiter's `id` (a hash of its rule's name, so
/// that a limiter keeps its buckets in a new generation that keeps the
/// seed). Distinct per limiter and family, so that no source under one
/// can be aimed at a bucket of another without the seed.
pub const fn bucket_key(seed: u64, id: u64, family: u32) -> u64 {
    fmix64(fmix64(seed ^ id) ^ family as u64)
}

/// A source's bucket tag under a limiter's `key`: the masked address
/// `(hi, lo)` (IPv4 in the top 32 bits of `hi`) hashed with the key, never
/// 0. A key whose `lo` is 0 (IPv4, IPv6 keyed by a /64 or shorter) takes
/// one round, a bijection of `hi`: such keys never collide. Others take
/// two, and for one `hi` never collide either; two keys with different
/// `hi` collide only through the secret key, as user space's 64-bit keyed
/// hashes do.
#[inline(always)]
pub const fn bucket_tag(key: u64, hi: u64, lo: u64) -> u64 {
    let mut t = fmix64(hi ^ key);
    if lo != 0 {
        t = fmix64(t ^ lo);
    }
    t | (t == 0) as u64
}

/// The set of a bucket tag.
#[inline(always)]
pub const fn bucket_set(tag: u64) -> u32 {
    (tag >> 32) as u32 & (SETS - 1)
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
const _: () = assert!(core::mem::size_of::<Limiter>() == 64);
const _: () = assert!(core::mem::size_of::<Counters>() == 16);
const _: () = assert!(core::mem::size_of::<Bucket>() == 16);
const _: () = assert!(core::mem::size_of::<BucketSet>() == 64);
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
    unsafe impl aya::Pod for super::Range {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Bucket {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Clock {}
}
