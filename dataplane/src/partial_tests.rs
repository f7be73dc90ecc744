//! The three-valued path against a model of its specification and
//! against brute force: random rulesets, random requests, random sets
//! of missing fields.

use crate::core::{Core, Decision, Verdict};
use crate::matcher::AtomSet;
use crate::partial::{eval3, Judged, Known, KnownHeaders, PartialTrace, Tri};
use crate::request::{Fields, Request};
use crate::{Engine, EngineConfig, NaiveEngine};
use rctl_compiler::ir::{Action, Cond, Ruleset, XdpKind};
use std::net::IpAddr;

/// A xorshift generator: the same cases on every run.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

fn atom(r: &mut Rng) -> String {
    match r.next() % 11 {
        0 => format!("path == \"{}\"", r.pick(&["/sparql", "/wiki/A", "/"])),
        1 => format!("path starts_with \"{}\"", r.pick(&["/w", "/api/"])),
        2 => format!(
            "header(\"user-agent\") ~* \"{}\"",
            r.pick(&["^curl", "bot", "python"])
        ),
        3 => format!("header(\"user-agent\") {}", r.pick(&["present", "absent"])),
        4 => format!("header(\"referer\") {}", r.pick(&["present", "absent"])),
        5 => format!("host == \"{}\"", r.pick(&["a.org", "b.org"])),
        6 => format!("query(\"action\") {}", r.pick(&["== \"purge\"", "present"])),
        7 => format!("method in {{ {} }}", r.pick(&["GET", "POST"])),
        8 => format!(
            "ip in {{ {} }}",
            r.pick(&["198.51.100.0/24", "203.0.113.5", "10.0.0.0/8"])
        ),
        9 => format!("port in {{ {} }}", r.pick(&["80", "443"])),
        _ => format!("header(\"x-client\") == \"{}\"", r.pick(&["a", "b"])),
    }
}

fn cond(r: &mut Rng, depth: u32) -> String {
    cond_of(r, depth, atom)
}

/// A random condition two levels deep over the atoms `atom` makes.
pub(crate) fn cond_of(r: &mut Rng, depth: u32, atom: fn(&mut Rng) -> String) -> String {
    if depth >= 2 || r.next().is_multiple_of(3) {
        return atom(r);
    }
    let (a, b) = (cond_of(r, depth + 1, atom), cond_of(r, depth + 1, atom));
    match r.next() % 3 {
        0 => format!("({a} and {b})"),
        1 => format!("({a} or {b})"),
        _ => format!("not ({a})"),
    }
}

fn ruleset(r: &mut Rng, throttles: bool) -> Option<Ruleset> {
    let mut src = String::new();
    for i in 0..(2 + r.next() % 6) {
        let action = match r.next() % if throttles { 6 } else { 5 } {
            0 => "allow".to_string(),
            1 => "log".to_string(),
            2 => "drop".to_string(),
            3 | 4 => format!("deny {}", 400 + r.next() % 10),
            _ => format!(
                "throttle 1 requests per 1s by {}",
                r.pick(&["ip", "header(\"user-agent\")", "host, path"])
            ),
        };
        let shadow = if r.next().is_multiple_of(6) {
            "shadow\n"
        } else {
            ""
        };
        src.push_str(&format!(
            "rule r{i} {{\npriority {}\n{shadow}when {}\n{action}\n}}\n",
            r.next() % 4,
            cond(r, 0)
        ));
    }
    if r.next().is_multiple_of(3) {
        src.push_str(
            "rule l4 {\npriority 0\nwhen ip in { 10.0.0.0/8 } and port in { 80 }\ndrop\n}\n",
        );
    }
    rctl_compiler::compile_str("t.rctl", &src, &Default::default()).ruleset
}

struct Req {
    method: &'static str,
    host: &'static str,
    target: &'static str,
    headers: Vec<(&'static [u8], &'static [u8])>,
    ip: IpAddr,
    port: u16,
}

fn request(r: &mut Rng) -> Req {
    let mut headers: Vec<(&'static [u8], &'static [u8])> = Vec::new();
    if !r.next().is_multiple_of(4) {
        headers.push((
            b"User-Agent",
            r.pick(&["curl/8", "Mozilla", "python-requests/2", "bot"])
                .as_bytes(),
        ));
    }
    if r.next().is_multiple_of(2) {
        headers.push((b"Referer", b"https://x/"));
    }
    if r.next().is_multiple_of(2) {
        headers.push((b"X-Client", r.pick(&["a", "b"]).as_bytes()));
    }
    Req {
        method: r.pick(&["GET", "POST"]),
        host: r.pick(&["a.org", "b.org"]),
        target: r.pick(&["/sparql", "/wiki/A?action=purge", "/w/x", "/api/y?q=1", "/"]),
        headers,
        ip: r
            .pick(&["198.51.100.7", "203.0.113.5", "10.1.2.3", "192.0.2.1"])
            .parse()
            .unwrap(),
        port: if r.next().is_multiple_of(2) { 80 } else { 443 },
    }
}

fn known(r: &mut Rng) -> Known {
    let mut k = Known::all();
    let mut b = || !r.next().is_multiple_of(3);
    k.method = b();
    k.host = b();
    k.path = b();
    k.query = b();
    k.url = k.path && k.query;
    k.port = b();
    let mut hs = Vec::new();
    for h in ["user-agent", "referer", "x-client"] {
        if !r.next().is_multiple_of(3) {
            hs.push(h.to_string());
        }
    }
    k.headers = KnownHeaders::Only(hs);
    k
}

/// The specification, written plainly: every rule in order, every atom
/// by the reference evaluator, Kleene's logic; no index, no limiter (the
/// rulesets it is used on have no throttles).
fn model(naive: &NaiveEngine, core: &Core, known: &Known, req: &Request<'_>) -> Judged {
    let rs = &core.ruleset;
    let f = Fields::new(req);
    let mut set = AtomSet::with_atoms(rs.atoms.len());
    for a in 0..rs.atoms.len() as u32 {
        if naive.atom(a, &f) {
            set.insert(a);
        }
    }
    let unknown: Vec<bool> = rs
        .atoms
        .iter()
        .map(|a| known.missing(a).is_some())
        .collect();
    let mut pending = None;
    for (i, p) in rs.plan.iter().enumerate() {
        let Some(x) = &p.xdp else { continue };
        if !core.active[i] || x.kind == XdpKind::Throttle {
            continue;
        }
        let c = Cond::Or(
            x.dnf
                .iter()
                .map(|t| {
                    Cond::And(
                        t.iter()
                            .map(|&(a, neg)| {
                                if neg {
                                    Cond::Not(Box::new(Cond::Atom(a)))
                                } else {
                                    Cond::Atom(a)
                                }
                            })
                            .collect(),
                    )
                })
                .collect(),
        );
        let unknown_from = |rule| Judged::Unknown {
            rule,
            logged: vec![],
        };
        match (eval3(&c, &set, &unknown), x.kind) {
            (Tri::False, _) => {}
            (Tri::True, XdpKind::Drop) => return pending.map_or(Judged::Stopped(i), unknown_from),
            (Tri::Unknown, XdpKind::Drop) => return unknown_from(pending.unwrap_or(i)),
            (Tri::True, _) => break,
            (Tri::Unknown, _) => {
                pending.get_or_insert(i);
            }
        }
    }
    let mut logged = Vec::new();
    for (i, r) in rs.rules.iter().enumerate() {
        if !core.on_request_path(i) {
            continue;
        }
        let shadow = r.shadow || r.action == Action::Log;
        match eval3(&r.cond, &set, &unknown) {
            Tri::False => continue,
            Tri::Unknown if shadow => continue,
            Tri::Unknown => return Judged::Unknown { rule: i, logged },
            Tri::True => {}
        }
        let v = match &r.action {
            Action::Allow => Verdict::Allow { rule: i },
            Action::Drop => Verdict::Drop { rule: i },
            Action::Deny { status, reason } => Verdict::Deny {
                rule: i,
                status: *status,
                reason: reason.clone(),
            },
            _ => Verdict::Pass,
        };
        if shadow {
            logged.push((i, v));
        } else if v != Verdict::Pass {
            return Judged::Decided(Decision { verdict: v, logged });
        }
    }
    Judged::Decided(Decision {
        verdict: Verdict::Pass,
        logged,
    })
}

/// The verdict when the unknown atoms take the values in `bits`.
fn completed(
    core: &Core,
    naive: &NaiveEngine,
    req: &Request<'_>,
    unknown: &[u32],
    bits: u64,
) -> Option<usize> {
    let rs = &core.ruleset;
    let f = Fields::new(req);
    let value = |a: u32| match unknown.iter().position(|&u| u == a) {
        Some(k) => bits >> k & 1 == 1,
        None => naive.atom(a, &f),
    };
    fn ev(c: &Cond, v: &dyn Fn(u32) -> bool) -> bool {
        match c {
            Cond::True => true,
            Cond::False => false,
            Cond::Atom(a) => v(*a),
            Cond::Not(x) => !ev(x, v),
            Cond::And(xs) => xs.iter().all(|x| ev(x, v)),
            Cond::Or(xs) => xs.iter().any(|x| ev(x, v)),
        }
    }
    for (i, p) in rs.plan.iter().enumerate() {
        let Some(x) = &p.xdp else { continue };
        if !core.active[i] || x.kind == XdpKind::Throttle {
            continue;
        }
        if x.dnf
            .iter()
            .any(|t| t.iter().all(|&(a, neg)| value(a) != neg))
        {
            if x.kind == XdpKind::Drop {
                return Some(usize::MAX - i);
            }
            break;
        }
    }
    let d = core.decide_request(
        &f,
        0..rs.rules.len(),
        |i| ev(&rs.rules[i].cond, &value),
        None,
        None,
    );
    d.verdict.rule()
}

fn as_request(q: &Req) -> Request<'_> {
    Request {
        method: q.method.as_bytes(),
        host: q.host.as_bytes(),
        target: q.target.as_bytes(),
        headers: &q.headers,
        ip: q.ip,
        dst: None,
        port: q.port,
        time_ns: 0,
    }
}

#[test]
fn the_three_valued_path_is_its_specification_and_sound() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut unknown_seen, mut decided_seen, mut checked) = (0, 0, 0);
    for _ in 0..300 {
        let Some(rs) = ruleset(&mut r, false) else {
            continue;
        };
        let engine = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let core = Core::new(rs.clone(), &EngineConfig::default()).unwrap();
        let mut s = engine.scratch();
        let mut trace = PartialTrace::default();
        for _ in 0..8 {
            let known = known(&mut r);
            let blind = engine.blind(&known);
            for _ in 0..20 {
                let q = request(&mut r);
                let req = as_request(&q);
                let got = engine.judge_request(&req, &blind, &mut s, &mut trace);
                let want = model(&naive, &core, &known, &req);
                assert_eq!(
                    got,
                    want,
                    "{known:?} {:?}",
                    (q.method, q.host, q.target, &q.headers)
                );
                checked += 1;
                // Brute force: a known outcome holds whatever the missing
                // fields' atoms are.
                let unknown: Vec<u32> = (0..rs.atoms.len() as u32)
                    .filter(|&a| known.missing(&rs.atoms[a as usize]).is_some())
                    .collect();
                assert!(unknown.len() <= 16);
                let outcome = match &got {
                    Judged::Unknown { .. } => {
                        unknown_seen += 1;
                        continue;
                    }
                    Judged::Stopped(i) => Some(usize::MAX - i),
                    Judged::Decided(d) => d.verdict.rule(),
                };
                decided_seen += 1;
                for bits in 0..1u64 << unknown.len() {
                    assert_eq!(
                        completed(&core, &naive, &req, &unknown, bits),
                        outcome,
                        "a known verdict changed with the missing fields"
                    );
                }
            }
        }
    }
    assert!(checked > 20_000, "{checked}");
    assert!(
        unknown_seen > 1_000 && decided_seen > 1_000,
        "{unknown_seen} {decided_seen}"
    );
}

/// With every field known, the three-valued path is the normal path:
/// the same verdicts and the same steps, limiters included.
#[test]
fn with_every_field_known_it_decides_as_the_engine() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut n = 0;
    for _ in 0..100 {
        let Some(rs) = ruleset(&mut r, true) else {
            continue;
        };
        let a = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let b = Engine::new(rs, &EngineConfig::default()).unwrap();
        let mut known = Known::all();
        // A capture's fields, declared one by one, change nothing either.
        if r.next().is_multiple_of(2) {
            known.headers = KnownHeaders::Only(vec![
                "user-agent".into(),
                "referer".into(),
                "x-client".into(),
            ]);
        }
        let blind = a.blind(&known);
        assert!(blind.is_complete());
        let (mut sa, mut sb) = (a.scratch(), b.scratch());
        let mut trace = PartialTrace::default();
        let mut steps = Vec::new();
        for t in 0..40u64 {
            let q = request(&mut r);
            let mut req = as_request(&q);
            req.time_ns = t * 100_000_000;
            let got = a.judge_request(&req, &blind, &mut sa, &mut trace);
            steps.clear();
            let l4 = b.decide_packet(&crate::Packet {
                src: req.ip,
                dst: None,
                proto: rctl_compiler::ir::Proto::Tcp,
                dst_port: req.port,
                syn: false,
                time_ns: 0,
            });
            if let Verdict::Drop { rule } = l4.verdict {
                assert_eq!(got, Judged::Stopped(rule));
                continue;
            }
            let want = b.decide_request_steps(&req, &mut sb, &mut steps);
            assert_eq!(got, Judged::Decided(want));
            assert_eq!(trace.steps, steps);
            n += 1;
        }
    }
    assert!(n > 2_000, "{n}");
}

/// The shortcut (a request on which every rule reading a missing field,
/// in its condition or its throttle's key, is false goes the normal path)
/// decides as the three-valued path does, throttles and their buckets
/// included: two engines, one with the shortcut and one without, judge
/// the same requests in time order.
#[test]
fn the_normal_path_shortcut_decides_as_the_three_valued_path() {
    let mut r = Rng(0x6a09_e667_f3bc_c909);
    let (mut checked, mut throttled, mut unknown) = (0, 0, 0);
    for _ in 0..150 {
        let Some(rs) = ruleset(&mut r, true) else {
            continue;
        };
        let a = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let b = Engine::new(rs, &EngineConfig::default()).unwrap();
        for _ in 0..4 {
            let mut known = known(&mut r);
            // A sample (no throttle can run) and a log without the
            // destination address, now and then.
            known.complete = !r.next().is_multiple_of(4);
            known.dst_ip = !r.next().is_multiple_of(4);
            let fast = a.blind(&known);
            let mut slow = b.blind(&known);
            slow.shortcut = false;
            let (mut sa, mut sb) = (a.scratch(), b.scratch());
            let (mut ta, mut tb) = (PartialTrace::default(), PartialTrace::default());
            for t in 0..60u64 {
                let q = request(&mut r);
                let mut req = as_request(&q);
                req.time_ns = t * 50_000_000;
                let got = a.judge_request(&req, &fast, &mut sa, &mut ta);
                let want = b.judge_request(&req, &slow, &mut sb, &mut tb);
                assert_eq!(got, want, "{known:?} {:?}", (q.host, q.target, &q.headers));
                assert_eq!(ta.steps, tb.steps);
                assert_eq!(ta.unknown, tb.unknown);
                checked += 1;
                match got {
                    Judged::Decided(d) if d.verdict.kind() == "throttle" => throttled += 1,
                    Judged::Unknown { .. } => unknown += 1,
                    _ => {}
                }
            }
        }
    }
    assert!(
        checked > 20_000 && throttled > 500 && unknown > 1_000,
        "{checked} {throttled} {unknown}"
    );
}

/// A condition's refuting clauses are sound: whenever no atom of one
/// holds, the three-valued evaluation is false.
#[test]
fn refuting_clauses_are_sound() {
    let mut r = Rng(0xbb67_ae85_84ca_a73b);
    let mut refuted = 0;
    for _ in 0..3_000 {
        let c = rand_cond(&mut r, 0);
        let unknown: Vec<bool> = (0..6).map(|_| r.next().is_multiple_of(3)).collect();
        let clauses = crate::partial::clauses(&c, &unknown);
        for bits in 0..64u32 {
            let mut set = AtomSet::with_atoms(6);
            for a in 0..6 {
                if (bits >> a) & 1 == 1 {
                    set.insert(a);
                }
            }
            if clauses.iter().any(|k| !k.iter().any(|&a| set.contains(a))) {
                refuted += 1;
                assert_eq!(
                    eval3(&c, &set, &unknown),
                    Tri::False,
                    "{c:?} {unknown:?} {bits:b}"
                );
            }
        }
    }
    assert!(refuted > 10_000, "{refuted}");
}

fn rand_cond(r: &mut Rng, depth: u32) -> Cond {
    if depth >= 3 || r.next().is_multiple_of(3) {
        return match r.next() % 10 {
            0 => Cond::True,
            1 => Cond::False,
            _ => Cond::Atom((r.next() % 6) as u32),
        };
    }
    let n = 1 + r.next() % 3;
    let kids: Vec<Cond> = (0..n).map(|_| rand_cond(r, depth + 1)).collect();
    match r.next() % 3 {
        0 => Cond::And(kids),
        1 => Cond::Or(kids),
        _ => Cond::Not(Box::new(kids.into_iter().next().unwrap())),
    }
}
