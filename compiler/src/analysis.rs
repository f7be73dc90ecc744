//! Ruleset analysis over disjunctive normal forms: which conditions imply
//! or exclude each other. Used for unreachable-rule warnings, exemption
//! conflicts and the packet-plane projection of allow rules.
//!
//! Every answer is conservative: `implies` and `contradicts` say `true`
//! only when that is certain, so a warning is never wrong about a rule
//! being unreachable, and an exemption conflict is reported whenever the
//! two conditions are not provably disjoint.

use crate::ir::{Atom, Cond, IpSet, StrField, StrOp};
use std::collections::HashMap;

/// A literal: an atom index, possibly negated.
pub type Lit = (u32, bool);
/// A conjunction of literals.
pub type Term = Vec<Lit>;

/// Converts a condition to DNF, or `None` if it would exceed `max_terms`.
/// Contradictory terms are kept; callers filter them with [`Analyzer`].
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
                    let mut next = Vec::with_capacity(acc.len() * d.len());
                    for a in &acc {
                        for b in &d {
                            let mut t = a.clone();
                            t.extend_from_slice(b);
                            t.sort_unstable();
                            t.dedup();
                            next.push(t);
                        }
                    }
                    acc = next;
                }
                acc
            }
        })
    }
    go(c, false, max_terms)
}

/// Answers implication and contradiction questions about atoms.
pub struct Analyzer<'a> {
    atoms: &'a [Atom],
    ipsets: &'a [IpSet],
    regex_cache: HashMap<(String, bool), Option<regex_automata::meta::Regex>>,
}

impl<'a> Analyzer<'a> {
    /// An analyzer over a ruleset's predicate table.
    pub fn new(atoms: &'a [Atom], ipsets: &'a [IpSet]) -> Self {
        Analyzer {
            atoms,
            ipsets,
            regex_cache: HashMap::new(),
        }
    }

    fn regex_match(&mut self, pattern: &str, ci: bool, text: &str) -> Option<bool> {
        let re = self
            .regex_cache
            .entry((pattern.to_string(), ci))
            .or_insert_with(|| {
                regex_automata::meta::Regex::builder()
                    .syntax(regex_automata::util::syntax::Config::new().case_insensitive(ci))
                    .build(pattern)
                    .ok()
            })
            .as_ref()?;
        Some(re.is_match(text))
    }

    /// What a string test says about one concrete value.
    fn str_test(&mut self, op: &StrOp, v: &str) -> Option<bool> {
        Some(match op {
            StrOp::Eq(x) => v == x,
            StrOp::Prefix(x) => v.starts_with(x.as_str()),
            StrOp::Suffix(x) => v.ends_with(x.as_str()),
            StrOp::Contains(x) => v.contains(x.as_str()),
            StrOp::In(xs) => xs.binary_search_by(|x| x.as_str().cmp(v)).is_ok(),
            StrOp::Regex { pattern, ci } => return self.regex_match(pattern, *ci, v),
        })
    }

    /// Whether positive atom `a` implies positive atom `b`.
    fn atom_implies(&mut self, a: u32, b: u32) -> bool {
        if a == b {
            return true;
        }
        let (x, y) = (&self.atoms[a as usize], &self.atoms[b as usize]);
        match (x, y) {
            (Atom::Str { field: f1, op: o1 }, Atom::Str { field: f2, op: o2 }) if f1 == f2 => {
                let (o1, o2) = (o1.clone(), o2.clone());
                match (&o1, &o2) {
                    (StrOp::Eq(v), _) => self.str_test(&o2, v) == Some(true),
                    (StrOp::In(vs), _) => vs.iter().all(|v| self.str_test(&o2, v) == Some(true)),
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
    fn atoms_exclude(&mut self, a: u32, b: u32) -> bool {
        if a == b {
            return false;
        }
        let (x, y) = (&self.atoms[a as usize], &self.atoms[b as usize]);
        match (x, y) {
            (Atom::Str { field: f1, op: o1 }, Atom::Str { field: f2, op: o2 }) if f1 == f2 => {
                let (o1, o2) = (o1.clone(), o2.clone());
                match (&o1, &o2) {
                    (StrOp::Eq(v), _) => self.str_test(&o2, v) == Some(false),
                    (_, StrOp::Eq(v)) => self.str_test(&o1, v) == Some(false),
                    (StrOp::In(vs), _) => vs.iter().all(|v| self.str_test(&o2, v) == Some(false)),
                    (_, StrOp::In(vs)) => vs.iter().all(|v| self.str_test(&o1, v) == Some(false)),
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

    /// Whether a term is unsatisfiable.
    pub fn term_unsat(&mut self, t: &Term) -> bool {
        for i in 0..t.len() {
            for j in i + 1..t.len() {
                if self.lits_exclude(t[i], t[j]) {
                    return true;
                }
            }
        }
        false
    }

    /// Whether term `t` implies term `u` (every literal of `u` follows from one of `t`).
    pub fn term_implies(&mut self, t: &Term, u: &Term) -> bool {
        u.iter().all(|&l| t.iter().any(|&k| self.lit_implies(k, l)))
    }

    /// Whether DNF `a` implies DNF `b`.
    pub fn implies(&mut self, a: &[Term], b: &[Term]) -> bool {
        a.iter()
            .all(|t| self.term_unsat(t) || b.iter().any(|u| self.term_implies(t, u)))
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
mod tests {
    use super::*;
    use crate::cidr::{parse_cidr, PrefixSet};

    fn set(s: &[&str]) -> IpSet {
        IpSet {
            name: "t".into(),
            prefixes: PrefixSet::from_cidrs(s.iter().map(|c| parse_cidr(c).unwrap().0)),
        }
    }

    #[test]
    fn dnf_pushes_negation_and_distributes() {
        // not (a or b) and c  ==  ¬a ∧ ¬b ∧ c
        let c = Cond::And(vec![
            Cond::Not(Box::new(Cond::Or(vec![Cond::Atom(0), Cond::Atom(1)]))),
            Cond::Atom(2),
        ]);
        assert_eq!(
            dnf(&c, 100).unwrap(),
            vec![vec![(0, true), (1, true), (2, false)]]
        );
        // (a or b) and (c or d) has four terms; the limit is honoured.
        let c = Cond::And(vec![
            Cond::Or(vec![Cond::Atom(0), Cond::Atom(1)]),
            Cond::Or(vec![Cond::Atom(2), Cond::Atom(3)]),
        ]);
        assert_eq!(dnf(&c, 100).unwrap().len(), 4);
        assert!(dnf(&c, 3).is_none());
    }

    #[test]
    fn implication_and_exclusion_over_fields() {
        let atoms = vec![
            Atom::Str {
                field: StrField::Path,
                op: StrOp::Eq("/sparql".into()),
            },
            Atom::Str {
                field: StrField::Path,
                op: StrOp::Prefix("/spa".into()),
            },
            Atom::Str {
                field: StrField::Path,
                op: StrOp::Regex {
                    pattern: "^/w/".into(),
                    ci: false,
                },
            },
            Atom::Ip(0),
            Atom::Ip(1),
            Atom::Ip(2),
        ];
        let sets = vec![
            set(&["10.0.0.0/8"]),
            set(&["10.1.0.0/16"]),
            set(&["192.0.2.0/24"]),
        ];
        let mut an = Analyzer::new(&atoms, &sets);
        assert!(an.lit_implies((0, false), (1, false)));
        assert!(!an.lit_implies((1, false), (0, false)));
        assert!(an.lits_exclude((0, false), (2, false)));
        assert!(an.lit_implies((4, false), (3, false)));
        assert!(an.lits_exclude((3, false), (5, false)));
        assert!(an.lits_exclude((4, false), (3, true)));
        // "/sparql and not updater" cannot overlap "updater".
        assert!(!an.may_overlap(&[vec![(0, false), (3, true)]], &[vec![(3, false)]]));
        assert!(an.may_overlap(&[vec![(0, false)]], &[vec![(3, false)]]));
    }

    #[test]
    fn projection_drops_l7_literals() {
        let atoms = vec![
            Atom::Ip(0),
            Atom::Present(StrField::Header("user-agent".into())),
        ];
        assert_eq!(
            project_l4(&[vec![(0, false), (1, false)]], &atoms),
            vec![vec![(0, false)]]
        );
        assert_eq!(
            project_l4(&[vec![(1, false)], vec![(0, false)]], &atoms),
            vec![Vec::<Lit>::new()]
        );
    }
}
