//! Programs for the benchmark, not for filtering: `rctl_gen`, the traffic
//! generator of the real-interface measurement, and `rctl_touch` and
//! `rctl_touch2`, probes of what one and two cold memory accesses cost on
//! the machine (the physical floor of a lookup). Their maps hold one
//! entry unless the benchmark sizes them.

use crate::packet::{bytes4_at, put4};
use crate::CONFIG;
use aya_ebpf::bindings::{xdp_action, BPF_F_MMAPABLE};
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::{Array, PerCpuArray};
use aya_ebpf::programs::XdpContext;
use rctl_common::dir::ENTRY_CHUNK;
use rctl_common::fmix64;

#[map(name = "RCTL_GEN_SOURCES")]
static GEN_SOURCES: Array<u32> = Array::with_max_entries(1, 0);
#[map(name = "RCTL_GEN_NEXT")]
static GEN_NEXT: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);
#[map(name = "RCTL_TOUCH")]
static TOUCH: Array<[u64; ENTRY_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Offset of an untagged IPv4 frame's source address.
const V4_SOURCE: usize = 14 + 12;

/// The traffic generator: run by BPF_PROG_RUN in live-frames mode
/// (`BPF_F_TEST_XDP_LIVE_FRAMES`), it writes a source address into each
/// IPv4 frame, random or the next of `RCTL_GEN_SOURCES`, and sends it
/// back out of the interface the run names (XDP_TX): into a veth pair,
/// whose far end runs the program measured.
#[xdp]
pub fn rctl_gen(ctx: XdpContext) -> u32 {
    let n = GEN_SOURCES.get(0).copied().unwrap_or(0);
    let src = if n == 0 {
        // SAFETY: a helper without arguments. Not 0.0.0.0/8.
        (unsafe { aya_ebpf::helpers::bpf_get_prandom_u32() }) | 0x0100_0000
    } else {
        let Some(next) = GEN_NEXT.get_ptr_mut(0) else {
            return xdp_action::XDP_ABORTED;
        };
        // SAFETY: a per-CPU slot, written only by this CPU.
        let i = unsafe {
            let i = *next;
            *next = if i + 1 >= n { 0 } else { i + 1 };
            i
        };
        GEN_SOURCES.get(1 + i).copied().unwrap_or(0)
    };
    match put4(&ctx, V4_SOURCE, src.to_be_bytes()) {
        Some(()) => xdp_action::XDP_TX,
        None => xdp_action::XDP_ABORTED,
    }
}

/// The index into `RCTL_TOUCH` (`CONFIG[2]` chunks) that `x` hashes to.
#[inline(always)]
fn touch_index(x: u64) -> Option<u64> {
    let chunks = u64::from(CONFIG.get(2).copied().unwrap_or(0).max(1));
    let h = fmix64(x);
    let c = TOUCH.get((h % chunks) as u32)?;
    Some(c[((h >> 40) % u64::from(ENTRY_CHUNK)) as usize])
}

/// One load from `RCTL_TOUCH` at a hash of the IPv4 source: one cold
/// memory access per new source.
#[xdp]
pub fn rctl_touch(ctx: XdpContext) -> u32 {
    if let Some(src) = bytes4_at(&ctx, V4_SOURCE) {
        let _ = core::hint::black_box(touch_index(u64::from(u32::from_be_bytes(src))).unwrap_or(0));
    }
    xdp_action::XDP_PASS
}

/// Two dependent loads from `RCTL_TOUCH` (the second at a hash of what
/// the first read): two cold accesses in sequence, as a two-level table
/// makes.
#[xdp]
pub fn rctl_touch2(ctx: XdpContext) -> u32 {
    if let Some(src) = bytes4_at(&ctx, V4_SOURCE) {
        let first = touch_index(u64::from(u32::from_be_bytes(src))).unwrap_or(0);
        let _ = core::hint::black_box(touch_index(first ^ 0x5eed).unwrap_or(0));
    }
    xdp_action::XDP_PASS
}

/// Chunks per inner array of `RCTL_TOUCH_AOM`: 28 KiB and the array's
/// header stay under 32 KiB, which the kernel allocates with kmalloc, in
/// its direct mapping (huge pages), not in vmalloc space (4 KiB pages).
pub const AOM_CHUNKS: u32 = 7;

#[aya_ebpf::macros::btf_map]
static RCTL_TOUCH_AOM: aya_ebpf::btf_maps::ArrayOfMaps<
    aya_ebpf::btf_maps::Array<[u64; ENTRY_CHUNK as usize], { AOM_CHUNKS as usize }>,
    1,
> = aya_ebpf::btf_maps::ArrayOfMaps::new();

/// As [`touch_index`], in `RCTL_TOUCH_AOM` (`CONFIG[2]` inner arrays).
#[inline(always)]
fn touch_aom(x: u64) -> Option<u64> {
    let inner = u64::from(
        CONFIG
            .get(2)
            .copied()
            .unwrap_or(0)
            .div_ceil(AOM_CHUNKS)
            .max(1),
    );
    let h = fmix64(x);
    let per = u64::from(AOM_CHUNKS * ENTRY_CHUNK);
    let i = (h >> 8) % (inner * per);
    let c = RCTL_TOUCH_AOM.get_value((i / per) as u32, &(((i % per) / 512) as u32))?;
    Some(c[(i % 512) as usize])
}

/// One load from an array of small arrays (see [`AOM_CHUNKS`]).
#[xdp]
pub fn rctl_touch_aom(ctx: XdpContext) -> u32 {
    if let Some(src) = bytes4_at(&ctx, V4_SOURCE) {
        let _ = core::hint::black_box(touch_aom(u64::from(u32::from_be_bytes(src))).unwrap_or(0));
    }
    xdp_action::XDP_PASS
}

/// Two dependent loads from an array of small arrays.
#[xdp]
pub fn rctl_touch2_aom(ctx: XdpContext) -> u32 {
    if let Some(src) = bytes4_at(&ctx, V4_SOURCE) {
        let first = touch_aom(u64::from(u32::from_be_bytes(src))).unwrap_or(0);
        let _ = core::hint::black_box(touch_aom(first ^ 0x5eed).unwrap_or(0));
    }
    xdp_action::XDP_PASS
}
