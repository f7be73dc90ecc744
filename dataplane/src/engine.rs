//! The compiled engine: one scan per field yields the atoms that hold
//! ([`Matcher`]); an index from atoms to rules yields the few rules that
//! can match; only those are evaluated, in order. Cost follows the request,
//! not the size of the ruleset.

use crate::core::{Core, Decision, EngineConfig, Step};
pub use crate::error::EngineError;
use crate::matcher::{AtomSet, MatchScratch, Matcher};
use crate::request::{Fields, Packet, Request};
use rctl_compiler::analysis::dnf;
use rctl_compiler::ir::{Cond, Rule, Ruleset};

/// Per-thread working memory for decisions; reuse one per thread.
pub struct Scratch {
    pub(crate) atoms: AtomSet,
    patterns: MatchScratch,
    pub(crate) candidates: Vec<u32>,
    /// Throttle outcomes given from outside: with `Some`, throttle rules
    /// take their outcomes from it instead of their limiters (see
    /// [`crate::core::Replay`]); `None` (the default) counts as usual.
    pub replay: Option<crate::core::Replay>,
    /// Throttles that matched a request whose key value may have been cut
    /// (see [`Engine::judge_request_cut`]): their buckets missed it, so
    /// none of their later verdicts is known.
    pub(crate) missed: Vec<u32>,
}

/// What `rctl eval` shows: the atoms that held and each rule that matched.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Atom indices that held.
    pub atoms: Vec<u32>,
    /// Rules whose condition was evaluated, in order.
    pub evaluated: Vec<usize>,
    /// Rules that matched, with their effect.
    pub steps: Vec<Step>,
}

/// One DNF term of a rule, for candidate selection.
struct Term {
    rule: u32,
    start: u32,
    end: u32,
}

/// A loaded ruleset, ready to decide. `Sync`: share one across threads.
///
/// Rule selection: every DNF term of every rule is filed under its least
/// shared positive atom; a request visits only the terms filed under atoms
/// it matched, checks their other positive atoms in the bitset, and
/// evaluates only rules with a complete term. Cost follows the atoms a
/// request matches, not the number of rules.
pub struct Engine {
    pub(crate) core: Core,
    pub(crate) matcher: Matcher,
    /// Per atom: the terms anchored on it.
    postings: Vec<Vec<u32>>,
    /// The DNF terms of every rule that has positive atoms.
    terms: Vec<Term>,
    /// The non-anchor positive atoms of each term, back to back.
    others: Vec<u32>,
    /// Rules with a term that has no positive atom: always evaluated.
    always: Vec<u32>,
}

pub(crate) fn eval(c: &Cond, set: &AtomSet) -> bool {
    match c {
        Cond::True => true,
        Cond::False => false,
        Cond::Atom(a) => set.contains(*a),
        Cond::Not(x) => !eval(x, set),
        Cond::And(v) => v.iter().all(|x| eval(x, set)),
        Cond::Or(v) => v.iter().any(|x| eval(x, set)),
    }
}

impl Engine {
    /// Compiles a ruleset for deciding.
    pub fn new(ruleset: Ruleset, config: &EngineConfig) -> Result<Engine, EngineError> {
        let core = Core::new(ruleset, config)?;
        let matcher = Matcher::new(&core.ruleset)?;
        // Each DNF term of each rule needs all its positive atoms. Terms
        // are filed under one anchor, their least shared positive atom; the
        // others are checked against the atom bitset before the rule
        // becomes a candidate.
        let mut positive_terms: Vec<(u32, Vec<u32>)> = Vec::new();
        let mut always = Vec::new();
        for i in 0..core.ruleset.rules.len() {
            if !core.on_request_path(i) {
                continue;
            }
            let forms = dnf(&core.rule(i).cond, 256);
            let Some(forms) = forms.filter(|f| f.iter().all(|t| t.iter().any(|(_, neg)| !neg)))
            else {
                always.push(i as u32);
                continue;
            };
            for t in forms {
                let mut pos: Vec<u32> = t.iter().filter(|(_, neg)| !neg).map(|(a, _)| *a).collect();
                pos.sort_unstable();
                pos.dedup();
                positive_terms.push((i as u32, pos));
            }
        }
        let mut frequency = vec![0usize; core.ruleset.atoms.len()];
        for (_, pos) in &positive_terms {
            pos.iter().for_each(|&a| frequency[a as usize] += 1);
        }
        let mut postings: Vec<Vec<u32>> = vec![Vec::new(); core.ruleset.atoms.len()];
        let mut terms = Vec::with_capacity(positive_terms.len());
        let mut others = Vec::new();
        for (rule, pos) in positive_terms {
            let Some(&anchor) = pos.iter().min_by_key(|&&a| (frequency[a as usize], a)) else {
                continue;
            };
            let start = others.len() as u32;
            others.extend(pos.iter().copied().filter(|&a| a != anchor));
            postings[anchor as usize].push(terms.len() as u32);
            terms.push(Term {
                rule,
                start,
                end: others.len() as u32,
            });
        }
        Ok(Engine {
            core,
            matcher,
            postings,
            terms,
            others,
            always,
        })
    }

    /// The ruleset.
    pub fn ruleset(&self) -> &Ruleset {
        &self.core.ruleset
    }

    /// A rule by index.
    pub fn rule(&self, i: usize) -> &Rule {
        self.core.rule(i)
    }

    /// Whether rule `i` takes part in request decisions (enabled, for
    /// this site, and not a packet or connection limit).
    pub fn on_request_path(&self, i: usize) -> bool {
        i < self.core.ruleset.rules.len() && self.core.on_request_path(i)
    }

    /// Rule `i`'s rate limiter, if it throttles.
    pub fn limiter(&self, i: usize) -> Option<&crate::limiter::Limiter> {
        self.core.limiter(i)
    }

    /// Rule `i`'s limiter, to put saved state back into before the engine
    /// decides anything ([`crate::snapshot::restore`]).
    pub fn limiter_mut(&mut self, i: usize) -> Option<&mut crate::limiter::Limiter> {
        self.core.limiter_mut(i)
    }

    /// Makes this engine's throttle rules take over `old`'s buckets and
    /// bans, by rule name, where the keys are the same (see
    /// [`crate::carry`]); call it before this engine decides anything.
    /// Returns what carried and what starts afresh.
    pub fn carry_limiters(&mut self, old: &Engine) -> crate::carry::Carry {
        self.core.carry_limiters(&old.core)
    }

    /// Makes every GCRA throttle rule count its hits in `zone` (memory
    /// several processes share: see [`crate::limiter::zone`]) under its
    /// identity (name, unit, keys, kind of bucket), so that those
    /// processes share one bucket per key, and a later engine's rule of
    /// the same identity finds the buckets and bans this one left. Call it
    /// before the engine decides anything. Returns the names of the rules
    /// that keep buckets of their own (`bucket vsthrottle`).
    pub fn count_in_zone(&mut self, zone: crate::limiter::zone::Zone) -> Vec<String> {
        let mut own = Vec::new();
        for i in 0..self.core.ruleset.rules.len() {
            let r = self.core.rule(i);
            let rctl_compiler::ir::Action::Throttle(t) = &r.action else {
                continue;
            };
            let what = format!(
                "{:?} {:?} {:?} shared={}",
                t.unit, t.keys, t.bucket, t.shared
            );
            let id = crate::limiter::zone::identity(&r.name, &what);
            let name = r.name.clone();
            if let Some(l) = self.core.limiter_mut(i) {
                if !l.count_in_zone(zone, id) {
                    own.push(name);
                }
            }
        }
        own
    }

    /// Fresh working memory.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            atoms: self.matcher.atom_set(),
            patterns: self.matcher.scratch(),
            candidates: Vec::new(),
            replay: None,
            missed: Vec::new(),
        }
    }

    /// Decides a request.
    pub fn decide_request(&self, req: &Request<'_>) -> Decision {
        self.decide_request_with(req, &mut self.scratch(), None)
    }

    /// Decides a request with reusable scratch memory and an optional trace.
    pub fn decide_request_with(
        &self,
        req: &Request<'_>,
        s: &mut Scratch,
        trace: Option<&mut Trace>,
    ) -> Decision {
        let f = Fields::new(req);
        self.candidates_for(&f, s);
        let atoms = &s.atoms;
        match trace {
            None => self.core.decide_request(
                &f,
                s.candidates.iter().map(|&i| i as usize),
                |i| eval(&self.core.rule(i).cond, atoms),
                None,
                s.replay.as_mut(),
            ),
            Some(t) => {
                t.atoms = atoms.atoms().to_vec();
                t.atoms.sort_unstable();
                t.evaluated.clear();
                let evaluated = &mut t.evaluated;
                self.core.decide_request(
                    &f,
                    s.candidates.iter().map(|&i| i as usize),
                    |i| {
                        evaluated.push(i);
                        eval(&self.core.rule(i).cond, atoms)
                    },
                    Some(&mut t.steps),
                    s.replay.as_mut(),
                )
            }
        }
    }

    /// Matches the request's fields and selects the rules that can match.
    pub(crate) fn candidates_for(&self, f: &Fields<'_>, s: &mut Scratch) {
        s.atoms.clear();
        self.matcher.request_atoms(f, &mut s.atoms, &mut s.patterns);
        self.candidates_of_atoms(s);
    }

    /// [`Engine::candidates_for`] where `s.atoms` holds the request's
    /// packet atoms already ([`Matcher::packet_atoms`] of its addresses
    /// and port, as the packet plane's judgement leaves them): its
    /// addresses are not looked up again.
    pub(crate) fn candidates_after_packet(&self, f: &Fields<'_>, s: &mut Scratch) {
        self.matcher.field_atoms(f, &mut s.atoms, &mut s.patterns);
        self.candidates_of_atoms(s);
    }

    /// The rules that can match, from the atoms in `s`.
    fn candidates_of_atoms(&self, s: &mut Scratch) {
        s.candidates.clear();
        s.candidates.extend_from_slice(&self.always);
        for &a in s.atoms.atoms() {
            for &t in &self.postings[a as usize] {
                let term = &self.terms[t as usize];
                if self.others[term.start as usize..term.end as usize]
                    .iter()
                    .all(|&o| s.atoms.contains(o))
                {
                    s.candidates.push(term.rule);
                }
            }
        }
        s.candidates.sort_unstable();
        s.candidates.dedup();
    }

    /// Decides a request and records, in `steps`, every rule that matched
    /// and what it did (the part of a [`Trace`] that reports need).
    pub fn decide_request_steps(
        &self,
        req: &Request<'_>,
        s: &mut Scratch,
        steps: &mut Vec<Step>,
    ) -> Decision {
        self.decide_steps(req, s, steps, false)
    }

    /// [`Engine::decide_request_steps`]; with `after_packet`, `s.atoms`
    /// holds the request's packet atoms already (see
    /// [`Engine::candidates_after_packet`]).
    pub(crate) fn decide_steps(
        &self,
        req: &Request<'_>,
        s: &mut Scratch,
        steps: &mut Vec<Step>,
        after_packet: bool,
    ) -> Decision {
        let f = Fields::new(req);
        if after_packet {
            self.candidates_after_packet(&f, s);
        } else {
            self.candidates_for(&f, s);
        }
        let atoms = &s.atoms;
        self.core.decide_request(
            &f,
            s.candidates.iter().map(|&i| i as usize),
            |i| eval(&self.core.rule(i).cond, atoms),
            Some(steps),
            s.replay.as_mut(),
        )
    }

    /// Decides a packet exactly as the XDP program does: only rules the plan
    /// puts on the packet plane take part; an exemption passes the packet on
    /// to user space.
    pub fn decide_packet(&self, p: &Packet) -> Decision {
        self.decide_packet_with(p, &mut self.scratch())
    }

    /// Decides a packet with reusable scratch memory.
    pub fn decide_packet_with(&self, p: &Packet, s: &mut Scratch) -> Decision {
        s.atoms.clear();
        self.matcher.packet_atoms(p, &mut s.atoms);
        let atoms = &s.atoms;
        self.core.decide_packet(p, |a| atoms.contains(a))
    }
}
