//! The lowering's own contracts, checked on small inputs whose answers
//! are worked out by hand: the address space cut into intervals, the
//! site filter, and each limiter's key and ban.

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

/// `width`-bit intervals: `n` random starts with random bits of 4.
fn random_intervals(seed: u64, n: usize, width: u32) -> Vec<(u128, u64)> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
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
