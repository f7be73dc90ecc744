//! The indexed checks against the direct, quadratic ones on random
//! rulesets: the indexes must not lose a single warning or conflict.

use super::*;
use crate::analysis::Exact;
use crate::diag::Severity;
use crate::ir::Cond;

use crate::TestRng as Rng;

fn literal(r: &mut Rng) -> String {
    match r.next() % 14 {
        0 => format!("host == \"{}\"", r.pick(&["a.org", "b.org", "c.org"])),
        1 => format!(
            "host in {{ {} }}",
            r.pick(&["\"a.org\", \"b.org\"", "\"c.org\""])
        ),
        2 => format!(
            "path == \"{}\"",
            r.pick(&["/w/x", "/w/y", "/api/z", "/health"])
        ),
        3 => format!(
            "path starts_with \"{}\"",
            r.pick(&["/w/", "/w/x", "/api/", "/"])
        ),
        4 => format!("path ends_with \"{}\"", r.pick(&[".php", "x", "/"])),
        5 => format!("header(\"ua\") ~* \"{}\"", r.pick(&["^curl", "bot"])),
        6 => format!("header(\"ua\") contains \"{}\"", r.pick(&["curl", "cur"])),
        7 => format!("header(\"ua\") {}", r.pick(&["present", "absent"])),
        8 => format!(
            "ip in {{ {} }}",
            r.pick(&[
                "10.0.0.0/8",
                "10.1.0.0/16",
                "10.0.0.0/16, 10.2.0.0/16",
                "192.0.2.0/24"
            ])
        ),
        9 => format!("not ip in {{ {} }}", r.pick(&["10.0.0.0/8", "10.1.0.0/16"])),
        10 => format!("port == {}", r.pick(&["80", "443"])),
        11 => format!("method in {{ {} }}", r.pick(&["GET", "GET, HEAD", "POST"])),
        12 => format!("path != \"{}\"", r.pick(&["/health", "/w/x"])),
        _ => format!("query(\"a\") == \"{}\"", r.pick(&["1", "2"])),
    }
}

fn condition(r: &mut Rng, depth: u32) -> String {
    if depth > 1 || r.next().is_multiple_of(3) {
        let n = 1 + r.next() % 3;
        return (0..n).map(|_| literal(r)).collect::<Vec<_>>().join(" and ");
    }
    let a = condition(r, depth + 1);
    let b = condition(r, depth + 1);
    match r.next() % 3 {
        0 => format!("({a}) or ({b})"),
        1 => format!("({a}) and not ({b})"),
        _ => format!("({a}) and ({b})"),
    }
}

fn ruleset(r: &mut Rng, n: usize) -> String {
    let mut src = String::new();
    for i in 0..n {
        let action = r.pick(&[
            "allow",
            "allow",
            "deny",
            "drop",
            "log",
            "throttle 5 requests per 1m",
        ]);
        let sites = r.pick(&["", "", "", "sites { x }", "sites { y }", "sites { x, y }"]);
        let shadow = if r.next().is_multiple_of(10) {
            "shadow"
        } else {
            ""
        };
        src += &format!(
            "rule r{i} {{ priority {} {sites} {shadow} when {} {action} }}\n",
            r.next() % 4,
            condition(r, 0)
        );
    }
    src
}

fn lowered(src: &str) -> crate::lower::Lowered {
    let opts = Options::default();
    let mut diags = Diagnostics::default();
    let mut map = crate::source::SourceMap::new();
    let id = map.add("t.rctl".into(), src.into());
    let file = crate::parse::parse_file(
        map.get(id).unwrap(),
        id,
        &crate::parse::ParseLimits::default(),
        &mut diags,
    );
    let (roots, _) = crate::files::Roots::new(&["t.rctl".into()], &[]);
    let l = crate::lower::lower(&[(id, file)], &mut map, &opts, &roots, &mut diags);
    assert!(!diags.has_errors(), "{src}");
    l
}

/// (code, later rule, earlier rule) of the analysis diagnostics.
fn found(diags: &Diagnostics) -> BTreeSet<(&'static str, String, String)> {
    diags
        .iter()
        .filter(|d| d.code == code::UNREACHABLE || d.severity == Severity::Error)
        .map(|d| {
            let names: Vec<&str> = d.message.split('`').skip(1).step_by(2).collect();
            let later = names[0].to_string();
            if d.code == code::UNREACHABLE {
                // One earlier rule or several: the oracle decides whether,
                // not by which.
                return (d.code, later, String::new());
            }
            let earlier = match names.get(1) {
                Some(e) => e.to_string(),
                None => d.labels[1].message.split('`').nth(1).unwrap().to_string(),
            };
            (d.code, later, earlier)
        })
        .collect()
}

/// The checks without indexes and without laziness: every later rule
/// against every earlier one, on DNFs for the pairwise answers, and with
/// every earlier deciding rule negated at once for the exact ones.
fn direct(l: &crate::lower::Lowered) -> BTreeSet<(&'static str, String, String)> {
    let mut an = Analyzer::new(&l.atoms, &l.ipsets);
    let forms: Vec<Option<Vec<Term>>> =
        l.rules.iter().map(|r| dnf(&r.rule.cond, 1 << 16)).collect();
    let rules: Vec<&Rule> = l.rules.iter().map(|r| &r.rule).collect();
    let mut out = BTreeSet::new();
    // Whether some request satisfies `goals` and no deciding rule before
    // `below` that applies at the site (`None`: an error, undecided).
    let exact =
        |an: &mut Analyzer<'_>, goals: Vec<(&Cond, bool)>, below: usize, site: Option<&str>| {
            let mut gs = goals;
            for r in &rules[..below] {
                if proof::decides(r) && proof::applies(r, site) {
                    gs.push((&r.cond, true));
                }
            }
            match an.solve(gs, &mut Budget(1 << 24)) {
                Exact::Sat(_) => Some(true),
                Exact::Unsat => Some(false),
                Exact::Unknown(_) | Exact::OutOfSteps => None,
            }
        };
    for (j, later) in l.rules.iter().enumerate() {
        let lr = &later.rule;
        let Some(lf) = forms[j].as_ref().filter(|_| lr.enabled) else {
            continue;
        };
        let mut single = false;
        for (e, ef) in l.rules[..j].iter().map(|x| &x.rule).zip(&forms) {
            if !active(e) || !e.action.is_terminal() || !sites_cover(e, lr) {
                continue;
            }
            if lr.is_packet_limit() && !matches!(e.action, Action::Allow | Action::Drop) {
                continue;
            }
            if an.implies(lf, ef.as_ref().unwrap()) {
                single = true;
                break;
            }
        }
        let sites: Vec<Option<&str>> = if lr.sites.is_empty() {
            vec![None]
        } else {
            lr.sites.iter().map(|s| Some(s.as_str())).collect()
        };
        let union = !single
            && proof::asked(&an, lr)
            && sites
                .iter()
                .all(|&s| exact(&mut an, vec![(&lr.cond, false)], j, s) == Some(false));
        if single || union {
            out.insert((code::UNREACHABLE, lr.name.clone(), String::new()));
        }
        if lr.action != Action::Allow || lr.shadow {
            continue;
        }
        for (i, (e, ef)) in l.rules[..j].iter().map(|x| &x.rule).zip(&forms).enumerate() {
            if !active(e) || matches!(e.action, Action::Allow | Action::Log) || !sites_meet(e, lr) {
                continue;
            }
            if !an.may_overlap(lf, ef.as_ref().unwrap()) {
                continue;
            }
            let goals = vec![(&lr.cond, false), (&e.cond, false)];
            let l4 = |r: &Rule| crate::analysis::l7_fields(&r.cond, &l.atoms).is_empty();
            let real = if e.is_packet_limit() || (l4(lr) && l4(e)) {
                an.solver.packets = true;
                let r = exact(&mut an, goals, 0, None) != Some(false);
                an.solver.packets = false;
                r
            } else {
                proof::common_sites(lr, e)
                    .iter()
                    .any(|s| exact(&mut an, goals.clone(), i, s.as_deref()) != Some(false))
            };
            if real {
                out.insert((code::EXEMPTION_CONFLICT, lr.name.clone(), e.name.clone()));
            }
        }
    }
    out
}

#[test]
fn the_indexes_lose_nothing() {
    let mut r = Rng(0xfeed_f00d);
    let (mut warnings, mut conflicts, mut quiet_allows) = (0, 0, 0);
    for _ in 0..400 {
        let n = 2 + (r.next() % 25) as usize;
        let src = ruleset(&mut r, n);
        let l = lowered(&src);
        let mut diags = Diagnostics::default();
        check_rules(
            &l.rules,
            &l.atoms,
            &l.ipsets,
            &Options::default(),
            &mut diags,
        );
        let got = found(&diags);
        let want = direct(&l);
        assert_eq!(got, want, "{src}");
        warnings += want.iter().filter(|d| d.0 == code::UNREACHABLE).count();
        conflicts += want
            .iter()
            .filter(|d| d.0 == code::EXEMPTION_CONFLICT)
            .count();
        quiet_allows += l
            .rules
            .iter()
            .filter(|x| x.rule.action == Action::Allow)
            .filter(|x| !want.iter().any(|d| d.1 == x.rule.name))
            .count();
    }
    assert!(
        warnings > 200 && conflicts > 200 && quiet_allows > 200,
        "{warnings} {conflicts} {quiet_allows}"
    );
}

#[test]
fn summaries_prove_disjointness_by_values_prefixes_and_addresses() {
    let src = "rule a { when host == \"a.org\" and path starts_with \"/w/\" and not ip in { 10.0.0.0/8 } deny }\n\
               rule b { when (host == \"b.org\" or host == \"c.org\") and path == \"/w/x\" allow }\n\
               rule c { when host == \"a.org\" and path == \"/api/x\" allow }\n\
               rule d { when ip in { 10.1.0.0/16 } and host == \"a.org\" allow }\n\
               rule e { when host in { \"a.org\", \"b.org\" } and path starts_with \"/w/x\" allow }\n";
    let l = lowered(src);
    let an = Analyzer::new(&l.atoms, &l.ipsets);
    let sum: Vec<Summary> = l
        .rules
        .iter()
        .map(|r| Summary::of(&an, &r.rule.cond, false))
        .collect();
    let mut index = Enforcers::new(l.rules.len());
    index.add(0, &sum[0]);
    let compatible = |s: &Summary| {
        s.fields
            .iter()
            .all(|(&c, need)| index.compatible(c, need).iter().any(|i| i == 0))
    };
    assert!(!compatible(&sum[1]), "other hosts");
    assert!(!compatible(&sum[2]), "a path outside the prefix");
    assert!(
        compatible(&sum[3]),
        "same host; the address part is not a field"
    );
    assert!(compatible(&sum[4]), "a host in common and a longer prefix");
    assert_eq!(sum[0].ip_out.len(), 1);
    assert_eq!(sum[3].ip_in.len(), 1);
}
