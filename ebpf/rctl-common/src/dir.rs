//! The prefix table's layout ("direct tables"), and its lookup, shared by
//! the XDP program and user space.
//!
//! An address (IPv4 as a 32-bit key, IPv6 as 128 bits: two halves) is
//! looked up by indexing tables of entries with slices of its bits, the
//! way DIR-24-8 does, but with strides sized to the ruleset:
//!
//! - the root table of a family is indexed by the address's top `k` bits
//!   (`k` grows with the number of prefixes);
//! - each entry is a [`LEAF`] (every address of the block is in the same
//!   ip sets: a class, an index into the class table of membership bits),
//!   an [`INLINE`] entry (up to three intervals, in the entry itself), a
//!   [`NODE`] (up to 16 intervals: their starts and classes packed into
//!   16, 32 or 64 bytes, never across a cache line), a [`TABLE`] (a child
//!   table indexed by the next bits: blocks crowded with intervals, and
//!   IPv6's clusters) or a [`SEARCH`] (a binary search over the block's
//!   intervals, the older interval-table layout, kept as the fallback
//!   where tables or nodes would not fit).
//!
//! Before the root, a bitmap with one bit per block of the top `f` bits
//! (the filter, small enough to stay in cache: 64 KiB for 100,000
//! prefixes) says whether the block holds an address in some ip set; most
//! addresses of a flood of random sources are in none, and stop there.
//!
//! A cold lookup thus reads the filter's word (usually cached) and, for a
//! block that holds prefixes, the root entry (which holds up to three
//! intervals) and, rarely, one node; the class table is small and stays
//! cached.
//!
//! Every array is cut into 4 KiB chunks (one map value each, so that
//! loading takes one system call per 4 KiB, and nodes never straddle a
//! cache line in page-aligned map memory).

/// Words per chunk of [`crate::maps::FILTER`].
pub const FILTER_CHUNK: u32 = 512;
/// Entries per chunk of [`crate::maps::ENTRIES`].
pub const ENTRY_CHUNK: u32 = 512;
/// `u16` slots per chunk of [`crate::maps::NODES`].
pub const NODE_CHUNK: u32 = 2048;
/// Classes per chunk of [`crate::maps::CLASSES`].
pub const CLASS_CHUNK: u32 = 512;
/// Intervals per chunk of [`crate::maps::RANGES`].
pub const RANGE_CHUNK: u32 = 128;

/// Entry kind (bits 61–63): the block's class in bits 0–31.
pub const LEAF: u64 = 0;
/// Entry kind: a node at `u16` offset bits 0–31 of the node array; its
/// starts are the address's bits `p..p + 16` (`p` in bits 32–38); it holds
/// `2^s` intervals (`s` in bits 40–42: 2, 3 or 4): `2^s` starts (the
/// first never read), then `2^s` classes.
pub const NODE: u64 = 1;
/// Entry kind: a child table at entry index bits 0–31, indexed by the
/// address's bits `shift..shift + stride` (`shift` in bits 32–38,
/// `stride` in bits 40–44, 1 to [`MAX_STRIDE`]).
pub const TABLE: u64 = 2;
/// Entry kind: the block's intervals are intervals `first..=first +
/// count` of the range array (`first` in bits 0–31, `count` in bits
/// 32–55, at most [`MAX_SEARCH`]); the first holds the block's first
/// address. A binary search finds the one holding the address.
pub const SEARCH: u64 = 3;
/// Entry kind: up to three intervals in the entry: their starts are the
/// address's bits `p..p + 16` (`p` in bits 0–6); the second starts at
/// digit `d1` (bits 7–22), the third at `d2` (bits 23–38, not below
/// `d1`); their classes (each below [`INLINE_CLASSES`]) are 7 bits each
/// from bit 39.
pub const INLINE: u64 = 4;
/// Classes an [`INLINE`] entry can hold.
pub const INLINE_CLASSES: u32 = 128;

/// Widest child table.
pub const MAX_STRIDE: u32 = 24;
/// Most tables a lookup descends through (the root included).
pub const MAX_DEPTH: u32 = 20;
/// Most interval starts inside one [`SEARCH`] block (the binary search
/// runs at most 23 steps).
pub const MAX_SEARCH: u32 = (1 << 23) - 1;
/// Most intervals in one node.
pub const NODE_MAX: u32 = 16;

/// An entry's kind.
#[inline(always)]
pub const fn kind(e: u64) -> u64 {
    e >> 61
}

/// A [`LEAF`] entry.
pub const fn leaf(class: u32) -> u64 {
    class as u64
}

/// A [`NODE`] entry: `offset` in `u16` units (aligned to the node's
/// size), `2^size_log` intervals, starts at bit `p`.
pub const fn node(offset: u32, size_log: u32, p: u32) -> u64 {
    NODE << 61 | (size_log as u64) << 40 | (p as u64) << 32 | offset as u64
}

/// A [`TABLE`] entry.
pub const fn table(base: u32, shift: u32, stride: u32) -> u64 {
    TABLE << 61 | (stride as u64) << 40 | (shift as u64) << 32 | base as u64
}

/// A [`SEARCH`] entry.
pub const fn search(first: u32, count: u32) -> u64 {
    SEARCH << 61 | (count as u64) << 32 | first as u64
}

/// An [`INLINE`] entry: digits at bit `p`, the second and third
/// intervals' first digits, the three classes.
pub const fn inline(p: u32, d1: u16, d2: u16, c: [u32; 3]) -> u64 {
    INLINE << 61
        | (c[2] as u64) << 53
        | (c[1] as u64) << 46
        | (c[0] as u64) << 39
        | (d2 as u64) << 23
        | (d1 as u64) << 7
        | p as u64
}

/// Entry `2 + family` describes the family's filter: the bitmap starts
/// at word `offset` (bits 0–31) of the filter array; block `b` is the
/// key's bits from `shift` (bits 32–38) for `bits` bits (40–44); 0: no
/// filter.
pub const fn filter(offset: u32, shift: u32, bits: u32) -> u64 {
    (bits as u64) << 40 | (shift as u64) << 32 | offset as u64
}

/// One interval of the address space (IPv4 starts in `start_lo`): it
/// runs from its start to the next interval's start; every address in it
/// is in the ip sets of `bits`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// The first address's first 8 bytes (0 for IPv4).
    pub start_hi: u64,
    /// Its last 8 bytes (an IPv4 address in the low 32 bits).
    pub start_lo: u64,
    /// Ip-set membership bits.
    pub bits: u64,
}

/// Where a lookup reads the tables: map values in the program, vectors in
/// user space. Each returns one chunk.
pub trait Chunks {
    /// Filter words `c * FILTER_CHUNK..`.
    fn filter(&self, c: u32) -> Option<&[u64; FILTER_CHUNK as usize]>;
    /// Entries `c * ENTRY_CHUNK..`.
    fn entries(&self, c: u32) -> Option<&[u64; ENTRY_CHUNK as usize]>;
    /// Node slots `c * NODE_CHUNK..`.
    fn nodes(&self, c: u32) -> Option<&[u16; NODE_CHUNK as usize]>;
    /// Classes `c * CLASS_CHUNK..`.
    fn classes(&self, c: u32) -> Option<&[u64; CLASS_CHUNK as usize]>;
    /// Intervals `c * RANGE_CHUNK..`.
    fn ranges(&self, c: u32) -> Option<&[Range; RANGE_CHUNK as usize]>;
}

/// Entry `i`.
#[inline(always)]
pub fn entry<T: Chunks>(t: &T, i: u32) -> Option<u64> {
    t.entries(i / ENTRY_CHUNK)
        .map(|c| c[(i % ENTRY_CHUNK) as usize])
}

/// The membership bits of class `c`.
#[inline(always)]
fn class<T: Chunks>(t: &T, c: u32) -> u64 {
    t.classes(c / CLASS_CHUNK)
        .map_or(0, |a| a[(c % CLASS_CHUNK) as usize])
}

/// Bits `shift..shift + 64` of the 128-bit key `(hi, lo)` (`shift` below
/// 128), without a branch.
#[inline(always)]
fn bits_at(hi: u64, lo: u64, shift: u64) -> u64 {
    let s = shift & 63;
    // For shift < 64: lo's top bits and hi's bottom ones; `(hi << 1) <<
    // (63 - s)` is `hi << (64 - s)` without shifting by 64 when s is 0.
    let low = (lo >> s) | ((hi << 1) << (63 - s));
    let high = hi >> s;
    let m = ((shift >> 6) & 1).wrapping_neg();
    (high & m) | (low & !m)
}

/// 1 if `x < y`, without a branch (the borrow of `x - y`).
#[inline(always)]
pub fn lt64(x: u64, y: u64) -> u64 {
    ((!x & y) | (!(x ^ y) & x.wrapping_sub(y))) >> 63
}

/// The ip-set membership bits of the key `(hi, lo)` (IPv4: `(0, addr)`)
/// in the tables whose root is entry `root` (0 for IPv4, 1 for IPv6: each
/// a [`TABLE`] entry, or a [`LEAF`] for an empty family).
#[inline(always)]
pub fn lookup<T: Chunks>(t: &T, root: u32, hi: u64, lo: u64) -> u64 {
    // The roots and the filters' descriptors share the first chunk.
    let Some(head) = t.entries(0) else {
        return 0;
    };
    let (f, mut e) = (head[(2 + root) as usize & 3], head[root as usize & 3]);
    // The filter: a block in no ip set stops here.
    if !filter_passes(t, f, hi, lo) {
        return 0;
    }
    for _ in 0..MAX_DEPTH {
        if kind(e) != TABLE {
            break;
        }
        let Some(next) = child(t, e, hi, lo) else {
            return 0;
        };
        e = next;
    }
    match kind(e) {
        LEAF => class(t, e as u32),
        INLINE => class(t, inline_class(e, hi, lo)),
        NODE => class(t, node_class(t, e, hi, lo)),
        SEARCH => search_bits(t, e, hi, lo),
        // Deeper than MAX_DEPTH: the builder never makes one.
        _ => 0,
    }
}

/// Whether the filter that entry `f` describes (see [`filter`]) lets the
/// key `(hi, lo)` through to the tables: false only when the key's block
/// holds no address in any ip set (always true without a filter).
#[inline(always)]
pub fn filter_passes<T: Chunks>(t: &T, f: u64, hi: u64, lo: u64) -> bool {
    let bits = (f >> 40) & 0x1f;
    if bits == 0 {
        return true;
    }
    let b = bits_at(hi, lo, (f >> 32) & 0x7f) & ((1u64 << bits) - 1);
    let w = (f as u32).wrapping_add((b >> 6) as u32);
    let word = t
        .filter(w / FILTER_CHUNK)
        .map_or(0, |c| c[(w % FILTER_CHUNK) as usize]);
    (word >> (b & 63)) & 1 != 0
}

/// The entry the [`TABLE`] entry `e` leads the key to.
#[inline(always)]
fn child<T: Chunks>(t: &T, e: u64, hi: u64, lo: u64) -> Option<u64> {
    let shift = (e >> 32) & 0x7f;
    let stride = (e >> 40) & 0x1f;
    let x = bits_at(hi, lo, shift) & ((1u64 << stride) - 1);
    entry(t, (e as u32).wrapping_add(x as u32))
}

/// The class an [`INLINE`] entry gives the key, without a branch.
#[inline(always)]
fn inline_class(e: u64, hi: u64, lo: u64) -> u32 {
    let d = bits_at(hi, lo, e & 0x7f) & 0xffff;
    let ge = |x: u64| (d.wrapping_sub(x) >> 63) ^ 1;
    let i = ge((e >> 7) & 0xffff) + ge((e >> 23) & 0xffff);
    ((e >> (39 + 7 * i)) & 0x7f) as u32
}

/// The class a [`NODE`] entry gives the key: a branch-free binary search
/// of its starts (all in one cache line).
#[inline(always)]
fn node_class<T: Chunks>(t: &T, e: u64, hi: u64, lo: u64) -> u32 {
    let off = e as u32;
    let p = (e >> 32) & 0x7f;
    let n = 1u32 << ((e >> 40) & 7);
    let d = (bits_at(hi, lo, p) & 0xffff) as u16;
    let Some(c) = t.nodes(off / NODE_CHUNK) else {
        return 0;
    };
    // Nodes are aligned to their size, so `o + 2n` stays in the chunk.
    let o = off % NODE_CHUNK;
    let mask = NODE_CHUNK - 1;
    let mut pos = 0u64;
    let mut step = u64::from(NODE_MAX / 2);
    let (n, d) = (u64::from(n), u64::from(d));
    while step > 0 {
        let next = pos + step;
        // Without a branch (the program has no conditional move): `inside`
        // is 1 when the step stays in the node; a step past its end reads
        // the last start, and is not taken.
        let inside = next.wrapping_sub(n) >> 63;
        let at = next.wrapping_sub((1 - inside).wrapping_mul(next.wrapping_sub(n - 1)));
        let s = u64::from(c[((u64::from(o) + at) & u64::from(mask)) as usize]);
        let le = (d.wrapping_sub(s) >> 63) ^ 1;
        pos += step * (inside & le);
        step /= 2;
    }
    u32::from(c[((u64::from(o) + n + pos) & u64::from(mask)) as usize])
}

/// The bits a [`SEARCH`] entry gives the key: a branch-free binary
/// search over the block's intervals (128-bit comparisons made of
/// borrows).
#[inline(always)]
fn search_bits<T: Chunks>(t: &T, e: u64, hi: u64, lo: u64) -> u64 {
    let mut base = e as u32;
    let mut len = ((e >> 32) & 0xff_ffff) as u32 + 1;
    for _ in 0..23 {
        if len <= 1 {
            break;
        }
        let half = len / 2;
        let Some(r) = range(t, base + half) else {
            return 0;
        };
        // key < start: the high halves' borrow, or equal high halves
        // (their difference below the low halves' borrow).
        let borrow = lt64(lo, r.start_lo);
        let below = lt64(hi, r.start_hi) | lt64(hi.wrapping_sub(r.start_hi), borrow);
        base += half * (1 - below as u32);
        len -= half;
    }
    range(t, base).map_or(0, |r| r.bits)
}

#[inline(always)]
fn range<T: Chunks>(t: &T, i: u32) -> Option<Range> {
    t.ranges(i / RANGE_CHUNK)
        .map(|c| c[(i % RANGE_CHUNK) as usize])
}

const _: () = assert!(core::mem::size_of::<Range>() == 24);
const _: () = assert!(RANGE_CHUNK * 24 <= 4096);
