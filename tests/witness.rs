//! The analysis' witnesses, checked by the evaluators: every request the
//! compiler shows as proof of an exemption conflict (E0050) or as reaching
//! a rule is run through the compiled engine and the reference evaluator,
//! which must decide it as the diagnostic claims; and a rule reported
//! unreachable is never reached on random traffic.

use crate::corpus::{random_request, random_rules};
use crate::util::{compile, rctl, root, tempdir};
use rctl_compiler::diag::Severity;
use rctl_compiler::ir::Ruleset;
use rctl_compiler::spec::TestCase;
use rctl_compiler::Options;
use rctl_dataplane::testing::{run_test, run_test_reference, with_sample_request};
use rctl_dataplane::{EngineConfig, NaiveEngine, Request};
use rctl_testkit::Rng;

/// The request of a test's first sample.
fn with_request<T>(t: &TestCase, f: impl FnOnce(&Request<'_>) -> T) -> T {
    with_sample_request(&t.samples[0], 0, f).expect("a request sample")
}

fn index(rs: &Ruleset, name: &str) -> usize {
    rs.rules.iter().position(|r| r.name == name).unwrap()
}

#[test]
fn every_conflict_witness_is_decided_as_claimed() {
    let mut r = Rng(0x5eed_0f7e_5700);
    let (mut witnessed, mut unreadable, mut by_rule) = (0, 0, 0);
    for _ in 0..400 {
        let n = 2 + (r.next() % 10) as usize;
        let rules = random_rules(&mut r, n);
        let src = rules.concat();
        let c = compile(&src);
        for d in c.diagnostics.iter().filter(|d| d.code == "E0050") {
            let names: Vec<&str> = d.message.split('`').skip(1).step_by(2).collect();
            let (allow, enforcer) = (names[0], names[1]);
            let Some(test) = &d.witness else {
                unreadable += 1;
                continue;
            };
            // The same rules with every allow turned into a log: the
            // ruleset compiles, keeps its order, and the witness test runs
            // on it unchanged (the witness reaches no earlier allow).
            let logged: String = rules
                .iter()
                .map(|x| x.replace("\nallow\n", "\nlog\n"))
                .collect();
            let full = format!("{logged}\n{test}");
            let c2 = compile(&full);
            let errors: Vec<String> = c2
                .diagnostics
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .map(|d| d.render(&c2.sources))
                .collect();
            assert!(errors.is_empty(), "{full}\n{errors:?}");
            let rs = c2.ruleset.unwrap();
            let t = c2.tests.last().unwrap();
            for report in [
                run_test(&rs, t).unwrap(),
                run_test_reference(&rs, t).unwrap(),
            ] {
                assert!(report.passed(), "{full}\n{:?}", report.failures);
            }
            // Both rules match the request, each evaluated on its own.
            let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
            with_request(t, |req| {
                for name in [allow, enforcer] {
                    assert!(
                        naive.rule_matches(index(&rs, name), req),
                        "{name} does not match the witness\n{full}"
                    );
                }
            });
            witnessed += 1;
            by_rule += usize::from(test.contains(&format!(" by {enforcer}\n")));
        }
    }
    assert!(
        witnessed > 80 && by_rule > 60,
        "{witnessed} {by_rule} {unreadable}"
    );
}

#[test]
fn reaching_requests_reach_and_unreachable_rules_are_never_reached() {
    let mut r = Rng(0x0ac4_ab1e);
    let (mut reached, mut covered) = (0, 0);
    for _ in 0..300 {
        let n = 2 + (r.next() % 10) as usize;
        // No allow after an enforcing rule, so that every ruleset compiles.
        let rules: Vec<String> = random_rules(&mut r, n)
            .into_iter()
            .map(|x| x.replace("\nallow\n", "\ndeny 403\n"))
            .collect();
        let src = rules.concat();
        let c = compile(&src);
        let Some(rs) = c.ruleset else { continue };
        let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let decides = |i: usize| {
            let x = &rs.rules[i];
            x.enabled && !x.shadow && x.action.is_terminal()
        };
        let reach =
            rctl_compiler::proof::reaching(&rs.rules, &rs.atoms, &rs.ipsets, &Options::default());
        let warned: Vec<&str> = c
            .diagnostics
            .iter()
            .filter(|d| d.code == "W0103")
            .map(|d| d.message.split('`').nth(1).unwrap())
            .collect();
        for (j, answer) in reach.iter().enumerate() {
            match answer {
                Some(rctl_compiler::proof::Reach::Reached { witness, .. }) => {
                    assert!(!warned.contains(&rs.rules[j].name.as_str()), "{src}");
                    let hs: Vec<(&[u8], &[u8])> = witness
                        .headers
                        .iter()
                        .map(|(a, b)| (a.as_bytes(), b.as_slice()))
                        .collect();
                    let target = witness.target();
                    let req = Request {
                        method: &witness.method,
                        host: &witness.host,
                        target: &target,
                        headers: &hs,
                        ip: witness.ip,
                        dst: witness.dst,
                        port: witness.port,
                        time_ns: 0,
                    };
                    assert!(naive.rule_matches(j, &req), "{src}\n{}", witness.summary());
                    for i in (0..j).filter(|&i| decides(i)) {
                        assert!(
                            !naive.rule_matches(i, &req),
                            "{src}\nr{i} takes {}",
                            witness.summary()
                        );
                    }
                    reached += 1;
                }
                Some(rctl_compiler::proof::Reach::Covered(_)) => covered += 1,
                _ => {}
            }
        }
        // A rule reported unreachable is never reached on random traffic.
        let (mut headers, mut target) = (Vec::new(), String::new());
        for t in 0..200 {
            let req = random_request(&mut r, &mut headers, &mut target, t);
            for (j, x) in rs.rules.iter().enumerate() {
                if !warned.contains(&x.name.as_str())
                    || x.is_packet_limit()
                    || !naive.rule_matches(j, &req)
                {
                    continue;
                }
                assert!(
                    (0..j).any(|i| decides(i) && naive.rule_matches(i, &req)),
                    "{} is reported unreachable but {req:?} reaches it\n{src}",
                    x.name
                );
            }
        }
    }
    assert!(reached > 500 && covered > 20, "{reached} {covered}");
}

#[test]
fn the_updater_after_a_throttle_it_cannot_match_is_no_conflict() {
    // A false alarm seen before: the exemption moved after the generic-client
    // throttle, whose User-Agent regex never matches the updater's prefix.
    let src = std::fs::read_to_string(root().join("rules/wdqs.rctl")).unwrap();
    let moved = src.replacen("  priority 10\n", "  priority 105\n", 1);
    assert_ne!(moved, src);
    let c = compile(&moved);
    let errors: Vec<_> = c
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.render(&c.sources))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    // After the per-address throttle, which matches any User-Agent on
    // /sparql, the conflict is real, and shown.
    let late = src.replacen("  priority 10\n", "  priority 115\n", 1);
    let c = compile(&late);
    let d: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "E0050").collect();
    assert_eq!(d.len(), 1, "{:?}", c.diagnostics);
    assert!(d[0].message.contains("`wdqs_sparql_per_ip`"));
    assert!(
        d[0].notes[0].contains("wmf-streaming-updater-consumer/"),
        "{:?}",
        d[0].notes
    );
    // `rctl check --witness` prints the test block on stdout.
    let dir = tempdir("witness");
    std::fs::write(dir.join("wdqs.rctl"), &late).unwrap();
    let out = rctl(&["check", "--witness", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout
            .starts_with("test \"`wdqs_updater_exempt` is pre-empted by `wdqs_sparql_per_ip`\" {")
            && stdout.contains("expect for witness last throttle by wdqs_sparql_per_ip"),
        "{stdout}"
    );
}

#[test]
fn explain_prints_a_request_that_reaches_each_rule() {
    let out = rctl(&[
        "explain",
        "--witness",
        root().join("rules").to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}:\n{text}"))
            .to_string()
    };
    assert!(
        line("wdqs_updater_exempt").contains("reached by GET")
            && line("wdqs_updater_exempt").contains("\"wmf-streaming-updater-consumer/\""),
        "{text}"
    );
    // The generic-client throttle is reached by a library User-Agent on
    // a SPARQL path, from outside the updater's addresses.
    let generic = line("wdqs_generic_clients");
    assert!(
        generic.contains("/sparql") && !generic.contains("208.80."),
        "{generic}"
    );
    assert!(line("drop_bogons").contains("not asked"), "{text}");
}

/// A rule on `url` (path and query as sent) gets a witness whose request
/// target is that url, and the engines decide it as the diagnostic says.
#[test]
fn a_url_rule_has_a_witness_sent_as_that_url() {
    let rules = [
        "rule block {\n  priority 1\n  when url ~ \"^/w/index\\.php\\?title=Special:Search&\"\n  deny 403\n}\n",
        "rule exempt {\n  priority 2\n  when header(\"user-agent\") == \"updater\"\n  allow\n}\n",
    ];
    let c = compile(&rules.concat());
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.code == "E0050")
        .expect("E0050");
    let test = d.witness.as_ref().expect("a witness");
    let full = format!(
        "{}{}\n{test}",
        rules[0],
        rules[1].replace("  allow\n", "  log\n")
    );
    let c2 = compile(&full);
    let rs = c2.ruleset.expect(&full);
    let t = c2.tests.last().unwrap();
    for report in [
        run_test(&rs, t).unwrap(),
        run_test_reference(&rs, t).unwrap(),
    ] {
        assert!(report.passed(), "{full}\n{:?}", report.failures);
    }
    with_request(t, |req| {
        assert!(
            req.target
                .starts_with(b"/w/index.php?title=Special:Search&"),
            "{}",
            String::from_utf8_lossy(req.target)
        );
        let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
        assert!(naive.rule_matches(index(&rs, "block"), req));
    });
}
