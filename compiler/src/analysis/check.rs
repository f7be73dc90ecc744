//! The checks over the ordered ruleset: unreachable rules (warnings) and
//! exemption conflicts (errors).
//!
//! Both compare each rule with the rules before it, so a direct
//! implementation is quadratic in the number of rules. Each check instead
//! asks an index for the few earlier rules that could possibly be
//! involved, and runs the exact analysis on those only:
//!
//! - **Exemptions** ([`exemptions`]): an allow conflicts with an earlier
//!   enforcing rule unless the two are provably disjoint. Every rule is
//!   summarised per field (the exact values or the prefix its `host`,
//!   `path`, a header… must have; the address sets it needs or avoids), and
//!   earlier rules whose summary is disjoint from the allow's are left out
//!   by bitset operations. The others are decided by
//!   [`Analyzer::overlap`], on the condition trees: no DNF limit applies,
//!   and a pair it cannot decide within its budget is reported (`E0051`,
//!   or `W0105` for an allow marked `allow_undecided`), never skipped.
//! - **Unreachable rules** ([`unreachable`]): a rule is unreachable when an
//!   earlier terminal rule matches all of its traffic. Each DNF term of
//!   each earlier rule is filed under its least common positive literal;
//!   a later term can only imply it if one of its own literals implies
//!   that anchor. This is a warning, so rules whose DNF has more than
//!   [`crate::Options::max_dnf_terms`] terms are not checked (a missed
//!   warning, never a wrong one).

use crate::analysis::{dnf, Analyzer, Budget, Overlap, Term};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::ir::{Action, Atom, IpSet, Rule, StrOp};
use crate::plan::SpannedRule;
use crate::proof::{self, Conflict, Deciders, Reach};
use crate::summary::{Enforcers, Summary};
use crate::Options;
use std::collections::{BTreeSet, HashMap, HashSet};

fn sites_cover(outer: &Rule, inner: &Rule) -> bool {
    outer.sites.is_empty()
        || (!inner.sites.is_empty() && inner.sites.iter().all(|s| outer.sites.contains(s)))
}

fn sites_meet(a: &Rule, b: &Rule) -> bool {
    a.sites.is_empty() || b.sites.is_empty() || a.sites.iter().any(|s| b.sites.contains(s))
}

fn active(r: &Rule) -> bool {
    r.enabled && !r.shadow
}

/// Reports unreachable rules (warnings) and exemption conflicts (errors).
pub fn check_rules(
    rules: &[SpannedRule],
    atoms: &[Atom],
    ipsets: &[IpSet],
    opts: &Options,
    diags: &mut Diagnostics,
) {
    let mut an = Analyzer::new(atoms, ipsets);
    let warned = unreachable(rules, &mut an, opts, diags);
    let refs: Vec<&Rule> = rules.iter().map(|r| &r.rule).collect();
    let deciders = Deciders::new(&an, &refs);
    covered(rules, &refs, &deciders, &warned, &mut an, opts, diags);
    exemptions(rules, &refs, &deciders, &mut an, opts, diags);
}

// ------------------------------------------------------------ unreachable

/// A bit per atom, for a quick subset test between sets of atoms.
fn bloom(a: u32) -> u128 {
    1u128 << (a.wrapping_mul(0x9e37_79b9) >> 25)
}

/// Per field class: atoms by a string (a prefix or a suffix), and the
/// lengths of those strings.
type ByAffix = HashMap<u32, (HashMap<String, Vec<u32>>, BTreeSet<usize>)>;

/// The atoms that appear as positive literals in earlier rules' terms,
/// arranged so that the ones an atom implies are found without testing
/// them all.
#[derive(Default)]
struct Implied {
    /// Per field class: `==`/`in` atoms by each of their values.
    exact: HashMap<u32, HashMap<String, Vec<u32>>>,
    /// Per field class: prefix atoms by prefix, and the prefix lengths.
    prefix: ByAffix,
    /// Per field class: suffix atoms by suffix, and the suffix lengths.
    suffix: ByAffix,
    /// Per field class: `contains` atoms.
    contains: HashMap<u32, Vec<u32>>,
    /// Per field class: regex atoms.
    regex: HashMap<u32, Vec<u32>>,
    /// Per field class: the `present` atom.
    present: HashMap<u32, u32>,
    /// Per field class: address, port and protocol atoms.
    other: HashMap<u32, Vec<u32>>,
    /// Atoms in the index.
    known: BTreeSet<u32>,
    /// Memo: per atom, the indexed atoms it implies and their bloom.
    memo: HashMap<u32, (Vec<u32>, u128)>,
}

impl Implied {
    fn add(&mut self, an: &Analyzer<'_>, a: u32) {
        if !self.known.insert(a) {
            return;
        }
        let c = an.class(a);
        let by_len = |m: &mut ByAffix, s: &str| {
            let e = m.entry(c).or_default();
            e.0.entry(s.to_string()).or_default().push(a);
            e.1.insert(s.len());
        };
        match &an.atoms()[a as usize] {
            Atom::Str { op, .. } => match op {
                StrOp::Eq(v) => self.exact_entry(c, v).push(a),
                StrOp::In(vs) => vs.iter().for_each(|v| self.exact_entry(c, v).push(a)),
                StrOp::Prefix(p) => by_len(&mut self.prefix, p),
                StrOp::Suffix(p) => by_len(&mut self.suffix, p),
                StrOp::Contains(_) => self.contains.entry(c).or_default().push(a),
                StrOp::Regex { .. } => self.regex.entry(c).or_default().push(a),
            },
            Atom::Present(_) => {
                self.present.insert(c, a);
            }
            Atom::Ip(_) | Atom::DstIp(_) | Atom::Port(_) | Atom::Proto(_) => {
                self.other.entry(c).or_default().push(a);
            }
        }
    }

    fn exact_entry(&mut self, c: u32, v: &str) -> &mut Vec<u32> {
        self.exact
            .entry(c)
            .or_default()
            .entry(v.to_string())
            .or_default()
    }

    /// The indexed atoms that positive atom `x` implies, and their bloom;
    /// `None` if finding them would cost more than the budget.
    fn of(
        &mut self,
        an: &mut Analyzer<'_>,
        x: u32,
        budget: &mut Budget,
    ) -> Option<&(Vec<u32>, u128)> {
        if !self.memo.contains_key(&x) {
            let found = self.compute(an, x, budget)?;
            let b = found.iter().fold(0, |m, &y| m | bloom(y));
            self.memo.insert(x, (found, b));
        }
        self.memo.get(&x)
    }

    fn compute(&self, an: &mut Analyzer<'_>, x: u32, budget: &mut Budget) -> Option<Vec<u32>> {
        let c = an.class(x);
        let mut cands: Vec<u32> = Vec::new();
        let lookup = |m: &ByAffix, v: &str, from_end: bool, cands: &mut Vec<u32>| {
            let Some((map, lens)) = m.get(&c) else { return };
            for &l in lens.range(..=v.len()) {
                let s = if from_end {
                    v.get(v.len() - l..)
                } else {
                    v.get(..l)
                };
                if let Some(found) = s.and_then(|s| map.get(s)) {
                    cands.extend_from_slice(found);
                }
            }
        };
        let list = |m: &HashMap<u32, Vec<u32>>| m.get(&c).cloned().unwrap_or_default();
        match &an.atoms()[x as usize] {
            Atom::Str { op, .. } => {
                let (exact, text) = match op {
                    StrOp::Eq(v) => (true, Some(v.as_str())),
                    StrOp::In(vs) => (true, vs.first().map(String::as_str)),
                    StrOp::Prefix(p) => {
                        lookup(&self.prefix, p, false, &mut cands);
                        (false, None)
                    }
                    StrOp::Suffix(p) => {
                        lookup(&self.suffix, p, true, &mut cands);
                        (false, None)
                    }
                    StrOp::Contains(_) | StrOp::Regex { .. } => (false, None),
                };
                if let Some(v) = text {
                    // Whatever `x` implies holds for each of its values,
                    // so for its first one.
                    if let Some(found) = self.exact.get(&c).and_then(|m| m.get(v)) {
                        cands.extend_from_slice(found);
                    }
                    lookup(&self.prefix, v, false, &mut cands);
                    lookup(&self.suffix, v, true, &mut cands);
                }
                if exact || matches!(op, StrOp::Prefix(_) | StrOp::Suffix(_) | StrOp::Contains(_)) {
                    cands.extend(list(&self.contains));
                }
                if exact {
                    cands.extend(list(&self.regex));
                }
                cands.extend(self.present.get(&c));
            }
            Atom::Present(_) => {}
            Atom::Ip(_) | Atom::DstIp(_) | Atom::Port(_) | Atom::Proto(_) => {
                cands.extend(list(&self.other));
            }
        }
        let mut out: Vec<u32> = Vec::new();
        if self.known.contains(&x) {
            out.push(x);
        }
        if !budget.spend(cands.len() as u64 + 1) {
            return None;
        }
        for y in cands {
            if y != x && an.atom_implies(x, y) {
                out.push(y);
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// Work allowed to find the candidates for one rule's reachability check
/// (comparisons of its literals with the earlier rules' atoms; what was
/// found for an atom is remembered for the next rules). Past it, the rule
/// is not checked: a warning may be missed, never given wrongly.
const CANDIDATE_BUDGET: u64 = 1 << 20;

/// Warns about rules that one earlier terminal rule always decides first;
/// returns the rules warned about.
fn unreachable(
    rules: &[SpannedRule],
    an: &mut Analyzer<'_>,
    opts: &Options,
    diags: &mut Diagnostics,
) -> HashSet<usize> {
    let mut warned = HashSet::new();
    let forms: Vec<Option<Vec<Term>>> = rules
        .iter()
        .map(|r| {
            r.rule
                .enabled
                .then(|| dnf(&r.rule.cond, opts.max_dnf_terms))
                .flatten()
        })
        .collect();
    let can_decide = |r: &Rule| active(r) && r.action.is_terminal();
    // How often each atom is a positive literal of a deciding rule's term.
    let mut freq: HashMap<u32, usize> = HashMap::new();
    for (r, f) in rules.iter().zip(&forms) {
        if let (true, Some(f)) = (can_decide(&r.rule), f) {
            for &(a, neg) in f.iter().flatten() {
                if !neg {
                    *freq.entry(a).or_default() += 1;
                }
            }
        }
    }
    // File every term under its rarest positive literal.
    let mut implied = Implied::default();
    let mut anchors: HashMap<u32, Vec<(u32, u128)>> = HashMap::new();
    let mut keyless: Vec<u32> = Vec::new();
    for (i, (r, f)) in rules.iter().zip(&forms).enumerate() {
        let (true, Some(f)) = (can_decide(&r.rule), f) else {
            continue;
        };
        for t in f {
            let pos = t.iter().filter(|l| !l.1).map(|l| l.0);
            match pos.clone().min_by_key(|a| (freq[a], *a)) {
                Some(anchor) => {
                    pos.clone().for_each(|a| implied.add(an, a));
                    let b = pos.fold(0, |m, a| m | bloom(a));
                    anchors.entry(anchor).or_default().push((i as u32, b));
                }
                None => keyless.push(i as u32),
            }
        }
    }
    keyless.dedup();
    // Rules before the first deciding one have nothing to check.
    let first = anchors
        .values()
        .filter_map(|l| l.first())
        .map(|e| e.0)
        .chain(keyless.first().copied())
        .min();
    let mut cands: Vec<u32> = Vec::new();
    for (j, later) in rules.iter().enumerate() {
        let Some(lform) = &forms[j] else { continue };
        if first.is_none_or(|i| i as usize >= j) {
            continue;
        }
        let below = |list: &[(u32, u128)]| list.partition_point(|e| (e.0 as usize) < j);
        let live: Vec<Term> = lform
            .iter()
            .filter(|t| !an.term_unsat(t))
            .cloned()
            .collect();
        cands.clear();
        match live.first() {
            // A rule that can never match: any earlier deciding rule
            // leaves it nothing.
            None => cands.extend(0..j as u32),
            Some(t0) => {
                let pos: Vec<u32> = t0.iter().filter(|l| !l.1).map(|l| l.0).collect();
                let mut reach = 0u128;
                let mut budget = Budget(CANDIDATE_BUDGET);
                let mut found = Vec::with_capacity(pos.len());
                for &x in &pos {
                    let Some((ys, b)) = implied.of(an, x, &mut budget) else {
                        break;
                    };
                    reach |= b;
                    found.push(ys.clone());
                }
                if found.len() < pos.len() {
                    continue;
                }
                for ys in found {
                    for y in ys {
                        let Some(list) = anchors.get(&y) else {
                            continue;
                        };
                        for &(i, b) in &list[..below(list)] {
                            if b & !reach == 0 {
                                cands.push(i);
                            }
                        }
                    }
                }
                cands.extend(keyless.iter().take_while(|&&i| (i as usize) < j));
            }
        }
        cands.sort_unstable();
        cands.dedup();
        for &i in &cands {
            let earlier = &rules[i as usize];
            let (e, l) = (&earlier.rule, &later.rule);
            if !can_decide(e) || !sites_cover(e, l) {
                continue;
            }
            if l.is_packet_limit() && !matches!(e.action, Action::Allow | Action::Drop) {
                continue;
            }
            let Some(eform) = &forms[i as usize] else {
                continue;
            };
            if an.terms_imply(&live, eform) {
                diags.push(
                    Diagnostic::warning(code::UNREACHABLE, format!("rule `{}` is unreachable", l.name))
                        .primary(later.name, "never decides anything")
                        .secondary(earlier.name, format!("`{}` ({}) matches all of its traffic first", e.name, e.action.kind()))
                        .hint("give it a lower priority number than the earlier rule, or narrow the earlier rule"),
                );
                warned.insert(j);
                break;
            }
        }
    }
    warned
}

/// Warns about the rules no request reaches, though no one earlier rule
/// covers them: several do together ([`proof::reach`]), or the condition
/// holds for no request.
fn covered(
    rules: &[SpannedRule],
    refs: &[&Rule],
    deciders: &Deciders,
    warned: &HashSet<usize>,
    an: &mut Analyzer<'_>,
    opts: &Options,
    diags: &mut Diagnostics,
) {
    for (j, later) in rules.iter().enumerate() {
        let l = &later.rule;
        if warned.contains(&j) || !proof::asked(an, l) {
            continue;
        }
        let d = match proof::reach(an, refs, deciders, j, opts) {
            Reach::Covered(by) => {
                let mut d = Diagnostic::warning(
                    code::UNREACHABLE,
                    format!("rule `{}` is unreachable", l.name),
                )
                .primary(later.name, "never decides anything");
                for &i in by.iter().take(4) {
                    let e = &rules[i].rule;
                    d = d.secondary(
                        rules[i].name,
                        format!(
                            "`{}` ({}) decides part of its traffic first",
                            e.name,
                            e.action.kind()
                        ),
                    );
                }
                let names: Vec<String> = by
                    .iter()
                    .map(|&i| format!("`{}`", rules[i].rule.name))
                    .collect();
                d.note(format!(
                    "together, {} decide every request it matches before it",
                    names.join(", ")
                ))
                .hint("give it a lower priority number than those rules, or narrow them")
            }
            Reach::NeverMatches => Diagnostic::warning(
                code::UNREACHABLE,
                format!(
                    "rule `{}` is unreachable: its condition holds for no request",
                    l.name
                ),
            )
            .primary(later.when, "no request satisfies all of this")
            .hint("look for tests on one field that exclude each other"),
            Reach::Reached { .. } | Reach::Unknown(_) => continue,
        };
        diags.push(d);
    }
}

// ------------------------------------------------------------ exemptions

/// Reports every allow that an earlier enforcing rule may pre-empt.
fn exemptions(
    rules: &[SpannedRule],
    refs: &[&Rule],
    deciders: &Deciders,
    an: &mut Analyzer<'_>,
    opts: &Options,
    diags: &mut Diagnostics,
) {
    let is_allow = |r: &Rule| r.enabled && !r.shadow && r.action == Action::Allow;
    let enforcing = |r: &Rule| active(r) && !matches!(r.action, Action::Allow | Action::Log);
    if !rules.iter().any(|r| is_allow(&r.rule)) {
        return;
    }
    let mut index = Enforcers::new(rules.len());
    let mut summaries: Vec<Option<Summary>> = vec![None; rules.len()];
    for (i, r) in rules.iter().enumerate() {
        if enforcing(&r.rule) || is_allow(&r.rule) {
            let s = Summary::of(an, &r.rule.cond, false);
            if enforcing(&r.rule) {
                index.add(i, &s);
            }
            summaries[i] = Some(s);
        }
    }
    for (j, later) in rules.iter().enumerate() {
        let (true, Some(sum)) = (is_allow(&later.rule), &summaries[j]) else {
            continue;
        };
        if sum.never {
            continue;
        }
        let cands = index.candidates(an, sum, j);
        for i in cands.iter() {
            let earlier = &rules[i];
            let (e, l) = (&earlier.rule, &later.rule);
            if !sites_meet(e, l) {
                continue;
            }
            let mut budget = Budget(opts.max_overlap_steps);
            let conflict = match an.overlap(&l.cond, &e.cond, &mut budget) {
                Overlap::Disjoint => continue,
                Overlap::May => {
                    let exact = proof::conflict(an, refs, deciders, (j, i), opts);
                    let d = Diagnostic::error(
                        code::EXEMPTION_CONFLICT,
                        format!("exemption `{}` does not win over `{}`", l.name, e.name),
                    )
                    .primary(later.when, format!("`{}` allows this traffic", l.name));
                    match exact {
                        Conflict::Unreal => continue,
                        Conflict::Real(p) => {
                            let d = d
                                .secondary(earlier.when, format!("but `{}` ({}, priority {}) is evaluated first and matches some of it", e.name, e.action.kind(), e.priority))
                                .note(proof::describe(&p));
                            match proof::witness_test(l, e, &p) {
                                Some(t) => d.witness(t),
                                None => d,
                            }
                        }
                        Conflict::Unknown(why) => d
                            .secondary(earlier.when, format!("but `{}` ({}, priority {}) is evaluated first and can match it", e.name, e.action.kind(), e.priority))
                            .note(format!("not decided exactly ({why}): reported because the two are not provably disjoint")),
                    }
                }
                Overlap::Undecided if later.allow_undecided => Diagnostic::warning(
                    code::EXEMPTION_UNPROVEN,
                    format!("exemption `{}` is not proven to win over `{}` (accepted: allow_undecided)", l.name, e.name),
                )
                .primary(later.when, format!("`{}` allows this traffic", l.name))
                .secondary(earlier.when, format!("`{}` ({}, priority {}) is evaluated first; whether it can match the same traffic was not decided in {} steps", e.name, e.action.kind(), e.priority, opts.max_overlap_steps)),
                Overlap::Undecided => Diagnostic::error(
                    code::EXEMPTION_UNDECIDED,
                    format!("cannot decide whether exemption `{}` wins over `{}`", l.name, e.name),
                )
                .primary(later.when, format!("`{}` allows this traffic", l.name))
                .secondary(earlier.when, format!("`{}` ({}, priority {}) is evaluated first; whether it can match the same traffic was not decided in {} steps", e.name, e.action.kind(), e.priority, opts.max_overlap_steps)),
            };
            let hint = format!(
                "give `{}` a lower priority number than {}, or exclude its traffic from `{}`",
                l.name, e.priority, e.name
            );
            let hint = match conflict.code {
                code::EXEMPTION_UNDECIDED => format!("{hint}; or simplify the conditions, or add `allow_undecided` to `{}` to accept it unproven", l.name),
                _ => hint,
            };
            diags.push(
                conflict
                    .secondary(later.name, format!("priority {}", l.priority))
                    .hint(hint),
            );
        }
    }
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
