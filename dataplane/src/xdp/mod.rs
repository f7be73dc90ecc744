//! The XDP program's tables: a ruleset's packet plane lowered into the
//! contents of the program's maps (loading them, attaching the program
//! and running packets through it is `rctl-loader`'s).
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

pub mod dir;

use crate::core::IndexError;
use crate::iptable::PrefixTable;
use dir::{DirConfig, DirTables};
use rctl_common::{kind, Limiter, Term, MAX_RULES, MAX_TERMS};
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

/// The program's map contents for one ruleset and site.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tables {
    /// Terms in evaluation order.
    pub terms: Vec<Term>,
    /// IPv4 (prefix, length, bits), for the LPM-trie baseline program (and
    /// the prefix counts `rctl status` shows).
    pub v4: Vec<([u8; 4], u8, u64)>,
    /// The program's prefix tables (both families).
    pub dir: DirTables,
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
    /// Each limiter's id: a hash of its rule's name, so that a limiter's
    /// buckets keep their place in a new generation (see
    /// [`rctl_common::bucket_key`]).
    pub limiter_ids: Vec<u64>,
    /// The ip set (index in the ruleset) of each address bit.
    pub sets: Vec<u32>,
}

/// A limiter's id: the first 8 bytes of its rule name's SHA-256.
pub fn limiter_id(rule_name: &str) -> u64 {
    let h = rctl_compiler::artifact::sha256(rule_name.as_bytes());
    u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
}

impl Tables {
    /// Lowers the packet plane of `rs` for `site`. Every index is checked
    /// first: a ruleset that names what it does not hold is an error here,
    /// never a term that silently cannot match.
    pub fn new(rs: &Ruleset, site: Option<&str>) -> Result<Tables, TablesError> {
        Tables::with_config(rs, site, &DirConfig::default())
    }

    /// As [`Tables::new`], with the prefix tables sized as `cfg` says.
    pub fn with_config(
        rs: &Ruleset,
        site: Option<&str>,
        cfg: &DirConfig,
    ) -> Result<Tables, TablesError> {
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
                t.limiter_ids.push(limiter_id(&rule.name));
                t.limiters.push(Limiter {
                    interval_ns: g.interval_ns,
                    tolerance_ns: g.tolerance_ns,
                    ban_ns: g.ban_ns,
                    v4_len,
                    v6_len,
                    syn_only: u32::from(th.unit == Unit::Connections),
                    ..Limiter::default()
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
        t.sets = by_bit.iter().map(|&(_, s)| s).collect();
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
        let (v4, v6) = (intervals(v4_ranges, 32), intervals(v6_ranges, 128));
        t.dir = DirTables::build(&v4, &v6, cfg);
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
/// (start, bits) pairs from 0 (gaps get no bits; neighbours with equal
/// bits are merged).
fn intervals(mut ranges: Vec<(u128, u128, u64)>, width: u32) -> Vec<(u128, u64)> {
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
    out
}

#[cfg(test)]
mod tests;
