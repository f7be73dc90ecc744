//! Limits the compiler enforces because something after it would hit them:
//! stack depth, the artifact's nesting bound, the XDP program's tables,
//! the analysis's promises on conditions too large to expand.

use crate::util::*;
use rctl_compiler::diag::Severity;
use rctl_compiler::{compile_str, Compilation, Options};
use std::fmt::Write as _;

fn errors(c: &Compilation) -> Vec<&'static str> {
    c.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.code)
        .collect()
}

/// Runs `rctl check` on `src`; the exit code (never a signal) and output.
fn check_file(tag: &str, src: &str) -> (i32, String) {
    let dir = tempdir(tag);
    let path = dir.join("rules.rctl");
    std::fs::write(&path, src).unwrap();
    let out = rctl(&["check", path.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("{tag}: killed by a signal: {:?}\n{text}", out.status));
    (code, text)
}

#[test]
fn deep_and_long_inputs_give_a_diagnostic_or_compile_never_a_crash() {
    // Each of these crashed the compiler (a stack overflow, exit 134) or
    // took minutes: a 30,000-deep chain of pattern references, long
    // `not`, `and` and `or` chains, and the analysis of a rule with
    // 100,000 literals against an allow after it.
    let n = 30_000;
    let mut chain = String::new();
    for i in 0..n {
        let _ = writeln!(chain, "pattern p/{i} {{ pattern@p/{} }}", i + 1);
    }
    let _ = writeln!(chain, "pattern p/{n} {{ path == \"/x\" }}");
    chain += "rule r { when pattern@p/0 deny }\n";
    let (code, out) = check_file("chain", &chain);
    assert_eq!(code, 0, "{out}");

    let mut cycle = String::new();
    for i in 0..3_000 {
        let _ = writeln!(cycle, "pattern p/{i} {{ pattern@p/{} }}", (i + 1) % 3_000);
    }
    cycle += "rule r { when pattern@p/0 deny }\n";
    let (code, out) = check_file("cycle", &cycle);
    assert_eq!(code, 1);
    assert_eq!(out.matches("error[E0012]").count(), 1, "{out}");
    assert!(
        out.contains("p/0 -> p/1 -> p/2 -> … -> p/2997 -> p/2998 -> p/2999 -> p/0"),
        "{out}"
    );

    let nots = format!(
        "rule r {{ when {}path == \"/\" deny }}\n",
        "not ".repeat(100_000)
    );
    assert_eq!(check_file("nots", &nots).0, 0);

    let terms = |op: &str, test: &str| {
        (0..100_000)
            .map(|i| format!("path {test} \"/{i}\""))
            .collect::<Vec<_>>()
            .join(op)
    };
    let ands = format!(
        "rule r {{ when {} deny }}\nrule a {{ when path == \"/x\" allow }}\n",
        terms(" and ", "!=")
    );
    let (code, out) = check_file("ands", &ands);
    // `a`'s traffic is all denied first: both an unreachable rule and an
    // exemption conflict.
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error[E0050]") && out.contains("warning[W0103]"),
        "{out}"
    );

    let ors = format!("rule r {{ when {} deny }}\n", terms(" or ", "=="));
    assert_eq!(check_file("ors", &ors).0, 0);

    // 20,000 substrings of one field, and allows on either side.
    let substrings = (0..20_000)
        .map(|i| format!("path contains \"/{i}\""))
        .collect::<Vec<_>>()
        .join(" and ");
    let contains = format!(
        "rule a {{ when path == \"/x\" allow }}\nrule r {{ when {substrings} deny }}\nrule b {{ when path == \"/y\" allow }}\n"
    );
    let (code, out) = check_file("contains", &contains);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn conditions_nested_deeper_than_an_artifact_holds_are_rejected() {
    // Each pattern nests 60 `not (…)` around the next: chained, they built
    // a condition the compiler accepted and the artifact reader refused
    // ("condition nests too deep"), so `compile` wrote an artifact that
    // nothing could load.
    for chain in [2, 8, 9, 12] {
        let mut src = String::new();
        for i in 0..chain {
            let next = if i + 1 == chain {
                "path == \"/x\"".to_string()
            } else {
                format!("pattern@p/{}", i + 1)
            };
            let _ = writeln!(
                src,
                "pattern p/{i} {{ {}path != \"/{i}\" and {next}{} }}",
                "not (".repeat(60),
                ")".repeat(60)
            );
        }
        src += "rule r { when pattern@p/0 deny }\n";
        let c = compile(&src);
        match c.ruleset {
            Some(rs) => {
                let bytes = rctl_compiler::artifact::encode(&rs);
                let back = rctl_compiler::artifact::decode(&bytes)
                    .unwrap_or_else(|e| panic!("{chain}: compiled, but the artifact fails: {e}"));
                assert_eq!(back.rules, rs.rules);
            }
            None => {
                assert!(chain > 8, "{chain}: {:?}", errors(&c));
                let d: Vec<_> = c.diagnostics.iter().collect();
                assert!(d.iter().all(|d| d.code == "E0040"), "{:?}", errors(&c));
                assert!(d[0].message.contains("limit of 512"), "{}", d[0].message);
                // At the reference where the inlined condition gets too deep.
                assert_eq!(
                    c.sources.snippet(d[0].labels[0].span),
                    format!("pattern@p/{}", chain - 9)
                );
            }
        }
    }
}

/// `(header("x-i") == "a" or header("x-i") == "b")` for i in 0..n: 2^n DNF
/// terms.
fn header_pairs(n: usize) -> String {
    (0..n)
        .map(|i| format!("(header(\"x-{i}\") == \"a\" or header(\"x-{i}\") == \"b\")"))
        .collect::<Vec<_>>()
        .join(" and ")
}

#[test]
fn an_exemption_is_checked_however_large_the_earlier_condition() {
    // A throttle of 512 DNF terms (nine OR'd header pairs) before an
    // overlapping allow: the check used to skip the pair in silence (its
    // DNF limit is 256), and the allow lost to the throttle.
    let throttle = format!(
        "rule limit {{ priority 1 when path starts_with \"/w/\" and {} throttle 1 requests per 1h by ip }}\n",
        header_pairs(9)
    );
    let overlapping =
        throttle.clone() + "rule updater { priority 2 when ip in { 10.0.0.0/8 } allow }";
    let c = compile(&overlapping);
    assert_eq!(errors(&c), ["E0050"]);
    let d = c.diagnostics.iter().next().unwrap();
    assert_eq!(d.labels.len(), 3);
    assert_eq!(c.sources.snippet(d.labels[0].span), "ip in { 10.0.0.0/8 }");
    assert!(c
        .sources
        .snippet(d.labels[1].span)
        .starts_with("path starts_with \"/w/\" and"));

    // The same throttle before an allow it provably never matches.
    let disjoint = throttle.clone() + "rule updater { priority 2 when path == \"/sparql\" allow }";
    let c = compile(&disjoint);
    assert!(errors(&c).is_empty(), "{:?}", errors(&c));
    let both = throttle
        + &format!(
            "rule updater {{ priority 2 when {} and not header(\"x-8\") present allow }}",
            header_pairs(9)
        );
    assert!(errors(&compile(&both)).is_empty());
}

#[test]
fn an_exemption_that_cannot_be_decided_is_an_error_unless_accepted() {
    let src = format!(
        "rule limit {{ priority 1 when {} throttle 1 requests per 1h by ip }}\nrule updater {{ priority 2 when {} allow }}\n",
        header_pairs(12),
        header_pairs(12)
    );
    let tight = Options {
        max_overlap_steps: 20,
        ..Options::default()
    };
    let c = compile_str("t.rctl", &src, &tight);
    assert_eq!(errors(&c), ["E0051"]);
    let d = c.diagnostics.iter().next().unwrap();
    assert_eq!((d.labels[0].span.line, d.labels[1].span.line), (2, 1));
    assert!(d.hint.as_deref().unwrap().contains("allow_undecided"));
    // Accepted explicitly: a warning, and the ruleset compiles.
    let accepted = src.replace(" allow }", " allow allow_undecided }");
    let c = compile_str("t.rctl", &accepted, &tight);
    assert!(c.ruleset.is_some());
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["W0105"]);
    // With the default budget the pair is decided: they overlap.
    assert_eq!(errors(&compile(&src)), ["E0050"]);
    // Only allows take it.
    let c = compile("rule r { when true deny allow_undecided }");
    assert_eq!(errors(&c), ["E0026"]);
    // `rctl fmt` keeps it.
    let f = rctl_compiler::compile_str("t.rctl", &accepted, &tight);
    let formatted = rctl_compiler::fmt::format_file(&f.files[0].1, f.sources.get(0).unwrap());
    assert!(formatted.contains("  allow_undecided\n"), "{formatted}");
}

#[test]
fn the_packet_plane_limits_are_compile_errors() {
    use rctl_dataplane::xdp::Tables;
    // Each pair: the largest ruleset the XDP program holds, and one more.
    // The compiler must accept exactly what the XDP tables can load.
    let terms = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "rule d{i} {{ when ip in {{ 10.{}.0.0/16 }} and port == {} drop }}\n",
                    i / 2,
                    80 + i % 2
                )
            })
            .collect::<String>()
    };
    let sets = |n: usize| {
        let parts: Vec<String> = (0..n)
            .map(|i| format!("not ip in {{ 10.{i}.0.0/16 }}"))
            .collect();
        format!(
            "rule d {{ when {} and proto == udp drop }}\n",
            parts.join(" and ")
        )
    };
    let ports = |n: usize| {
        let parts: Vec<String> = (0..n).map(|i| format!("port != {}", 1000 + i)).collect();
        format!(
            "rule d {{ when {} and proto == udp drop }}\n",
            parts.join(" and ")
        )
    };
    let position = |n: usize| {
        let mut s: String = (0..n)
            .map(|i| format!("rule h{i} {{ when path == \"/{i}\" deny }}\n"))
            .collect();
        s += "rule d { priority 200 when ip in { 192.0.2.0/24 } drop }\n";
        s
    };
    type Make<'a> = &'a dyn Fn(usize) -> String;
    let cases: [(&str, Make, usize); 4] = [
        ("terms", &terms, 64),
        ("address sets", &sets, 64),
        ("ports", &ports, 64),
        ("counters", &position, 1023),
    ];
    for (what, make, fits) in cases {
        let ok = compile(&make(fits));
        let rs = ok
            .ruleset
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: {:?}", errors(&ok)));
        Tables::new(rs, None).unwrap_or_else(|e| panic!("{what}: {e}"));
        let over = compile(&make(fits + 1));
        assert_eq!(errors(&over), ["E0040"], "{what}");
        let d = over.diagnostics.iter().find(|d| d.code == "E0040").unwrap();
        assert!(d.message.contains("XDP program"), "{what}: {}", d.message);
        // Named by its own rule: the last one.
        let last = if what == "terms" {
            format!("d{fits}")
        } else {
            "d".into()
        };
        assert!(
            d.message.contains(&format!("`{last}`")),
            "{what}: {}",
            d.message
        );
    }
}

#[test]
fn xdp_terms_that_can_never_act_are_left_out() {
    // The same address block exempted by 100 allows: one term in XDP, not
    // 100 (which the program could not hold). A drop that an earlier drop
    // always decides never acts in XDP: a warning, and no term.
    let mut src = String::from("ipblock x/trusted { 10.0.0.0/8 }\n");
    for i in 0..100 {
        let _ = writeln!(
            src,
            "rule a{i} {{ when ipblock@x/trusted and header(\"x-{i}\") present allow }}"
        );
    }
    src += "rule wide { when ip in { 192.0.2.0/24 } drop }\nrule narrow { when ip in { 192.0.2.0/25 } and proto == udp drop }\n";
    let c = compile(&src);
    let rs = c.ruleset.unwrap();
    let xdp: Vec<&str> = rs
        .plan
        .iter()
        .zip(&rs.rules)
        .filter(|(p, _)| p.xdp.is_some())
        .map(|(_, r)| r.name.as_str())
        .collect();
    assert_eq!(xdp, ["a0", "wide"]);
    assert!(
        rs.plan[1].note.contains("decided first in XDP by `a0`"),
        "{}",
        rs.plan[1].note
    );
    let w: Vec<&str> = c.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        w,
        [
            "rule `narrow` is unreachable",
            "rule `narrow` never acts in XDP"
        ]
    );
    // The packet decision is the same: the engine and the XDP tables still
    // agree on it (tests/xdp.rs runs the program itself).
    let both = engine(&src);
    let p = |ip: &str| rctl_dataplane::Packet {
        src: ip.parse().unwrap(),
        dst: None,
        proto: rctl_compiler::ir::Proto::Udp,
        dst_port: 53,
        syn: false,
        time_ns: 0,
    };
    assert_eq!(pkt(&both, &p("10.1.2.3")), "allow:a0");
    assert_eq!(pkt(&both, &p("192.0.2.7")), "drop:wide");
}

#[test]
fn a_ruleset_the_engine_cannot_load_does_not_compile() {
    // Eleven regexes of nearly 1 MB each on one header passed `check`
    // (each is under the 1 MiB limit for one regex), and the engine then
    // failed to load the ruleset: one field's automaton holds them all,
    // and its limit is 10 MiB.
    let rules = |n: usize| {
        (0..n)
            .map(|i| format!("rule r{i} {{ when header(\"x\") ~ \"{i}[a-z]{{14000}}\" deny }}\n"))
            .collect::<String>()
    };
    let ten = compile(&rules(10));
    let rs = ten.ruleset.expect("ten fit");
    rctl_dataplane::Engine::new(rs, &Default::default()).expect("and the engine loads them");
    let eleven = compile(&rules(11));
    assert_eq!(errors(&eleven), ["E0040"]);
    let d = eleven.diagnostics.iter().next().unwrap();
    assert!(
        d.message.contains("`header(\"x\")`") && d.message.contains("10 MiB"),
        "{}",
        d.message
    );
    // At the regexes of that field, the largest first.
    assert_eq!(c_snippet(&eleven, d.labels[0].span), "\"10[a-z]{14000}\"");
    assert_eq!(d.labels.len(), 4);
    assert!(d.hint.as_deref().unwrap().contains("one automaton"));
    // Other fields are built apart: the same regexes spread over two
    // headers compile, and load.
    let spread = rules(11).replace("header(\"x\") ~ \"1", "header(\"y\") ~ \"1");
    let c = compile(&spread);
    rctl_dataplane::Engine::new(c.ruleset.unwrap(), &Default::default()).unwrap();
}

fn c_snippet(c: &Compilation, s: rctl_compiler::source::Span) -> &str {
    c.sources.snippet(s)
}

#[test]
fn test_traffic_and_eval_counts_have_a_ceiling_checked_first() {
    // `repeat` and `--count` took any count up to ten million or four
    // billion: a test kept every decision in memory (~100 bytes each), and
    // `eval` ran for hours. Both are refused before any work starts.
    let rule = "rule r { when true deny }\n";
    let test = |name: &str, repeats: &[u64]| {
        let samples: String = repeats
            .iter()
            .map(|n| format!("request {{ path \"/\" repeat {n} }} "))
            .collect();
        format!("test \"{name}\" {{ {samples}expect all deny }}\n")
    };
    let c = compile(&format!("{rule}{}", test("one", &[1_000_000])));
    assert!(c.ruleset.is_some());
    let c = compile(&format!("{rule}{}", test("one", &[1_000_001])));
    assert_eq!(errors(&c), ["E0060"]);
    let d = c.diagnostics.iter().next().unwrap();
    assert!(
        d.hint.as_deref().unwrap().contains("1 to 1000000"),
        "{:?}",
        d.hint
    );
    let c = compile(&format!("{rule}{}", test("two", &[600_000, 600_000])));
    assert_eq!(errors(&c), ["E0040"]);
    let many: String = (0..11)
        .map(|i| test(&format!("t{i}"), &[1_000_000]))
        .collect();
    let c = compile(&format!("{rule}{many}"));
    assert_eq!(errors(&c), ["E0040"]);
    let d = c.diagnostics.iter().next().unwrap();
    assert_eq!(d.labels[0].span.line, 12, "the eleventh test crosses it");

    let rules = root().join("rules");
    let out = rctl(&[
        "eval",
        rules.to_str().unwrap(),
        "--url",
        "https://x.org/",
        "--count",
        "1000001",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1..=1000000"), "{err}");
}
