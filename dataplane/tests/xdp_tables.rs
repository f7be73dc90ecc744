//! The XDP lowering's address tables (the program's direct tables, through
//! the lookup user space shares with the program, and the LPM-trie entries)
//! and the engine's `PrefixTable`, checked against an
//! oracle that shares no code with them: membership computed in this file
//! from the CIDR text with integer arithmetic, at every prefix's first and
//! last address and one either side. The XDP parity tests compare the
//! program with the engine, and both are built from `PrefixTable`, so an
//! off-by-one at an interval end there passes them; it fails here. No root
//! needed: `DirTables::lookup` runs the program's lookup code
//! (`rctl_common::dir`) in user space. The direct tables are also built
//! straight from interval lists of many shapes and sizings and checked
//! against a binary search over those intervals. A test of this crate, so
//! that a mutation run of the tables builds this crate and not the CLI.

use rctl_compiler::cidr::{parse_cidr, PrefixSet};
use rctl_compiler::ir::IpSet;
use rctl_dataplane::iptable::PrefixTable;
use rctl_dataplane::xdp::Tables;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// xorshift64: a seeded, reproducible stream of draws.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One CIDR as the oracle reads it: family, first and last address.
#[derive(Clone, Copy, Debug)]
struct Block {
    v4: bool,
    first: u128,
    last: u128,
}

/// Parses `a/len` with the standard library only.
fn block(text: &str) -> Block {
    let (a, l) = text.split_once('/').expect("a/len");
    let len: u32 = l.parse().expect("a length");
    let (v4, addr, width) = match a.parse::<IpAddr>().expect("an address") {
        IpAddr::V4(x) => (true, u128::from(u32::from(x)), 32),
        IpAddr::V6(x) => (false, u128::from(x), 128),
    };
    let host = if len == 0 {
        u128::MAX >> (128 - width)
    } else {
        (1u128 << (width - len)) - 1
    };
    Block {
        v4,
        first: addr & !host,
        last: (addr & !host) | host,
    }
}

/// A random ruleset's sets: for each rule, its CIDRs as text. The sets
/// nest and overlap (a few clustered regions), and some touch the ends of
/// the address spaces.
fn random_sets(r: &mut Rng, rules: usize) -> Vec<Vec<String>> {
    let v4_regions = [0x0a00_0000u32, 0xc0a8_0000, 0xc633_6400];
    let v6_regions = [0x2001_0db8u128 << 96, 0x2a02_0000u128 << 96];
    (0..rules)
        .map(|i| {
            let mut c = Vec::new();
            for _ in 0..40 {
                let base = match r.next() % 3 {
                    0 => r.next() as u32,
                    k => v4_regions[(k as usize + i) % 3] | (r.next() as u32 & 0x00ff_ffff),
                };
                let len = 8 + (r.next() % 25) as u32;
                let net = base & (u32::MAX << (32 - len));
                c.push(format!("{}/{len}", Ipv4Addr::from(net)));
            }
            for _ in 0..20 {
                let base = match r.next() % 2 {
                    0 => (u128::from(r.next()) << 64 | u128::from(r.next())) | 1u128 << 125,
                    _ => {
                        v6_regions[i % 2]
                            | (u128::from(r.next()) << 32 | u128::from(r.next() >> 32))
                    }
                };
                let len = 16 + (r.next() % 113) as u32;
                let net = base & (u128::MAX << (128 - len));
                c.push(format!("{}/{len}", Ipv6Addr::from(net)));
            }
            // The ends of both spaces, for some rules.
            if i % 3 == 0 {
                c.extend(["0.0.0.0/32", "255.255.255.254/31", "::/120"].map(String::from));
            }
            if i % 3 == 1 {
                c.extend(["255.255.255.255/32", "ffff:ffff::/32", "::1/128"].map(String::from));
            }
            c
        })
        .collect()
}

/// Every prefix's first and last address and one either side (within the
/// family), plus some random ones.
fn probes(sets: &[Vec<String>], r: &mut Rng) -> Vec<(bool, u128)> {
    let mut out = Vec::new();
    for b in sets.iter().flatten().map(|c| block(c)) {
        let max = if b.v4 {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        for a in [b.first, b.last] {
            out.push((b.v4, a));
            out.extend(a.checked_sub(1).map(|x| (b.v4, x)));
            out.extend(a.checked_add(1).filter(|&x| x <= max).map(|x| (b.v4, x)));
        }
    }
    for _ in 0..2_000 {
        out.push((true, u128::from(r.next() as u32)));
        out.push((false, u128::from(r.next()) << 64 | u128::from(r.next())));
    }
    out.extend([
        (true, 0),
        (true, u128::from(u32::MAX)),
        (false, 0),
        (false, u128::MAX),
    ]);
    out
}

/// The oracle: the rules whose CIDRs hold the address, as a bit mask by
/// rule.
fn oracle(sets: &[Vec<Block>], v4: bool, a: u128) -> u64 {
    sets.iter()
        .enumerate()
        .filter(|(_, bs)| bs.iter().any(|b| b.v4 == v4 && b.first <= a && a <= b.last))
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// A longest-prefix match over trie entries, as the kernel's LPM trie does.
fn lpm(entries: &HashMap<(u128, u8), u64>, width: u32, a: u128) -> u64 {
    (0..=width)
        .rev()
        .find_map(|l| {
            let mask = if l == 0 {
                0
            } else {
                u128::MAX << (128 - l) >> (128 - width)
            };
            entries.get(&(a & mask, l as u8)).copied()
        })
        .unwrap_or(0)
}

/// Runs every check for one ruleset of `sets` (a rule per set).
fn check(sets: &[Vec<String>], r: &mut Rng) {
    let mut src = String::new();
    for (i, cidrs) in sets.iter().enumerate() {
        src += &format!(
            "rule r{i} {{ when ip in {{ {} }} drop }}\n",
            cidrs.join(", ")
        );
    }
    let c = rctl_compiler::compile_str("t.rctl", &src, &Default::default());
    let rs = c
        .ruleset
        .unwrap_or_else(|| panic!("compiles: {:?}", c.diagnostics));
    let t = Tables::new(&rs, None).unwrap();
    // Rule i's set has the bit its single term tests.
    assert_eq!(t.terms.len(), sets.len());
    let bit_of: Vec<u64> = t.terms.iter().map(|e| e.set_pos).collect();
    for (i, e) in t.terms.iter().enumerate() {
        assert_eq!(e.rule as usize, i);
        assert_eq!(e.set_pos.count_ones(), 1, "rule {i}: one address bit");
    }
    let to_bits = |by_rule: u64| {
        (0..sets.len())
            .filter(|&i| by_rule & 1 << i != 0)
            .fold(0, |m, i| m | bit_of[i])
    };
    let blocks: Vec<Vec<Block>> = sets
        .iter()
        .map(|cs| cs.iter().map(|c| block(c)).collect())
        .collect();
    let mut l4 = HashMap::new();
    for &(p, l, b) in &t.v4 {
        let key = (u128::from(u32::from_be_bytes(p)), l);
        assert!(l4.insert(key, b).is_none(), "duplicate trie key {key:?}");
    }
    let mut l6 = HashMap::new();
    for &(p, l, b) in &t.v6 {
        let key = (u128::from_be_bytes(p), l);
        assert!(l6.insert(key, b).is_none(), "duplicate trie key {key:?}");
    }
    let engine_sets: Vec<IpSet> = sets
        .iter()
        .map(|cs| IpSet {
            name: "t".into(),
            prefixes: PrefixSet::from_cidrs(cs.iter().map(|c| parse_cidr(c).unwrap().0)),
        })
        .collect();
    let table = PrefixTable::new(&engine_sets);
    let probes = probes(sets, r);
    for &(v4, a) in &probes {
        let want = oracle(&blocks, v4, a);
        let (trie, ip) = if v4 {
            (lpm(&l4, 32, a), IpAddr::V4(Ipv4Addr::from(a as u32)))
        } else {
            (lpm(&l6, 128, a), IpAddr::V6(Ipv6Addr::from(a)))
        };
        let mapped = matches!(ip, IpAddr::V6(x) if x.to_ipv4_mapped().is_some());
        // The program looks an IPv4-mapped address up as its IPv4 address
        // (tests/xdp_dir.rs checks that); here the oracle reads IPv6 text.
        if !mapped {
            assert_eq!(t.dir.lookup(ip), to_bits(want), "direct tables at {ip}");
        }
        assert_eq!(trie, to_bits(want), "LPM entries at {ip}");
        // The engine's table, by set index (= rule index here).
        let engine = table.lookup(ip).iter().fold(0u64, |m, &s| m | 1 << s);
        if !mapped {
            assert_eq!(engine, want, "PrefixTable at {ip}");
        }
    }
}

#[test]
fn xdp_tables_agree_with_membership_from_the_cidrs() {
    let mut r = Rng(0x16b0_0001);
    for rules in [1, 2, 6] {
        let sets = random_sets(&mut r, rules);
        check(&sets, &mut r);
    }
}

#[test]
fn adjacent_and_nested_prefixes_keep_their_ends() {
    // Neighbours that touch (10.0.0.0/25 and 10.0.0.128/25), a /32 at a /24's
    // last address, and one-address gaps.
    let sets = vec![
        vec![
            "10.0.0.0/25".into(),
            "10.0.1.255/32".into(),
            "2001:db8::/127".into(),
        ],
        vec![
            "10.0.0.128/25".into(),
            "10.0.1.0/24".into(),
            "2001:db8::2/128".into(),
        ],
        vec![
            "10.0.0.127/32".into(),
            "10.0.2.1/32".into(),
            "2001:db8::1/128".into(),
        ],
    ];
    check(&sets, &mut Rng(7));
}

/// Intervals as `DirTables::build` takes them: sorted unique starts from
/// 0, each with its membership bits.
type Intervals = Vec<(u128, u64)>;

/// `n` interval starts of a `width`-bit space in one of several shapes,
/// with bits from `classes` distinct values (0 among them).
fn shaped(r: &mut Rng, shape: u64, n: usize, width: u32, classes: u64) -> Intervals {
    let max = u128::MAX >> (128 - width);
    let word = |r: &mut Rng| (u128::from(r.next()) << 64 | u128::from(r.next())) & max;
    // A cluster: starts within `2^spread` of a random base, on multiples
    // of `2^align` (nodes, inline entries and child tables are cut by
    // where the starts' differing bits lie).
    let spread = 4 + (r.next() % u64::from(width - 4)) as u32;
    let align = (r.next() % u64::from(spread.min(24))) as u32;
    let base = word(r) & !(u128::MAX >> (128 - spread));
    let mut starts: Vec<u128> = (0..n)
        .map(|_| match shape {
            // Anywhere.
            0 => word(r),
            // One cluster.
            1 => base + ((word(r) & (u128::MAX >> (128 - spread))) & !((1u128 << align) - 1)),
            // A few tight clusters: crowded blocks beside empty ones.
            _ => {
                let c = (r.next() % 4) as u128;
                (base ^ (c << (width - 3))).wrapping_add(word(r) & 0xff)
            }
        })
        .filter(|&s| s <= max)
        .collect();
    starts.push(0);
    starts.sort_unstable();
    starts.dedup();
    let bits = |r: &mut Rng| match r.next() % classes {
        0 => 0,
        k => k * 0x9e37 + 1,
    };
    starts.into_iter().map(|s| (s, bits(r))).collect()
}

/// The oracle for the direct tables: the bits of the last interval that
/// starts at or below `a`, by binary search over the intervals.
fn search(ivs: &Intervals, a: u128) -> u64 {
    let i = ivs.partition_point(|&(s, _)| s <= a);
    ivs[i - 1].1
}

/// Every start and its neighbours, the family's ends and random addresses.
fn interval_probes(r: &mut Rng, ivs: &Intervals, width: u32) -> Vec<u128> {
    let max = u128::MAX >> (128 - width);
    let mut out = vec![0, max];
    for &(s, _) in ivs {
        out.push(s);
        out.extend(s.checked_sub(1));
        out.extend(s.checked_add(1).filter(|&x| x <= max));
    }
    for _ in 0..500 {
        out.push((u128::from(r.next()) << 64 | u128::from(r.next())) & max);
    }
    out
}

/// The direct tables answer as a search over the intervals they were
/// built from, for every shape of layout and every way of sizing them:
/// the root's bits from 8 up, more root entries per interval, filters
/// forced on, sized or off, few and many classes (inline entries hold
/// only the first 128). The builder's choice of entry (leaf, inline,
/// node, child table, search) changes only speed; a wrong choice or a
/// wrong digit changes an answer here.
#[test]
fn direct_tables_answer_as_a_search_over_their_intervals() {
    use rctl_dataplane::xdp::dir::{DirConfig, DirTables};
    let mut r = Rng(0xd1_7ab1e5);
    let configs = [
        DirConfig::default(),
        DirConfig {
            v4_root_bits: Some(8),
            v6_root_bits: Some(8),
            v4_filter_bits: Some(0),
            v6_filter_bits: Some(0),
            ..DirConfig::default()
        },
        DirConfig {
            v4_root_bits: Some(16),
            v6_root_bits: Some(12),
            v4_filter_bits: Some(18),
            v6_filter_bits: Some(20),
            ..DirConfig::default()
        },
        DirConfig {
            root_extra: 3,
            ..DirConfig::default()
        },
    ];
    let mut kinds = [0usize; 5];
    for round in 0..48u64 {
        let n = [1, 2, 3, 5, 9, 17, 40, 300, 3_000][(r.next() % 9) as usize];
        let classes = [2, 5, 200, 1_000][(round % 4) as usize];
        let v4 = shaped(&mut r, round % 3, n, 32, classes);
        let v6 = shaped(&mut r, (round / 3) % 3, n, 128, classes);
        let cfg = &configs[(round / 9 % 4) as usize];
        let d = DirTables::build(&v4, &v6, cfg);
        for (k, c) in kinds.iter_mut().zip(d.kinds()) {
            *k += c;
        }
        for a in interval_probes(&mut r, &v4, 32) {
            let ip = IpAddr::V4(Ipv4Addr::from(a as u32));
            assert_eq!(
                d.lookup(ip),
                search(&v4, a),
                "{ip} ({cfg:?}, {n} intervals)"
            );
        }
        for a in interval_probes(&mut r, &v6, 128) {
            let ip = Ipv6Addr::from(a);
            if ip.to_ipv4_mapped().is_some() {
                continue;
            }
            let got = d.lookup(IpAddr::V6(ip));
            assert_eq!(got, search(&v6, a), "{ip} ({cfg:?}, {n} intervals)");
        }
    }
    // Every kind of entry was built: leaves, nodes, tables, searches,
    // inline.
    assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
}
