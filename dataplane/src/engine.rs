//! The compiled engine: one scan per field yields the atoms that hold
//! ([`Matcher`]); an index from atoms to rules yields the few rules that
//! can match; only those are evaluated, in order. Cost follows the request,
//! not the size of the ruleset.

use crate::core::{Core, Decision, EngineConfig, Step};
use crate::matcher::{AtomSet, Matcher};
use crate::request::{Fields, Packet, Request};
use rctl_compiler::analysis::dnf;
use rctl_compiler::ir::{Cond, Rule, Ruleset};
use regex_automata::PatternSet;
use std::fmt;

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

/// Per-thread working memory for decisions; reuse one per thread.
pub struct Scratch {
    atoms: AtomSet,
    patterns: PatternSet,
    candidates: Vec<u32>,
    counts: Vec<u8>,
    touched: Vec<u32>,
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

/// A loaded ruleset, ready to decide. `Sync`: share one across threads.
///
/// Rule selection counts, per DNF term of every rule, how many of the
/// term's positive atoms hold: only rules with a complete term are
/// evaluated (the classic counting algorithm of publish/subscribe
/// matching). Cost follows the atoms a request matches and their posting
/// lists, not the number of rules.
pub struct Engine {
    core: Core,
    matcher: Matcher,
    /// Per atom: the terms that need it.
    postings: Vec<Vec<u32>>,
    /// Per term: (rule, number of positive atoms it needs).
    terms: Vec<(u32, u8)>,
    /// Rules with a term that has no positive atom: always evaluated.
    always: Vec<u32>,
}

fn eval(c: &Cond, set: &AtomSet) -> bool {
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
        let matcher = Matcher::new(&ruleset).map_err(|e| EngineError { message: e.0 })?;
        let core = Core::new(ruleset, config);
        let mut postings = vec![Vec::new(); core.ruleset.atoms.len()];
        let mut terms = Vec::new();
        let mut always = Vec::new();
        for i in 0..core.ruleset.rules.len() {
            if !core.on_request_path(i) {
                continue;
            }
            // A rule can only match if, for some DNF term, all of that
            // term's positive atoms hold.
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
                let id = terms.len() as u32;
                terms.push((i as u32, pos.len().min(255) as u8));
                for a in pos.into_iter().take(255) {
                    postings[a as usize].push(id);
                }
            }
        }
        Ok(Engine {
            core,
            matcher,
            postings,
            terms,
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

    /// Keys tracked and capacity of rule `i`'s limiter, if it has one.
    pub fn limiter_fill(&self, i: usize) -> Option<(usize, usize)> {
        self.core.limiter(i).map(|l| (l.len(), l.capacity()))
    }

    /// Fresh working memory.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            atoms: self.matcher.atom_set(),
            patterns: self.matcher.pattern_set(),
            candidates: Vec::new(),
            counts: vec![0; self.terms.len()],
            touched: Vec::new(),
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
        s.atoms.clear();
        self.matcher
            .request_atoms(&f, &mut s.atoms, &mut s.patterns);
        s.candidates.clear();
        s.candidates.extend_from_slice(&self.always);
        for &a in s.atoms.atoms() {
            for &t in &self.postings[a as usize] {
                let c = &mut s.counts[t as usize];
                if *c == 0 {
                    s.touched.push(t);
                }
                *c += 1;
                let (rule, need) = self.terms[t as usize];
                if *c == need {
                    s.candidates.push(rule);
                }
            }
        }
        for &t in &s.touched {
            s.counts[t as usize] = 0;
        }
        s.touched.clear();
        s.candidates.sort_unstable();
        s.candidates.dedup();
        let atoms = &s.atoms;
        match trace {
            None => self.core.decide_request(
                &f,
                s.candidates.iter().map(|&i| i as usize),
                |i| eval(&self.core.rule(i).cond, atoms),
                None,
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
                )
            }
        }
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
        self.matcher
            .packet_atoms(p.src, p.proto, p.dst_port, &mut s.atoms);
        let atoms = &s.atoms;
        self.core.decide_packet(p, |a| atoms.contains(a))
    }
}
