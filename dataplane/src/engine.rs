//! The decision engine: evaluates a compiled ruleset for HTTP requests and
//! for packets, with the documented priority, exemption and shadow
//! semantics.
//!
//! Evaluation order is the ruleset's order (ascending priority, then file
//! order). For each rule that applies to the site and matches:
//! - `shadow` rules and `log` rules are recorded and evaluation continues
//!   (a shadow throttle still counts, to report what it would have done);
//! - `allow` ends evaluation: nothing later can deny, drop or throttle it;
//! - `deny` and `drop` end evaluation;
//! - `throttle` ends evaluation only when its key is over the limit.

use crate::limiter::{Limiter, Outcome};
use crate::request::{Fields, Packet, Request};
use rctl_compiler::ir::{Action, Atom, Cond, Key, Proto, Rule, Ruleset, StrOp, Unit, XdpKind};
use regex_automata::meta::Regex;
use std::fmt;
use std::net::IpAddr;

/// Why a ruleset could not be loaded into the engine.
#[derive(Debug)]
pub struct EngineError {
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EngineError {}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Only rules for this site (and rules for all sites) apply.
    pub site: Option<String>,
    /// Most keys each limiter tracks.
    pub max_keys_per_limiter: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            site: None,
            max_keys_per_limiter: 1 << 20,
        }
    }
}

/// The final decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No rule decided.
    Pass,
    /// An allow rule (or, on the packet path, an exemption) decided.
    Allow {
        /// Deciding rule index.
        rule: usize,
    },
    /// Answer with an HTTP error.
    Deny {
        /// Deciding rule index.
        rule: usize,
        /// Status.
        status: u16,
        /// Reason.
        reason: String,
    },
    /// Over a rate limit.
    Throttle {
        /// Deciding rule index.
        rule: usize,
        /// Status.
        status: u16,
        /// Reason.
        reason: String,
        /// Seconds for the Retry-After header (at least 1).
        retry_after_s: u64,
    },
    /// Close (or drop the packet) without a response.
    Drop {
        /// Deciding rule index.
        rule: usize,
    },
}

impl Verdict {
    /// The deciding rule, if any.
    pub fn rule(&self) -> Option<usize> {
        match self {
            Verdict::Pass => None,
            Verdict::Allow { rule }
            | Verdict::Deny { rule, .. }
            | Verdict::Throttle { rule, .. }
            | Verdict::Drop { rule } => Some(*rule),
        }
    }

    /// pass, allow, deny, throttle or drop.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Allow { .. } => "allow",
            Verdict::Deny { .. } => "deny",
            Verdict::Throttle { .. } => "throttle",
            Verdict::Drop { .. } => "drop",
        }
    }
}

/// A verdict and what shadow and log rules saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What is enforced.
    pub verdict: Verdict,
    /// Log and shadow rules that matched, with what each would have done.
    pub logged: Vec<(usize, Verdict)>,
}

struct IpTable {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl IpTable {
    fn contains(&self, ip: IpAddr) -> bool {
        fn find<T: Ord + Copy>(r: &[(T, T)], a: T) -> bool {
            let i = r.partition_point(|&(s, _)| s <= a);
            i > 0 && r[i - 1].1 >= a
        }
        match ip {
            IpAddr::V4(a) => find(&self.v4, u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => find(&self.v4, u32::from(v4)),
                None => find(&self.v6, u128::from(a)),
            },
        }
    }
}

/// A loaded ruleset, ready to decide.
pub struct Engine {
    ruleset: Ruleset,
    regexes: Vec<Option<Regex>>,
    ips: Vec<IpTable>,
    active: Vec<bool>,
    limiters: Vec<Option<Limiter>>,
}

impl Engine {
    /// Loads a ruleset, compiling its regexes.
    pub fn new(ruleset: Ruleset, config: &EngineConfig) -> Result<Engine, EngineError> {
        let mut regexes = Vec::with_capacity(ruleset.atoms.len());
        for a in &ruleset.atoms {
            regexes.push(match a {
                Atom::Str {
                    op: StrOp::Regex { pattern, ci },
                    ..
                } => Some(
                    Regex::builder()
                        .syntax(regex_automata::util::syntax::Config::new().case_insensitive(*ci))
                        .build(pattern)
                        .map_err(|e| EngineError {
                            message: format!("regex {pattern:?}: {e}"),
                        })?,
                ),
                _ => None,
            });
        }
        let ips = ruleset
            .ipsets
            .iter()
            .map(|s| {
                let (v4, v6) = s.prefixes.ranges();
                IpTable {
                    v4: v4.into_iter().map(|(a, b)| (a as u32, b as u32)).collect(),
                    v6,
                }
            })
            .collect();
        let active = ruleset
            .rules
            .iter()
            .map(|r| r.enabled && r.applies_to(config.site.as_deref()))
            .collect();
        let limiters = ruleset
            .rules
            .iter()
            .map(|r| match &r.action {
                Action::Throttle(t) => Some(Limiter::new(
                    t.limit,
                    t.period_ms,
                    t.burst,
                    t.ban_ms,
                    config.max_keys_per_limiter,
                )),
                _ => None,
            })
            .collect();
        Ok(Engine {
            ruleset,
            regexes,
            ips,
            active,
            limiters,
        })
    }

    /// The ruleset.
    pub fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// A rule by index.
    pub fn rule(&self, i: usize) -> &Rule {
        &self.ruleset.rules[i]
    }

    fn eval(&self, c: &Cond, atom: &mut impl FnMut(u32) -> bool) -> bool {
        match c {
            Cond::True => true,
            Cond::False => false,
            Cond::Atom(a) => atom(*a),
            Cond::Not(x) => !self.eval(x, atom),
            Cond::And(v) => v.iter().all(|x| self.eval(x, atom)),
            Cond::Or(v) => v.iter().any(|x| self.eval(x, atom)),
        }
    }

    fn l4_atom(&self, a: u32, ip: IpAddr, proto: Proto, port: u16) -> Option<bool> {
        Some(match &self.ruleset.atoms[a as usize] {
            Atom::Ip(s) => self.ips[*s as usize].contains(ip),
            Atom::Port(r) => r.iter().any(|&(lo, hi)| (lo..=hi).contains(&port)),
            Atom::Proto(p) => p.contains(&proto),
            _ => return None,
        })
    }

    fn request_atom(&self, a: u32, f: &Fields<'_>, req: &Request<'_>) -> bool {
        if let Some(v) = self.l4_atom(a, req.ip, Proto::Tcp, req.port) {
            return v;
        }
        match &self.ruleset.atoms[a as usize] {
            Atom::Present(field) => f.get(field).is_some(),
            Atom::Str { field, op } => {
                let Some(v) = f.get(field) else { return false };
                match op {
                    StrOp::Eq(x) => *v == **x,
                    StrOp::Prefix(x) => v.starts_with(x.as_str()),
                    StrOp::Suffix(x) => v.ends_with(x.as_str()),
                    StrOp::Contains(x) => v.contains(x.as_str()),
                    StrOp::In(xs) => xs.binary_search_by(|x| x.as_str().cmp(&v)).is_ok(),
                    StrOp::Regex { .. } => self.regexes[a as usize]
                        .as_ref()
                        .is_some_and(|r| r.is_match(v.as_bytes())),
                }
            }
            _ => false,
        }
    }

    fn key(keys: &[Key], f: Option<&Fields<'_>>, ip: IpAddr) -> Vec<u8> {
        let mut out = Vec::new();
        for k in keys {
            match k {
                Key::Ip => out.extend_from_slice(&ip_bytes(ip)),
                Key::Prefix { v4, v6 } => out.extend_from_slice(&masked(ip, *v4, *v6)),
                Key::Global | Key::Host => {
                    out.extend_from_slice(f.map_or("", |f| f.host.as_str()).as_bytes())
                }
                Key::Path => out.extend_from_slice(f.map_or("", |f| f.path.as_str()).as_bytes()),
                Key::Method => out.extend_from_slice(f.map_or("", |f| f.method).as_bytes()),
                Key::Header(h) => {
                    let v = f.and_then(|f| f.get(&rctl_compiler::ir::StrField::Header(h.clone())));
                    out.extend_from_slice(v.as_deref().unwrap_or("").as_bytes());
                }
                Key::Query(q) => {
                    let v =
                        f.and_then(|f| f.get(&rctl_compiler::ir::StrField::QueryParam(q.clone())));
                    out.extend_from_slice(v.as_deref().unwrap_or("").as_bytes());
                }
            }
            out.push(0xff);
        }
        out
    }

    fn throttle(
        &mut self,
        i: usize,
        f: Option<&Fields<'_>>,
        ip: IpAddr,
        now: u64,
    ) -> Option<Verdict> {
        let Action::Throttle(t) = &self.ruleset.rules[i].action else {
            return None;
        };
        let key = Self::key(&t.keys, f, ip);
        let limiter = self.limiters[i].as_mut()?;
        match limiter.hit(&key, now) {
            Outcome::Allowed => None,
            Outcome::Limited { retry_after_ns } => Some(Verdict::Throttle {
                rule: i,
                status: t.status,
                reason: t.reason.clone(),
                retry_after_s: retry_after_ns.div_ceil(1_000_000_000).max(1),
            }),
        }
    }

    fn terminal(&self, i: usize) -> Option<Verdict> {
        match &self.ruleset.rules[i].action {
            Action::Allow => Some(Verdict::Allow { rule: i }),
            Action::Drop => Some(Verdict::Drop { rule: i }),
            Action::Deny { status, reason } => Some(Verdict::Deny {
                rule: i,
                status: *status,
                reason: reason.clone(),
            }),
            Action::Log | Action::Throttle(_) => None,
        }
    }

    /// Decides an HTTP request.
    pub fn decide_request(&mut self, req: &Request<'_>) -> Decision {
        let fields = Fields::new(req);
        let mut logged = Vec::new();
        for i in 0..self.ruleset.rules.len() {
            let r = &self.ruleset.rules[i];
            if !self.active[i] || r.is_packet_limit() {
                continue;
            }
            if !self.eval(&r.cond, &mut |a| self.request_atom(a, &fields, req)) {
                continue;
            }
            let shadow = r.shadow || r.action == Action::Log;
            let v = match self.terminal(i) {
                Some(v) => Some(v),
                None => self.throttle(i, Some(&fields), req.ip, req.time_ns),
            };
            if shadow {
                logged.push((i, v.unwrap_or(Verdict::Pass)));
                continue;
            }
            if let Some(v) = v {
                return Decision { verdict: v, logged };
            }
        }
        Decision {
            verdict: Verdict::Pass,
            logged,
        }
    }

    /// Decides a packet exactly as the XDP program does: only rules the plan
    /// puts on the packet plane take part; an exemption passes the packet
    /// on to user space.
    pub fn decide_packet(&mut self, p: &Packet) -> Decision {
        for i in 0..self.ruleset.rules.len() {
            let Some(x) = &self.ruleset.plan[i].xdp else {
                continue;
            };
            if !self.active[i] {
                continue;
            }
            let hit = x.dnf.iter().any(|t| {
                t.iter().all(|&(a, neg)| {
                    self.l4_atom(a, p.src, p.proto, p.dst_port).unwrap_or(false) != neg
                })
            });
            if !hit {
                continue;
            }
            let v = match x.kind {
                XdpKind::Allow | XdpKind::Exempt => Some(Verdict::Allow { rule: i }),
                XdpKind::Drop => Some(Verdict::Drop { rule: i }),
                XdpKind::Throttle => {
                    let counts = match &self.ruleset.rules[i].action {
                        Action::Throttle(t) => {
                            t.unit == Unit::Packets || (p.syn && p.proto == Proto::Tcp)
                        }
                        _ => false,
                    };
                    if counts {
                        self.throttle(i, None, p.src, p.time_ns)
                    } else {
                        None
                    }
                }
            };
            if let Some(v) = v {
                return Decision {
                    verdict: v,
                    logged: Vec::new(),
                };
            }
        }
        Decision {
            verdict: Verdict::Pass,
            logged: Vec::new(),
        }
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn masked(ip: IpAddr, v4: u8, v6: u8) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => {
            let m = if v4 == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(v4.min(32)))
            };
            let mut b = (u32::from(a) & m).to_be_bytes().to_vec();
            b.push(v4);
            b
        }
        IpAddr::V6(a) => {
            let m = if v6 == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(v6.min(128)))
            };
            let mut b = (u128::from(a) & m).to_be_bytes().to_vec();
            b.push(v6);
            b
        }
    }
}
