//! Per-field summaries of conditions, and the bitset index over them that
//! the checks use to find the few earlier rules a rule could meet: what
//! every request a condition matches must have (the values or prefix of a
//! field, the address sets it needs or avoids). Two conditions whose
//! summaries are disjoint are disjoint.

use crate::analysis::{Analyzer, Lit};
use crate::ir::{Atom, Cond, StrOp};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a condition needs of one string field: one of a few values, or a
/// prefix. (A field absent from a [`Summary`] may have any value.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    Values(BTreeSet<String>),
    Prefix(String),
}

/// A summary of what every request a condition matches must have: an
/// over-approximation, so two disjoint summaries prove two conditions
/// disjoint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Summary {
    /// The condition never holds.
    pub(crate) never: bool,
    /// Per field class.
    pub(crate) fields: BTreeMap<u32, Need>,
    /// Address atoms (client or destination) that must hold.
    pub(crate) ip_in: BTreeSet<u32>,
    /// Address atoms that must not hold.
    pub(crate) ip_out: BTreeSet<u32>,
}

/// Value sets larger than this are widened to their common prefix.
pub(crate) const MAX_VALUES: usize = 4096;

pub(crate) fn common_prefix<'s>(a: &'s str, b: &str) -> &'s str {
    let n = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    &a[..n]
}

/// The longest common prefix of `p` and every value.
pub(crate) fn lcp(p: &str, values: &BTreeSet<String>) -> String {
    values
        .iter()
        .fold(p.to_string(), |p, x| common_prefix(&p, x).to_string())
}

pub(crate) fn widen(n: Need) -> Option<Need> {
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
    pub(crate) fn never() -> Self {
        Summary {
            never: true,
            ..Summary::default()
        }
    }

    pub(crate) fn of(an: &Analyzer<'_>, c: &Cond, neg: bool) -> Summary {
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

    pub(crate) fn lit(an: &Analyzer<'_>, (a, neg): Lit) -> Summary {
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
    pub(crate) fn meet(mut self, o: Summary) -> Summary {
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
    pub(crate) fn join(self, o: Summary) -> Summary {
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
pub(crate) struct Bits(pub(crate) Vec<u64>);

impl Bits {
    pub(crate) fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    pub(crate) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub(crate) fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    /// Clears every position from `n` on.
    pub(crate) fn keep_below(&mut self, n: usize) {
        let (w, b) = (n / 64, n % 64);
        if let Some(word) = self.0.get_mut(w) {
            *word &= (1u64 << b) - 1;
        }
        self.0.iter_mut().skip(w + 1).for_each(|x| *x = 0);
    }
    pub(crate) fn and(&mut self, o: &Bits) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a &= b);
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &bits)| {
            let mut rest = bits;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let b = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    w * 64 + b
                })
            })
        })
    }
}

/// The enforcing rules, indexed by what their summaries need.
pub(crate) struct Enforcers {
    pub(crate) n: usize,
    /// Rules that can decide against an allow (and may match at all).
    pub(crate) live: Bits,
    /// Per field class: the rules that need something of that field.
    pub(crate) constrained: HashMap<u32, Bits>,
    pub(crate) values: HashMap<u32, BTreeMap<String, Vec<usize>>>,
    pub(crate) prefixes: HashMap<u32, BTreeMap<String, Vec<usize>>>,
    pub(crate) ip_in: BTreeMap<u32, Vec<usize>>,
    pub(crate) ip_out: BTreeMap<u32, Vec<usize>>,
}

/// Address atoms beyond which the index ignores addresses (the exact
/// check still sees them).
pub(crate) const MAX_INDEXED_SETS: usize = 1024;

impl Enforcers {
    pub(crate) fn new(n: usize) -> Self {
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

    pub(crate) fn add(&mut self, i: usize, s: &Summary) {
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
    pub(crate) fn compatible(&self, c: u32, need: &Need) -> Bits {
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

impl Enforcers {
    /// The indexed rules before position `below` whose summaries are
    /// compatible with `sum`: every rule that could meet it, and few
    /// others.
    pub(crate) fn candidates(&self, an: &mut Analyzer<'_>, sum: &Summary, below: usize) -> Bits {
        let mut cands = self.live.clone();
        cands.keep_below(below);
        for (&c, need) in &sum.fields {
            cands.and(&self.compatible(c, need));
        }
        if self.ip_in.len() + self.ip_out.len() <= MAX_INDEXED_SETS {
            for &a in &sum.ip_in {
                for (&e, list) in &self.ip_in {
                    if an.atoms_exclude(a, e) {
                        list.iter().for_each(|&i| cands.clear(i));
                    }
                }
                for (&e, list) in &self.ip_out {
                    if an.atom_implies(a, e) {
                        list.iter().for_each(|&i| cands.clear(i));
                    }
                }
            }
        }
        cands
    }
}
