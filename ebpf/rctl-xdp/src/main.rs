//! The rctl XDP program: the packet plane of a compiled ruleset.
//!
//! For each packet: parse Ethernet (up to two VLAN tags), IPv4 (with
//! options) or IPv6 (with hop-by-hop, routing, destination-options and
//! fragment headers), and the TCP/UDP destination port; look the source up
//! in the prefix tries (one lookup gives the membership bits of every ip
//! set); then run the rules' DNF terms in order. The first term that
//! matches decides: drop, or pass (allow and exemptions). Anything the
//! program does not parse passes.

#![no_std]
#![no_main]

mod packet;

use aya_ebpf::bindings::{xdp_action, BPF_F_NO_PREALLOC};
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{Array, LpmTrie, LruHashMap, PerCpuArray};
use aya_ebpf::programs::XdpContext;
use packet::{be16_at, bytes16_at, bytes4_at, u8_at};
use rctl_common::{
    kind, Counters, LimitKey, LimitState, Limiter, Term, MAX_BUCKETS, MAX_RULES, MAX_TERMS,
    PROTO_ICMP, PROTO_OTHER, PROTO_TCP, PROTO_UDP,
};

#[map(name = "RCTL_TERMS")]
static TERMS: Array<Term> = Array::with_max_entries(MAX_TERMS, 0);
#[map(name = "RCTL_CONFIG")]
static CONFIG: Array<u32> = Array::with_max_entries(4, 0);
#[map(name = "RCTL_V4")]
static V4: LpmTrie<[u8; 4], u64> = LpmTrie::with_max_entries(1 << 22, BPF_F_NO_PREALLOC);
#[map(name = "RCTL_V6")]
static V6: LpmTrie<[u8; 16], u64> = LpmTrie::with_max_entries(1 << 20, BPF_F_NO_PREALLOC);
#[map(name = "RCTL_PORTS")]
static PORTS: Array<u64> = Array::with_max_entries(65536, 0);
#[map(name = "RCTL_PROTOS")]
static PROTOS: Array<u32> = Array::with_max_entries(4, 0);
#[map(name = "RCTL_COUNTERS")]
static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(MAX_RULES, 0);
#[map(name = "RCTL_LIMITERS")]
static LIMITERS: Array<Limiter> = Array::with_max_entries(MAX_TERMS, 0);
#[map(name = "RCTL_BUCKETS")]
static BUCKETS: LruHashMap<LimitKey, LimitState> = LruHashMap::with_max_entries(MAX_BUCKETS, 0);
#[map(name = "RCTL_CLOCK")]
static CLOCK: Array<u64> = Array::with_max_entries(1, 0);

struct Parsed {
    sets: u64,
    proto: u32,
    dport: u16,
    /// TCP SYN without ACK.
    syn: bool,
    /// 4 or 6.
    family: u32,
    src: [u8; 16],
}

#[xdp]
pub fn rctl(ctx: XdpContext) -> u32 {
    match try_rctl(&ctx) {
        Ok(v) | Err(v) => v,
    }
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
    let (sets, next, l4, family, src) = match ethertype {
        0x0800 => {
            let vihl = u8_at(ctx, off)?;
            let ihl = ((vihl & 0x0f) as usize) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return None;
            }
            let frag = be16_at(ctx, off + 6)?;
            let proto = u8_at(ctx, off + 9)?;
            let src = bytes4_at(ctx, off + 12)?;
            let sets = V4.get(&Key::new(32, src)).copied().unwrap_or(0);
            // Later fragments carry no ports.
            let l4 = if frag & 0x1fff != 0 {
                None
            } else {
                Some(off + ihl)
            };
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&src);
            (sets, proto, l4, 4u32, a)
        }
        0x86dd => {
            let mut next = u8_at(ctx, off + 6)?;
            let src = bytes16_at(ctx, off + 8)?;
            let mapped = src[..10] == [0; 10] && src[10] == 0xff && src[11] == 0xff;
            let (family, key_addr) = if mapped {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&src[12..16]);
                (4u32, a)
            } else {
                (6u32, src)
            };
            let sets = if mapped {
                V4.get(&Key::new(32, [src[12], src[13], src[14], src[15]]))
                    .copied()
                    .unwrap_or(0)
            } else {
                V6.get(&Key::new(128, src)).copied().unwrap_or(0)
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
            (sets, next, l4.map(|_| at), family, key_addr)
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
        sets,
        proto,
        dport,
        syn,
        family,
        src,
    })
}

#[inline(always)]
fn try_rctl(ctx: &XdpContext) -> Result<u32, u32> {
    let Some(p) = parse(ctx) else {
        return Ok(xdp_action::XDP_PASS);
    };
    let ports = PORTS.get(p.dport as u32).copied().unwrap_or(0);
    let protos = PROTOS.get(p.proto).copied().unwrap_or(0);
    let n = CONFIG.get(0).copied().unwrap_or(0);
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
        let hit = p.sets & t.set_pos == t.set_pos
            && p.sets & t.set_neg == 0
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
            if !over_limit(&p, t.limiter, l) {
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

/// GCRA with a ban, exactly as the user-space limiter: true if the packet
/// is over the limit.
#[inline(always)]
fn over_limit(p: &Parsed, limiter: u32, l: &Limiter) -> bool {
    let now = match CLOCK.get(0).copied() {
        Some(t) if t != 0 => t,
        // SAFETY: a helper without arguments or side effects.
        _ => unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() },
    };
    let bits = if p.family == 4 { l.v4_len } else { l.v6_len };
    let mut key = LimitKey {
        limiter,
        family: p.family,
        addr: [0; 16],
    };
    for i in 0..16u32 {
        let full = (i + 1) * 8;
        let b = p.src[i as usize];
        key.addr[i as usize] = if full <= bits {
            b
        } else if i * 8 < bits {
            b & (0xffu8 << (full - bits))
        } else {
            0
        };
    }
    let Some(st) = BUCKETS.get_ptr_mut(&key) else {
        let fresh = LimitState {
            tat: now + l.interval_ns,
            banned_until: 0,
        };
        let _ = BUCKETS.insert(&key, &fresh, 0);
        return false;
    };
    // SAFETY: a value pointer from the map, valid during this program run.
    let st = unsafe { &mut *st };
    if st.banned_until > now {
        return true;
    }
    let tat = if st.tat > now { st.tat } else { now };
    if tat - now > l.tolerance_ns {
        if l.ban_ns > 0 {
            st.banned_until = now + l.ban_ns;
        }
        return true;
    }
    st.tat = tat + l.interval_ns;
    false
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
