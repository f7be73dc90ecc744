use super::*;
use crate::cidr::{parse_cidr, PrefixSet};

fn set(s: &[&str]) -> IpSet {
    IpSet {
        name: "t".into(),
        prefixes: PrefixSet::from_cidrs(s.iter().map(|c| parse_cidr(c).unwrap().0)),
    }
}

fn path(op: StrOp) -> Atom {
    Atom::Str {
        field: StrField::Path,
        op,
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
    // The limit is inclusive, for a disjunction and for a product.
    assert_eq!(dnf(&c, 4).unwrap().len(), 4);
    let any4 = Cond::Or((0..4).map(Cond::Atom).collect());
    assert_eq!(dnf(&any4, 4).unwrap().len(), 4);
    assert!(dnf(&any4, 3).is_none());
    // A false part ends a conjunction before a later part over the limit.
    let c = Cond::And(vec![Cond::False, any4.clone()]);
    assert_eq!(dnf(&c, 3), Some(Vec::new()));
    // Terms come out sorted and without repeats; a false part empties a
    // conjunction.
    let c = Cond::And(vec![Cond::Atom(3), Cond::Atom(1), Cond::Atom(3)]);
    assert_eq!(dnf(&c, 10).unwrap(), vec![vec![(1, false), (3, false)]]);
    let c = Cond::And(vec![Cond::Atom(3), Cond::False]);
    assert_eq!(dnf(&c, 10).unwrap(), Vec::<Term>::new());
}

#[test]
fn implication_and_exclusion_over_fields() {
    let atoms = vec![
        path(StrOp::Eq("/sparql".into())),
        path(StrOp::Prefix("/spa".into())),
        path(StrOp::Regex {
            pattern: "^/w/".into(),
            ci: false,
        }),
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
    // Different fields never relate.
    assert!(!an.lits_exclude((0, false), (3, false)));
    // "/sparql and not updater" cannot overlap "updater".
    assert!(!an.may_overlap(&[vec![(0, false), (3, true)]], &[vec![(3, false)]]));
    assert!(an.may_overlap(&[vec![(0, false)]], &[vec![(3, false)]]));
}

#[test]
fn term_unsat_compares_within_fields_only() {
    // 50,000 literals `path != "/i"` and one `ip in …`: no pair can
    // exclude (two negatives never do), found without 10^9 comparisons.
    let mut atoms: Vec<Atom> = (0..50_000)
        .map(|i| path(StrOp::Eq(format!("/{i}"))))
        .collect();
    atoms.push(Atom::Ip(0));
    let sets = vec![set(&["10.0.0.0/8"])];
    let mut an = Analyzer::new(&atoms, &sets);
    let mut t: Term = (0..50_000).map(|i| (i, true)).collect();
    t.push((50_000, false));
    let mut budget = Budget(1_000_000);
    assert_eq!(an.term_unsat_within(&t, &mut budget), Some(false));
    // One positive `path == "/7"` contradicts `path != "/7"`.
    t.push((7, false));
    assert_eq!(an.term_unsat_within(&t, &mut budget), Some(true));
}

/// Builds `(h1 == a1 or h1 == b1) and … and (hn == an or hn == bn)`
/// (2^n DNF terms) over header fields, plus `extra` conjuncts.
fn wide(atoms: &mut Vec<Atom>, n: usize, extra: Vec<Cond>) -> Cond {
    let mut parts = Vec::new();
    for i in 0..n {
        let mut alt = Vec::new();
        for v in ["a", "b"] {
            atoms.push(Atom::Str {
                field: StrField::Header(format!("x-{i}")),
                op: StrOp::Eq(v.into()),
            });
            alt.push(Cond::Atom(atoms.len() as u32 - 1));
        }
        parts.push(Cond::Or(alt));
    }
    parts.extend(extra);
    Cond::And(parts)
}

#[test]
fn overlap_is_decided_without_the_dnf() {
    // 2^12 = 4,096 terms: more than any DNF limit, decided in a few steps.
    let mut atoms = vec![path(StrOp::Eq("/a".into())), path(StrOp::Eq("/b".into()))];
    let big = wide(&mut atoms, 12, vec![Cond::Atom(0)]);
    assert!(dnf(&big, 256).is_none());
    let sets = Vec::new();
    let mut an = Analyzer::new(&atoms, &sets);
    let mut budget = Budget(10_000);
    assert_eq!(an.overlap(&big, &Cond::Atom(0), &mut budget), Overlap::May);
    assert_eq!(
        an.overlap(&big, &Cond::Atom(1), &mut budget),
        Overlap::Disjoint
    );
    assert!(budget.0 > 9_000, "{budget:?}");
    // The contradiction only shows in the last header: unit propagation
    // takes it first, there is no branching.
    let last = atoms.len() as u32 - 1;
    let mut b = Budget(10_000);
    let other = Cond::Not(Box::new(Cond::Or(vec![
        Cond::Atom(last),
        Cond::Atom(last - 1),
    ])));
    assert_eq!(an.overlap(&big, &other, &mut b), Overlap::Disjoint);
    // Out of budget: undecided, never a guess.
    assert_eq!(
        an.overlap(&big, &Cond::Atom(0), &mut Budget(3)),
        Overlap::Undecided
    );
}

use crate::TestRng as Rng;

fn random_cond(r: &mut Rng, atoms: u64, depth: u32) -> Cond {
    if depth > 3 || r.next().is_multiple_of(3) {
        return match r.next() % 12 {
            0 => Cond::True,
            1 => Cond::False,
            _ => Cond::Atom((r.next() % atoms) as u32),
        };
    }
    let n = 1 + r.next() % 3;
    let parts = (0..n).map(|_| random_cond(r, atoms, depth + 1)).collect();
    match r.next() % 3 {
        0 => Cond::And(parts),
        1 => Cond::Or(parts),
        _ => Cond::Not(Box::new(random_cond(r, atoms, depth + 1))),
    }
}

#[test]
fn the_search_agrees_with_the_dnf() {
    // An independent route to the same answer: expand both conditions
    // into DNF and compare every pair of terms.
    let atoms = vec![
        path(StrOp::Eq("/a".into())),
        path(StrOp::Eq("/b".into())),
        path(StrOp::Prefix("/a".into())),
        path(StrOp::Prefix("/c".into())),
        Atom::Present(StrField::Header("ua".into())),
        Atom::Str {
            field: StrField::Header("ua".into()),
            op: StrOp::Regex {
                pattern: "^curl".into(),
                ci: false,
            },
        },
        Atom::Str {
            field: StrField::Header("ua".into()),
            op: StrOp::Eq("curl/8".into()),
        },
        Atom::Ip(0),
        Atom::Ip(1),
        Atom::Port(vec![(80, 80)]),
        Atom::Port(vec![(443, 443)]),
    ];
    let sets = vec![set(&["10.0.0.0/8"]), set(&["10.1.0.0/16"])];
    let mut an = Analyzer::new(&atoms, &sets);
    let mut r = Rng(0x5eed_cafe);
    let (mut disjoint, mut may) = (0, 0);
    for _ in 0..3_000 {
        let a = random_cond(&mut r, atoms.len() as u64, 0);
        let b = random_cond(&mut r, atoms.len() as u64, 0);
        let (Some(da), Some(db)) = (dnf(&a, 10_000), dnf(&b, 10_000)) else {
            continue;
        };
        let want = if an.may_overlap(&da, &db) {
            may += 1;
            Overlap::May
        } else {
            disjoint += 1;
            Overlap::Disjoint
        };
        let got = an.overlap(&a, &b, &mut Budget(1 << 30));
        assert_eq!(got, want, "{a:?}\n{b:?}");
    }
    assert!(disjoint > 300 && may > 300, "{disjoint} {may}");
}
