//! Source and destination lookups: the direct tables
//! ([`rctl_common::dir`]), and the kernel's LPM tries for the `rctl_lpm`
//! baseline.

use aya_ebpf::bindings::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC};
use aya_ebpf::macros::map;
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{Array, LpmTrie};
use rctl_common::dir::{
    self, Chunks, Range, CLASS_CHUNK, ENTRY_CHUNK, FILTER_CHUNK, NODE_CHUNK, RANGE_CHUNK,
};

// Page-aligned (mmapable arrays start their values on a page), so that a
// node or a bucket set never straddles a cache line. Sized at load time.
#[map(name = "RCTL_FILTER")]
static FILTER: Array<[u64; FILTER_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map(name = "RCTL_ENTRIES")]
static ENTRIES: Array<[u64; ENTRY_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map(name = "RCTL_NODES")]
static NODES: Array<[u16; NODE_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map(name = "RCTL_CLASSES")]
static CLASSES: Array<[u64; CLASS_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map(name = "RCTL_RANGES")]
static RANGES: Array<[Range; RANGE_CHUNK as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map(name = "RCTL_V4")]
static V4: LpmTrie<[u8; 4], u64> = LpmTrie::with_max_entries(1 << 22, BPF_F_NO_PREALLOC);
#[map(name = "RCTL_V6")]
static V6: LpmTrie<[u8; 16], u64> = LpmTrie::with_max_entries(1 << 20, BPF_F_NO_PREALLOC);

/// The direct tables, as the program's maps.
struct Maps;

impl Chunks for Maps {
    #[inline(always)]
    fn filter(&self, c: u32) -> Option<&[u64; FILTER_CHUNK as usize]> {
        FILTER.get(c)
    }
    #[inline(always)]
    fn entries(&self, c: u32) -> Option<&[u64; ENTRY_CHUNK as usize]> {
        ENTRIES.get(c)
    }
    #[inline(always)]
    fn nodes(&self, c: u32) -> Option<&[u16; NODE_CHUNK as usize]> {
        NODES.get(c)
    }
    #[inline(always)]
    fn classes(&self, c: u32) -> Option<&[u64; CLASS_CHUNK as usize]> {
        CLASSES.get(c)
    }
    #[inline(always)]
    fn ranges(&self, c: u32) -> Option<&[Range; RANGE_CHUNK as usize]> {
        RANGES.get(c)
    }
}

/// The direct tables' root and key for an address of `family` (4 or 6)
/// given as two big-endian halves, IPv4 in the top 32 bits of `hi`:
/// `(0, (0, address))` or `(1, (hi, lo))`, chosen without a branch.
#[inline(always)]
fn key(family: u32, hi: u64, lo: u64) -> (u32, u64, u64) {
    let v4 = (u64::from(family ^ 4).wrapping_sub(1) >> 63).wrapping_neg();
    ((!v4 & 1) as u32, hi & !v4, (lo & !v4) | ((hi >> 32) & v4))
}

/// The ip-set bits of the address `(hi, lo)` of `family` in the direct
/// tables: the same lookup as the source's, as a global BPF function
/// (verified once, on its own) for the destination, which only some
/// rulesets read. The source's is inlined: a BPF-to-BPF call returns
/// through the kernel's return thunk, which costs several ns on CPUs
/// that need one (this VM's AMD, with "Safe RET").
#[no_mangle]
#[inline(never)]
pub extern "C" fn rctl_lookup(family: u32, hi: u64, lo: u64) -> u64 {
    let (root, hi, lo) = key(family, hi, lo);
    dir::lookup(&Maps, root, hi, lo)
}

/// How a program variant looks sources up.
pub(crate) const TABLES: u8 = 0;
/// See [`TABLES`].
pub(crate) const TRIE: u8 = 1;
/// No lookup at all (every source in no ip set): the benchmark's measure
/// of the work every variant shares.
pub(crate) const NONE: u8 = 2;

/// The ip-set bits of the address `(hi, lo)` of `family` (IPv4 in the
/// top 32 bits of `hi`), looked up as `L` says; `source` for the source
/// (the lookup inlined), else through [`rctl_lookup`].
#[inline(always)]
pub(crate) fn sets<const L: u8>(family: u32, hi: u64, lo: u64, source: bool) -> u64 {
    match L {
        TABLES if source => {
            let (root, hi, lo) = key(family, hi, lo);
            dir::lookup(&Maps, root, hi, lo)
        }
        TABLES => rctl_lookup(family, hi, lo),
        TRIE if family == 4 => V4
            .get(Key::new(32, ((hi >> 32) as u32).to_be_bytes()))
            .copied()
            .unwrap_or(0),
        TRIE => {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&hi.to_be_bytes());
            key[8..].copy_from_slice(&lo.to_be_bytes());
            V6.get(Key::new(128, key)).copied().unwrap_or(0)
        }
        _ => 0,
    }
}
