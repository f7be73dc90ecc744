//! The program's prefix tables (the direct tables) against an independent
//! oracle: membership computed here, straight from the CIDRs written into
//! the rules (an address is in a set when one of the set's CIDRs covers
//! it; an IPv4-mapped IPv6 address is looked up as its IPv4 address, as
//! `grammar/README.md` says). Layouts are made to hit every edge of the tables:
//! prefixes of every length at and around each root size's level split,
//! the default route, overlapping prefixes of every length, crowded blocks
//! (nodes of 4, 8 and 16 intervals, child tables), IPv6 clusters, and
//! scattered long IPv6 prefixes (the binary-search fallback). Probes are
//! every CIDR's first and last address and their neighbours, every block
//! edge near them, and random addresses.
//!
//! The lookup user space runs (the same code as the program's) is checked
//! always; the program itself, through BPF_PROG_TEST_RUN, as root.

use rctl_compiler::ir::Proto;
use rctl_dataplane::xdp::dir::DirConfig;
use rctl_dataplane::xdp::Tables;
use rctl_loader::XdpProgram;
use rctl_testkit::frame::frame;
use rctl_testkit::xdp::object;
use rctl_testkit::Rng;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A CIDR as the test wrote it: (is IPv4, network, length).
type Cidr = (bool, u128, u32);

/// Sets of CIDRs, and the rules that drop set `i` on port `1000 + i`.
struct Layout {
    sets: Vec<Vec<Cidr>>,
}

fn mask(len: u32, width: u32) -> u128 {
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    all & !all.checked_shr(len).unwrap_or(0)
}

impl Layout {
    fn add(&mut self, set: usize, v4: bool, addr: u128, len: u32) {
        let width = if v4 { 32 } else { 128 };
        self.sets[set].push((v4, addr & mask(len, width), len));
    }

    fn source(&self) -> String {
        let mut src = String::new();
        for (i, set) in self.sets.iter().enumerate() {
            src += &format!("ipblock t/s{i} {{\n");
            for &(v4, net, len) in set {
                let a = if v4 {
                    Ipv4Addr::from(net as u32).to_string()
                } else {
                    Ipv6Addr::from(net).to_string()
                };
                src += &format!("  {a}/{len}\n");
            }
            src += "}\n";
        }
        for i in 0..self.sets.len() {
            src += &format!(
                "rule r{i} {{ when ipblock@t/s{i} and port == {} drop }}\n",
                1000 + i
            );
        }
        src
    }

    /// The oracle: is `ip` in set `i`?
    fn contains(&self, i: usize, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (v4, a, width) = match ip {
            IpAddr::V4(a) => (true, u128::from(u32::from(a)), 32),
            IpAddr::V6(a) => (false, u128::from(a), 128),
        };
        self.sets[i]
            .iter()
            .any(|&(f, net, len)| f == v4 && a & mask(len, width) == net)
    }

    /// Every CIDR's first and last address and their neighbours, the
    /// edges of blocks of `split` bits around them, IPv4-mapped copies of
    /// the IPv4 ones, and random addresses.
    fn probes(&self, r: &mut Rng, splits: &[u32]) -> Vec<IpAddr> {
        let mut out = Vec::new();
        let v4 = |a: u128| IpAddr::V4(Ipv4Addr::from(a as u32));
        let v6 = |a: u128| IpAddr::V6(Ipv6Addr::from(a));
        for set in &self.sets {
            for &(is4, net, len) in set {
                let width = if is4 { 32 } else { 128 };
                let max = mask(width, width);
                let last = net | (max & !mask(len, width));
                let mut edges = vec![net, last];
                for &k in splits.iter().filter(|&&k| k < width) {
                    let block = (max >> k) + 1;
                    edges.push(net & !(block - 1));
                    edges.push(last | (block - 1));
                }
                for e in edges {
                    for a in [e.wrapping_sub(1), e, e.wrapping_add(1)] {
                        let a = a & max;
                        if is4 {
                            out.push(v4(a));
                            out.push(IpAddr::V6(Ipv4Addr::from(a as u32).to_ipv6_mapped()));
                        } else {
                            out.push(v6(a));
                        }
                    }
                }
            }
        }
        for _ in 0..2_000 {
            out.push(v4(u128::from(r.next() as u32)));
            out.push(v6(u128::from(r.next()) << 64 | u128::from(r.next())));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Sets 0 to 2 hold most prefixes; set 3 the default route; set 4 the
/// short prefixes (which would swallow much of the others).
fn sets() -> Layout {
    Layout {
        sets: vec![Vec::new(); 5],
    }
}

/// An IPv4 layout for a root of `k` bits.
fn v4_layout(r: &mut Rng, k: u32) -> Layout {
    let mut l = sets();
    let rand = |r: &mut Rng| u128::from(r.next() as u32);
    // Prefixes of every length, and of the lengths at the level split
    // (k - 1, k, k + 1) and DIR-24-8's (/24, /25) many times over.
    l.add(3, true, 0, 0);
    for len in 1..=32 {
        l.add(
            if len < 8 { 4 } else { len as usize % 3 },
            true,
            rand(r),
            len,
        );
    }
    for len in [k.saturating_sub(1), k, (k + 1).min(32), 24, 25] {
        for i in 0..20 {
            l.add(i % 3, true, rand(r), len);
        }
    }
    // Overlapping prefixes of every length, across and within sets.
    for len in 1..=32 {
        l.add(len as usize % 3, true, 0x0a00_0000 | 0x55_5555, len);
        l.add(
            (len as usize + 1) % 3,
            true,
            0x0a00_0000 | 0x55_5555,
            len.max(8),
        );
    }
    // Crowded blocks of the root: 2, 4, 8, 16 and 60 prefixes in one
    // block (nodes of each size, and a child table).
    let block = 1u128 << (32 - k);
    for (i, n) in [1usize, 2, 4, 7, 30, 60].into_iter().enumerate() {
        let base = rand(r) & !(block - 1);
        for j in 0..n {
            let len = [32, 31, 30, 29][j % 4].max(k);
            l.add((i + j) % 3, true, base + (rand(r) % block), len);
        }
    }
    l
}

/// An IPv6 layout: every length, the default route, nested prefixes, a
/// cluster of /64s in 2001:db8::/32 (zoomed into), scattered /128s (the
/// search fallback) and an IPv4-mapped prefix (which no source matches:
/// mapped sources are looked up as IPv4).
fn v6_layout(r: &mut Rng) -> Layout {
    let mut l = sets();
    let rand = |r: &mut Rng| u128::from(r.next()) << 64 | u128::from(r.next());
    l.add(3, false, 0, 0);
    l.add(3, true, 0, 0);
    for len in 1..=128 {
        l.add(
            if len < 16 { 4 } else { len as usize % 3 },
            false,
            rand(r),
            len,
        );
    }
    let db8 = 0x2001_0db8_u128 << 96;
    for len in 32..=128 {
        l.add(len as usize % 3, false, db8 | 0x1234_5678_9abc_def0, len);
    }
    for i in 0..3_000 {
        let a = db8 | (u128::from(r.next() as u32) << 64);
        l.add(i % 3, false, a, 64);
    }
    for i in 0..200 {
        let a = (0x2a00_u128 << 112) | (rand(r) >> 16);
        l.add(i % 3, false, a, 128);
    }
    // Crowds of /64s and /80s in one /52: nodes of 8 and 16 intervals.
    for (j, n) in [3u128, 7, 40].into_iter().enumerate() {
        let base = db8 | 0xffff_u128 << 80 | (j as u128) << 76;
        for k in 0..n {
            l.add(
                k as usize % 3,
                false,
                base | (2 * k) << 64,
                64 + 16 * (k as u32 % 2),
            );
        }
    }
    l.add(0, false, 0xffff_0a09_0000, 112);
    l
}

/// Checks every probe of `l` against the oracle, in user space and (as
/// root, with `obj`) in the program; returns the number of checks.
fn check(l: &Layout, cfg: &DirConfig, obj: Option<&[u8]>, r: &mut Rng, splits: &[u32]) -> usize {
    let c = rctl_compiler::compile_str("t.rctl", &l.source(), &Default::default());
    let rs = c.ruleset.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    let tables = Tables::with_config(&rs, None, cfg).unwrap();
    // Bit b of the lookup is the ruleset's ip set tables.sets[b], named
    // `t/s<i>`.
    let set_of_bit: Vec<usize> = tables
        .sets
        .iter()
        .map(|&s| {
            let name = &rs.ipsets[s as usize].name;
            name.trim_start_matches("t/s").parse().unwrap()
        })
        .collect();
    let want = |ip: IpAddr| -> u64 {
        set_of_bit
            .iter()
            .enumerate()
            .filter(|&(_, &i)| l.contains(i, ip))
            .fold(0, |m, (b, _)| m | 1 << b)
    };
    let probes = l.probes(r, splits);
    for &ip in &probes {
        assert_eq!(
            tables.dir.lookup(ip),
            want(ip),
            "{ip} (roots {}, {} bits)",
            tables.dir.v4_root_bits,
            tables.dir.v6_root_bits
        );
    }
    let mut checked = probes.len();
    if let Some(obj) = obj {
        let mut prog = XdpProgram::load(obj, &tables, rs.rules.len(), false).unwrap();
        for &ip in &probes {
            for i in 0..l.sets.len() {
                let f = frame(ip, Proto::Tcp, 1000 + i as u16, false, false);
                let got = prog.run(&f).unwrap();
                let drop = l.contains(i, ip);
                assert_eq!(got, if drop { 1 } else { 2 }, "{ip} in set {i}: {drop}");
                checked += 1;
            }
        }
    }
    checked
}

/// IPv4, for roots of 8 to 24 bits: every prefix length, every boundary
/// at the level split, overlapping prefixes, crowded blocks.
#[test]
fn v4_tables_agree_with_the_cidrs_at_every_split() {
    let obj = object();
    let mut r = Rng(0x000d_1248);
    let mut checked = 0;
    for k in [8, 12, 16, 20, 23, 24] {
        let l = v4_layout(&mut r, k);
        let cfg = DirConfig {
            v4_root_bits: Some(k),
            ..DirConfig::default()
        };
        checked += check(&l, &cfg, obj.as_deref(), &mut r, &[k, k + 8, 24, 25]);
    }
    assert!(checked > 20_000, "{checked}");
}

/// IPv6, for roots of 8 and 16 bits and the default.
#[test]
fn v6_tables_agree_with_the_cidrs() {
    let obj = object();
    let mut r = Rng(0x6d17);
    let mut checked = 0;
    for k in [None, Some(8), Some(16)] {
        let l = v6_layout(&mut r);
        let cfg = DirConfig {
            v6_root_bits: k,
            ..DirConfig::default()
        };
        let tables = {
            let c = rctl_compiler::compile_str("t.rctl", &l.source(), &Default::default());
            Tables::with_config(&c.ruleset.unwrap(), None, &cfg).unwrap()
        };
        // The layout reaches every kind of entry.
        let [leaves, nodes, children, searches, inline] = tables.dir.kinds();
        assert!(
            leaves > 0 && nodes > 0 && children > 1 && searches > 0 && inline > 0,
            "{:?}",
            tables.dir.kinds()
        );
        checked += check(&l, &cfg, obj.as_deref(), &mut r, &[8, 16, 32, 48, 64]);
    }
    assert!(checked > 20_000, "{checked}");
}

/// IPv6 lists cluster (here, 3,000 prefixes of /48 to /128 inside
/// 2001:db8::/32): the filter indexes the bits below the prefix they all
/// share, so that it stops most random sources of the cluster before the
/// tables (indexing the top bits put the whole cluster in one block,
/// which every source passed), and the tables still agree with the CIDRs.
#[test]
fn v6_cluster_filter_stops_random_sources_of_the_cluster() {
    let obj = object();
    let mut r = Rng(0x0db8);
    let mut l = sets();
    let base = 0x2001_0db8_u128 << 96;
    let rand = |r: &mut Rng| base | u128::from(r.next()) << 32 | u128::from(r.next() as u32);
    for i in 0..3_000usize {
        l.add(i % 3, false, rand(&mut r), [64, 48, 56, 128][i % 4]);
    }
    let cfg = DirConfig::default();
    let tables = {
        let c = rctl_compiler::compile_str("t.rctl", &l.source(), &Default::default());
        Tables::with_config(&c.ruleset.unwrap(), None, &cfg).unwrap()
    };
    assert!(tables.dir.v6_filter_bits > 0, "a filter for the cluster");
    let f = tables.dir.entries[3];
    let passed = (0..10_000)
        .filter(|_| {
            let a = rand(&mut r);
            rctl_common::dir::filter_passes(&tables.dir, f, (a >> 64) as u64, a as u64)
        })
        .count();
    assert!(
        passed < 2_500,
        "{passed} of 10,000 random sources passed the filter"
    );
    assert!(check(&l, &cfg, obj.as_deref(), &mut r, &[32, 48, 64]) > 10_000);
}
