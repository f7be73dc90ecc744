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

use crate::analysis::{dnf, Analyzer, Budget, Lit, Overlap, Term};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::ir::{Action, Atom, Cond, IpSet, Rule, StrOp};
use crate::plan::SpannedRule;
use crate::Options;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    unreachable(rules, &mut an, opts, diags);
    exemptions(rules, &mut an, opts, diags);
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

/// Warns about rules that an earlier terminal rule always decides first.
fn unreachable(
    rules: &[SpannedRule],
    an: &mut Analyzer<'_>,
    opts: &Options,
    diags: &mut Diagnostics,
) {
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
                break;
            }
        }
    }
}

// ------------------------------------------------------------ exemptions

/// What a condition needs of one string field: one of a few values, or a
/// prefix. (A field absent from a [`Summary`] may have any value.)
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    Values(BTreeSet<String>),
    Prefix(String),
}

/// A summary of what every request a condition matches must have: an
/// over-approximation, so two disjoint summaries prove two conditions
/// disjoint.
#[derive(Debug, Clone, Default)]
struct Summary {
    /// The condition never holds.
    never: bool,
    /// Per field class.
    fields: BTreeMap<u32, Need>,
    /// Address atoms (client or destination) that must hold.
    ip_in: BTreeSet<u32>,
    /// Address atoms that must not hold.
    ip_out: BTreeSet<u32>,
}

/// Value sets larger than this are widened to their common prefix.
const MAX_VALUES: usize = 4096;

fn common_prefix<'s>(a: &'s str, b: &str) -> &'s str {
    let n = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    &a[..n]
}

/// The longest common prefix of `p` and every value.
fn lcp(p: &str, values: &BTreeSet<String>) -> String {
    values
        .iter()
        .fold(p.to_string(), |p, x| common_prefix(&p, x).to_string())
}

fn widen(n: Need) -> Option<Need> {
    match n {
        Need::Values(v) if v.len() > MAX_VALUES => {
            let p = lcp(v.first()?, &v);
            (!p.is_empty()).then_some(Need::Prefix(p))
        }
        Need::Prefix(p) if p.is_empty() => None,
        n => Some(n),
    }
}

impl Summary {
    fn never() -> Self {
        Summary {
            never: true,
            ..Summary::default()
        }
    }

    fn of(an: &Analyzer<'_>, c: &Cond, neg: bool) -> Summary {
        match (c, neg) {
            (Cond::True, false) | (Cond::False, true) => Summary::default(),
            (Cond::True, true) | (Cond::False, false) => Summary::never(),
            (Cond::Not(x), n) => Summary::of(an, x, !n),
            (Cond::Atom(a), n) => Summary::lit(an, (*a, n)),
            (Cond::And(v), false) | (Cond::Or(v), true) => v
                .iter()
                .fold(Summary::default(), |s, x| s.meet(Summary::of(an, x, neg))),
            (Cond::Or(v), false) | (Cond::And(v), true) => {
                let mut it = v.iter().map(|x| Summary::of(an, x, neg));
                let first = it.next().unwrap_or_else(Summary::never);
                it.fold(first, Summary::join)
            }
        }
    }

    fn lit(an: &Analyzer<'_>, (a, neg): Lit) -> Summary {
        let mut s = Summary::default();
        match (&an.atoms()[a as usize], neg) {
            (Atom::Ip(_) | Atom::DstIp(_), false) => {
                s.ip_in.insert(a);
            }
            (Atom::Ip(_) | Atom::DstIp(_), true) => {
                s.ip_out.insert(a);
            }
            (Atom::Str { op, .. }, false) => {
                let need = match op {
                    StrOp::Eq(v) => Need::Values(BTreeSet::from([v.clone()])),
                    StrOp::In(vs) => Need::Values(vs.iter().cloned().collect()),
                    StrOp::Prefix(p) => Need::Prefix(p.clone()),
                    _ => return s,
                };
                if let Some(n) = widen(need) {
                    s.fields.insert(an.class(a), n);
                }
            }
            _ => {}
        }
        s
    }

    /// Both hold.
    fn meet(mut self, o: Summary) -> Summary {
        if self.never || o.never {
            return Summary::never();
        }
        for (c, n) in o.fields {
            let merged = match (self.fields.remove(&c), n) {
                (None, n) => n,
                (Some(Need::Values(a)), Need::Values(b)) => {
                    Need::Values(a.intersection(&b).cloned().collect())
                }
                (Some(Need::Values(v)), Need::Prefix(p))
                | (Some(Need::Prefix(p)), Need::Values(v)) => {
                    Need::Values(v.into_iter().filter(|x| x.starts_with(&p)).collect())
                }
                (Some(Need::Prefix(p)), Need::Prefix(q)) => {
                    if p.starts_with(&q) {
                        Need::Prefix(p)
                    } else if q.starts_with(&p) {
                        Need::Prefix(q)
                    } else {
                        Need::Values(BTreeSet::new())
                    }
                }
            };
            if merged == Need::Values(BTreeSet::new()) {
                return Summary::never();
            }
            self.fields.insert(c, merged);
        }
        self.ip_in.extend(o.ip_in);
        self.ip_out.extend(o.ip_out);
        self
    }

    /// Either holds.
    fn join(self, o: Summary) -> Summary {
        if self.never {
            return o;
        }
        if o.never {
            return self;
        }
        let mut fields = BTreeMap::new();
        for (c, a) in self.fields {
            let Some(b) = o.fields.get(&c) else { continue };
            let joined = match (a, b) {
                (Need::Values(mut a), Need::Values(b)) => {
                    a.extend(b.iter().cloned());
                    Need::Values(a)
                }
                (Need::Values(v), Need::Prefix(p)) => Need::Prefix(lcp(p, &v)),
                (Need::Prefix(p), Need::Values(v)) => Need::Prefix(lcp(&p, v)),
                (Need::Prefix(p), Need::Prefix(q)) => {
                    Need::Prefix(common_prefix(&p, q).to_string())
                }
            };
            if let Some(n) = widen(joined) {
                fields.insert(c, n);
            }
        }
        Summary {
            never: false,
            fields,
            ip_in: self.ip_in.intersection(&o.ip_in).copied().collect(),
            ip_out: self.ip_out.intersection(&o.ip_out).copied().collect(),
        }
    }
}

/// A set of rule positions.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    /// Clears every position from `n` on.
    fn keep_below(&mut self, n: usize) {
        let (w, b) = (n / 64, n % 64);
        if let Some(word) = self.0.get_mut(w) {
            *word &= (1u64 << b) - 1;
        }
        self.0.iter_mut().skip(w + 1).for_each(|x| *x = 0);
    }
    fn and(&mut self, o: &Bits) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a &= b);
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }
}

/// The enforcing rules, indexed by what their summaries need.
struct Enforcers {
    n: usize,
    /// Rules that can decide against an allow (and may match at all).
    live: Bits,
    /// Per field class: the rules that need something of that field.
    constrained: HashMap<u32, Bits>,
    values: HashMap<u32, BTreeMap<String, Vec<usize>>>,
    prefixes: HashMap<u32, BTreeMap<String, Vec<usize>>>,
    ip_in: BTreeMap<u32, Vec<usize>>,
    ip_out: BTreeMap<u32, Vec<usize>>,
}

/// Address atoms beyond which the index ignores addresses (the exact
/// check still sees them).
const MAX_INDEXED_SETS: usize = 1024;

impl Enforcers {
    fn new(n: usize) -> Self {
        Enforcers {
            n,
            live: Bits::new(n),
            constrained: HashMap::new(),
            values: HashMap::new(),
            prefixes: HashMap::new(),
            ip_in: BTreeMap::new(),
            ip_out: BTreeMap::new(),
        }
    }

    fn add(&mut self, i: usize, s: &Summary) {
        if s.never {
            return;
        }
        self.live.set(i);
        for (&c, need) in &s.fields {
            let n = self.n;
            self.constrained
                .entry(c)
                .or_insert_with(|| Bits::new(n))
                .set(i);
            match need {
                Need::Values(vs) => {
                    let m = self.values.entry(c).or_default();
                    vs.iter()
                        .for_each(|v| m.entry(v.clone()).or_default().push(i));
                }
                Need::Prefix(p) => self
                    .prefixes
                    .entry(c)
                    .or_default()
                    .entry(p.clone())
                    .or_default()
                    .push(i),
            }
        }
        s.ip_in
            .iter()
            .for_each(|&a| self.ip_in.entry(a).or_default().push(i));
        s.ip_out
            .iter()
            .for_each(|&a| self.ip_out.entry(a).or_default().push(i));
    }

    /// The rules whose need of field class `c` is compatible with `need`.
    fn compatible(&self, c: u32, need: &Need) -> Bits {
        let mut out = Bits::new(self.n);
        match self.constrained.get(&c) {
            Some(b) => out.0.iter_mut().zip(&b.0).for_each(|(o, b)| *o = !b),
            None => return Bits(vec![u64::MAX; self.n.div_ceil(64)]),
        }
        let empty = BTreeMap::new();
        let values = self.values.get(&c).unwrap_or(&empty);
        let prefixes = self.prefixes.get(&c).unwrap_or(&empty);
        let mut add = |list: &Vec<usize>| list.iter().for_each(|&i| out.set(i));
        let prefixes_of = |v: &str, add: &mut dyn FnMut(&Vec<usize>)| {
            for (i, _) in v.char_indices().chain([(v.len(), ' ')]) {
                if let Some(l) = prefixes.get(&v[..i]) {
                    add(l);
                }
            }
        };
        match need {
            Need::Values(vs) => {
                for v in vs {
                    if let Some(l) = values.get(v) {
                        add(l);
                    }
                    prefixes_of(v, &mut add);
                }
            }
            Need::Prefix(p) => {
                let longer = |m: &BTreeMap<String, Vec<usize>>,
                              add: &mut dyn FnMut(&Vec<usize>)| {
                    for (k, l) in m.range(p.clone()..) {
                        if !k.starts_with(p.as_str()) {
                            break;
                        }
                        add(l);
                    }
                };
                longer(values, &mut add);
                longer(prefixes, &mut add);
                prefixes_of(p, &mut add);
            }
        }
        out
    }
}

/// Reports every allow that an earlier enforcing rule may pre-empt.
fn exemptions(
    rules: &[SpannedRule],
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
    let index_ips = index.ip_in.len() + index.ip_out.len() <= MAX_INDEXED_SETS;
    for (j, later) in rules.iter().enumerate() {
        let (true, Some(sum)) = (is_allow(&later.rule), &summaries[j]) else {
            continue;
        };
        if sum.never {
            continue;
        }
        let mut cands = index.live.clone();
        cands.keep_below(j);
        for (&c, need) in &sum.fields {
            cands.and(&index.compatible(c, need));
        }
        if index_ips {
            for &a in &sum.ip_in {
                for (&e, list) in &index.ip_in {
                    if an.atoms_exclude(a, e) {
                        list.iter().for_each(|&i| cands.clear(i));
                    }
                }
                for (&e, list) in &index.ip_out {
                    if an.atom_implies(a, e) {
                        list.iter().for_each(|&i| cands.clear(i));
                    }
                }
            }
        }
        for i in cands.iter() {
            let earlier = &rules[i];
            let (e, l) = (&earlier.rule, &later.rule);
            if !sites_meet(e, l) {
                continue;
            }
            let mut budget = Budget(opts.max_overlap_steps);
            let conflict = match an.overlap(&l.cond, &e.cond, &mut budget) {
                Overlap::Disjoint => continue,
                Overlap::May => Diagnostic::error(
                    code::EXEMPTION_CONFLICT,
                    format!("exemption `{}` does not win over `{}`", l.name, e.name),
                )
                .primary(later.when, format!("`{}` allows this traffic", l.name))
                .secondary(earlier.when, format!("but `{}` ({}, priority {}) is evaluated first and can match it", e.name, e.action.kind(), e.priority)),
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
