//! The reference evaluator: every rule in order, every condition evaluated
//! on its own, one regex per predicate, a linear scan per address set. This
//! is how VCL and HAProxy configurations run. It defines the semantics the
//! compiled [`Engine`](crate::Engine) must reproduce, and is the baseline
//! of the benchmarks.

use crate::core::{Core, Decision, EngineConfig};
use crate::engine::EngineError;
use crate::request::{Fields, Packet, Request};
use rctl_compiler::ir::{Atom, Cond, Proto, Ruleset, StrOp};
use regex_automata::meta::Regex;
use std::net::IpAddr;

/// The reference evaluator.
pub struct NaiveEngine {
    core: Core,
    regexes: Vec<Option<Regex>>,
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
        Ok(NaiveEngine {
            core: Core::new(ruleset, config)?,
            regexes,
        })
    }

    fn in_set(&self, s: u32, ip: IpAddr) -> bool {
        let p = &self.core.ruleset.ipsets[s as usize].prefixes;
        match ip {
            IpAddr::V4(v) => p.contains_v4(u32::from(v)),
            IpAddr::V6(v) => match v.to_ipv4_mapped() {
                Some(v4) => p.contains_v4(u32::from(v4)),
                None => p.contains_v6(u128::from(v)),
            },
        }
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

    fn atom(&self, i: u32, f: &Fields<'_>) -> bool {
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
