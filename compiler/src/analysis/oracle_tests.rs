//! The analysis judged by brute force: random predicate tables and
//! conditions over a few fields, every answer checked against every
//! concrete request of a small domain that is rich enough to hold a
//! counterexample to each claim the analysis makes or refuses to make.
//!
//! The oracle evaluates atoms itself (string tests on bytes, address
//! membership from the CIDRs it drew, port ranges, protocols): nothing
//! of the analysis or the solver decides what holds.
//!
//! - Sound, always: an implication or exclusion the analysis claims, an
//!   unsatisfiable term, `Disjoint`, `Unsat` and `implies` hold on every
//!   request; a witness satisfies its goals.
//! - Exact where the analysis promises it: the pairs it decides by
//!   comparison (`==` and `in` against anything, prefix with prefix,
//!   suffix with suffix, contains, addresses, ports, protocols) get the
//!   domain's answer, and `solve` finds a request whenever the domain
//!   holds one.

use super::*;
use crate::cidr::{parse_cidr, PrefixSet};
use crate::ir::Proto;
use crate::TestRng as Rng;

/// The fields a case draws its atoms from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Path,
    Header,
    Ip,
    Port,
    Proto,
}

const KINDS: [Kind; 5] = [Kind::Path, Kind::Header, Kind::Ip, Kind::Port, Kind::Proto];
const HEADER: &str = "x-h";
/// Literals in atoms: every string over {a, b} of length 0 to 2.
const LITERALS: [&str; 7] = ["", "a", "b", "aa", "ab", "ba", "bb"];
const REGEXES: [&str; 7] = ["^a", "b$", "ab", "^a.*b$", "^(aa|b)$", "a{2}", "^$"];
/// Address blocks inside 10.0.0.0/24 (sets are unions of one or two).
const BLOCKS: [&str; 8] = [
    "10.0.0.0/28",
    "10.0.0.0/29",
    "10.0.0.8/29",
    "10.0.0.4/30",
    "10.0.0.6/31",
    "10.0.0.5/32",
    "10.0.0.12/30",
    "10.0.0.0/24",
];

/// One concrete request (or packet, when `http` is false).
#[derive(Debug, Clone)]
struct Req {
    http: bool,
    path: Vec<u8>,
    header: Option<Vec<u8>>,
    /// IPv4 client address (`None`: an IPv6 one, in no set drawn here).
    ip: Option<u32>,
    port: u16,
    proto: Proto,
}

/// A random case: the predicate table, the oracle's view of its address
/// sets, and the compiled regexes.
struct Case {
    atoms: Vec<Atom>,
    sets: Vec<IpSet>,
    cidrs: Vec<Vec<(u32, u32)>>,
    regexes: Vec<Option<regex_automata::meta::Regex>>,
    kinds: Vec<Kind>,
}

fn v4(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

fn below(r: &mut Rng, n: usize) -> usize {
    (r.next() % n as u64) as usize
}

fn str_op(r: &mut Rng) -> StrOp {
    let lit = |r: &mut Rng| LITERALS[below(r, LITERALS.len())].to_string();
    match below(r, 7) {
        0 | 1 => StrOp::Eq(lit(r)),
        2 => StrOp::Prefix(lit(r)),
        3 => StrOp::Suffix(lit(r)),
        4 => StrOp::Contains(lit(r)),
        5 => {
            let mut v: Vec<String> = (0..1 + below(r, 3)).map(|_| lit(r)).collect();
            v.sort();
            v.dedup();
            StrOp::In(v)
        }
        _ => StrOp::Regex {
            pattern: REGEXES[below(r, REGEXES.len())].to_string(),
            ci: false,
        },
    }
}

impl Case {
    fn random(r: &mut Rng) -> Case {
        // Two fields, or one, so that atoms meet often.
        let first = KINDS[below(r, KINDS.len())];
        let second = KINDS[below(r, KINDS.len())];
        let kinds = if first == second {
            vec![first]
        } else {
            vec![first, second]
        };
        let mut c = Case {
            atoms: Vec::new(),
            sets: Vec::new(),
            cidrs: Vec::new(),
            regexes: Vec::new(),
            kinds,
        };
        for _ in 0..3 + below(r, 4) {
            let kind = c.kinds[below(r, c.kinds.len())];
            let atom = match kind {
                Kind::Path => Atom::Str {
                    field: StrField::Path,
                    op: str_op(r),
                },
                Kind::Header if below(r, 5) == 0 => Atom::Present(StrField::Header(HEADER.into())),
                Kind::Header => Atom::Str {
                    field: StrField::Header(HEADER.into()),
                    op: str_op(r),
                },
                Kind::Ip => {
                    let blocks: Vec<&str> = (0..1 + below(r, 2))
                        .map(|_| BLOCKS[below(r, BLOCKS.len())])
                        .collect();
                    let cidrs = blocks
                        .iter()
                        .map(|b| {
                            let (net, len) = b.split_once('/').unwrap();
                            (v4(net), len.parse().unwrap())
                        })
                        .collect();
                    let prefixes =
                        PrefixSet::from_cidrs(blocks.iter().map(|b| parse_cidr(b).unwrap().0));
                    c.sets.push(IpSet {
                        name: format!("s{}", c.sets.len()),
                        prefixes,
                    });
                    c.cidrs.push(cidrs);
                    Atom::Ip(c.sets.len() as u32 - 1)
                }
                Kind::Port => {
                    let lo = 1 + below(r, 8) as u16;
                    let hi = lo + below(r, 3) as u16;
                    let mut ranges = vec![(lo, hi)];
                    if below(r, 3) == 0 && hi + 2 <= 8 {
                        let lo2 = hi + 2 + below(r, (8 - hi - 1) as usize) as u16;
                        ranges.push((lo2, lo2.max(8)));
                    }
                    Atom::Port(ranges)
                }
                Kind::Proto => {
                    let mut p: Vec<Proto> = [Proto::Tcp, Proto::Udp, Proto::Icmp]
                        .into_iter()
                        .filter(|_| below(r, 2) == 0)
                        .collect();
                    if p.is_empty() {
                        p.push(Proto::Tcp);
                    }
                    p.sort();
                    Atom::Proto(p)
                }
            };
            // The compiler interns atoms: no two indices are the same test.
            if !c.atoms.contains(&atom) {
                c.atoms.push(atom);
            }
        }
        c.regexes = c
            .atoms
            .iter()
            .map(|a| match a {
                Atom::Str {
                    op: StrOp::Regex { pattern, ci },
                    ..
                } => Some(
                    regex_automata::meta::Regex::builder()
                        .syntax(crate::scan::syntax(*ci))
                        .build(pattern)
                        .unwrap(),
                ),
                _ => None,
            })
            .collect();
        c
    }

    /// Every request of the domain: all strings over {a, b} up to three
    /// long (and a packet that is no request) for the string fields, the
    /// addresses at and around every block's ends, the ports around every
    /// range, every protocol.
    fn domain(&self) -> Vec<Req> {
        let uses = |k| self.kinds.contains(&k);
        let mut strings = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..3 {
            last = last
                .iter()
                .flat_map(|s: &Vec<u8>| [b'a', b'b'].map(|c| [s.as_slice(), &[c]].concat()))
                .collect();
            strings.extend(last.iter().cloned());
        }
        let paths: Vec<Option<Vec<u8>>> = if uses(Kind::Path) {
            strings.iter().cloned().map(Some).chain([None]).collect()
        } else {
            vec![Some(b"/".to_vec()), None]
        };
        let headers: Vec<Option<Vec<u8>>> = if uses(Kind::Header) {
            strings.iter().cloned().map(Some).chain([None]).collect()
        } else {
            vec![None]
        };
        let ips: Vec<Option<u32>> = if uses(Kind::Ip) {
            (0..=16)
                .map(|i| Some(v4("10.0.0.0") + i))
                .chain([Some(v4("10.0.0.200")), Some(v4("10.0.1.0")), None])
                .collect()
        } else {
            vec![Some(v4("192.0.2.1"))]
        };
        let ports: Vec<u16> = if uses(Kind::Port) {
            (0..=10).chain([65535]).collect()
        } else {
            vec![0, 80]
        };
        let protos: Vec<Proto> = if uses(Kind::Proto) {
            vec![Proto::Tcp, Proto::Udp, Proto::Icmp]
        } else {
            vec![Proto::Tcp]
        };
        let mut out = Vec::new();
        for p in &paths {
            for h in &headers {
                if p.is_none() && h.is_some() {
                    continue;
                }
                for &ip in &ips {
                    for &port in &ports {
                        // An HTTP request came over TCP; a packet that is
                        // no request may be anything; ICMP has no port
                        // (the engine and the packet plane read 0).
                        for &proto in protos
                            .iter()
                            .filter(|&&x| p.is_none() || x == Proto::Tcp)
                            .filter(|&&x| x != Proto::Icmp || port == 0)
                        {
                            out.push(Req {
                                http: p.is_some(),
                                path: p.clone().unwrap_or_default(),
                                header: h.clone(),
                                ip,
                                port,
                                proto,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether atom `a` holds for `q`, decided here.
    fn atom(&self, a: u32, q: &Req) -> bool {
        let value = |f: &StrField| match f {
            StrField::Path => Some(q.path.as_slice()),
            StrField::Header(_) => q.header.as_deref(),
            _ => unreachable!("no other field is drawn"),
        };
        match &self.atoms[a as usize] {
            Atom::Present(f) => q.http && value(f).is_some(),
            Atom::Str { field, op } => {
                let Some(v) = value(field).filter(|_| q.http) else {
                    return false;
                };
                match op {
                    StrOp::Eq(x) => v == x.as_bytes(),
                    StrOp::In(xs) => xs.iter().any(|x| v == x.as_bytes()),
                    StrOp::Prefix(x) => v.starts_with(x.as_bytes()),
                    StrOp::Suffix(x) => v.ends_with(x.as_bytes()),
                    StrOp::Contains(x) => {
                        x.is_empty() || v.windows(x.len()).any(|w| w == x.as_bytes())
                    }
                    StrOp::Regex { .. } => self.regexes[a as usize].as_ref().unwrap().is_match(v),
                }
            }
            Atom::Ip(s) => q.ip.is_some_and(|ip| {
                self.cidrs[*s as usize]
                    .iter()
                    .any(|&(net, len)| len == 0 || (ip ^ net) >> (32 - len) == 0)
            }),
            Atom::Port(r) => r.iter().any(|&(lo, hi)| lo <= q.port && q.port <= hi),
            Atom::Proto(p) => p.contains(&q.proto),
            Atom::DstIp(_) => unreachable!("not drawn"),
        }
    }

    fn holds(&self, c: &Cond, q: &Req) -> bool {
        match c {
            Cond::True => true,
            Cond::False => false,
            Cond::Atom(a) => self.atom(*a, q),
            Cond::Not(x) => !self.holds(x, q),
            Cond::And(v) => v.iter().all(|x| self.holds(x, q)),
            Cond::Or(v) => v.iter().any(|x| self.holds(x, q)),
        }
    }

    fn term(&self, t: &Term, q: &Req) -> bool {
        t.iter().all(|&(a, neg)| self.atom(a, q) != neg)
    }

    /// Whether the analysis promises the exact answer about `a ⇒ b`
    /// (`implies`) or `a ∧ b = ∅`.
    fn decided(&self, a: u32, b: u32, implies: bool) -> bool {
        let (x, y) = (&self.atoms[a as usize], &self.atoms[b as usize]);
        match (x, y) {
            (Atom::Str { field: f, op: o1 }, Atom::Str { field: g, op: o2 }) if f == g => {
                use StrOp::*;
                let pinned = |o: &StrOp| matches!(o, Eq(_) | In(_));
                if implies {
                    pinned(o1)
                        || matches!(
                            (o1, o2),
                            (Prefix(_), Prefix(_))
                                | (Suffix(_), Suffix(_))
                                | (Prefix(_) | Suffix(_) | Contains(_), Contains(_))
                        )
                } else {
                    pinned(o1)
                        || pinned(o2)
                        || matches!((o1, o2), (Prefix(_), Prefix(_)) | (Suffix(_), Suffix(_)))
                }
            }
            (Atom::Str { field: f, .. }, Atom::Present(g)) => implies && f == g,
            (Atom::Ip(_), Atom::Ip(_))
            | (Atom::Port(_), Atom::Port(_))
            | (Atom::Proto(_), Atom::Proto(_)) => true,
            _ => false,
        }
    }
}

fn random_cond(r: &mut Rng, atoms: usize, depth: u32) -> Cond {
    if depth > 2 || r.next().is_multiple_of(3) {
        return match r.next() % 16 {
            0 => Cond::True,
            1 => Cond::False,
            _ => Cond::Atom(below(r, atoms) as u32),
        };
    }
    let parts = (0..1 + below(r, 3))
        .map(|_| random_cond(r, atoms, depth + 1))
        .collect();
    match r.next() % 3 {
        0 => Cond::And(parts),
        1 => Cond::Or(parts),
        _ => Cond::Not(Box::new(random_cond(r, atoms, depth + 1))),
    }
}

/// The witness as the oracle's request (an IPv6 client that is not
/// IPv4-mapped has no IPv4 address: in no set drawn here).
fn request_of(w: &Witness) -> Req {
    Req {
        http: w.request,
        path: w.path_value.clone(),
        header: w
            .headers
            .iter()
            .find(|(n, _)| n == HEADER)
            .map(|(_, v)| v.clone()),
        ip: match w.ip {
            std::net::IpAddr::V4(a) => Some(u32::from(a)),
            std::net::IpAddr::V6(a) => a.to_ipv4_mapped().map(u32::from),
        },
        port: w.port,
        proto: w.proto,
    }
}

/// Counts of what the run met, so that a generator that stopped
/// exercising a branch fails the test.
#[derive(Debug, Default)]
struct Seen {
    implies: [u32; 2],
    excludes: [u32; 2],
    disjoint: u32,
    overlapping: u32,
    sat: u32,
    unsat: u32,
    unsat_terms: u32,
    unknown: u32,
}

fn check_pairs(c: &Case, an: &mut Analyzer<'_>, dom: &[Req], seen: &mut Seen) {
    let n = c.atoms.len() as u32;
    for a in 0..n {
        for b in 0..n {
            let both = dom.iter().any(|q| c.atom(a, q) && c.atom(b, q));
            let implied = dom.iter().all(|q| !c.atom(a, q) || c.atom(b, q));
            let (i, e) = (an.atom_implies(a, b), an.atoms_exclude(a, b));
            let (x, y) = (&c.atoms[a as usize], &c.atoms[b as usize]);
            assert!(!i || implied, "{x:?} ⇒ {y:?} claimed, a request refutes it");
            assert!(
                !e || !both,
                "{x:?} excludes {y:?} claimed, a request has both"
            );
            if c.decided(a, b, true) {
                assert_eq!(i, implied, "{x:?} ⇒ {y:?}");
            }
            if c.decided(a, b, false) && a != b {
                assert_eq!(e, !both, "{x:?} excludes {y:?}");
            }
            seen.implies[usize::from(i)] += 1;
            seen.excludes[usize::from(e)] += 1;
            // Literals follow from atoms by the four sign rules.
            for (s, t) in [(false, false), (false, true), (true, false), (true, true)] {
                let lit = |q: &Req, at: u32, neg: bool| c.atom(at, q) != neg;
                if an.lit_implies((a, s), (b, t)) {
                    assert!(
                        dom.iter().all(|q| !lit(q, a, s) || lit(q, b, t)),
                        "{x:?}/{s} ⇒ {y:?}/{t}"
                    );
                }
                if an.lits_exclude((a, s), (b, t)) {
                    assert!(
                        !dom.iter().any(|q| lit(q, a, s) && lit(q, b, t)),
                        "{x:?}/{s} excludes {y:?}/{t}"
                    );
                }
            }
        }
    }
}

fn check_conds(c: &Case, an: &mut Analyzer<'_>, dom: &[Req], a: &Cond, b: &Cond, seen: &mut Seen) {
    let (Some(da), Some(db)) = (dnf(a, 4096), dnf(b, 4096)) else {
        return;
    };
    for q in dom {
        assert_eq!(
            da.iter().any(|t| c.term(t, q)),
            c.holds(a, q),
            "dnf of {a:?}: {da:?} at {q:?}"
        );
    }
    let both: Vec<&Req> = dom
        .iter()
        .filter(|q| c.holds(a, q) && c.holds(b, q))
        .collect();
    // Overlap: `Disjoint` only when no request has both.
    let o = an.overlap(a, b, &mut Budget(1 << 24));
    assert_ne!(o, Overlap::Undecided);
    assert_eq!(o == Overlap::Disjoint, !an.may_overlap(&da, &db));
    if o == Overlap::Disjoint {
        assert!(
            both.is_empty(),
            "{a:?} and {b:?} called disjoint: {:?}",
            both[0]
        );
        seen.disjoint += 1;
    } else {
        seen.overlapping += 1;
    }
    // Every unsatisfiable term of the product is empty on the domain.
    for t in &da {
        for u in &db {
            let mut tu = t.clone();
            tu.extend_from_slice(u);
            tu.sort_unstable();
            tu.dedup();
            if an.term_unsat(&tu) {
                assert!(!dom.iter().any(|q| c.term(&tu, q)), "{tu:?} is satisfiable");
                seen.unsat_terms += 1;
            }
        }
    }
    // Implication: every request of `a` is one of `b`; and what follows
    // from the terms' shapes alone is found (a implies a, a or b; a and
    // b implies a).
    if an.implies(&da, &db) {
        assert!(
            dom.iter().all(|q| !c.holds(a, q) || c.holds(b, q)),
            "{a:?} ⇒ {b:?}"
        );
    }
    let or = dnf(&Cond::Or(vec![a.clone(), b.clone()]), 1 << 14).unwrap();
    assert!(
        an.implies(&da, &da) && an.terms_imply(&da, &da),
        "{a:?} ⇒ itself"
    );
    assert!(
        an.implies(&da, &or) && an.terms_imply(&db, &or),
        "{a:?}, {b:?} ⇒ either"
    );
    if let Some(and) = dnf(&Cond::And(vec![a.clone(), b.clone()]), 1 << 14) {
        assert!(an.implies(&and, &da), "{a:?} and {b:?} ⇒ {a:?}");
    }
    // The packet-plane projection over-approximates, and is the
    // condition itself when every atom is one the packet plane reads.
    let l4 = project_l4(&da, &c.atoms);
    let exact = c.atoms.iter().all(Atom::is_l4);
    for q in dom {
        let (holds, projected) = (c.holds(a, q), l4.iter().any(|t| c.term(t, q)));
        assert!(!holds || projected, "{l4:?} misses {q:?} of {a:?}");
        assert!(!exact || holds == projected, "{l4:?} is not {a:?} at {q:?}");
    }
    // Exact search, a ∧ ¬b and a ∧ b: for HTTP requests, and with
    // `packets` for packets too (found whenever a request or, with no
    // string field drawn, a packet has them).
    let strings = c
        .kinds
        .iter()
        .any(|k| matches!(k, Kind::Path | Kind::Header));
    for packets in [false, true] {
        an.solver.packets = packets;
        for neg in [true, false] {
            let want: Vec<&Req> = dom
                .iter()
                .filter(|q| q.http || (packets && !strings))
                .filter(|q| c.holds(a, q) && c.holds(b, q) != neg)
                .collect();
            let what = format!("{a:?} / {neg} {b:?} (packets {packets}) over {:?}", c.atoms);
            match an.solve(vec![(a, false), (b, neg)], &mut Budget(1 << 24)) {
                Exact::Sat(w) => {
                    let q = request_of(&w);
                    assert!(q.http || packets, "{what}: a packet {w:?}");
                    assert!(c.holds(a, &q) && c.holds(b, &q) != neg, "{what}: {w:?}");
                    // The analysis's own reading of a witness agrees.
                    for x in [a, b] {
                        assert_eq!(
                            an.witness_holds(x, &w),
                            Some(c.holds(x, &q)),
                            "{what}: {w:?}"
                        );
                    }
                    seen.sat += 1;
                }
                Exact::Unsat => {
                    assert!(want.is_empty(), "{what}: called unsat: {:?}", want[0]);
                    seen.unsat += 1;
                }
                // Allowed (the solver says why it gave up), and counted.
                Exact::Unknown(_) => seen.unknown += 1,
                Exact::OutOfSteps => panic!("{what}: out of steps"),
            }
        }
    }
    an.solver.packets = false;
}

#[test]
fn every_answer_agrees_with_brute_force_over_concrete_requests() {
    let mut r = Rng(0x0a11_5e1f_0bad_cafe);
    let mut seen = Seen::default();
    for _ in 0..400 {
        let c = Case::random(&mut r);
        let dom = c.domain();
        let mut an = Analyzer::new(&c.atoms, &c.sets);
        check_pairs(&c, &mut an, &dom, &mut seen);
        for _ in 0..6 {
            let a = random_cond(&mut r, c.atoms.len(), 0);
            let b = random_cond(&mut r, c.atoms.len(), 0);
            check_conds(&c, &mut an, &dom, &a, &b, &mut seen);
        }
    }
    eprintln!("{seen:?}");
    let s = &seen;
    assert!(s.implies[1] > 500 && s.excludes[1] > 500, "{s:?}");
    assert!(s.disjoint > 100 && s.overlapping > 100, "{s:?}");
    assert!(s.sat > 100 && s.unsat > 100 && s.unsat_terms > 100, "{s:?}");
    assert!(s.unknown * 20 < s.sat + s.unsat, "{s:?}");
}

#[test]
fn fields_are_named_once_in_order() {
    let atoms = vec![
        Atom::Str {
            field: StrField::Header(HEADER.into()),
            op: StrOp::Eq("a".into()),
        },
        Atom::Ip(0),
        Atom::Str {
            field: StrField::Path,
            op: StrOp::Prefix("/".into()),
        },
        Atom::Present(StrField::Header(HEADER.into())),
    ];
    let c = Cond::And(vec![
        Cond::Atom(0),
        Cond::Not(Box::new(Cond::Or(vec![Cond::Atom(1), Cond::Atom(2)]))),
        Cond::Atom(3),
    ]);
    let names = l7_fields(&c, &atoms);
    assert_eq!(names.len(), 2, "{names:?}");
    assert_ne!(names[0], names[1]);
    assert_eq!(names[1], "path");
    assert!(l7_fields(&Cond::Atom(1), &atoms).is_empty());
}
