//! The lowering's own contracts, checked on inputs whose answers are
//! worked out by hand or by a plain search over the input: the address
//! space cut into intervals, the site filter, each limiter's key and ban,
//! the direct tables' documented sizing, their filters (exact per block,
//! kept while at most half the blocks are set), and the map values that
//! hold them.

use super::dir::{DirConfig, DirTables};
use super::{intervals, Tables};
use rctl_compiler::ir::Ruleset;

fn ruleset(src: &str) -> Ruleset {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    c.ruleset
        .unwrap_or_else(|| panic!("compiles: {:?}", c.diagnostics))
}

#[test]
fn intervals_cut_the_space_at_every_edge_and_fill_the_gaps() {
    // A gap before, between and after.
    assert_eq!(
        intervals(vec![(20, 29, 2), (10, 14, 1)], 32),
        [(0, 0), (10, 1), (15, 0), (20, 2), (30, 0)]
    );
    // Neighbours that touch: no empty interval between them.
    assert_eq!(
        intervals(vec![(0, 9, 1), (10, 19, 2)], 32),
        [(0, 1), (10, 2), (20, 0)]
    );
}

#[test]
fn intervals_merge_neighbours_with_the_same_bits() {
    assert_eq!(
        intervals(vec![(0, 9, 1), (10, 19, 1), (30, 39, 0)], 32),
        [(0, 1), (20, 0)]
    );
}

#[test]
fn intervals_stop_at_the_end_of_the_family() {
    // A range up to 255.255.255.255 leaves nothing after it in IPv4.
    assert_eq!(
        intervals(vec![(0xffff_ff00, 0xffff_ffff, 1)], 32),
        [(0, 0), (0xffff_ff00, 1)]
    );
    assert_eq!(
        intervals(vec![(1 << 127, u128::MAX, 1)], 128),
        [(0, 0), (1 << 127, 1)]
    );
    // Below the end, the rest is a gap.
    assert_eq!(
        intervals(vec![(0, 0xffff_fffe, 1)], 32),
        [(0, 1), (0xffff_ffff, 0)]
    );
}

#[test]
fn only_the_rules_of_this_site_are_offloaded() {
    let rs = ruleset(
        "rule here { sites { eqiad } when ip in { 192.0.2.0/24 } drop }\n\
         rule there { sites { codfw } when ip in { 198.51.100.0/24 } drop }\n\
         rule off { enabled false when ip in { 203.0.113.0/24 } drop }\n",
    );
    let rules = |site| -> Vec<u32> {
        let t = Tables::new(&rs, site).unwrap();
        t.terms.iter().map(|e| e.rule).collect()
    };
    let idx = |name: &str| rs.rules.iter().position(|r| r.name == name).unwrap() as u32;
    assert_eq!(rules(Some("eqiad")), [idx("here")]);
    assert_eq!(rules(Some("codfw")), [idx("there")]);
    let t = Tables::new(&rs, Some("eqiad")).unwrap();
    assert_eq!(t.dir.lookup("198.51.100.1".parse().unwrap()), 0);
    assert_eq!(t.dir.lookup("203.0.113.1".parse().unwrap()), 0);
    assert_ne!(t.dir.lookup("192.0.2.1".parse().unwrap()), 0);
}

#[test]
fn a_limiter_keeps_its_prefix_lengths_and_its_ban() {
    let rs = ruleset(
        "rule p { when proto == udp throttle 100 packets per 1s burst 50 by prefix(24, 56) ban 2m }\n\
         rule a { when proto == tcp throttle 10 connections per 1s by ip }\n",
    );
    let t = Tables::new(&rs, None).unwrap();
    let by_name = |n: &str| {
        let i = rs.rules.iter().position(|r| r.name == n).unwrap();
        let k = t.limiter_rules.iter().position(|&r| r == i).unwrap();
        t.limiters[k]
    };
    let p = by_name("p");
    assert_eq!((p.v4_len, p.v6_len, p.syn_only), (24, 56, 0));
    assert_eq!(p.ban_ns, 120_000_000_000);
    assert_eq!(p.interval_ns, 10_000_000);
    let a = by_name("a");
    assert_eq!((a.v4_len, a.v6_len, a.syn_only), (32, 128, 1));
    assert_eq!(a.ban_ns, 0);
}

#[test]
fn the_tables_are_sized_as_documented() {
    let d = DirConfig::default();
    // Root: log2 of the intervals, IPv4 8 to 24 bits, IPv6 8 to 16.
    assert_eq!(d.root_bits(1, 32), 8);
    assert_eq!(d.root_bits(100_000, 32), 17);
    assert_eq!(d.root_bits(1 << 30, 32), 24);
    assert_eq!(d.root_bits(100_000, 128), 16);
    assert_eq!(d.root_bits(1_000, 128), 10);
    let extra = DirConfig { root_extra: 2, ..d };
    assert_eq!(extra.root_bits(1_000, 32), 12);
    let given = DirConfig {
        v4_root_bits: Some(20),
        v6_root_bits: Some(9),
        v4_filter_bits: Some(0),
        v6_filter_bits: Some(11),
        ..d
    };
    assert_eq!((given.root_bits(5, 32), given.root_bits(5, 128)), (20, 9));
    assert_eq!(
        (given.filter_bits(5, 32), given.filter_bits(5, 128)),
        (0, 11)
    );
    // Filter: four bits per interval, from 10 to 24 bits.
    assert_eq!(d.filter_bits(1, 32), 10);
    assert_eq!(d.filter_bits(200_000, 32), 20);
    assert_eq!(d.filter_bits(200_000, 128), 20);
    assert_eq!(d.filter_bits(1 << 30, 128), 24);
}

/// xorshift64 from `seed`: a reproducible stream of draws.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// `width`-bit intervals: `n` random starts with random bits of 4.
fn random_intervals(seed: u64, n: usize, width: u32) -> Vec<(u128, u64)> {
    let mut next = xorshift(seed);
    let mut starts: Vec<u128> = (0..n)
        .map(|_| {
            let v = (u128::from(next()) << 64) | u128::from(next());
            v >> (128 - width)
        })
        .collect();
    starts.push(0);
    starts.sort_unstable();
    starts.dedup();
    starts.into_iter().map(|s| (s, next() % 4)).collect()
}

#[test]
fn memory_is_what_the_maps_hold() {
    // Enough intervals, clustered and spread, that every kind of entry
    // is built: nodes, child tables and searches.
    let v4 = random_intervals(0x5eed, 20_000, 32);
    let mut v6 = random_intervals(0x1dea, 3_000, 128);
    v6.extend((1..4_000u128).map(|i| ((0x2001_0db8u128 << 96) + i * 4096, (i % 3) as u64)));
    v6.sort_unstable();
    v6.dedup_by_key(|x| x.0);
    let d = DirTables::build(&v4, &v6, &DirConfig::default());
    let [_, nodes, tables, searches, _] = d.kinds();
    assert!(nodes > 0 && tables > 0 && searches > 0, "{:?}", d.kinds());
    // The map values written, counted from the chunks themselves.
    fn bytes<T>(it: impl Iterator<Item = T>) -> usize {
        it.count() * std::mem::size_of::<T>()
    }
    let written = bytes(d.entry_chunks())
        + bytes(d.filter_chunks())
        + bytes(d.node_chunks())
        + bytes(d.class_chunks())
        + bytes(d.range_chunks());
    assert_eq!(d.memory(), written);
    assert!(d.memory() > 100_000, "{}", d.memory());
}

/// The filter of family `fam` (0 IPv4, 1 IPv6) of `d`, built from `ivs`,
/// checked at `probes`: where it is kept, it passes exactly the addresses
/// whose block (as its descriptor cuts the space) holds an address in
/// some set, for every address under the prefix all set addresses share.
/// Returns whether a filter was kept.
fn check_filter(d: &DirTables, ivs: &[(u128, u64)], fam: usize, probes: &[u128]) -> bool {
    let width = [32, 128][fam];
    let f = d.entries[2 + fam];
    let (bits, shift) = (((f >> 40) & 0x1f) as u32, ((f >> 32) & 0x7f) as u32);
    assert_eq!(bits, [d.v4_filter_bits, d.v6_filter_bits][fam]);
    if bits == 0 {
        return false;
    }
    let max = u128::MAX >> (128 - width);
    let set: Vec<(u128, u128)> = ivs
        .iter()
        .enumerate()
        .filter(|(_, iv)| iv.1 != 0)
        .map(|(i, &(s, _))| (s, ivs.get(i + 1).map_or(max, |n| n.0 - 1)))
        .collect();
    let common = width - shift - bits;
    let top = |a: u128| {
        if common == 0 {
            0
        } else {
            a >> (width - common)
        }
    };
    for &a in probes {
        if top(a) != top(set[0].0) {
            continue;
        }
        let low = (1u128 << shift) - 1;
        let (lo, hi) = (a & !low, a | low);
        let want = set.iter().any(|&(s, e)| s <= hi && e >= lo);
        let passes = rctl_common::dir::filter_passes(d, f, (a >> 64) as u64, a as u64);
        assert_eq!(passes, want, "{a:#x}: block [{lo:#x}, {hi:#x}]");
    }
    true
}

/// One interval of bits 1 at the start of each IPv4 block of 2^22 named
/// (a /10 each), up to `len` addresses long.
fn in_blocks(blocks: &[u32], len: u128) -> Vec<(u128, u64)> {
    let mut ivs = vec![(0u128, 0u64)];
    for &b in blocks {
        let s = u128::from(b) << 22;
        ivs.retain(|&(x, _)| x != s);
        ivs.push((s, 1));
        ivs.push((s + len, 0));
    }
    ivs.sort_unstable();
    ivs.dedup_by_key(|x| x.0);
    ivs
}

#[test]
fn a_filter_is_kept_while_at_most_half_its_blocks_hold_set_addresses() {
    let cfg = DirConfig {
        v4_filter_bits: Some(10),
        ..DirConfig::default()
    };
    let probes: Vec<u128> = (0..1024u128)
        .flat_map(|b| [b << 22, (b << 22) + 100, ((b + 1) << 22) - 1])
        .collect();
    // 512 of 1,024 blocks (the first and the last set addresses differ in
    // the top bit: the filter indexes the top ten bits).
    let half: Vec<u32> = (0..1024).step_by(2).collect();
    let ivs = in_blocks(&half, 100);
    let d = DirTables::build(&ivs, &[(0, 0)], &cfg);
    assert!(check_filter(&d, &ivs, 0, &probes));
    assert_eq!(d.v4_filter_bits, 10);
    // 513: dropped.
    let mut more = half.clone();
    more.push(1);
    let ivs = in_blocks(&more, 100);
    let d = DirTables::build(&ivs, &[(0, 0)], &cfg);
    assert!(!check_filter(&d, &ivs, 0, &probes));
    // A set interval that fills its block exactly, the next block empty:
    // the next block's addresses stop at the filter.
    let ivs = in_blocks(&[0, 5, 1000], 1 << 22);
    let d = DirTables::build(&ivs, &[(0, 0)], &cfg);
    assert!(check_filter(&d, &ivs, 0, &probes));
    assert!(!rctl_common::dir::filter_passes(
        &d,
        d.entries[2],
        0,
        6 << 22
    ));
    // One interval, or nothing in any set: no filter.
    let d = DirTables::build(&[(0, 1)], &[(0, 0)], &cfg);
    assert!(!check_filter(&d, &[(0, 1)], 0, &probes));
    let d = DirTables::build(&[(0, 0), (7, 0)], &[(0, 0)], &cfg);
    assert!(!check_filter(&d, &[(0, 0), (7, 0)], 0, &probes));
}

#[test]
fn filters_pass_exactly_the_blocks_that_hold_set_addresses() {
    let mut kept = 0;
    for seed in 1..40u64 {
        // Sparse: a few hundred short set intervals, each followed by a
        // gap, at random starts (IPv6 ones shifted down into a cluster).
        let n = 50 + (seed as usize * 37) % 400;
        let sparse = |ivs: Vec<(u128, u64)>, shift: u64, max: u128| {
            let mut out = vec![(0u128, 0u64)];
            for (s, b) in ivs.into_iter().skip(1) {
                let s = s >> shift;
                let len = 1 + (b << (seed % 24)) as u128;
                out.push((s, 1 + b % 3));
                out.extend(s.checked_add(len).filter(|&e| e <= max).map(|e| (e, 0)));
            }
            out.sort_unstable();
            out.dedup_by_key(|x| x.0);
            out
        };
        let v4 = sparse(random_intervals(seed, n, 32), 0, u128::from(u32::MAX));
        let v6 = sparse(random_intervals(seed ^ 0xabc, n, 128), seed % 40, u128::MAX);
        let cfg = DirConfig {
            v4_filter_bits: [None, Some(12), Some(16)][seed as usize % 3],
            v6_filter_bits: [None, Some(14), Some(20)][seed as usize % 3],
            ..DirConfig::default()
        };
        let d = DirTables::build(&v4, &v6, &cfg);
        for (fam, ivs) in [(0, &v4), (1, &v6)] {
            let mut probes: Vec<u128> = ivs
                .iter()
                .flat_map(|&(s, _)| [s, s.saturating_sub(1), s.saturating_add(1)])
                .collect();
            let mut next = xorshift(seed);
            probes.extend((0..300).map(|_| {
                let a = u128::from(next()) << 64 | u128::from(next());
                if fam == 0 {
                    a & 0xffff_ffff
                } else {
                    a >> (seed % 40)
                }
            }));
            kept += usize::from(check_filter(&d, ivs, fam, &probes));
        }
    }
    assert!(kept > 40, "{kept} filters kept of 78");
}

/// The vectors are whole chunks (`Builder::finish` pads them), so the
/// map values the loader writes are the vectors, in order.
#[test]
fn the_map_values_hold_the_tables_in_order() {
    let v4 = random_intervals(0x5eed, 3_000, 32);
    let v6 = random_intervals(0x1dea, 3_000, 128);
    let d = DirTables::build(&v4, &v6, &DirConfig::default());
    fn same<T: Copy + PartialEq + std::fmt::Debug, const N: usize>(
        chunks: impl Iterator<Item = [T; N]>,
        v: &[T],
    ) {
        assert_eq!(v.len() % N, 0, "a whole number of chunks");
        let flat: Vec<T> = chunks.flatten().collect();
        assert_eq!(flat, v);
    }
    assert!(!d.classes.is_empty() && !d.filter.is_empty() && !d.ranges.is_empty());
    same(d.entry_chunks(), &d.entries);
    same(d.filter_chunks(), &d.filter);
    same(d.node_chunks(), &d.nodes);
    same(d.class_chunks(), &d.classes);
    same(d.range_chunks(), &d.ranges);
}
