//! The rctl XDP program: the packet plane of a compiled ruleset.
//!
//! For each packet: parse Ethernet (up to two VLAN tags), IPv4 (with
//! options) or IPv6 (with hop-by-hop, routing, destination-options and
//! fragment headers), and the TCP/UDP destination port; look the source up
//! up (one lookup gives the membership bits of every ip set); then run the
//! rules' DNF terms in order. The first term that matches decides: drop,
//! or pass (allow and exemptions). Anything the program does not parse
//! passes.
//!
//! Sources are looked up in direct tables sized to the ruleset
//! ([`rctl_common::dir`]: a root indexed by the address's top bits, whose
//! entries are a class, a one-cache-line node of a few intervals, a child
//! table, or a binary search over intervals where neither fits): one or
//! two cache lines per lookup (`lookup.rs`). `rctl_lpm` is the same
//! program with the kernel's LPM tries instead: the baseline the benchmark
//! compares against. When a rate limit applies to every source, the
//! source's bucket set is read before the lookup, so that the two cache
//! misses of a new source overlap.

#![no_std]
#![no_main]
// For `atomic_cxchg` (see `limit::cas`): the program is built with nightly.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for atomic_cxchg")]

mod bench;
mod limit;
mod lookup;
mod packet;

use aya_ebpf::bindings::{xdp_action, BPF_F_MMAPABLE};
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::{Array, PerCpuArray};
use aya_ebpf::programs::XdpContext;
use lookup::{sets, NONE, TABLES, TRIE};
use packet::{be16_at, bytes16_at, bytes4_at, u8_at};
use rctl_common::{
    kind, BucketSet, Clock, Counters, Limiter, Term, BUCKET_ENTRIES, BUCKET_SETS, CONFIG_PREFETCH,
    CONFIG_PREFETCH_SHIFT, CONFIG_SETS_ONLY, CONFIG_TERMS, CONFIG_USES_DST, MAX_RULES, MAX_TERMS,
    PROTO_ICMP, PROTO_OTHER, PROTO_TCP, PROTO_UDP,
};

#[map(name = "RCTL_TERMS")]
static TERMS: Array<Term> = Array::with_max_entries(MAX_TERMS, 0);
#[map(name = "RCTL_CONFIG")]
static CONFIG: Array<u32> = Array::with_max_entries(4, 0);
#[map(name = "RCTL_PORTS")]
static PORTS: Array<u64> = Array::with_max_entries(65536, 0);
#[map(name = "RCTL_PROTOS")]
static PROTOS: Array<u32> = Array::with_max_entries(4, 0);
#[map(name = "RCTL_COUNTERS")]
static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(MAX_RULES, 0);
#[map(name = "RCTL_LIMITERS")]
static LIMITERS: Array<Limiter> = Array::with_max_entries(MAX_TERMS, 0);
/// One set per value; page-aligned (mmapable), so each set is one cache
/// line.
#[map(name = "RCTL_BUCKETS")]
static BUCKETS: Array<BucketSet> = Array::with_max_entries(BUCKET_SETS, BPF_F_MMAPABLE);
#[map(name = "RCTL_BANS")]
static BANS: Array<u64> = Array::with_max_entries(BUCKET_ENTRIES, 0);
#[map(name = "RCTL_CLOCK")]
static CLOCK: Array<Clock> = Array::with_max_entries(1, 0);

struct Parsed {
    proto: u32,
    dport: u16,
    /// TCP SYN without ACK.
    syn: bool,
    /// 4 or 6.
    family: u32,
    /// The source address as two big-endian halves (IPv4 in the top 32
    /// bits of `src_hi`).
    src_hi: u64,
    /// See `src_hi`.
    src_lo: u64,
    /// The destination address, as `src_hi` and `src_lo`.
    dst_hi: u64,
    /// See `dst_hi`.
    dst_lo: u64,
    /// 1 when the destination is IPv4 (or IPv4-mapped), in `dst_hi`'s top
    /// 32 bits.
    dst_v4: u32,
}

#[xdp]
pub fn rctl(ctx: XdpContext) -> u32 {
    match try_rctl::<TABLES>(&ctx) {
        Ok(v) | Err(v) => v,
    }
}

/// The same rules with IPv4 looked up in the kernel's LPM trie: the
/// benchmark's baseline (and a second implementation for the parity
/// tests).
#[xdp]
pub fn rctl_lpm(ctx: XdpContext) -> u32 {
    match try_rctl::<TRIE>(&ctx) {
        Ok(v) | Err(v) => v,
    }
}

/// The same rules with no source lookup (wrong for any ip-set rule): the
/// benchmark subtracts it to show the lookups' own cost.
#[xdp]
pub fn rctl_nolookup(ctx: XdpContext) -> u32 {
    match try_rctl::<NONE>(&ctx) {
        Ok(v) | Err(v) => v,
    }
}

/// Sixteen address bytes as two big-endian halves.
#[inline(always)]
fn halves(a: &[u8; 16]) -> (u64, u64) {
    (
        u64::from_be_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
        u64::from_be_bytes([a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]]),
    )
}

/// An empty program: the harness floor for benchmarks.
#[xdp]
pub fn rctl_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

#[inline(always)]
fn parse(ctx: &XdpContext) -> Option<Parsed> {
    let mut off = 12usize;
    let mut ethertype = be16_at(ctx, off)?;
    off += 2;
    if ethertype == 0x8100 || ethertype == 0x88a8 || ethertype == 0x9100 {
        ethertype = be16_at(ctx, off + 2)?;
        off += 4;
        if ethertype == 0x8100 || ethertype == 0x88a8 || ethertype == 0x9100 {
            ethertype = be16_at(ctx, off + 2)?;
            off += 4;
        }
    }
    let (next, l4, family, src, dst) = match ethertype {
        0x0800 => {
            let vihl = u8_at(ctx, off)?;
            let ihl = ((vihl & 0x0f) as usize) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return None;
            }
            let frag = be16_at(ctx, off + 6)?;
            let proto = u8_at(ctx, off + 9)?;
            let src = bytes4_at(ctx, off + 12)?;
            let dst = bytes4_at(ctx, off + 16)?;
            // Later fragments carry no ports.
            let l4 = if frag & 0x1fff != 0 {
                None
            } else {
                Some(off + ihl)
            };
            let hi = u64::from(u32::from_be_bytes(src)) << 32;
            let dst = (u64::from(u32::from_be_bytes(dst)) << 32, 0, 1);
            (proto, l4, 4u32, (hi, 0), dst)
        }
        0x86dd => {
            let mut next = u8_at(ctx, off + 6)?;
            let (hi, lo) = halves(&bytes16_at(ctx, off + 8)?);
            let (dhi, dlo) = halves(&bytes16_at(ctx, off + 24)?);
            // The destination, IPv4-mapped or not (as the source below).
            let dst = if dhi == 0 && dlo >> 32 == 0xffff {
                (dlo << 32, 0, 1)
            } else {
                (dhi, dlo, 0)
            };
            // An IPv4-mapped address (::ffff:a.b.c.d) is its IPv4 source.
            let (family, key) = if hi == 0 && lo >> 32 == 0xffff {
                (4u32, (lo << 32, 0))
            } else {
                (6u32, (hi, lo))
            };
            let mut at = off + 40;
            let mut l4 = Some(0usize);
            for _ in 0..4 {
                match next {
                    0 | 43 | 60 => {
                        // Next header and length, read together.
                        let h = bytes4_at(ctx, at)?;
                        next = h[0];
                        at += (h[1] as usize + 1) * 8;
                    }
                    44 => {
                        let h = bytes4_at(ctx, at)?;
                        if u16::from_be_bytes([h[2], h[3]]) & 0xfff8 != 0 {
                            l4 = None;
                        }
                        next = h[0];
                        at += 8;
                    }
                    _ => break,
                }
                // A bound the verifier can see.
                if at > 512 {
                    return None;
                }
            }
            (next, l4.map(|_| at), family, key, dst)
        }
        _ => return None,
    };
    let (proto, dport, syn) = match next {
        6 => {
            let dport = l4
                .and_then(|o| bytes4_at(ctx, o))
                .map_or(0, |p| u16::from_be_bytes([p[2], p[3]]));
            let flags = l4.and_then(|o| bytes4_at(ctx, o + 12)).map_or(0, |p| p[1]);
            (PROTO_TCP, dport, flags & 0x12 == 0x02)
        }
        17 => (
            PROTO_UDP,
            l4.and_then(|o| bytes4_at(ctx, o))
                .map_or(0, |p| u16::from_be_bytes([p[2], p[3]])),
            false,
        ),
        1 | 58 => (PROTO_ICMP, 0, false),
        _ => (PROTO_OTHER, 0, false),
    };
    Some(Parsed {
        proto,
        dport,
        syn,
        family,
        src_hi: src.0,
        src_lo: src.1,
        dst_hi: dst.0,
        dst_lo: dst.1,
        dst_v4: dst.2,
    })
}

#[inline(always)]
fn try_rctl<const L: u8>(ctx: &XdpContext) -> Result<u32, u32> {
    let Some(p) = parse(ctx) else {
        return Ok(xdp_action::XDP_PASS);
    };
    let config = CONFIG.get(0).copied().unwrap_or(0);
    let n = config & CONFIG_TERMS;
    // A rate limit every source reaches: its bucket set is read now, so
    // that its cache miss overlaps the lookup's.
    let pre = (config & CONFIG_PREFETCH) >> CONFIG_PREFETCH_SHIFT;
    let (hint, hinted) = limit::prefetch(pre, p.family, p.src_hi, p.src_lo);
    let src = sets::<L>(p.family, p.src_hi, p.src_lo, true);
    // Zero only for a source in no ip set when every term needs one. The
    // test is on this value alone (`black_box` keeps LLVM from splitting
    // it back into two), so that the verifier learns nothing about
    // `src` and walks the terms once, not once per outcome.
    let none =
        core::hint::black_box(src | u64::from((config & CONFIG_SETS_ONLY) ^ CONFIG_SETS_ONLY));
    if none == 0 {
        return Ok(xdp_action::XDP_PASS);
    }
    let ports = PORTS.get(p.dport as u32).copied().unwrap_or(0);
    let protos = PROTOS.get(p.proto).copied().unwrap_or(0);
    // The destination's bits, looked up only when some term reads them.
    // Skipping the lookup with a plain `0` would split the verifier's state
    // before the terms loop (known zero against unknown) and double its
    // walk; so the default is CONFIG[3], always 0 but unknown to the
    // verifier, spread over 64 bits: both paths leave an unknown value and
    // the second is pruned.
    let zero = u64::from(CONFIG.get(3).copied().unwrap_or(0));
    let mut dst = zero << 32 | zero;
    if config & CONFIG_USES_DST != 0 {
        dst |= sets::<L>(6 - 2 * p.dst_v4, p.dst_hi, p.dst_lo, false);
    }
    // A throttle that let a packet through is done with it: later terms of
    // the same rule must not count it again.
    let mut counted_rule = u32::MAX;
    for i in 0..MAX_TERMS {
        if i >= n {
            break;
        }
        let Some(t) = TERMS.get(i) else { break };
        if t.rule == counted_rule {
            continue;
        }
        let hit = src & t.set_pos == t.set_pos
            && src & t.set_neg == 0
            && dst & t.dst_pos == t.dst_pos
            && dst & t.dst_neg == 0
            && ports & t.port_pos == t.port_pos
            && ports & t.port_neg == 0
            && protos & t.proto_pos == t.proto_pos
            && protos & t.proto_neg == 0;
        if !hit {
            continue;
        }
        if t.kind == kind::THROTTLE {
            let Some(l) = LIMITERS.get(t.limiter) else {
                continue;
            };
            if l.syn_only != 0 && !(p.proto == PROTO_TCP && p.syn) {
                continue;
            }
            counted_rule = t.rule;
            let family = p.family | hinted << 8;
            if limit::rctl_limit(t.limiter, family, p.src_hi, p.src_lo, hint) == limit::UNDER {
                continue;
            }
        }
        if let Some(c) = COUNTERS.get_ptr_mut(t.rule) {
            // SAFETY: a per-CPU slot, written only by this CPU.
            unsafe {
                (*c).packets += 1;
                (*c).bytes += (ctx.data_end() - ctx.data()) as u64;
            }
        }
        return Ok(if t.kind == kind::DROP || t.kind == kind::THROTTLE {
            xdp_action::XDP_DROP
        } else {
            xdp_action::XDP_PASS
        });
    }
    Ok(xdp_action::XDP_PASS)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
