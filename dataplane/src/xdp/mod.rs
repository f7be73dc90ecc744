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
//! user-space limiter; their buckets live in an LRU map of
//! [`rctl_common::MAX_BUCKETS`] entries.

pub mod host;

use crate::iptable::PrefixTable;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, PerCpuArray};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use rctl_common::{kind, maps, Counters, Limiter, Term, MAX_RULES, MAX_TERMS};
use rctl_compiler::ir::{Action, Atom, IpSet, Key as RateKey, Proto, Ruleset, Unit, XdpKind};
use std::collections::HashMap;
use std::fmt;

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

/// The program's map contents for one ruleset and site.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tables {
    /// Terms in evaluation order.
    pub terms: Vec<Term>,
    /// IPv4 (prefix, length, bits).
    pub v4: Vec<([u8; 4], u8, u64)>,
    /// IPv6 (prefix, length, bits).
    pub v6: Vec<([u8; 16], u8, u64)>,
    /// Port bits, indexed by port (only non-zero entries).
    pub ports: Vec<(u16, u64)>,
    /// Protocol bits for tcp, udp, icmp, other.
    pub protos: [u32; 4],
    /// Rate limits, indexed by `Term::limiter`.
    pub limiters: Vec<Limiter>,
}

impl Tables {
    /// Lowers the packet plane of `rs` for `site`.
    pub fn new(rs: &Ruleset, site: Option<&str>) -> Result<Tables, XdpError> {
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
                    return Err(err(format!(
                        "rule `{}`: a throttle plan without a throttle",
                        rule.name
                    )));
                };
                let (v4_len, v6_len) = match th.keys.first() {
                    Some(RateKey::Prefix { v4, v6 }) => (u32::from(*v4), u32::from(*v6)),
                    _ => (32, 128),
                };
                let g = crate::limiter::Gcra::new(th.limit, th.period_ms, th.burst, th.ban_ms);
                limiter = t.limiters.len() as u32;
                t.limiters.push(Limiter {
                    interval_ns: g.interval_ns,
                    tolerance_ns: g.tolerance_ns,
                    ban_ns: g.ban_ns,
                    v4_len,
                    v6_len,
                    syn_only: u32::from(th.unit == Unit::Connections),
                    pad: 0,
                });
            }
            if i as u32 >= MAX_RULES {
                return Err(err(format!("more than {MAX_RULES} rules")));
            }
            for term in &x.dnf {
                let mut e = Term {
                    rule: i as u32,
                    kind: k,
                    limiter,
                    ..Term::default()
                };
                for &(a, neg) in term {
                    let (map, count, limit) = match &rs.atoms[a as usize] {
                        Atom::Ip(_) => (&mut set_bit, 0, 64),
                        Atom::Port(_) => (&mut port_bit, 1, 64),
                        Atom::Proto(_) => (&mut proto_bit, 2, 32),
                        _ => return Err(err("an XDP term reads an HTTP field")),
                    };
                    let n = map.len() as u32;
                    let bit = *map.entry(a).or_insert(n);
                    if bit >= limit {
                        return Err(err(format!(
                            "more than {limit} distinct {} predicates in XDP rules",
                            ["address", "port", "protocol"][count]
                        )));
                    }
                    let (pos, negm): (&mut u64, &mut u64) = match count {
                        0 => (&mut e.set_pos, &mut e.set_neg),
                        1 => (&mut e.port_pos, &mut e.port_neg),
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
                    return Err(err(format!("more than {MAX_TERMS} XDP terms")));
                }
                t.terms.push(e);
            }
        }
        // Address bits: the sets in bit order, cut into disjoint ranges.
        let mut by_bit: Vec<(u32, u32)> = set_bit.iter().map(|(&a, &b)| (b, a)).collect();
        by_bit.sort_unstable();
        let sets: Vec<IpSet> = by_bit
            .iter()
            .map(|&(_, a)| match &rs.atoms[a as usize] {
                Atom::Ip(s) => rs.ipsets[*s as usize].clone(),
                _ => unreachable!("only ip atoms have set bits"),
            })
            .collect();
        let table = PrefixTable::new(&sets);
        for (is_v4, start, end, members) in table.ranges() {
            let bits = members.iter().fold(0u64, |m, &s| m | (1 << s));
            if bits == 0 {
                continue;
            }
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
        for (&a, &bit) in &port_bit {
            if let Atom::Port(ranges) = &rs.atoms[a as usize] {
                for &(lo, hi) in ranges {
                    for p in lo..=hi {
                        match t.ports.iter_mut().find(|(q, _)| *q == p) {
                            Some((_, m)) => *m |= 1 << bit,
                            None => t.ports.push((p, 1 << bit)),
                        }
                    }
                }
            }
        }
        t.ports.sort_unstable();
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

/// The loaded program (not attached to any interface).
pub struct XdpProgram {
    ebpf: Ebpf,
    rules: usize,
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
    /// Loads the object at `path` and fills its maps from `tables`.
    pub fn load(object: &[u8], tables: &Tables, rules: usize) -> Result<XdpProgram, XdpError> {
        let mut ebpf =
            Ebpf::load(object).map_err(|e| err(format!("loading the XDP object: {e}")))?;
        {
            let mut terms: Array<_, Term> = Array::try_from(
                ebpf.map_mut(maps::TERMS)
                    .ok_or_else(|| err("no terms map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            for (i, t) in tables.terms.iter().enumerate() {
                terms.set(i as u32, t, 0).map_err(|e| err(e.to_string()))?;
            }
        }
        {
            let mut v4: LpmTrie<_, [u8; 4], u64> =
                LpmTrie::try_from(ebpf.map_mut(maps::V4).ok_or_else(|| err("no v4 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v4 {
                v4.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        {
            let mut v6: LpmTrie<_, [u8; 16], u64> =
                LpmTrie::try_from(ebpf.map_mut(maps::V6).ok_or_else(|| err("no v6 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v6 {
                v6.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        {
            let mut ports: Array<_, u64> = Array::try_from(
                ebpf.map_mut(maps::PORTS)
                    .ok_or_else(|| err("no ports map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            for (p, b) in &tables.ports {
                ports
                    .set(u32::from(*p), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        {
            let mut protos: Array<_, u32> = Array::try_from(
                ebpf.map_mut(maps::PROTOS)
                    .ok_or_else(|| err("no protos map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            for (i, b) in tables.protos.iter().enumerate() {
                protos.set(i as u32, b, 0).map_err(|e| err(e.to_string()))?;
            }
        }
        {
            let mut lim: Array<_, Limiter> = Array::try_from(
                ebpf.map_mut(maps::LIMITERS)
                    .ok_or_else(|| err("no limiters map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            for (i, l) in tables.limiters.iter().enumerate() {
                lim.set(i as u32, l, 0).map_err(|e| err(e.to_string()))?;
            }
        }
        {
            // The term count goes in last: until then the program sees none.
            let mut config: Array<_, u32> = Array::try_from(
                ebpf.map_mut(maps::CONFIG)
                    .ok_or_else(|| err("no config map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            config
                .set(0, tables.terms.len() as u32, 0)
                .map_err(|e| err(e.to_string()))?;
        }
        let prog: &mut Xdp = ebpf
            .program_mut("rctl")
            .ok_or_else(|| err("no program `rctl`"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))?;
        prog.load()
            .map_err(|e| err(format!("the kernel refused the program: {e}")))?;
        Ok(XdpProgram { ebpf, rules })
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
                .map_err(|e| err(format!("pinning {}: {e}", path.display())))?;
        }
        let path = dir.join("prog");
        self.xdp_mut()?
            .pin(&path)
            .map_err(|e| err(format!("pinning {}: {e}", path.display())))
    }

    /// The loaded `rctl` program.
    pub fn xdp_mut(&mut self) -> Result<&mut Xdp, XdpError> {
        self.ebpf
            .program_mut("rctl")
            .ok_or_else(|| err("no program `rctl`"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
    }

    fn counts(&self) -> Result<Vec<u64>, XdpError> {
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

    fn program(&self) -> Result<&Xdp, XdpError> {
        self.ebpf
            .program("rctl")
            .ok_or_else(|| err("no program"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
    }

    /// Runs one frame through the program at `time_ns` (the program's clock
    /// is set to it); `rule` is found from the counters, so this is for
    /// tests, not speed.
    pub fn test(&mut self, frame: &[u8], time_ns: u64) -> Result<Outcome, XdpError> {
        {
            // Replay the packet's time through the program's clock.
            let mut clock: Array<_, u64> = Array::try_from(
                self.ebpf
                    .map_mut(maps::CLOCK)
                    .ok_or_else(|| err("no clock map"))?,
            )
            .map_err(|e| err(e.to_string()))?;
            clock
                .set(0, time_ns.max(1), 0)
                .map_err(|e| err(e.to_string()))?;
        }
        let before = self.counts()?;
        let r = self
            .program()?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat: 1,
                ..TestRunOptions::new()
            })
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))?;
        let after = self.counts()?;
        let rule = before.iter().zip(&after).position(|(a, b)| a != b);
        Ok(Outcome {
            action: r.return_value,
            rule,
        })
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
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(program)
            .ok_or_else(|| err(format!("no program `{program}`")))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))?;
        if prog.fd().is_err() {
            prog.load()
                .map_err(|e| err(format!("the kernel refused `{program}`: {e}")))?;
        }
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..TestRunOptions::new()
            })
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }
}
