//! The XDP program's user-space side: lowering a ruleset's packet plane
//! into the program's maps, loading it, and running packets through it
//! with BPF_PROG_TEST_RUN (aya's `TestRun`).
//!
//! Lowering: each L3/L4 predicate of the plan gets one bit (ip sets, ports,
//! protocols); the prefix tries map every address range to the bits of the
//! ip sets that contain it (ranges are cut into disjoint prefixes, so the
//! longest match is the only match); each DNF term becomes a pair of
//! must-be-set and must-be-clear masks.
//!
//! Packet and connection limits run in the program as GCRA with a ban,
//! keyed by the masked source address, with the same arithmetic as the
//! user-space limiter; their buckets live in a fixed set-associative table
//! of [`rctl_common::MAX_BUCKETS`] slots (see the program). The clock they
//! read is the kernel tick by default ([`ClockMode`]).

pub mod host;

use crate::core::IndexError;
use crate::iptable::PrefixTable;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, PerCpuArray};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use rctl_common::{
    kind, maps, Bucket, Clock, Counters, Limiter, Range4, Range6, Term, CONFIG_SETS_ONLY,
    CONFIG_USES_DST, MAX_RULES, MAX_TERMS, MAX_V6_RANGES,
};
use rctl_compiler::ir::{Action, Atom, IpSet, Key as RateKey, Proto, Ruleset, Unit, XdpKind};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// The clock the program's rate limits read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// The kernel tick (jiffies, 1/HZ): one inlined load per packet. The
    /// average rate is exact; a burst may exceed the configured one by at
    /// most one tick's worth of packets (see [`rctl_common::Clock`]).
    #[default]
    Tick,
    /// `bpf_ktime_get_ns`: exact bursts, a helper call per limited packet.
    Exact,
}

/// The kernel's tick in ns (`TICK_NSEC`: the resolution of
/// CLOCK_MONOTONIC_COARSE) and the jiffies value at which the tick clock
/// reads 0, chosen so that it follows CLOCK_MONOTONIC (to within a tick):
/// from /proc/timer_list's `now at` and `jiffies:` (one read), else the
/// kernel's `INITIAL_JIFFIES` (300 s before the 32-bit wrap; the clock
/// then runs some 0.2 s behind, the boot time before the first tick).
#[allow(unsafe_code)]
pub fn kernel_tick() -> Result<(u64, u64), XdpError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let tick = u64::try_from(ts.tv_nsec).unwrap_or(0);
    if rc != 0 || ts.tv_sec != 0 || tick == 0 {
        return Err(err(
            "cannot read the kernel tick (clock_getres(CLOCK_MONOTONIC_COARSE)); \
             apply with --clock exact",
        ));
    }
    let base = match host::timer_list() {
        Some((now, Some(jiffies))) => jiffies.wrapping_sub(now / tick),
        _ => {
            let hz = (1_000_000_000 + tick / 2) / tick;
            u64::from((hz as u32).wrapping_mul(300).wrapping_neg())
        }
    };
    Ok((tick, base))
}

/// Why the packet plane could not be lowered or loaded.
#[derive(Debug)]
pub struct XdpError(pub String);

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for XdpError {}

fn err(m: impl Into<String>) -> XdpError {
    XdpError(m.into())
}

/// Why a ruleset's packet plane could not be lowered into the program's
/// tables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TablesError {
    /// The ruleset names a predicate, ip set or plan it does not hold.
    Index(IndexError),
    /// A rule's XDP plan reads an HTTP field, which the program cannot see.
    HttpAtom {
        /// Rule index.
        rule: usize,
        /// The predicate.
        atom: u32,
    },
    /// A rule has a throttle plan but no throttle.
    NotAThrottle {
        /// Rule index.
        rule: usize,
    },
    /// A valid ruleset whose packet plane is larger than the program holds
    /// (rules, terms, predicate bits or IPv6 intervals).
    Capacity(String),
}

impl fmt::Display for TablesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TablesError::Index(e) => write!(f, "{e}"),
            TablesError::HttpAtom { rule, atom } => write!(
                f,
                "the XDP plan of rule {rule} reads predicate {atom}, an HTTP field"
            ),
            TablesError::NotAThrottle { rule } => {
                write!(f, "rule {rule}: a throttle plan without a throttle")
            }
            TablesError::Capacity(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for TablesError {}

impl From<TablesError> for XdpError {
    fn from(e: TablesError) -> Self {
        XdpError(e.to_string())
    }
}

/// The program's map contents for one ruleset and site.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tables {
    /// Terms in evaluation order.
    pub terms: Vec<Term>,
    /// IPv4 (prefix, length, bits), for the LPM-trie baseline program (and
    /// the prefix counts `rctl status` shows).
    pub v4: Vec<([u8; 4], u8, u64)>,
    /// The IPv4 space as sorted intervals with their bits (the program's
    /// lookup table).
    pub v4_ranges: Vec<Range4>,
    /// For each block of the top [`Tables::v4_index_bits`] bits: first
    /// interval, and intervals starting inside.
    pub v4_index: Vec<u64>,
    /// Address bits that index `v4_index` (8 to 16).
    pub v4_index_bits: u32,
    /// The IPv6 space as sorted intervals with their bits.
    pub v6_ranges: Vec<Range6>,
    /// For each top [`Tables::v6_index_bits`] bits of an IPv6 address, as
    /// `v4_index`.
    pub v6_index: Vec<u64>,
    /// Address bits that index `v6_index` (8 to 16).
    pub v6_index_bits: u32,
    /// IPv6 (prefix, length, bits), likewise.
    pub v6: Vec<([u8; 16], u8, u64)>,
    /// Port bits, indexed by port (only non-zero entries).
    pub ports: Vec<(u16, u64)>,
    /// Protocol bits for tcp, udp, icmp, other.
    pub protos: [u32; 4],
    /// Rate limits, indexed by `Term::limiter`.
    pub limiters: Vec<Limiter>,
    /// The rule index of each limiter.
    pub limiter_rules: Vec<usize>,
}

impl Tables {
    /// Lowers the packet plane of `rs` for `site`. Every index is checked
    /// first: a ruleset that names what it does not hold is an error here,
    /// never a term that silently cannot match.
    pub fn new(rs: &Ruleset, site: Option<&str>) -> Result<Tables, TablesError> {
        IndexError::check(rs).map_err(TablesError::Index)?;
        let capacity = |m: String| TablesError::Capacity(m);
        let mut t = Tables::default();
        let mut set_bit: HashMap<u32, u32> = HashMap::new();
        let mut port_bit: HashMap<u32, u32> = HashMap::new();
        let mut proto_bit: HashMap<u32, u32> = HashMap::new();
        for (i, (rule, plan)) in rs.rules.iter().zip(&rs.plan).enumerate() {
            let Some(x) = &plan.xdp else { continue };
            if !rule.enabled || !rule.applies_to(site) {
                continue;
            }
            let k = match x.kind {
                XdpKind::Allow => kind::ALLOW,
                XdpKind::Exempt => kind::EXEMPT,
                XdpKind::Drop => kind::DROP,
                XdpKind::Throttle => kind::THROTTLE,
            };
            let mut limiter = 0;
            if k == kind::THROTTLE {
                let Action::Throttle(th) = &rule.action else {
                    return Err(TablesError::NotAThrottle { rule: i });
                };
                let (v4_len, v6_len) = match th.keys.first() {
                    Some(RateKey::Prefix { v4, v6 }) => (u32::from(*v4), u32::from(*v6)),
                    _ => (32, 128),
                };
                let g = crate::limiter::Gcra::new(th.limit, th.period_ms, th.burst, th.ban_ms);
                limiter = t.limiters.len() as u32;
                t.limiter_rules.push(i);
                t.limiters.push(Limiter {
                    interval_ns: g.interval_ns,
                    tolerance_ns: g.tolerance_ns,
                    ban_ns: g.ban_ns,
                    v4_len,
                    v6_len,
                    syn_only: u32::from(th.unit == Unit::Connections),
                    seed: 0,
                });
            }
            if i as u32 >= MAX_RULES {
                return Err(capacity(format!(
                    "rule {i} (`{}`) is offloaded to XDP, which counts rules 0 to {}",
                    rule.name,
                    MAX_RULES - 1
                )));
            }
            for term in &x.dnf {
                let mut e = Term {
                    rule: i as u32,
                    kind: k,
                    limiter,
                    ..Term::default()
                };
                for &(a, neg) in term {
                    // Address bits are per ip set: the source and the
                    // destination are looked up in the same table.
                    let (map, count, limit, key) = match &rs.atoms[a as usize] {
                        Atom::Ip(s) => (&mut set_bit, 0, 64, *s),
                        Atom::DstIp(s) => (&mut set_bit, 3, 64, *s),
                        Atom::Port(_) => (&mut port_bit, 1, 64, a),
                        Atom::Proto(_) => (&mut proto_bit, 2, 32, a),
                        _ => return Err(TablesError::HttpAtom { rule: i, atom: a }),
                    };
                    let n = map.len() as u32;
                    let bit = *map.entry(key).or_insert(n);
                    if bit >= limit {
                        return Err(capacity(format!(
                            "more than {limit} distinct {} predicates in XDP rules",
                            ["address", "port", "protocol", "address"][count]
                        )));
                    }
                    let (pos, negm): (&mut u64, &mut u64) = match count {
                        0 => (&mut e.set_pos, &mut e.set_neg),
                        1 => (&mut e.port_pos, &mut e.port_neg),
                        3 => (&mut e.dst_pos, &mut e.dst_neg),
                        _ => {
                            if neg {
                                e.proto_neg |= 1 << bit;
                            } else {
                                e.proto_pos |= 1 << bit;
                            }
                            continue;
                        }
                    };
                    if neg {
                        *negm |= 1 << bit;
                    } else {
                        *pos |= 1 << bit;
                    }
                }
                if t.terms.len() as u32 >= MAX_TERMS {
                    return Err(capacity(format!("more than {MAX_TERMS} XDP terms")));
                }
                t.terms.push(e);
            }
        }
        // Address bits: the sets in bit order, cut into disjoint ranges.
        let mut by_bit: Vec<(u32, u32)> = set_bit.iter().map(|(&s, &b)| (b, s)).collect();
        by_bit.sort_unstable();
        let sets: Vec<IpSet> = by_bit
            .iter()
            .map(|&(_, s)| rs.ipsets[s as usize].clone())
            .collect();
        let table = PrefixTable::new(&sets);
        let (mut v4_ranges, mut v6_ranges) = (Vec::new(), Vec::new());
        for (is_v4, start, end, members) in table.ranges() {
            let bits = members.iter().fold(0u64, |m, &s| m | (1 << s));
            if bits == 0 {
                continue;
            }
            if is_v4 {
                &mut v4_ranges
            } else {
                &mut v6_ranges
            }
            .push((start, end, bits));
            let width = if is_v4 { 32 } else { 128 };
            let out = rctl_compiler::cidr::to_prefixes(vec![(start, end)], width);
            if is_v4 {
                t.v4.extend(
                    out.into_iter()
                        .map(|(n, l)| ((n as u32).to_be_bytes(), l, bits)),
                );
            } else {
                t.v6.extend(out.into_iter().map(|(n, l)| (n.to_be_bytes(), l, bits)));
            }
        }
        let (starts, index, bits) = interval_table(v4_ranges, 32);
        t.v4_index_bits = bits;
        t.v4_ranges = starts
            .into_iter()
            .map(|(start, bits)| Range4 {
                start: start as u32,
                pad: 0,
                bits,
            })
            .collect();
        t.v4_index = index;
        let (starts, index, bits) = interval_table(v6_ranges, 128);
        t.v6_index_bits = bits;
        if starts.len() > MAX_V6_RANGES as usize {
            return Err(capacity(format!(
                "{} IPv6 intervals: at most {MAX_V6_RANGES}",
                starts.len()
            )));
        }
        t.v6_ranges = starts
            .into_iter()
            .map(|(start, bits)| Range6 {
                start_hi: (start >> 64) as u64,
                start_lo: start as u64,
                bits,
            })
            .collect();
        t.v6_index = index;
        // One bit per port predicate, in a dense table: linear in the ports
        // named, however wide the ranges (`port in { 0-65535 }` is 65,536).
        let mut ports = vec![0u64; 1 << 16];
        for (&a, &bit) in &port_bit {
            if let Atom::Port(ranges) = &rs.atoms[a as usize] {
                for &(lo, hi) in ranges {
                    for p in lo..=hi {
                        ports[usize::from(p)] |= 1 << bit;
                    }
                }
            }
        }
        t.ports = (0..=u16::MAX).zip(ports).filter(|&(_, m)| m != 0).collect();
        for (&a, &bit) in &proto_bit {
            if let Atom::Proto(ps) = &rs.atoms[a as usize] {
                for p in ps {
                    let i = match p {
                        Proto::Tcp => 0,
                        Proto::Udp => 1,
                        Proto::Icmp => 2,
                    };
                    t.protos[i] |= 1 << bit;
                }
            }
        }
        Ok(t)
    }
}

/// An address space of `width` bits cut at every range edge, as sorted
/// (start, bits) pairs (gaps get no bits; neighbours with equal bits are
/// merged), its index by the top `k` bits, and `k`: for each block, the
/// interval holding its first address (low 32 bits) and how many intervals
/// start inside it (high 32 bits). `k` is the intervals' count rounded up
/// to a power of two, from 8 to 16 bits: about one interval per block, and
/// a small table's index small enough to stay in cache. A block then holds
/// at most 2^16 + 1 intervals, which bounds the program's binary search.
fn interval_table(
    mut ranges: Vec<(u128, u128, u64)>,
    width: u32,
) -> (Vec<(u128, u64)>, Vec<u64>, u32) {
    ranges.sort_unstable();
    let max = u128::MAX >> (128 - width);
    let mut out: Vec<(u128, u64)> = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut push = |start: u128, bits: u64| match out.last() {
        Some(&(_, b)) if b == bits => {}
        _ => out.push((start, bits)),
    };
    let mut next = Some(0u128);
    for (start, end, bits) in ranges {
        if let Some(n) = next.filter(|&n| start > n) {
            push(n, 0);
        }
        push(start, bits);
        next = end.checked_add(1).filter(|&n| n <= max);
    }
    if let Some(n) = next {
        push(n, 0);
    }
    let k = out.len().next_power_of_two().trailing_zeros().clamp(8, 16);
    let shift = width - k;
    let index = (0..1u32 << k)
        .map(|p| {
            let first = u128::from(p) << shift;
            let last = first | ((1u128 << shift) - 1);
            let lo = out.partition_point(|r| r.0 <= first) - 1;
            let hi = out.partition_point(|r| r.0 <= last) - 1;
            lo as u64 | ((hi - lo) as u64) << 32
        })
        .collect();
    (out, index, k)
}

fn array<'a, V: aya::Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<Array<&'a mut aya::maps::MapData, V>, XdpError> {
    Array::try_from(
        ebpf.map_mut(name)
            .ok_or_else(|| err(format!("no map {name}")))?,
    )
    .map_err(|e| err(format!("{name}: {e}")))
}

/// The object's XDP program `name`.
fn xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, XdpError> {
    ebpf.program_mut(name)
        .ok_or_else(|| err(format!("no program `{name}`")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
}

/// The XDP program `name`, loaded into the kernel if it is not yet.
fn loaded<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, XdpError> {
    let prog = xdp(ebpf, name)?;
    if prog.fd().is_err() {
        prog.load().map_err(|e| {
            err(format!(
                "the kernel refused `{name}`: {}",
                host::describe(&e)
            ))
        })?;
    }
    Ok(prog)
}

/// Writes `items` into the array map `name` from index 0.
fn fill<V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
    items: impl IntoIterator<Item = V>,
) -> Result<(), XdpError> {
    let mut a = array::<V>(ebpf, name)?;
    for (i, v) in items.into_iter().enumerate() {
        a.set(i as u32, v, 0)
            .map_err(|e| err(format!("{name}[{i}]: {e}")))?;
    }
    Ok(())
}

/// The loaded program (not attached to any interface).
pub struct XdpProgram {
    ebpf: Ebpf,
    rules: usize,
    /// The bucket hash's seed.
    seed: u32,
    /// The program [`XdpProgram::test`] runs.
    selected: &'static str,
}

/// What the program did with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// XDP_DROP (1) or XDP_PASS (2).
    pub action: u32,
    /// The rule whose counter moved, if any.
    pub rule: Option<usize>,
}

impl XdpProgram {
    /// Loads the object and fills its maps from `tables`; with `tries`,
    /// also the LPM tries that only the `rctl_lpm` baseline reads.
    pub fn load(
        object: &[u8],
        tables: &Tables,
        rules: usize,
        tries: bool,
    ) -> Result<XdpProgram, XdpError> {
        let ranges = u32::try_from(tables.v4_ranges.len().max(1))
            .map_err(|_| err("too many IPv4 intervals"))?;
        let ranges6 = u32::try_from(tables.v6_ranges.len().max(1))
            .map_err(|_| err("too many IPv6 intervals"))?;
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(maps::V4_RANGES, ranges)
            .map_max_entries(maps::V6_RANGES, ranges6)
            .load(object)
            .map_err(|e| err(format!("loading the XDP object: {e}")))?;
        let e = &mut ebpf;
        fill(e, maps::TERMS, tables.terms.iter().copied())?;
        fill(e, maps::V4_RANGES, tables.v4_ranges.iter().copied())?;
        fill(e, maps::V4_INDEX, tables.v4_index.iter().copied())?;
        fill(e, maps::V6_RANGES, tables.v6_ranges.iter().copied())?;
        fill(e, maps::V6_INDEX, tables.v6_index.iter().copied())?;
        // The bucket hash's seed, random per load.
        let seed = {
            use std::hash::BuildHasher as _;
            std::hash::RandomState::new().hash_one(0x5eed_u64) as u32
        };
        let limiters = tables.limiters.iter().map(|l| Limiter { seed, ..*l });
        fill(e, maps::LIMITERS, limiters)?;
        fill(e, maps::PROTOS, tables.protos.iter().copied())?;
        {
            let mut ports: Array<_, u64> = array(e, maps::PORTS)?;
            for (p, b) in &tables.ports {
                ports
                    .set(u32::from(*p), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        if tries {
            let mut v4: LpmTrie<_, [u8; 4], u64> =
                LpmTrie::try_from(e.map_mut(maps::V4).ok_or_else(|| err("no v4 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v4 {
                v4.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        if tries {
            let mut v6: LpmTrie<_, [u8; 16], u64> =
                LpmTrie::try_from(e.map_mut(maps::V6).ok_or_else(|| err("no v6 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v6 {
                v6.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        // The term count goes in last: until it is set the program sees no
        // terms.
        {
            let mut config = array::<u32>(e, maps::CONFIG)?;
            let shifts = [
                (1, 32 - tables.v4_index_bits),
                (2, 64 - tables.v6_index_bits),
            ];
            let sets_only = !tables.terms.is_empty() && tables.terms.iter().all(|t| t.set_pos != 0);
            let uses_dst = tables.terms.iter().any(|t| t.dst_pos | t.dst_neg != 0);
            let head = tables.terms.len() as u32
                | if sets_only { CONFIG_SETS_ONLY } else { 0 }
                | if uses_dst { CONFIG_USES_DST } else { 0 };
            for (i, v) in shifts.into_iter().chain([(0, head)]) {
                config
                    .set(i, v, 0)
                    .map_err(|e| err(format!("{}[{i}]: {e}", maps::CONFIG)))?;
            }
        }
        loaded(&mut ebpf, "rctl")?;
        let mut program = XdpProgram {
            ebpf,
            rules,
            seed,
            selected: "rctl",
        };
        // The tick clock where the kernel tick can be read (callers that
        // ask for it explicitly get the error), else the exact one.
        if program.set_clock_mode(ClockMode::Tick).is_err() {
            program.set_clock_mode(ClockMode::Exact)?;
        }
        Ok(program)
    }

    /// Pins the program (as `prog`) and the named maps into `dir`, which
    /// must be on a bpffs.
    pub fn pin(&mut self, dir: &std::path::Path, names: &[&str]) -> Result<(), XdpError> {
        for name in names {
            let path = dir.join(name);
            self.ebpf
                .map(name)
                .ok_or_else(|| err(format!("no map {name}")))?
                .pin(&path)
                .map_err(|e| {
                    err(format!(
                        "pinning {}: {}",
                        path.display(),
                        host::describe(&e)
                    ))
                })?;
        }
        let path = dir.join("prog");
        self.xdp_mut()?.pin(&path).map_err(|e| {
            err(format!(
                "pinning {}: {}",
                path.display(),
                host::describe(&e)
            ))
        })
    }

    /// The loaded `rctl` program.
    pub fn xdp_mut(&mut self) -> Result<&mut Xdp, XdpError> {
        xdp(&mut self.ebpf, "rctl")
    }

    /// Packets each rule decided, summed over CPUs, by rule index.
    pub fn counts(&self) -> Result<Vec<u64>, XdpError> {
        let c: PerCpuArray<_, Counters> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::COUNTERS)
                .ok_or_else(|| err("no counters map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        (0..self.rules as u32)
            .map(|i| {
                c.get(&i, 0)
                    .map(|v| v.iter().map(|x| x.packets).sum())
                    .map_err(|e| err(e.to_string()))
            })
            .collect()
    }

    /// Makes [`XdpProgram::test`] run `name`: `rctl`, or `rctl_lpm` (the
    /// LPM-trie baseline, which needs the maps loaded with `tries`).
    pub fn select(&mut self, name: &'static str) -> Result<(), XdpError> {
        loaded(&mut self.ebpf, name)?;
        self.selected = name;
        Ok(())
    }

    fn program(&self) -> Result<&Xdp, XdpError> {
        self.ebpf
            .program(self.selected)
            .ok_or_else(|| err("no program"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
    }

    /// Runs one frame through the program at `time_ns` (the program's clock
    /// is set to it); `rule` is found from the counters, so this is for
    /// tests, not speed.
    pub fn test(&mut self, frame: &[u8], time_ns: u64) -> Result<Outcome, XdpError> {
        self.set_clock(time_ns)?;
        let before = self.counts()?;
        let action = self.run(frame)?;
        let after = self.counts()?;
        let rule = before.iter().zip(&after).position(|(a, b)| a != b);
        Ok(Outcome { action, rule })
    }

    /// The seed of this load's bucket hash ([`rctl_common::bucket_set`]).
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// The rate-limit bucket at `slot`.
    pub fn bucket(&self, slot: u32) -> Result<Bucket, XdpError> {
        let a: Array<_, Bucket> = Array::try_from(
            self.ebpf
                .map(maps::BUCKETS)
                .ok_or_else(|| err("no bucket map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        a.get(&slot, 0)
            .map_err(|e| err(format!("{}[{slot}]: {e}", maps::BUCKETS)))
    }

    /// Writes rate-limit buckets at the given slots.
    pub fn write_buckets(&mut self, entries: &[(u32, Bucket)]) -> Result<(), XdpError> {
        let mut a = array::<Bucket>(&mut self.ebpf, maps::BUCKETS)?;
        for (i, b) in entries {
            a.set(*i, b, 0)
                .map_err(|e| err(format!("{}[{i}]: {e}", maps::BUCKETS)))?;
        }
        Ok(())
    }

    /// Sets rules' per-CPU counters: (rule, one value per possible CPU).
    pub fn write_counters(&mut self, entries: Vec<(u32, Vec<Counters>)>) -> Result<(), XdpError> {
        let mut c: PerCpuArray<_, Counters> = PerCpuArray::try_from(
            self.ebpf
                .map_mut(maps::COUNTERS)
                .ok_or_else(|| err("no counters map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        for (i, v) in entries {
            let v = aya::maps::PerCpuValues::try_from(v).map_err(|e| err(e.to_string()))?;
            c.set(i, v, 0)
                .map_err(|e| err(format!("{}[{i}]: {e}", maps::COUNTERS)))?;
        }
        Ok(())
    }

    /// Sets the program's clock to `time_ns` (instead of the kernel's).
    pub fn set_clock(&mut self, time_ns: u64) -> Result<(), XdpError> {
        self.write_clock(Clock {
            fixed_ns: time_ns.max(1),
            ..Clock::default()
        })
    }

    /// Makes the program read the kernel's clock, as `mode` says (loading
    /// sets [`ClockMode::Tick`] where it can).
    pub fn set_clock_mode(&mut self, mode: ClockMode) -> Result<(), XdpError> {
        let clock = match mode {
            ClockMode::Tick => {
                let (tick_ns, jiffies_base) = kernel_tick()?;
                Clock {
                    fixed_ns: 0,
                    tick_ns,
                    jiffies_base,
                }
            }
            ClockMode::Exact => Clock::default(),
        };
        self.write_clock(clock)
    }

    fn write_clock(&mut self, clock: Clock) -> Result<(), XdpError> {
        array::<Clock>(&mut self.ebpf, maps::CLOCK)?
            .set(0, clock, 0)
            .map_err(|e| err(format!("{}: {e}", maps::CLOCK)))
    }

    /// Runs one frame through the selected program; returns its action.
    pub fn run(&mut self, frame: &[u8]) -> Result<u32, XdpError> {
        self.program()?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat: 1,
                ..TestRunOptions::new()
            })
            .map(|r| r.return_value)
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))
    }

    /// Runs one frame `repeat` times through the selected program from
    /// the calling thread; returns the last run's action. Takes `&self`,
    /// so that several threads (on several CPUs) can run the same program
    /// and maps at once, as a multi-queue NIC does.
    pub fn run_repeat(&self, frame: &[u8], repeat: u32) -> Result<u32, XdpError> {
        self.program()?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..TestRunOptions::new()
            })
            .map(|r| r.return_value)
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))
    }

    /// Runs one frame `repeat` times through `program` (`rctl`, or the
    /// empty `rctl_pass`); returns the action and the kernel's mean ns per
    /// run.
    pub fn bench(
        &mut self,
        program: &str,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(u32, f64), XdpError> {
        let r = loaded(&mut self.ebpf, program)?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..TestRunOptions::new()
            })
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }
}
