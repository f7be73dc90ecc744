//! Decisions on inputs that do not carry every field of a request: a log
//! line holds the fields its format writes, and no more.
//!
//! A field an input lacks is never guessed. Each atom reading such a field
//! is *unknown*; conditions are evaluated three-valued (Kleene: `false and
//! unknown` is false, `true or unknown` is true, `not unknown` is
//! unknown), and the rules are run in order as [`crate::core`] runs them:
//! a rule whose condition is unknown makes the verdict unknown from there
//! on, unless an earlier rule decided. A throttle whose condition holds
//! but whose key reads a missing field (or that is not run at all, on a
//! sampled input) makes it unknown too. Shadow and log rules never decide,
//! so an unknown one only leaves its own match unknown.
//!
//! The packet plane is judged on the request's addresses and port as XDP
//! would judge its packets: a drop stops the request, an exemption or an
//! L3/L4 allow passes it on (one that is unknown leaves the request
//! unknown only if a later drop may hold); packet and connection limits count packets
//! and connections, which a log does not hold, so they take no part (as on
//! a capture, where they stop packets, never a request's last packet).
//!
//! With nothing missing the engine's normal path runs unchanged, and this
//! path decides exactly as it does (`partial_tests`).

use crate::core::{Decision, Step, Verdict};
use crate::matcher::AtomSet;
use crate::request::{Fields, Packet, Request};
use crate::{Engine, Scratch};
use rctl_compiler::ir::{Action, Atom, Cond, Key, Proto, StrField, XdpKind};

/// The request fields an input carries. The client address and the
/// arrival time are always carried (an input without them has no
/// requests); the protocol is TCP (HTTP/1 and HTTP/2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// The method.
    pub method: bool,
    /// The Host header (or the authority of an absolute URL).
    pub host: bool,
    /// The path.
    pub path: bool,
    /// The query string (and so every query parameter).
    pub query: bool,
    /// The request target as sent (VCL's `req.url`).
    pub url: bool,
    /// Which headers are carried.
    pub headers: KnownHeaders,
    /// The address the client reached.
    pub dst_ip: bool,
    /// The destination port.
    pub port: bool,
    /// Whether every request is there, so that throttles can be run; on a
    /// sample they cannot, and a throttle that matches leaves the verdict
    /// unknown from there on.
    pub complete: bool,
    /// Headers logged only up to a length (lower-case): a value may be
    /// cut, and a request says which of its values may be (see
    /// [`Engine::judge_request_cut`]).
    pub capped: Vec<String>,
}

/// The request headers Wikimedia's webrequest schema carries: each
/// column, and its header. `rctl-logs` reads them, the agent's tap
/// writes them.
pub const WEBREQUEST_HEADERS: [(&str, &str); 6] = [
    ("user_agent", "user-agent"),
    ("referer", "referer"),
    ("accept_language", "accept-language"),
    ("x_analytics", "x-analytics"),
    ("accept", "accept"),
    ("range", "range"),
];

/// Which headers an input carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnownHeaders {
    /// Every header (a capture).
    All,
    /// Only these, lower-case.
    Only(Vec<String>),
}

impl Known {
    /// Every field: what a capture carries.
    pub fn all() -> Known {
        Known {
            method: true,
            host: true,
            path: true,
            query: true,
            url: true,
            headers: KnownHeaders::All,
            dst_ip: true,
            port: true,
            complete: true,
            capped: Vec::new(),
        }
    }

    /// Nothing but the client address and the time.
    pub fn none() -> Known {
        Known {
            method: false,
            host: false,
            path: false,
            query: false,
            url: false,
            headers: KnownHeaders::Only(Vec::new()),
            dst_ip: false,
            port: false,
            complete: true,
            capped: Vec::new(),
        }
    }

    /// Whether the header with this name (any case) is carried.
    pub fn has_header(&self, name: &str) -> bool {
        match &self.headers {
            KnownHeaders::All => true,
            KnownHeaders::Only(v) => v.iter().any(|h| h.eq_ignore_ascii_case(name)),
        }
    }

    /// Whether a string field is carried.
    pub fn has(&self, f: &StrField) -> bool {
        match f {
            StrField::Method => self.method,
            StrField::Host => self.host,
            StrField::Path => self.path,
            StrField::Query | StrField::QueryParam(_) => self.query,
            StrField::Url => self.url,
            StrField::Header(h) => self.has_header(h),
        }
    }

    /// The field an atom reads, as the language writes it, if the input
    /// lacks it.
    pub fn missing(&self, a: &Atom) -> Option<String> {
        match a {
            Atom::Str { field, .. } | Atom::Present(field) => {
                (!self.has(field)).then(|| field.display())
            }
            Atom::Ip(_) | Atom::Proto(_) => None,
            Atom::DstIp(_) => (!self.dst_ip).then(|| "dst_ip".to_string()),
            Atom::Port(_) => (!self.port).then(|| "port".to_string()),
        }
    }

    fn missing_key(&self, k: &Key) -> Option<String> {
        match k {
            Key::Ip | Key::Prefix { .. } | Key::Server => None,
            Key::Global | Key::Host => (!self.host).then(|| "host".to_string()),
            Key::Path => (!self.path).then(|| "path".to_string()),
            Key::Method => (!self.method).then(|| "method".to_string()),
            Key::Header(h) => (!self.has_header(h)).then(|| StrField::Header(h.clone()).display()),
            Key::Query(q) => (!self.query).then(|| StrField::QueryParam(q.clone()).display()),
        }
    }
}

/// Three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    /// Holds.
    True,
    /// Does not hold.
    False,
    /// Depends on a field the input lacks.
    Unknown,
}

/// Kleene's evaluation of `c`: `set` holds the atoms that hold,
/// `unknown` says which atoms read a missing field.
pub fn eval3(c: &Cond, set: &AtomSet, unknown: &[bool]) -> Tri {
    match c {
        Cond::True => Tri::True,
        Cond::False => Tri::False,
        Cond::Atom(a) => {
            if unknown.get(*a as usize).copied().unwrap_or(false) {
                Tri::Unknown
            } else if set.contains(*a) {
                Tri::True
            } else {
                Tri::False
            }
        }
        Cond::Not(x) => match eval3(x, set, unknown) {
            Tri::True => Tri::False,
            Tri::False => Tri::True,
            Tri::Unknown => Tri::Unknown,
        },
        Cond::And(v) => {
            let mut out = Tri::True;
            for x in v {
                match eval3(x, set, unknown) {
                    Tri::False => return Tri::False,
                    Tri::Unknown => out = Tri::Unknown,
                    Tri::True => {}
                }
            }
            out
        }
        Cond::Or(v) => {
            let mut out = Tri::False;
            for x in v {
                match eval3(x, set, unknown) {
                    Tri::True => return Tri::True,
                    Tri::Unknown => out = Tri::Unknown,
                    Tri::False => {}
                }
            }
            out
        }
    }
}

/// Clauses of known atoms (`unknown` marks the others) that refute `c`:
/// if no atom of one clause holds, `c` is false (three-valued, as
/// [`eval3`] has it), whatever the unknown atoms hold. A known atom is
/// its own clause; a conjunction has its parts' clauses; a disjunction
/// whose every branch has one has their first clauses together (none
/// holding makes every branch false); anything else has none. Testing
/// them costs a few loads, where evaluating the condition walks its tree.
pub(crate) fn clauses(c: &Cond, unknown: &[bool]) -> Vec<Box<[u32]>> {
    match c {
        Cond::Atom(a) if !unknown.get(*a as usize).copied().unwrap_or(false) => {
            vec![Box::new([*a])]
        }
        Cond::And(v) => v.iter().flat_map(|x| clauses(x, unknown)).collect(),
        Cond::Or(v) => {
            let mut one: Vec<u32> = Vec::new();
            for x in v {
                match clauses(x, unknown).first() {
                    Some(c) => one.extend_from_slice(c),
                    None => return Vec::new(),
                }
            }
            one.sort_unstable();
            one.dedup();
            if one.is_empty() {
                Vec::new()
            } else {
                vec![one.into_boxed_slice()]
            }
        }
        _ => Vec::new(),
    }
}

/// What an input lacks, compiled against one engine: which atoms are
/// unknown, which rules can be unknown and why.
#[derive(Debug, Clone)]
pub struct Blind {
    unknown: Vec<bool>,
    /// Per rule: its throttle cannot be run (key field missing, or a
    /// sample).
    key: Vec<bool>,
    /// Request-path rules whose condition reads a missing field.
    extra: Vec<u32>,
    /// Request-path rules that read a missing field, in their condition
    /// or their throttle's key, each with its clauses of known atoms
    /// ([`clauses`]): the condition can hold only if every clause has an
    /// atom that holds, so a request on which each of these rules has a
    /// clause with none is decided on the normal path.
    check: Vec<(u32, Vec<Box<[u32]>>)>,
    /// Whether a request `check` finds decided goes the normal path (off
    /// only in tests, which compare the two paths).
    pub(crate) shortcut: bool,
    /// Whether any rule has a packet-plane part (the packet plane is then
    /// judged first).
    packet_plane: bool,
    /// The packet-plane drops, allows and exemptions, in order (active,
    /// not limits): what [`Engine::judge_packet_plane`] walks.
    packet_rules: Vec<u32>,
    /// Per rule: what it reads that the input lacks (empty if nothing).
    missing: Vec<Vec<String>>,
    /// Nothing is missing for this ruleset: the normal path decides.
    none: bool,
    /// Headers that may be cut, and what reads them.
    cuts: Vec<crate::cut::CutHeader>,
}

impl Blind {
    /// Per rule: the fields it reads that the input lacks, as the
    /// language writes them (`header("referer")`, `port`), and
    /// `(sampled input)` for a throttle that a sample cannot run.
    pub fn missing(&self, rule: usize) -> &[String] {
        self.missing.get(rule).map_or(&[], Vec::as_slice)
    }

    /// Whether the input carries every field the ruleset reads.
    pub fn is_complete(&self) -> bool {
        self.none
    }
}

/// How one request fared on an input that may lack fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// A packet-plane rule (a drop) stopped it before the HTTP plane.
    Stopped(usize),
    /// The verdict is known.
    Decided(Decision),
    /// The verdict is unknown from this rule on; `logged` has the shadow
    /// and log rules matched before it.
    Unknown {
        /// The rule whose condition or key could not be evaluated.
        rule: usize,
        /// Log and shadow rules that matched before it.
        logged: Vec<(usize, Verdict)>,
    },
}

/// The part of a partial decision reports need: every rule that matched
/// with what it did, and every rule left unknown (shadow and log rules
/// whose condition was unknown, and the rule that made the verdict
/// unknown). A throttle that matched but could not be run (its key reads
/// a missing field, or the input is a sample) is in both lists: its
/// step's effect is then not what it did, which is unknown.
#[derive(Debug, Clone, Default)]
pub struct PartialTrace {
    /// Rules that matched, in order.
    pub steps: Vec<Step>,
    /// Rules whose condition or key could not be evaluated, in order.
    pub unknown: Vec<usize>,
}

impl PartialTrace {
    /// Empties both lists.
    pub fn clear(&mut self) {
        self.steps.clear();
        self.unknown.clear();
    }
}

impl Engine {
    /// Compiles what an input lacks for this engine's ruleset.
    pub fn blind(&self, known: &Known) -> Blind {
        let rs = self.ruleset();
        let unknown: Vec<bool> = rs
            .atoms
            .iter()
            .map(|a| known.missing(a).is_some())
            .collect();
        let mut missing = Vec::with_capacity(rs.rules.len());
        let mut key = Vec::with_capacity(rs.rules.len());
        let mut extra = Vec::new();
        let mut check = Vec::new();
        let mut none = true;
        for (i, r) in rs.rules.iter().enumerate() {
            let mut m: Vec<String> = Vec::new();
            r.cond.visit_atoms(&mut |a| {
                if let Some(f) = rs.atoms.get(a as usize).and_then(|a| known.missing(a)) {
                    m.push(f);
                }
            });
            let cond_unknown = !m.is_empty();
            let mut k = false;
            if let Action::Throttle(t) = &r.action {
                if !r.is_packet_limit() {
                    for key in &t.keys {
                        if let Some(f) = known.missing_key(key) {
                            m.push(f);
                            k = true;
                        }
                    }
                    if !known.complete {
                        m.push("(sampled input)".to_string());
                        k = true;
                    }
                }
            }
            if r.is_packet_limit() {
                // They count packets and connections, which an input of
                // requests does not hold; they decide no request.
                m = vec!["(packets and connections)".to_string()];
            }
            m.sort();
            m.dedup();
            let relevant = self.core.active[i]
                && (self.core.on_request_path(i) || self.ruleset().plan[i].xdp.is_some());
            if relevant && (cond_unknown || k) && !r.is_packet_limit() {
                none = false;
            }
            if cond_unknown && self.core.on_request_path(i) {
                extra.push(i as u32);
            }
            if (cond_unknown || k) && self.core.on_request_path(i) {
                check.push((i as u32, clauses(&r.cond, &unknown)));
            }
            key.push(k);
            missing.push(if relevant { m } else { Vec::new() });
        }
        // The packet plane's atoms (ip sets, ports, protocols) too.
        for (i, p) in rs.plan.iter().enumerate() {
            if let Some(x) = &p.xdp {
                let reads_unknown = x
                    .dnf
                    .iter()
                    .flatten()
                    .any(|&(a, _)| unknown.get(a as usize).copied().unwrap_or(false));
                if reads_unknown && self.core.active[i] && x.kind != XdpKind::Throttle {
                    none = false;
                }
            }
        }
        Blind {
            unknown,
            key,
            extra,
            check,
            shortcut: true,
            packet_plane: rs.plan.iter().any(|p| p.xdp.is_some()),
            packet_rules: (0..rs.plan.len())
                .filter(|&i| {
                    rs.plan[i]
                        .xdp
                        .as_ref()
                        .is_some_and(|x| self.core.active[i] && x.kind != XdpKind::Throttle)
                })
                .map(|i| i as u32)
                .collect(),
            missing,
            none,
            cuts: crate::cut::compile(rs, &known.capped),
        }
    }

    /// Decides a request from an input described by `blind` (see the
    /// module's documentation), recording matched and unknown rules in
    /// `trace` (cleared first).
    pub fn judge_request(
        &self,
        req: &Request<'_>,
        blind: &Blind,
        s: &mut Scratch,
        trace: &mut PartialTrace,
    ) -> Judged {
        self.judge_request_cut(req, blind, &[], s, trace)
    }

    /// [`Engine::judge_request`] for a request whose headers named in
    /// `cut` (of the input's [`Known::capped`]) may have been cut at
    /// their logged length: each atom on them is known only where every
    /// longer value would give it the same truth, and a throttle keyed by
    /// one cannot be run, on that request or any later one (its bucket
    /// missed a request: `s` remembers it).
    pub fn judge_request_cut(
        &self,
        req: &Request<'_>,
        blind: &Blind,
        cut: &[&[u8]],
        s: &mut Scratch,
        trace: &mut PartialTrace,
    ) -> Judged {
        trace.clear();
        // Judging the packet plane leaves the request's packet atoms in
        // `s.atoms`: the request's decision goes on from them.
        let after_packet = blind.packet_plane;
        if after_packet {
            if let Some(j) = self.judge_packet_plane(req, blind, s) {
                if let Judged::Unknown { rule, .. } = j {
                    trace.unknown.push(rule);
                }
                return j;
            }
        }
        let cuts = !cut.is_empty() && !blind.cuts.is_empty();
        // A throttle that missed a cut key decides nothing from then on.
        if blind.none && !cuts && s.missed.is_empty() {
            let d = self.decide_steps(req, s, &mut trace.steps, after_packet);
            return Judged::Decided(d);
        }
        let f = Fields::new(req);
        if after_packet {
            self.candidates_after_packet(&f, s);
        } else {
            self.candidates_for(&f, s);
        }
        // Most requests are decided whatever the missing fields hold: the
        // rules reading them, in a condition or a throttle's key, are
        // false on what is known (a title rule on another path, a throttle
        // by host on a log without hosts). Skipping a false rule changes
        // no decision, and every other rule reads only known atoms, on
        // which the two-valued evaluation is the three-valued one: the
        // normal path decides.
        if blind.shortcut
            && !cuts
            && s.missed.is_empty()
            && blind.check.iter().all(|(i, refute)| {
                refute
                    .iter()
                    .any(|c| !c.iter().any(|&a| s.atoms.contains(a)))
                    || eval3(&self.core.rule(*i as usize).cond, &s.atoms, &blind.unknown)
                        == Tri::False
            })
        {
            let atoms = &s.atoms;
            let core = &self.core;
            return Judged::Decided(core.decide_request(
                &f,
                s.candidates.iter().map(|&i| i as usize),
                |i| crate::engine::eval(&core.rule(i).cond, atoms),
                Some(&mut trace.steps),
                s.replay.as_mut(),
            ));
        }
        let refined = if cuts {
            crate::cut::refine(&blind.cuts, cut, &f, &s.atoms, &blind.unknown)
        } else {
            None
        };
        let (unknown, keyed): (&[bool], &[u32]) = match &refined {
            Some(r) => {
                s.candidates.extend_from_slice(&r.rules);
                (&r.unknown, &r.keyed)
            }
            None => (&blind.unknown, &[]),
        };
        s.candidates.extend_from_slice(&blind.extra);
        s.candidates.sort_unstable();
        s.candidates.dedup();
        let core = &self.core;
        let mut logged = Vec::new();
        let mut key = Vec::new();
        for &i in &s.candidates {
            let i = i as usize;
            if !core.on_request_path(i) {
                continue;
            }
            let r = core.rule(i);
            let shadow = r.shadow || r.action == Action::Log;
            let holds = eval3(&r.cond, &s.atoms, unknown);
            if holds == Tri::False {
                continue;
            }
            let throttle = matches!(r.action, Action::Throttle(_));
            // A bucket that missed a request (its key cut) counts one
            // request fewer than live from then on.
            let cut_key = throttle && keyed.contains(&(i as u32));
            if cut_key && !s.missed.contains(&(i as u32)) {
                s.missed.push(i as u32);
            }
            let unkeyed = blind.key[i] || cut_key || s.missed.contains(&(i as u32));
            if holds == Tri::Unknown || (throttle && unkeyed) {
                trace.unknown.push(i);
                if holds == Tri::True {
                    // A throttle whose condition holds matched, though what
                    // it did is unknown: the step is recorded, its effect
                    // is not (the rule is in `trace.unknown`).
                    trace.steps.push(Step {
                        rule: i,
                        effect: Verdict::Pass,
                        shadow,
                    });
                }
                if shadow {
                    continue;
                }
                return Judged::Unknown { rule: i, logged };
            }
            let v = match &r.action {
                Action::Allow => Some(Verdict::Allow { rule: i }),
                Action::Drop => Some(Verdict::Drop { rule: i }),
                Action::Deny { status, reason } => Some(Verdict::Deny {
                    rule: i,
                    status: *status,
                    reason: reason.clone(),
                }),
                Action::Log => None,
                Action::Throttle(_) => core.throttle(
                    i,
                    Some(&f),
                    req.ip,
                    req.time_ns,
                    &mut key,
                    s.replay.as_mut(),
                ),
            };
            trace.steps.push(Step {
                rule: i,
                effect: v.clone().unwrap_or(Verdict::Pass),
                shadow,
            });
            if shadow {
                logged.push((i, v.unwrap_or(Verdict::Pass)));
                continue;
            }
            if let Some(v) = v {
                return Judged::Decided(Decision { verdict: v, logged });
            }
        }
        Judged::Decided(Decision {
            verdict: Verdict::Pass,
            logged,
        })
    }

    /// The packet plane for a request from a log: what XDP would have
    /// done to its packets. `None`: the request reaches the HTTP plane.
    fn judge_packet_plane(
        &self,
        req: &Request<'_>,
        blind: &Blind,
        s: &mut Scratch,
    ) -> Option<Judged> {
        let rs = self.ruleset();
        if !blind.packet_plane {
            return None;
        }
        s.atoms.clear();
        let p = Packet {
            src: req.ip,
            dst: req.dst,
            proto: Proto::Tcp,
            dst_port: req.port,
            syn: false,
            time_ns: req.time_ns,
        };
        self.matcher.packet_atoms(&p, &mut s.atoms);
        let mut pending = None;
        for &i in &blind.packet_rules {
            let i = i as usize;
            let Some(x) = &rs.plan[i].xdp else { continue };
            let mut holds = Tri::False;
            for t in &x.dnf {
                let mut term = Tri::True;
                for &(a, neg) in t {
                    let v = if blind.unknown.get(a as usize).copied().unwrap_or(false) {
                        Tri::Unknown
                    } else if s.atoms.contains(a) != neg {
                        Tri::True
                    } else {
                        Tri::False
                    };
                    match v {
                        Tri::False => {
                            term = Tri::False;
                            break;
                        }
                        Tri::Unknown => term = Tri::Unknown,
                        Tri::True => {}
                    }
                }
                match term {
                    Tri::True => {
                        holds = Tri::True;
                        break;
                    }
                    Tri::Unknown => holds = Tri::Unknown,
                    Tri::False => {}
                }
            }
            let unknown = |rule| {
                Some(Judged::Unknown {
                    rule,
                    logged: Vec::new(),
                })
            };
            match (holds, x.kind) {
                (Tri::False, _) => {}
                (Tri::True, XdpKind::Drop) => {
                    return pending.map_or(Some(Judged::Stopped(i)), unknown)
                }
                (Tri::Unknown, XdpKind::Drop) => return unknown(pending.unwrap_or(i)),
                // An allow or exemption passes the packet on to user space;
                // one that may or may not hold matters only if a later drop
                // may hold.
                (Tri::True, _) => return None,
                (Tri::Unknown, _) => {
                    pending.get_or_insert(i);
                }
            }
        }
        None
    }
}
