//! The reference evaluator: every rule in order, every condition evaluated
//! on its own, one regex per predicate, a binary search per address set
//! (HAProxy's address lists are trees; a sorted list searched in halves
//! costs the same). This is how VCL and HAProxy configurations run. It defines the semantics the
//! compiled [`Engine`](crate::Engine) must reproduce, and is the baseline
//! of the benchmarks.

use crate::core::{Core, Decision, EngineConfig};
use crate::engine::EngineError;
use crate::request::{Fields, Packet, Request};
use rctl_compiler::cidr::PrefixSet;
use rctl_compiler::ir::{Atom, Cond, Proto, Ruleset, StrOp};
use regex_automata::meta::Regex;
use std::net::IpAddr;

/// The reference evaluator.
pub struct NaiveEngine {
    core: Core,
    regexes: Vec<Option<Regex>>,
    /// Per address set, its ranges for a binary search.
    sets: Vec<Sorted>,
}

/// One address set as sorted, disjoint inclusive ranges, searched in
/// halves: O(log n) per lookup, as a tree-based list (HAProxy's) is.
struct Sorted {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Sorted {
    fn new(p: &PrefixSet) -> Sorted {
        let (v4, v6) = p.ranges();
        Sorted {
            v4: v4.into_iter().map(|(s, e)| (s as u32, e as u32)).collect(),
            v6,
        }
    }

    fn contains<T: Ord + Copy>(ranges: &[(T, T)], a: T) -> bool {
        // The last range starting at or before `a` is the only candidate.
        let i = ranges.partition_point(|&(s, _)| s <= a);
        i > 0 && a <= ranges[i - 1].1
    }

    fn contains_ip(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v) => Self::contains(&self.v4, u32::from(v)),
            IpAddr::V6(v) => match v.to_ipv4_mapped() {
                Some(v4) => Self::contains(&self.v4, u32::from(v4)),
                None => Self::contains(&self.v6, u128::from(v)),
            },
        }
    }
}

impl NaiveEngine {
    /// Loads a ruleset, compiling one regex per regex predicate.
    pub fn new(ruleset: Ruleset, config: &EngineConfig) -> Result<NaiveEngine, EngineError> {
        let mut regexes = Vec::with_capacity(ruleset.atoms.len());
        for a in &ruleset.atoms {
            regexes.push(match a {
                Atom::Str {
                    op: StrOp::Regex { pattern, ci },
                    ..
                } => Some(
                    Regex::builder()
                        .syntax(rctl_compiler::scan::syntax(*ci))
                        .build(pattern)
                        .map_err(|e| EngineError::Regex {
                            pattern: pattern.clone(),
                            message: e.to_string(),
                        })?,
                ),
                _ => None,
            });
        }
        let sets = ruleset
            .ipsets
            .iter()
            .map(|s| Sorted::new(&s.prefixes))
            .collect();
        Ok(NaiveEngine {
            core: Core::new(ruleset, config)?,
            regexes,
            sets,
        })
    }

    fn in_set(&self, s: u32, ip: IpAddr) -> bool {
        // Core::new has checked that every set a rule names exists.
        self.sets[s as usize].contains_ip(ip)
    }

    fn l4(
        &self,
        a: &Atom,
        ip: IpAddr,
        dst: Option<IpAddr>,
        proto: Proto,
        port: u16,
    ) -> Option<bool> {
        Some(match a {
            Atom::Ip(s) => self.in_set(*s, ip),
            Atom::DstIp(s) => dst.is_some_and(|d| self.in_set(*s, d)),
            Atom::Port(r) => r.iter().any(|&(lo, hi)| (lo..=hi).contains(&port)),
            Atom::Proto(p) => p.contains(&proto),
            _ => return None,
        })
    }

    pub(crate) fn atom(&self, i: u32, f: &Fields<'_>) -> bool {
        let a = &self.core.ruleset.atoms[i as usize];
        let req = f.request();
        if let Some(v) = self.l4(a, req.ip, req.dst, Proto::Tcp, req.port) {
            return v;
        }
        match a {
            Atom::Present(field) => f.get(field).is_some(),
            Atom::Str { field, op } => {
                let Some(v) = f.get(field) else { return false };
                let v: &[u8] = &v;
                match op {
                    StrOp::Eq(x) => v == x.as_bytes(),
                    StrOp::Prefix(x) => v.starts_with(x.as_bytes()),
                    StrOp::Suffix(x) => v.ends_with(x.as_bytes()),
                    StrOp::Contains(x) => {
                        v.windows(x.len().max(1)).any(|w| w == x.as_bytes()) || x.is_empty()
                    }
                    StrOp::In(xs) => xs.iter().any(|x| x.as_bytes() == v),
                    StrOp::Regex { .. } => self.regexes[i as usize]
                        .as_ref()
                        .is_some_and(|r| r.is_match(v)),
                }
            }
            _ => false,
        }
    }

    fn eval(&self, c: &Cond, f: &Fields<'_>) -> bool {
        match c {
            Cond::True => true,
            Cond::False => false,
            Cond::Atom(a) => self.atom(*a, f),
            Cond::Not(x) => !self.eval(x, f),
            Cond::And(v) => v.iter().all(|x| self.eval(x, f)),
            Cond::Or(v) => v.iter().any(|x| self.eval(x, f)),
        }
    }

    /// Whether rule `i`'s condition holds for a request, on its own: no
    /// order, site, shadow or limit. For oracles that reason about rules
    /// one by one.
    pub fn rule_matches(&self, i: usize, req: &Request<'_>) -> bool {
        let f = Fields::new(req);
        self.eval(&self.core.rule(i).cond, &f)
    }

    /// Decides a request by testing every rule in order.
    pub fn decide_request(&self, req: &Request<'_>) -> Decision {
        let f = Fields::new(req);
        self.core.decide_request(
            &f,
            0..self.core.ruleset.rules.len(),
            |i| self.eval(&self.core.rule(i).cond, &f),
            None,
            None,
        )
    }

    /// Decides a packet.
    pub fn decide_packet(&self, p: &Packet) -> Decision {
        self.core.decide_packet(p, |a| {
            self.l4(
                &self.core.ruleset.atoms[a as usize],
                p.src,
                p.dst,
                p.proto,
                p.dst_port,
            )
            .unwrap_or(false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Sorted;
    use rctl_compiler::cidr::{parse_cidr, PrefixSet};
    use std::net::IpAddr;

    /// The binary search answers as the prefixes themselves do (the linear
    /// `PrefixSet::contains_*`, straight from each network and length) on
    /// both sides of every range's ends, and at the ends of the spaces.
    #[test]
    fn the_binary_search_agrees_with_the_prefixes_at_every_boundary() {
        let cidrs = [
            "0.0.0.0/32",
            "10.0.0.0/8",
            "11.0.0.0/16",
            "11.2.0.0/15",
            "192.0.2.7/32",
            "192.0.2.9/32",
            "203.0.113.128/25",
            "255.255.255.255/32",
            "::/128",
            "2001:db8::/32",
            "2001:db9:1::/48",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120",
        ];
        let p = PrefixSet::from_cidrs(cidrs.iter().map(|c| parse_cidr(c).unwrap().0));
        let s = Sorted::new(&p);
        let (r4, r6) = p.ranges();
        assert_eq!(r4.len(), 8, "no two of them merge: {r4:?}");
        let mut checked = 0;
        for (lo, hi) in r4 {
            for a in [
                lo.wrapping_sub(1),
                lo,
                lo + 1,
                hi.wrapping_sub(1),
                hi,
                hi + 1,
            ] {
                let Ok(a) = u32::try_from(a) else { continue };
                let want = p.contains_v4(a);
                assert_eq!(s.contains_ip(IpAddr::from(a.to_be_bytes())), want, "{a:#x}");
                let mapped = std::net::Ipv4Addr::from(a).to_ipv6_mapped();
                assert_eq!(s.contains_ip(IpAddr::V6(mapped)), want, "{mapped}");
                checked += 1;
            }
        }
        for (lo, hi) in r6 {
            for a in [
                lo.wrapping_sub(1),
                lo,
                lo.wrapping_add(1),
                hi.wrapping_sub(1),
                hi,
                hi.wrapping_add(1),
            ] {
                if std::net::Ipv6Addr::from(a).to_ipv4_mapped().is_some() {
                    continue;
                }
                assert_eq!(
                    s.contains_ip(IpAddr::from(a.to_be_bytes())),
                    p.contains_v6(a),
                    "{a:#x}"
                );
                checked += 1;
            }
        }
        assert!(checked > 50, "{checked}");
    }
}
