//! Building the program's prefix tables: the direct tables of
//! [`rctl_common::dir`] from the address space cut into intervals.
//!
//! Each family's space is a sorted list of intervals (a start and the
//! membership bits of every address up to the next start). The root
//! table splits the space into `2^k` blocks by the address's top `k` bits
//! (`k` grows with the number of intervals: [`DirConfig`]); each block
//! becomes a leaf (one interval covers it), a node (at most 16 intervals,
//! whose starts differ only in 16 bits), a child table (more intervals,
//! or starts spread wider than a node holds: the child's stride is sized
//! to the block's intervals, and narrow where they cluster, as IPv6
//! prefixes do), or a binary search over the block's intervals (the
//! fallback where a table would cost more memory than it saves).

use rctl_common::dir::{
    self, Chunks, Range, CLASS_CHUNK, ENTRY_CHUNK, FILTER_CHUNK, INLINE_CLASSES, MAX_DEPTH,
    MAX_SEARCH, MAX_STRIDE, NODE, NODE_CHUNK, NODE_MAX, RANGE_CHUNK,
};
use std::collections::HashMap;
use std::net::IpAddr;

/// How the tables are sized (the default: from the number of intervals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirConfig {
    /// Root bits of IPv4 (`None`: from the number of intervals, see
    /// [`DirConfig::root_bits`]).
    pub v4_root_bits: Option<u32>,
    /// Root bits of IPv6, likewise.
    pub v6_root_bits: Option<u32>,
    /// How many root entries per interval, as a power of two: the root
    /// of `n` intervals has `2^(ceil(log2 n) + root_extra)` entries (then
    /// clamped).
    pub root_extra: u32,
    /// Filter bits of IPv4 (`None`: from the number of intervals, see
    /// [`DirConfig::filter_bits`]; `Some(0)`: no filter).
    pub v4_filter_bits: Option<u32>,
    /// Filter bits of IPv6, likewise.
    pub v6_filter_bits: Option<u32>,
}

impl DirConfig {
    /// The root bits for `n` intervals of a `width`-bit family: IPv4 from
    /// 8 to 24 bits, IPv6 from 8 to 16 (IPv6 prefixes cluster: the tables
    /// below the root zoom in where they do).
    pub fn root_bits(&self, n: usize, width: u32) -> u32 {
        let max = if width == 32 { 24 } else { 16 };
        let given = [self.v6_root_bits, self.v4_root_bits][usize::from(width == 32)];
        given.unwrap_or_else(|| (log2_ceil(n) + self.root_extra).clamp(8, max))
    }

    /// The filter bits for `n` intervals of a `width`-bit family: four
    /// bits per interval (128 KiB for 100,000 prefixes, a bitmap that
    /// mostly stays cached and in which most blocks hold no prefix; 1 MiB
    /// for 1,000,000), from 10 to 24 bits: the best of 16 to 24 in the
    /// benchmark. A filter in which most blocks hold prefixes is dropped.
    pub fn filter_bits(&self, n: usize, width: u32) -> u32 {
        let given = [self.v6_filter_bits, self.v4_filter_bits][usize::from(width == 32)];
        given.unwrap_or_else(|| (log2_ceil(n) + 2).clamp(10, 24))
    }
}

fn log2_ceil(n: usize) -> u32 {
    n.max(1).next_power_of_two().trailing_zeros()
}

/// The direct tables of both families.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DirTables {
    /// Entries: 0 is the IPv4 root, 1 the IPv6 root, 2 and 3 their
    /// filters, then the tables.
    pub entries: Vec<u64>,
    /// The filters' bitmaps.
    pub filter: Vec<u64>,
    /// Nodes, each aligned to its size.
    pub nodes: Vec<u16>,
    /// Each class's membership bits (class 0: none).
    pub classes: Vec<u64>,
    /// The intervals of the blocks that are searched.
    pub ranges: Vec<Range>,
    /// The IPv4 root's bits.
    pub v4_root_bits: u32,
    /// The IPv6 root's bits.
    pub v6_root_bits: u32,
    /// The IPv4 filter's bits (0: none).
    pub v4_filter_bits: u32,
    /// The IPv6 filter's bits (0: none).
    pub v6_filter_bits: u32,
}

/// One interval: its start and class.
type Iv = (u128, u32);

struct Builder {
    entries: Vec<u64>,
    filter: Vec<u64>,
    /// Nodes by size (4, 8, 16 intervals), laid out largest first at the
    /// end so that each stays aligned to its size without padding.
    nodes: [Vec<u16>; 3],
    ranges: Vec<Range>,
    classes: Vec<u64>,
}

impl DirTables {
    /// Builds the tables from each family's intervals: sorted `(start,
    /// bits)` pairs, the first starting at 0 (IPv4 starts below 2^32).
    pub fn build(v4: &[(u128, u64)], v6: &[(u128, u64)], cfg: &DirConfig) -> DirTables {
        let mut class_of: HashMap<u64, u32> = HashMap::from([(0, 0)]);
        let mut classes = vec![0u64];
        let mut intern = |ivs: &[(u128, u64)]| -> Vec<Iv> {
            ivs.iter()
                .map(|&(s, bits)| {
                    let n = classes.len() as u32;
                    let c = *class_of.entry(bits).or_insert_with(|| {
                        classes.push(bits);
                        n
                    });
                    (s, c)
                })
                .collect()
        };
        let (i4, i6) = (intern(v4), intern(v6));
        let mut b = Builder {
            entries: vec![0; 4],
            filter: Vec::new(),
            nodes: Default::default(),
            ranges: Vec::new(),
            classes,
        };
        let k4 = cfg.root_bits(i4.len(), 32);
        let k6 = cfg.root_bits(i6.len(), 128);
        b.entries[0] = b.root(&i4, 32, k4);
        b.entries[1] = b.root(&i6, 128, k6);
        let f4 = b.filter(&i4, 32, cfg.filter_bits(i4.len(), 32));
        let f6 = b.filter(&i6, 128, cfg.filter_bits(i6.len(), 128));
        b.entries[2] = f4.0;
        b.entries[3] = f6.0;
        let mut d = b.finish(k4, k6);
        (d.v4_filter_bits, d.v6_filter_bits) = (f4.1, f6.1);
        d
    }

    /// The membership bits of `ip` (IPv4-mapped IPv6 counts as IPv4), by
    /// the lookup the program runs.
    pub fn lookup(&self, ip: IpAddr) -> u64 {
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(a) => dir::lookup(self, 0, 0, u64::from(u32::from(a))),
            IpAddr::V6(a) => {
                let a = u128::from(a);
                dir::lookup(self, 1, (a >> 64) as u64, a as u64)
            }
        }
    }

    /// How many entries of each kind the tables hold (the roots included):
    /// `[leaves, nodes, tables, searches, inline]`.
    pub fn kinds(&self) -> [usize; 5] {
        let mut k = [0; 5];
        // Padding past the last table holds leaves of class 0 too; count
        // only what the tables reach.
        let mut stack = vec![self.entries[0], self.entries[1]];
        while let Some(e) = stack.pop() {
            k[dir::kind(e) as usize] += 1;
            if dir::kind(e) == dir::TABLE {
                let base = e as u32 as usize;
                let n = 1usize << ((e >> 40) & 0x1f);
                stack.extend_from_slice(&self.entries[base..base + n]);
            }
        }
        k
    }

    /// Bytes of map memory the tables take (whole chunks).
    pub fn memory(&self) -> usize {
        (self.entries.len() + self.filter.len() + self.classes.len()) * 8
            + self.nodes.len() * 2
            + self.ranges.len() * 24
    }

    /// The filters cut into map values (chunks of 4 KiB).
    pub fn filter_chunks(&self) -> impl Iterator<Item = [u64; FILTER_CHUNK as usize]> + '_ {
        chunks(&self.filter)
    }

    /// The tables cut into map values (chunks of 4 KiB).
    pub fn entry_chunks(&self) -> impl Iterator<Item = [u64; ENTRY_CHUNK as usize]> + '_ {
        chunks(&self.entries)
    }

    /// See [`DirTables::entry_chunks`].
    pub fn node_chunks(&self) -> impl Iterator<Item = [u16; NODE_CHUNK as usize]> + '_ {
        chunks(&self.nodes)
    }

    /// See [`DirTables::entry_chunks`].
    pub fn class_chunks(&self) -> impl Iterator<Item = [u64; CLASS_CHUNK as usize]> + '_ {
        chunks(&self.classes)
    }

    /// See [`DirTables::entry_chunks`].
    pub fn range_chunks(&self) -> impl Iterator<Item = [Range; RANGE_CHUNK as usize]> + '_ {
        chunks(&self.ranges)
    }
}

/// `v` cut into arrays of `N`, the last padded with defaults.
fn chunks<T: Copy + Default, const N: usize>(v: &[T]) -> impl Iterator<Item = [T; N]> + '_ {
    v.chunks(N).map(|c| {
        let mut a = [T::default(); N];
        a[..c.len()].copy_from_slice(c);
        a
    })
}

/// The lookup reads the vectors as the program reads its maps. Every
/// vector is padded to whole chunks by [`Builder::finish`].
impl Chunks for DirTables {
    fn filter(&self, c: u32) -> Option<&[u64; FILTER_CHUNK as usize]> {
        chunk(&self.filter, c)
    }
    fn entries(&self, c: u32) -> Option<&[u64; ENTRY_CHUNK as usize]> {
        chunk(&self.entries, c)
    }
    fn nodes(&self, c: u32) -> Option<&[u16; NODE_CHUNK as usize]> {
        chunk(&self.nodes, c)
    }
    fn classes(&self, c: u32) -> Option<&[u64; CLASS_CHUNK as usize]> {
        chunk(&self.classes, c)
    }
    fn ranges(&self, c: u32) -> Option<&[Range; RANGE_CHUNK as usize]> {
        chunk(&self.ranges, c)
    }
}

fn chunk<T, const N: usize>(v: &[T], c: u32) -> Option<&[T; N]> {
    let at = c as usize * N;
    v.get(at..at + N)?.try_into().ok()
}

impl Builder {
    /// A filter of `bits` bits over the intervals `ivs` of a `width`-bit
    /// family: one bit per block, set when the block holds an address in
    /// some ip set; its descriptor entry and its bits (0 when the filter
    /// would not help: most blocks set).
    fn filter(&mut self, ivs: &[Iv], width: u32, bits: u32) -> (u64, u32) {
        if bits == 0 || ivs.len() <= 1 {
            return (0, 0);
        }
        // The blocks of ip-set addresses: (first, last) of each interval
        // in some set.
        let set_blocks: Vec<(u128, u128)> = ivs
            .iter()
            .enumerate()
            .filter(|(_, iv)| iv.1 != 0)
            .map(|(i, &(start, _))| (start, ivs.get(i + 1).map_or(ones(width), |n| n.0 - 1)))
            .collect();
        let (Some(first), Some(last)) = (set_blocks.first(), set_blocks.last()) else {
            return (0, 0);
        };
        // The filter indexes the bits right below the prefix every listed
        // address shares (for IPv6 lists clustered in a /32, the bits
        // after it: indexing the top bits would put the whole cluster in
        // one block). An address outside that prefix is in no set, so
        // whatever bit it reads, no listed address is stopped.
        let common = ((first.0 ^ last.1) << (128 - width))
            .leading_zeros()
            .min(width);
        let bits = bits.min(width - common);
        if bits == 0 {
            return (0, 0);
        }
        let shift = width - common - bits;
        let block = |a: u128| ((a >> shift) & ones(bits)) as usize;
        let mut map = vec![0u64; (1usize << bits).div_ceil(64)];
        for &(start, end) in &set_blocks {
            for b in block(start)..=block(end) {
                map[b / 64] |= 1 << (b % 64);
            }
        }
        let set: u32 = map.iter().map(|w| w.count_ones()).sum();
        if u64::from(set) * 2 > 1u64 << bits {
            return (0, 0);
        }
        let offset = self.filter.len() as u32;
        self.filter.extend(map);
        (dir::filter(offset, shift, bits), bits)
    }

    /// The root entry of a family of `width` bits: a table of `2^k`
    /// entries (a leaf when one interval covers everything).
    fn root(&mut self, ivs: &[Iv], width: u32, k: u32) -> u64 {
        if ivs.len() <= 1 {
            return dir::leaf(ivs.first().map_or(0, |iv| iv.1));
        }
        self.table(0, width, ivs, k, 0)
    }

    /// A table of stride `s` over the block `[lo, lo + 2^bits)`, whose
    /// intervals are `ivs` (the first holds `lo`; the others start inside
    /// the block), at `depth` tables below the root.
    fn table(&mut self, lo: u128, bits: u32, ivs: &[Iv], s: u32, depth: u32) -> u64 {
        let base = self.entries.len();
        self.entries.resize(base + (1 << s), 0);
        let child_bits = bits - s;
        // Intervals i..j hold the current child's addresses: i the one
        // holding its first address.
        let (mut i, mut j) = (0, 1);
        for c in 0..1u128 << s {
            let first = lo + (c << child_bits);
            let last = first | ones(child_bits);
            while i + 1 < ivs.len() && ivs[i + 1].0 <= first {
                i += 1;
            }
            j = j.max(i + 1);
            while j < ivs.len() && ivs[j].0 <= last {
                j += 1;
            }
            let e = self.block(first, child_bits, &ivs[i..j], depth + 1);
            self.entries[base + c as usize] = e;
        }
        dir::table(base as u32, child_bits, s)
    }

    /// The entry of the block `[lo, lo + 2^bits)` whose intervals are
    /// `ivs`, at `depth` tables below the root.
    fn block(&mut self, lo: u128, bits: u32, ivs: &[Iv], depth: u32) -> u64 {
        if ivs.len() == 1 {
            return dir::leaf(ivs[0].1);
        }
        let inner = &ivs[1..];
        // The lowest bit any inner start sets: a node's digits start there.
        let p = inner
            .iter()
            .map(|iv| (iv.0 - lo).trailing_zeros())
            .min()
            .unwrap_or(0);
        let n = ivs.len();
        let few = n <= NODE_MAX as usize;
        if n <= 3 && bits <= p + 16 && ivs.iter().all(|iv| iv.1 < INLINE_CLASSES) {
            let digit = |a: u128| ((a >> p) & 0xffff) as u16;
            let (d1, c1) = (digit(ivs[1].0), ivs[1].1);
            let (d2, c2) = ivs.get(2).map_or((d1, c1), |iv| (digit(iv.0), iv.1));
            return dir::inline(p, d1, d2, [ivs[0].1, c1, c2]);
        }
        if few && bits <= p + 16 && ivs.iter().all(|iv| iv.1 <= u32::from(u16::MAX)) {
            return self.node(lo, p, ivs);
        }
        // The inner starts differ only in their low `spread` bits: a table
        // of stride `zoom` puts them all in one child (a cluster). A table
        // of stride `to_nodes` makes children narrow enough for nodes.
        let (first, last) = (inner[0].0 - lo, inner[n - 2].0 - lo);
        let spread = 128 - (first ^ last).leading_zeros();
        let zoom = bits - spread;
        let to_nodes = bits.saturating_sub(p + 16);
        // About two entries per interval, 256 at least.
        let budget = (log2_ceil(n) + 1).clamp(8, MAX_STRIDE).min(bits);
        let stride = if few {
            // Too wide for a node: one cheap table that makes children
            // narrow enough, or that zooms in on the starts; else a search
            // over these few intervals.
            if (1..=8).contains(&to_nodes) {
                Some(to_nodes)
            } else if (1..=8).contains(&zoom) && spread <= p + 16 {
                Some(zoom)
            } else {
                None
            }
        } else if zoom >= 8 {
            Some(zoom.min(budget))
        } else if to_nodes <= budget {
            Some(budget)
        } else if to_nodes <= budget + 2 {
            Some(to_nodes)
        } else {
            Some(budget)
        };
        match stride {
            Some(s) if depth + 1 < MAX_DEPTH || n - 1 > MAX_SEARCH as usize => {
                self.table(lo, bits, ivs, s, depth)
            }
            _ => self.search(ivs),
        }
    }

    /// A node for the block at `lo` whose intervals are `ivs` (at most
    /// 16), with digits at bit `p`.
    fn node(&mut self, lo: u128, p: u32, ivs: &[Iv]) -> u64 {
        let size_log = log2_ceil(ivs.len()).max(2);
        let size = 1usize << size_log;
        let region = &mut self.nodes[size_log as usize - 2];
        let offset = region.len();
        let digit = |a: u128| ((a >> p) & 0xffff) as u16;
        let last = ivs[ivs.len() - 1];
        // Starts (the first is the block's own: never read), padded with
        // the last interval; then the classes, likewise.
        let starts = ivs
            .iter()
            .enumerate()
            .map(|(i, iv)| digit(if i == 0 { lo } else { iv.0 }));
        region.extend(starts.chain(std::iter::repeat(digit(last.0))).take(size));
        let classes = ivs.iter().map(|iv| iv.1 as u16);
        region.extend(classes.chain(std::iter::repeat(last.1 as u16)).take(size));
        dir::node(offset as u32, size_log, p)
    }

    /// A binary search over `ivs` (the fallback layout).
    fn search(&mut self, ivs: &[Iv]) -> u64 {
        let first = self.ranges.len() as u32;
        self.ranges.extend(ivs.iter().map(|&(s, c)| Range {
            start_hi: (s >> 64) as u64,
            start_lo: s as u64,
            bits: self.classes[c as usize],
        }));
        dir::search(first, (ivs.len() - 1) as u32)
    }

    /// Lays the nodes out (64-byte ones first, then 32, then 16: each
    /// aligned to its size), moves node entries to their place, and pads
    /// every array to whole chunks.
    fn finish(mut self, k4: u32, k6: u32) -> DirTables {
        let mut nodes = Vec::new();
        let mut base = [0u32; 3];
        for size_log in (0..3).rev() {
            base[size_log] = nodes.len() as u32;
            nodes.extend_from_slice(&self.nodes[size_log]);
        }
        for e in &mut self.entries {
            if dir::kind(*e) == NODE {
                let size_log = ((*e >> 40) & 7) as usize;
                *e += u64::from(base[size_log - 2]);
            }
        }
        pad(&mut self.entries, ENTRY_CHUNK);
        pad(&mut self.filter, FILTER_CHUNK);
        pad(&mut nodes, NODE_CHUNK);
        pad(&mut self.classes, CLASS_CHUNK);
        pad(&mut self.ranges, RANGE_CHUNK);
        DirTables {
            entries: self.entries,
            filter: self.filter,
            nodes,
            classes: self.classes,
            ranges: self.ranges,
            v4_root_bits: k4,
            v6_root_bits: k6,
            v4_filter_bits: 0,
            v6_filter_bits: 0,
        }
    }
}

/// Pads `v` with defaults to a non-zero multiple of `n`.
fn pad<T: Default + Clone>(v: &mut Vec<T>, n: u32) {
    let n = n as usize;
    let len = v.len().max(1).div_ceil(n) * n;
    v.resize(len, T::default());
}

/// `bits` one bits.
fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}
