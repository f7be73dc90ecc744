//! What every evaluator shares: verdicts, and the one implementation of the
//! priority, exemption and shadow semantics. Evaluators differ only in how
//! they decide whether a rule's condition holds.
//!
//! Evaluation order is the ruleset's order (ascending priority, then file
//! order). For each rule that applies to the site and matches:
//! - `shadow` rules and `log` rules are recorded and evaluation continues
//!   (a shadow throttle still counts, to report what it would have done);
//! - `allow` ends evaluation: nothing later can deny, drop or throttle it;
//! - `deny` and `drop` end evaluation;
//! - `throttle` ends evaluation only when its key is over the limit.

use crate::limiter::{Limiter, Outcome};
use crate::request::Fields;
use rctl_compiler::ir::{Action, Atom, Bucket, Key, Rule, Ruleset, StrField};
use std::fmt;
use std::net::IpAddr;

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

    /// Whether the request is stopped: denied, throttled or dropped.
    pub fn is_stop(&self) -> bool {
        matches!(
            self,
            Verdict::Deny { .. } | Verdict::Throttle { .. } | Verdict::Drop { .. }
        )
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

/// One rule's part in a decision, for traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Rule index.
    pub rule: usize,
    /// What its match did: the verdict it gave, or would give in shadow.
    pub effect: Verdict,
    /// Whether it was only recorded (log or shadow).
    pub shadow: bool,
}

/// Throttle outcomes decided elsewhere, for a replay that runs each
/// throttle rule's limiter apart from the rest of the decision (a
/// distributed dry run: every request that reaches one throttle rule,
/// shuffled by its key and run through that rule's limiter in time
/// order, then the decisions resumed). With a replay in the scratch
/// ([`crate::Scratch::replay`]), a throttle rule whose outcome is in
/// `outcomes` takes it instead of counting a hit; the first one that is
/// not is recorded in `pending` with its key, counts nothing, and lets
/// the request through (the decision is then incomplete until its
/// outcome is known, and the caller discards it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// Per throttle rule reached so far: its index and what its limiter
    /// said of this request.
    pub outcomes: Vec<(usize, Outcome)>,
    /// The first throttle rule reached whose outcome is not known yet,
    /// with the limiter key of this request for it.
    pub pending: Option<(usize, Vec<u8>)>,
}

impl Replay {
    /// Empties both parts.
    pub fn clear(&mut self) {
        self.outcomes.clear();
        self.pending = None;
    }
}

/// A ruleset that names a predicate, ip set or plan it does not hold.
/// The artifact decoder rejects these (`rctl_compiler::validate`), but a
/// ruleset built in memory can have them; loading one fails with this,
/// rather than its tests silently never matching or a decision panicking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// A rule's condition names a predicate that does not exist.
    Atom {
        /// Rule index.
        rule: usize,
        /// The missing predicate.
        atom: u32,
    },
    /// An address predicate names an ip set that does not exist.
    IpSet {
        /// Predicate index.
        atom: usize,
        /// The missing set.
        set: u32,
    },
    /// Plans and rules differ in number.
    PlanCount {
        /// Plans.
        plans: usize,
        /// Rules.
        rules: usize,
    },
    /// A rule's XDP plan names a predicate that does not exist.
    PlanAtom {
        /// Rule index.
        rule: usize,
        /// The missing predicate.
        atom: u32,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Atom { rule, atom } => {
                write!(
                    f,
                    "rule {rule} names predicate {atom}, which does not exist"
                )
            }
            IndexError::IpSet { atom, set } => {
                write!(
                    f,
                    "predicate {atom} names ip set {set}, which does not exist"
                )
            }
            IndexError::PlanCount { plans, rules } => write!(f, "{plans} plans for {rules} rules"),
            IndexError::PlanAtom { rule, atom } => write!(
                f,
                "the XDP plan of rule {rule} names predicate {atom}, which does not exist"
            ),
        }
    }
}

impl std::error::Error for IndexError {}

impl IndexError {
    /// Checks every predicate, ip set and plan index of `rs`.
    pub fn check(rs: &Ruleset) -> Result<(), IndexError> {
        let natoms = rs.atoms.len();
        for (atom, a) in rs.atoms.iter().enumerate() {
            if let Atom::Ip(set) | Atom::DstIp(set) = a {
                if *set as usize >= rs.ipsets.len() {
                    return Err(IndexError::IpSet { atom, set: *set });
                }
            }
        }
        if rs.plan.len() != rs.rules.len() {
            return Err(IndexError::PlanCount {
                plans: rs.plan.len(),
                rules: rs.rules.len(),
            });
        }
        for (rule, (r, p)) in rs.rules.iter().zip(&rs.plan).enumerate() {
            let mut missing = None;
            r.cond.visit_atoms(&mut |a| {
                if a as usize >= natoms {
                    missing.get_or_insert(a);
                }
            });
            if let Some(atom) = missing {
                return Err(IndexError::Atom { rule, atom });
            }
            let mut terms = p.xdp.iter().flat_map(|x| x.dnf.iter().flatten());
            if let Some(&(atom, _)) = terms.find(|(a, _)| *a as usize >= natoms) {
                return Err(IndexError::PlanAtom { rule, atom });
            }
        }
        Ok(())
    }
}

/// The ruleset, its site selection and its limiters.
pub(crate) struct Core {
    pub ruleset: Ruleset,
    pub active: Vec<bool>,
    limiters: Vec<Option<Limiter>>,
}

impl Core {
    /// Fails if the ruleset names anything it does not hold: after this,
    /// every index in it can be used as it is.
    pub fn new(ruleset: Ruleset, config: &EngineConfig) -> Result<Core, IndexError> {
        IndexError::check(&ruleset)?;
        let active = ruleset
            .rules
            .iter()
            .map(|r| r.enabled && r.applies_to(config.site.as_deref()))
            .collect();
        let limiters = ruleset
            .rules
            .iter()
            .map(|r| match &r.action {
                Action::Throttle(t) if t.bucket == Bucket::Vsthrottle => Some(Limiter::vsthrottle(
                    t.limit,
                    t.period_ms,
                    t.ban_ms,
                    config.max_keys_per_limiter,
                )),
                Action::Throttle(t) => {
                    let new = if t.shared {
                        Limiter::new_shared
                    } else {
                        Limiter::new
                    };
                    Some(new(
                        t.limit,
                        t.period_ms,
                        t.burst,
                        t.ban_ms,
                        config.max_keys_per_limiter,
                    ))
                }
                _ => None,
            })
            .collect();
        Ok(Core {
            ruleset,
            active,
            limiters,
        })
    }

    pub fn rule(&self, i: usize) -> &Rule {
        &self.ruleset.rules[i]
    }

    pub fn limiter(&self, i: usize) -> Option<&Limiter> {
        self.limiters.get(i).and_then(Option::as_ref)
    }

    /// Rule `i`'s limiter, mutably.
    pub fn limiter_mut(&mut self, i: usize) -> Option<&mut Limiter> {
        self.limiters.get_mut(i).and_then(Option::as_mut)
    }

    /// Takes over `old`'s limiter state rule by rule (see [`crate::carry`]).
    pub fn carry_limiters(&mut self, old: &Core) -> crate::carry::Carry {
        crate::carry::link(
            &self.ruleset.rules,
            &mut self.limiters,
            &old.ruleset.rules,
            &old.limiters,
        )
    }

    /// Whether rule `i` takes part in request decisions.
    pub fn on_request_path(&self, i: usize) -> bool {
        self.active[i] && !self.ruleset.rules[i].is_packet_limit()
    }

    /// The limiter key of a request or packet: each part with its length
    /// in front (8 bytes, little-endian), so that different parts can never
    /// make the same key (`?a=x&b=%05%00%00%00y` and `?a=x%01%00%00%00&b=y`
    /// do not share a bucket). An absent header or query parameter counts
    /// as an empty one.
    fn key(keys: &[Key], f: Option<&Fields<'_>>, ip: IpAddr, out: &mut Vec<u8>) {
        out.clear();
        for k in keys {
            let at = out.len();
            out.extend_from_slice(&[0; 8]);
            match k {
                Key::Ip => match ip {
                    IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                    IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
                },
                Key::Prefix { v4, v6 } => match ip {
                    IpAddr::V4(a) => {
                        let m = if *v4 == 0 {
                            0
                        } else {
                            u32::MAX << (32 - u32::from((*v4).min(32)))
                        };
                        out.extend_from_slice(&(u32::from(a) & m).to_be_bytes());
                        out.push(*v4);
                    }
                    IpAddr::V6(a) => {
                        let m = if *v6 == 0 {
                            0
                        } else {
                            u128::MAX << (128 - u32::from((*v6).min(128)))
                        };
                        out.extend_from_slice(&(u128::from(a) & m).to_be_bytes());
                        out.push(*v6);
                    }
                },
                // One bucket for everything: the key part stays empty.
                Key::Server => {}
                Key::Global | Key::Host => out.extend_from_slice(f.map_or(&b""[..], |f| &f.host)),
                Key::Path => out.extend_from_slice(f.map_or(&b""[..], |f| &f.path)),
                Key::Method => out.extend_from_slice(f.map_or(&b""[..], |f| f.method)),
                Key::Header(h) => {
                    if let Some(v) = f.and_then(|f| f.header(h.as_bytes())) {
                        out.extend_from_slice(v);
                    }
                }
                Key::Query(q) => {
                    if let Some(v) = f.and_then(|f| f.get(&StrField::QueryParam(q.clone()))) {
                        out.extend_from_slice(&v);
                    }
                }
            }
            let len = (out.len() - at - 8) as u64;
            out[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
    }

    /// Counts a hit in rule `i`'s limiter; the throttle verdict if over.
    pub fn throttle(
        &self,
        i: usize,
        f: Option<&Fields<'_>>,
        ip: IpAddr,
        now: u64,
        key: &mut Vec<u8>,
        replay: Option<&mut Replay>,
    ) -> Option<Verdict> {
        let Action::Throttle(t) = &self.ruleset.rules[i].action else {
            return None;
        };
        Self::key(&t.keys, f, ip, key);
        let outcome = match replay {
            None => self.limiter(i)?.hit(key, now),
            Some(r) => match r.outcomes.iter().find(|(rule, _)| *rule == i) {
                Some((_, o)) => *o,
                None => {
                    if r.pending.is_none() {
                        r.pending = Some((i, key.clone()));
                    }
                    Outcome::Allowed
                }
            },
        };
        match outcome {
            Outcome::Allowed => None,
            Outcome::Limited { retry_after_ns } => Some(Verdict::Throttle {
                rule: i,
                status: t.status,
                reason: t.reason.clone(),
                retry_after_s: retry_after_ns.div_ceil(1_000_000_000).max(1),
            }),
        }
    }

    /// Runs the request semantics over `candidates` (rule indices in
    /// ascending order), asking `matches` whether each rule's condition holds.
    pub fn decide_request(
        &self,
        f: &Fields<'_>,
        candidates: impl Iterator<Item = usize>,
        mut matches: impl FnMut(usize) -> bool,
        mut trace: Option<&mut Vec<Step>>,
        mut replay: Option<&mut Replay>,
    ) -> Decision {
        let req = f.request();
        let mut logged = Vec::new();
        let mut key = Vec::new();
        for i in candidates {
            if !self.on_request_path(i) || !matches(i) {
                continue;
            }
            let r = &self.ruleset.rules[i];
            let shadow = r.shadow || r.action == Action::Log;
            let v = match &r.action {
                Action::Allow => Some(Verdict::Allow { rule: i }),
                Action::Drop => Some(Verdict::Drop { rule: i }),
                Action::Deny { status, reason } => Some(Verdict::Deny {
                    rule: i,
                    status: *status,
                    reason: reason.clone(),
                }),
                Action::Log => None,
                Action::Throttle(_) => self.throttle(
                    i,
                    Some(f),
                    req.ip,
                    req.time_ns,
                    &mut key,
                    replay.as_deref_mut(),
                ),
            };
            if let Some(t) = trace.as_deref_mut() {
                t.push(Step {
                    rule: i,
                    effect: v.clone().unwrap_or(Verdict::Pass),
                    shadow,
                });
            }
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
}

impl Core {
    /// Runs the packet semantics (what XDP does) given a test for atoms.
    pub fn decide_packet(
        &self,
        p: &crate::request::Packet,
        atom: impl Fn(u32) -> bool,
    ) -> Decision {
        use rctl_compiler::ir::{Proto, Unit, XdpKind};
        let mut key = Vec::new();
        for i in 0..self.ruleset.rules.len() {
            let Some(x) = &self.ruleset.plan[i].xdp else {
                continue;
            };
            if !self.active[i]
                || !x
                    .dnf
                    .iter()
                    .any(|t| t.iter().all(|&(a, neg)| atom(a) != neg))
            {
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
                        self.throttle(i, None, p.src, p.time_ns, &mut key, None)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's bytes are a contract between hosts: a `shared`
    /// throttle's site-wide id is a hash of them, so every host and every
    /// version must build the same bytes for the same request.
    #[test]
    fn key_parts_are_length_prefixed_little_endian() {
        let mut out = Vec::new();
        let keys = [
            Key::Ip,
            Key::Server,
            Key::Prefix { v4: 24, v6: 64 },
            Key::Prefix { v4: 0, v6: 0 },
        ];
        Core::key(&keys, None, "192.0.2.77".parse().unwrap(), &mut out);
        let mut want = Vec::new();
        want.extend_from_slice(&4u64.to_le_bytes());
        want.extend_from_slice(&[192, 0, 2, 77]);
        want.extend_from_slice(&0u64.to_le_bytes());
        want.extend_from_slice(&5u64.to_le_bytes());
        want.extend_from_slice(&[192, 0, 2, 0, 24]);
        want.extend_from_slice(&5u64.to_le_bytes());
        want.extend_from_slice(&[0, 0, 0, 0, 0]);
        assert_eq!(out, want);
        Core::key(
            &keys[2..3],
            None,
            "2001:db8:1:2:3::4".parse().unwrap(),
            &mut out,
        );
        let mut want = 17u64.to_le_bytes().to_vec();
        want.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2]);
        want.extend_from_slice(&[0; 8]);
        want.push(64);
        assert_eq!(out, want);
    }
}
