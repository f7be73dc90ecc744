//! Ruleset analysis: which conditions imply or exclude each other. Used for
//! unreachable-rule warnings, exemption conflicts and the packet-plane
//! projection of allow rules.
//!
//! Every answer is conservative: `implies` and `contradicts` say `true`
//! only when that is certain, so a warning is never wrong about a rule
//! being unreachable, and an exemption conflict is reported whenever the
//! two conditions are not provably disjoint.
//!
//! Two literals can only relate (one implying or excluding the other) when
//! they test the same field, so every atom has a field *class* and pairs of
//! different classes are never compared. Answers about atom pairs are
//! cached: a ruleset asks about the same pairs over and over.

pub(crate) mod addrs;
pub mod check;
pub mod proof;
pub mod strlang;
pub(crate) mod summary;
pub mod witness;

use crate::ir::{Atom, Cond, IpSet, StrField, StrOp};
use crate::witness::{Solution, Solver, Witness};
use std::collections::HashMap;

pub use witness::Lit;
/// A conjunction of literals.
pub type Term = Vec<Lit>;

/// Converts a condition to DNF, or `None` if it would exceed `max_terms`.
/// Contradictory terms are kept; callers filter them with [`Analyzer`].
/// Each term is sorted and free of duplicates.
///
/// Recursion follows the condition's nesting, which the compiler bounds
/// ([`crate::artifact::MAX_COND_DEPTH`]); a long `and` costs time linear in
/// its length.
pub fn dnf(c: &Cond, max_terms: usize) -> Option<Vec<Term>> {
    fn go(c: &Cond, neg: bool, max: usize) -> Option<Vec<Term>> {
        Some(match (c, neg) {
            (Cond::True, false) | (Cond::False, true) => vec![Vec::new()],
            (Cond::False, false) | (Cond::True, true) => Vec::new(),
            (Cond::Atom(a), n) => vec![vec![(*a, n)]],
            (Cond::Not(x), n) => go(x, !n, max)?,
            (Cond::Or(v), false) | (Cond::And(v), true) => {
                let mut out = Vec::new();
                for x in v {
                    out.extend(go(x, neg, max)?);
                    if out.len() > max {
                        return None;
                    }
                }
                out
            }
            (Cond::And(v), false) | (Cond::Or(v), true) => {
                let mut acc: Vec<Term> = vec![Vec::new()];
                for x in v {
                    let d = go(x, neg, max)?;
                    if acc.len().saturating_mul(d.len()) > max {
                        return None;
                    }
                    match d.as_slice() {
                        [] => return Some(Vec::new()),
                        // One term (the usual case): extend in place, so a
                        // long conjunction is not copied once per part.
                        [only] => acc.iter_mut().for_each(|a| a.extend_from_slice(only)),
                        _ => {
                            let mut next = Vec::with_capacity(acc.len() * d.len());
                            for a in &acc {
                                for b in &d {
                                    let mut t = a.clone();
                                    t.extend_from_slice(b);
                                    next.push(t);
                                }
                            }
                            acc = next;
                        }
                    }
                }
                for t in &mut acc {
                    t.sort_unstable();
                    t.dedup();
                }
                acc
            }
        })
    }
    go(c, false, max_terms)
}

/// The answer to "can these conditions hold together?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Provably never: every combination of their parts contradicts.
    Disjoint,
    /// Some combination is not contradictory: they may match the same
    /// traffic.
    May,
    /// The search ran out of its step budget before deciding.
    Undecided,
}

/// The exact answer to "is there a request for which all these goals
/// hold?" ([`Analyzer::solve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exact {
    /// Yes: this one.
    Sat(Box<Witness>),
    /// No request.
    Unsat,
    /// Some combination of literals could not be decided exactly (a DFA
    /// over its budget, fields that depend on each other), and no other
    /// combination holds: why.
    Unknown(String),
    /// The search ran out of its step budget.
    OutOfSteps,
}

/// Answers implication and contradiction questions about atoms.
pub struct Analyzer<'a> {
    atoms: &'a [Atom],
    ipsets: &'a [IpSet],
    /// The field class of each atom: literals of different classes never
    /// relate.
    class: Vec<u32>,
    regexes: HashMap<u32, Option<regex_automata::meta::Regex>>,
    implies: HashMap<(u32, u32), bool>,
    excludes: HashMap<(u32, u32), bool>,
    /// Exact per-field answers and witnesses.
    pub solver: Solver,
}

/// A work budget: each literal comparison and search step costs one.
#[derive(Debug, Clone, Copy)]
pub struct Budget(pub u64);

impl Budget {
    /// Spends `n` units; `false` once the budget is exhausted.
    pub fn spend(&mut self, n: u64) -> bool {
        self.0 = self.0.saturating_sub(n);
        self.0 > 0
    }
}

impl<'a> Analyzer<'a> {
    /// An analyzer over a ruleset's predicate table.
    pub fn new(atoms: &'a [Atom], ipsets: &'a [IpSet]) -> Self {
        let mut fields: HashMap<&StrField, u32> = HashMap::new();
        let class = atoms
            .iter()
            .map(|a| match a {
                Atom::Ip(_) => 0,
                Atom::DstIp(_) => 1,
                Atom::Port(_) => 2,
                Atom::Proto(_) => 3,
                Atom::Str { field, .. } | Atom::Present(field) => {
                    let n = fields.len() as u32;
                    4 + *fields.entry(field).or_insert(n)
                }
            })
            .collect();
        Analyzer {
            atoms,
            ipsets,
            class,
            regexes: HashMap::new(),
            implies: HashMap::new(),
            excludes: HashMap::new(),
            solver: Solver::default(),
        }
    }

    /// Whether `c` holds for the witness, as the engine would decide
    /// (`None`: a regex the analysis cannot run).
    pub fn witness_holds(&mut self, c: &Cond, w: &Witness) -> Option<bool> {
        self.solver.holds(self.atoms, self.ipsets, c, w)
    }

    /// Whether a conjunction of literals holds for some request, exactly.
    pub fn solve_lits(&mut self, lits: &[Lit]) -> Solution {
        self.solver.solve(self.atoms, self.ipsets, lits)
    }

    /// The predicate table.
    pub fn atoms(&self) -> &'a [Atom] {
        self.atoms
    }

    /// The field class of an atom: atoms of different classes test
    /// different fields.
    pub fn class(&self, a: u32) -> u32 {
        self.class[a as usize]
    }

    /// What string atom `a` says about one concrete value (`None`: a regex
    /// that does not build, so nothing is known).
    pub fn holds(&mut self, a: u32, v: &str) -> Option<bool> {
        let Atom::Str { op, .. } = &self.atoms[a as usize] else {
            return None;
        };
        Some(match op {
            StrOp::Eq(x) => v == x,
            StrOp::Prefix(x) => v.starts_with(x.as_str()),
            StrOp::Suffix(x) => v.ends_with(x.as_str()),
            StrOp::Contains(x) => v.contains(x.as_str()),
            StrOp::In(xs) => xs.binary_search_by(|x| x.as_str().cmp(v)).is_ok(),
            StrOp::Regex { pattern, ci } => {
                let re = self.regexes.entry(a).or_insert_with(|| {
                    regex_automata::meta::Regex::builder()
                        .syntax(crate::scan::syntax(*ci))
                        .build(pattern)
                        .ok()
                });
                return Some(re.as_ref()?.is_match(v));
            }
        })
    }

    /// Whether positive atom `a` implies positive atom `b`.
    pub fn atom_implies(&mut self, a: u32, b: u32) -> bool {
        if a == b {
            return true;
        }
        if self.class(a) != self.class(b) {
            return false;
        }
        if !self.costly(a, b) {
            return self.compute_implies(a, b);
        }
        if let Some(&r) = self.implies.get(&(a, b)) {
            return r;
        }
        let r = self.compute_implies(a, b);
        self.implies.insert((a, b), r);
        r
    }

    /// Whether relating `a` and `b` costs more than a cache lookup: a
    /// regex, a value list or two address sets. Other answers are a string
    /// or range comparison, cheaper computed than remembered.
    fn costly(&self, a: u32, b: u32) -> bool {
        let heavy = |x: &Atom| {
            matches!(
                x,
                Atom::Ip(_)
                    | Atom::DstIp(_)
                    | Atom::Str {
                        op: StrOp::Regex { .. } | StrOp::In(_),
                        ..
                    }
            )
        };
        heavy(&self.atoms[a as usize]) || heavy(&self.atoms[b as usize])
    }

    fn compute_implies(&mut self, a: u32, b: u32) -> bool {
        let atoms = self.atoms;
        match (&atoms[a as usize], &atoms[b as usize]) {
            (Atom::Str { field: f1, op: o1 }, Atom::Str { field: f2, op: o2 }) if f1 == f2 => {
                match (o1, o2) {
                    (StrOp::Eq(v), _) => self.holds(b, v) == Some(true),
                    (StrOp::In(vs), _) => vs.iter().all(|v| self.holds(b, v) == Some(true)),
                    (StrOp::Prefix(p), StrOp::Prefix(q)) => p.starts_with(q.as_str()),
                    (StrOp::Suffix(p), StrOp::Suffix(q)) => p.ends_with(q.as_str()),
                    (
                        StrOp::Prefix(p) | StrOp::Suffix(p) | StrOp::Contains(p),
                        StrOp::Contains(q),
                    ) => p.contains(q.as_str()),
                    _ => false,
                }
            }
            (Atom::Str { field: f1, .. }, Atom::Present(f2)) => f1 == f2,
            (Atom::Ip(s1), Atom::Ip(s2)) | (Atom::DstIp(s1), Atom::DstIp(s2)) => self.ipsets
                [*s1 as usize]
                .prefixes
                .is_subset_of(&self.ipsets[*s2 as usize].prefixes),
            (Atom::Port(r1), Atom::Port(r2)) => r1
                .iter()
                .all(|&(a, b)| r2.iter().any(|&(c, d)| c <= a && b <= d)),
            (Atom::Proto(p1), Atom::Proto(p2)) => p1.iter().all(|p| p2.contains(p)),
            _ => false,
        }
    }

    /// Whether positive atoms `a` and `b` can never both hold.
    pub fn atoms_exclude(&mut self, a: u32, b: u32) -> bool {
        if a == b || self.class(a) != self.class(b) {
            return false;
        }
        let key = (a.min(b), a.max(b));
        if !self.costly(a, b) {
            return self.compute_excludes(key.0, key.1);
        }
        if let Some(&r) = self.excludes.get(&key) {
            return r;
        }
        let r = self.compute_excludes(key.0, key.1);
        self.excludes.insert(key, r);
        r
    }

    fn compute_excludes(&mut self, a: u32, b: u32) -> bool {
        let atoms = self.atoms;
        match (&atoms[a as usize], &atoms[b as usize]) {
            (Atom::Str { field: f1, op: o1 }, Atom::Str { field: f2, op: o2 }) if f1 == f2 => {
                match (o1, o2) {
                    (StrOp::Eq(v), _) => self.holds(b, v) == Some(false),
                    (_, StrOp::Eq(v)) => self.holds(a, v) == Some(false),
                    (StrOp::In(vs), _) => vs.iter().all(|v| self.holds(b, v) == Some(false)),
                    (_, StrOp::In(vs)) => vs.iter().all(|v| self.holds(a, v) == Some(false)),
                    (StrOp::Prefix(p), StrOp::Prefix(q)) => {
                        !p.starts_with(q.as_str()) && !q.starts_with(p.as_str())
                    }
                    (StrOp::Suffix(p), StrOp::Suffix(q)) => {
                        !p.ends_with(q.as_str()) && !q.ends_with(p.as_str())
                    }
                    _ => false,
                }
            }
            (Atom::Ip(s1), Atom::Ip(s2)) | (Atom::DstIp(s1), Atom::DstIp(s2)) => !self.ipsets
                [*s1 as usize]
                .prefixes
                .intersects(&self.ipsets[*s2 as usize].prefixes),
            (Atom::Port(r1), Atom::Port(r2)) => !r1
                .iter()
                .any(|&(a, b)| r2.iter().any(|&(c, d)| a <= d && c <= b)),
            (Atom::Proto(p1), Atom::Proto(p2)) => !p1.iter().any(|p| p2.contains(p)),
            _ => false,
        }
    }

    /// Whether literal `a` implies literal `b`.
    pub fn lit_implies(&mut self, a: Lit, b: Lit) -> bool {
        match (a.1, b.1) {
            (false, false) => self.atom_implies(a.0, b.0),
            // x ⇒ ¬y  iff  x and y exclude each other.
            (false, true) => self.atoms_exclude(a.0, b.0),
            // ¬x ⇒ ¬y  iff  y ⇒ x.
            (true, true) => self.atom_implies(b.0, a.0),
            (true, false) => false,
        }
    }

    /// Whether literals `a` and `b` can never both hold.
    pub fn lits_exclude(&mut self, a: Lit, b: Lit) -> bool {
        match (a.1, b.1) {
            (false, false) => self.atoms_exclude(a.0, b.0),
            (false, true) => self.atom_implies(a.0, b.0),
            (true, false) => self.atom_implies(b.0, a.0),
            (true, true) => false,
        }
    }

    /// Whether literal `l` contradicts one of `lits`. Two negative literals
    /// never do, and literals of different fields are not compared.
    fn clashes(&mut self, l: Lit, lits: &[Lit], budget: &mut Budget) -> Option<bool> {
        let c = self.class(l.0);
        for &k in lits {
            if (l.1 && k.1) || self.class(k.0) != c {
                continue;
            }
            if !budget.spend(1) {
                return None;
            }
            if self.lits_exclude(l, k) {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Whether a term is unsatisfiable: some pair of its literals excludes
    /// each other. `None` when the budget runs out first (a term of
    /// thousands of literals on one field).
    pub fn term_unsat_within(&mut self, t: &Term, budget: &mut Budget) -> Option<bool> {
        let mut by_class: Vec<(u32, Lit)> = t.iter().map(|&l| (self.class(l.0), l)).collect();
        by_class.sort_unstable();
        let mut start = 0;
        while start < by_class.len() {
            let c = by_class[start].0;
            let end = start + by_class[start..].iter().take_while(|x| x.0 == c).count();
            let group = &by_class[start..end];
            // Positive literals against each other and against the
            // negatives; two negatives never contradict.
            let pos: Vec<Lit> = group.iter().map(|x| x.1).filter(|l| !l.1).collect();
            let neg: Vec<Lit> = group.iter().map(|x| x.1).filter(|l| l.1).collect();
            for (i, &l) in pos.iter().enumerate() {
                if self.clashes(l, &pos[i + 1..], budget)? || self.clashes(l, &neg, budget)? {
                    return Some(true);
                }
            }
            start = end;
        }
        Some(false)
    }

    /// Whether a term is unsatisfiable (`false` when that cannot be
    /// decided within a generous budget: conservative for every caller).
    pub fn term_unsat(&mut self, t: &Term) -> bool {
        self.term_unsat_within(t, &mut Budget(TERM_BUDGET))
            .unwrap_or(false)
    }

    /// Whether term `t` implies term `u` (every literal of `u` follows from one of `t`).
    pub fn term_implies(&mut self, t: &Term, u: &Term) -> bool {
        u.iter().all(|&l| {
            let c = self.class(l.0);
            t.iter()
                .any(|&k| self.class(k.0) == c && self.lit_implies(k, l))
        })
    }

    /// Whether DNF `a` implies DNF `b`.
    pub fn implies(&mut self, a: &[Term], b: &[Term]) -> bool {
        a.iter()
            .all(|t| self.term_unsat(t) || b.iter().any(|u| self.term_implies(t, u)))
    }

    /// Whether every term of `a`, all known to be satisfiable or not
    /// worth excluding, implies some term of `b`.
    pub fn terms_imply(&mut self, a: &[Term], b: &[Term]) -> bool {
        a.iter().all(|t| b.iter().any(|u| self.term_implies(t, u)))
    }

    /// Whether DNFs `a` and `b` may both hold. `false` only when certain.
    pub fn may_overlap(&mut self, a: &[Term], b: &[Term]) -> bool {
        a.iter().any(|t| {
            b.iter().any(|u| {
                let mut both = t.clone();
                both.extend_from_slice(u);
                !self.term_unsat(&both)
            })
        })
    }

    /// Whether conditions `a` and `b` can hold together, decided on the
    /// condition trees without expanding them into DNF: a search over the
    /// choices their `or`s offer, which keeps every literal that must hold
    /// and abandons a choice as soon as two of its literals exclude each
    /// other. Literals are taken first and an `or` with a single viable
    /// alternative is taken without branching, so conditions that a DNF
    /// would blow up into thousands of terms are usually decided in a few
    /// steps. The verdict is the one the DNF would give: `Disjoint` exactly
    /// when every pair of terms (one from each) contains two excluding
    /// literals. `Undecided` when `budget` runs out.
    ///
    /// `a`'s literals are taken before `b`'s: pass the smaller condition
    /// (an allow, usually) first.
    pub fn overlap(&mut self, a: &Cond, b: &Cond, budget: &mut Budget) -> Overlap {
        Search::new(vec![(b, false), (a, false)]).run(self, budget)
    }

    /// Whether some request satisfies every goal (a condition, or with
    /// `true` its negation), exactly: the same search as
    /// [`Analyzer::overlap`], where each complete branch (a conjunction of
    /// literals no two of which exclude each other) is then decided field
    /// by field ([`Solver`]); a branch that holds for no request is
    /// abandoned like a contradictory one. The first branch that holds
    /// gives the witness.
    pub fn solve(&mut self, goals: Vec<(&Cond, bool)>, budget: &mut Budget) -> Exact {
        let mut goals = goals;
        goals.reverse();
        Search::new(goals).exact(self, budget)
    }
}

/// How much work one [`Analyzer::term_unsat`] may do.
const TERM_BUDGET: u64 = 1 << 22;

/// A goal of the search: a condition that must hold (or, negated, fail).
type Goal<'c> = (&'c Cond, bool);

/// A choice point: the state before an `or` was split, and the
/// alternatives not yet tried.
struct Choice<'c> {
    trail: usize,
    pending: Vec<Goal<'c>>,
    alternatives: Vec<Goal<'c>>,
    next: usize,
}

struct Search<'c> {
    /// Literals that hold on the current branch.
    trail: Trail,
    /// Conjunctive goals still to take apart.
    agenda: Vec<Goal<'c>>,
    /// Disjunctive goals not yet split.
    pending: Vec<Goal<'c>>,
    choices: Vec<Choice<'c>>,
}

/// The literals of a branch, indexed by field class and sign, so that a
/// new literal is compared only with those it could contradict.
#[derive(Default)]
struct Trail {
    lits: Vec<Lit>,
    seen: std::collections::HashSet<Lit>,
    /// Per class: positive and negative literals, in trail order.
    by_class: HashMap<u32, [Vec<Lit>; 2]>,
}

impl Trail {
    fn len(&self) -> usize {
        self.lits.len()
    }

    fn push(&mut self, an: &Analyzer<'_>, l: Lit) {
        if self.seen.insert(l) {
            self.lits.push(l);
            self.by_class.entry(an.class(l.0)).or_default()[usize::from(l.1)].push(l);
        }
    }

    fn truncate(&mut self, an: &Analyzer<'_>, n: usize) {
        while self.lits.len() > n {
            let Some(l) = self.lits.pop() else { break };
            self.seen.remove(&l);
            if let Some(lists) = self.by_class.get_mut(&an.class(l.0)) {
                lists[usize::from(l.1)].pop();
            }
        }
    }

    /// Whether a literal of the branch implies `l`.
    fn implies(&self, an: &mut Analyzer<'_>, l: Lit, budget: &mut Budget) -> Option<bool> {
        if self.seen.contains(&l) {
            return Some(true);
        }
        let Some([pos, neg]) = self.by_class.get(&an.class(l.0)) else {
            return Some(false);
        };
        for &k in pos.iter().chain(neg) {
            if !budget.spend(1) {
                return None;
            }
            if an.lit_implies(k, l) {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Whether `l` contradicts a literal of the branch.
    fn clashes(&self, an: &mut Analyzer<'_>, l: Lit, budget: &mut Budget) -> Option<bool> {
        let Some([pos, neg]) = self.by_class.get(&an.class(l.0)) else {
            return Some(false);
        };
        let others: &[Lit] = if l.1 { &[] } else { neg };
        for &k in pos.iter().chain(others) {
            if !budget.spend(1) {
                return None;
            }
            if an.lits_exclude(l, k) {
                return Some(true);
            }
        }
        Some(false)
    }
}

/// What a goal is, once negations are pushed down to it.
enum Shape<'c> {
    Const(bool),
    Lit(Lit),
    All(&'c [Cond], bool),
    Any(&'c [Cond], bool),
}

fn shape<'c>((c, neg): Goal<'c>) -> Shape<'c> {
    let (mut c, mut neg) = (c, neg);
    loop {
        return match c {
            Cond::Not(x) => {
                c = x;
                neg = !neg;
                continue;
            }
            Cond::True => Shape::Const(!neg),
            Cond::False => Shape::Const(neg),
            Cond::Atom(a) => Shape::Lit((*a, neg)),
            Cond::And(v) if !neg => Shape::All(v, neg),
            Cond::Or(v) if neg => Shape::All(v, neg),
            Cond::And(v) | Cond::Or(v) => Shape::Any(v, neg),
        };
    }
}

impl<'c> Search<'c> {
    fn new(goals: Vec<Goal<'c>>) -> Self {
        Search {
            trail: Trail::default(),
            agenda: goals,
            pending: Vec::new(),
            choices: Vec::new(),
        }
    }

    fn exact(mut self, an: &mut Analyzer<'_>, budget: &mut Budget) -> Exact {
        let mut unknown = None;
        loop {
            match self.extend(an, budget) {
                None => return Exact::OutOfSteps,
                Some(true) => {
                    if !budget.spend(self.trail.len() as u64 + 1) {
                        return Exact::OutOfSteps;
                    }
                    match an.solve_lits(&self.trail.lits) {
                        Solution::Sat(w) => return Exact::Sat(w),
                        Solution::Unsat => {}
                        Solution::Unknown(why) => {
                            unknown.get_or_insert(why);
                        }
                    }
                }
                Some(false) => {}
            }
            if !self.backtrack(an, budget) {
                return unknown.map_or(Exact::Unsat, Exact::Unknown);
            }
        }
    }

    fn run(mut self, an: &mut Analyzer<'_>, budget: &mut Budget) -> Overlap {
        loop {
            match self.extend(an, budget) {
                None => return Overlap::Undecided,
                Some(true) => return Overlap::May,
                Some(false) => {
                    if !self.backtrack(an, budget) {
                        return Overlap::Disjoint;
                    }
                }
            }
        }
    }

    /// Works on the current branch until it is complete (`true`), closed
    /// (`false`) or the budget is spent (`None`).
    fn extend(&mut self, an: &mut Analyzer<'_>, budget: &mut Budget) -> Option<bool> {
        loop {
            if let Some(goal) = self.agenda.pop() {
                if !budget.spend(1) {
                    return None;
                }
                match shape(goal) {
                    Shape::Const(true) => {}
                    Shape::Const(false) => return Some(false),
                    Shape::Lit(l) => {
                        if self.trail.seen.contains(&l) {
                            continue;
                        }
                        if self.trail.clashes(an, l, budget)? {
                            return Some(false);
                        }
                        self.trail.push(an, l);
                    }
                    Shape::All(v, n) => self.agenda.extend(v.iter().map(|x| (x, n))),
                    Shape::Any(..) => self.pending.push(goal),
                }
                continue;
            }
            // Only disjunctions are left. Those the branch already
            // satisfies are dropped; the most constrained other is split.
            let mut left = std::mem::take(&mut self.pending).into_iter();
            let mut keep: Vec<Goal<'c>> = Vec::with_capacity(left.len());
            let mut best: Option<(usize, Vec<Goal<'c>>)> = None;
            while let Some(g) = left.next() {
                let Shape::Any(v, n) = shape(g) else {
                    keep.push(g);
                    continue;
                };
                let Some(viable) = self.viable(an, v, n, budget)? else {
                    continue;
                };
                if best.as_ref().is_none_or(|b| viable.len() < b.1.len()) {
                    let done = viable.len() <= 1;
                    best = Some((keep.len(), viable));
                    keep.push(g);
                    if done {
                        keep.extend(left);
                        break;
                    }
                } else {
                    keep.push(g);
                }
            }
            self.pending = keep;
            let Some((i, mut viable)) = best else {
                return Some(true);
            };
            self.pending.swap_remove(i);
            if viable.is_empty() {
                return Some(false);
            }
            let first = viable.remove(0);
            if !viable.is_empty() {
                if !budget.spend(self.pending.len() as u64 + 1) {
                    return None;
                }
                self.choices.push(Choice {
                    trail: self.trail.len(),
                    pending: self.pending.clone(),
                    alternatives: viable,
                    next: 0,
                });
            }
            self.agenda.push(first);
        }
    }

    /// The alternatives of a disjunction that do not contradict the
    /// branch; `None` when the branch already satisfies one of them.
    fn viable(
        &self,
        an: &mut Analyzer<'_>,
        v: &'c [Cond],
        n: bool,
        budget: &mut Budget,
    ) -> Option<Option<Vec<Goal<'c>>>> {
        let mut viable = Vec::new();
        for x in v {
            let alt = (x, n);
            if !budget.spend(1) {
                return None;
            }
            let keep = match shape(alt) {
                Shape::Const(true) => return Some(None),
                Shape::Const(false) => false,
                Shape::Lit(l) => {
                    if self.trail.implies(an, l, budget)? {
                        return Some(None);
                    }
                    !self.trail.clashes(an, l, budget)?
                }
                Shape::All(..) | Shape::Any(..) => true,
            };
            if keep {
                viable.push(alt);
            }
        }
        Some(Some(viable))
    }

    /// Moves to the next untried alternative; `false` when none is left.
    fn backtrack(&mut self, an: &Analyzer<'_>, budget: &mut Budget) -> bool {
        while let Some(ch) = self.choices.last_mut() {
            if let Some(&alt) = ch.alternatives.get(ch.next) {
                ch.next += 1;
                budget.spend(ch.pending.len() as u64 + 1);
                self.trail.truncate(an, ch.trail);
                self.pending.clone_from(&ch.pending);
                self.agenda.clear();
                self.agenda.push(alt);
                return true;
            }
            self.choices.pop();
        }
        false
    }
}

/// Projects a condition onto the packet plane: L7 literals become `true`,
/// so the result holds for every packet of any request the condition
/// could match (an over-approximation, sound for exemptions).
pub fn project_l4(terms: &[Term], atoms: &[Atom]) -> Vec<Term> {
    let mut out: Vec<Term> = terms
        .iter()
        .map(|t| {
            t.iter()
                .copied()
                .filter(|(a, _)| atoms[*a as usize].is_l4())
                .collect()
        })
        .collect();
    if out.iter().any(Vec::is_empty) {
        return vec![Vec::new()];
    }
    out.sort();
    out.dedup();
    out
}

/// The fields a condition reads, for explanations.
pub fn l7_fields(c: &Cond, atoms: &[Atom]) -> Vec<String> {
    let mut out = Vec::new();
    c.visit_atoms(&mut |a| {
        if let Atom::Str { field, .. } | Atom::Present(field) = &atoms[a as usize] {
            let f: &StrField = field;
            let d = f.display();
            if !out.contains(&d) {
                out.push(d);
            }
        }
    });
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod oracle_tests;
