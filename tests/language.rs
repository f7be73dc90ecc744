//! Every language feature, compiled and run through the engine.

use crate::util::*;
use rctl_compiler::ir::{Action, Key, Proto};
use rctl_dataplane::{Packet, Verdict};

fn verdict(src: &str, r: Req) -> String {
    let e = engine(src);
    let d = r.decide(&e);
    show(&e, &d.verdict)
}

#[test]
fn fields_and_operators() {
    let cases: Vec<(&str, Req, &str)> = vec![
        ("method == \"POST\"", Req::get("/").method("POST"), "deny:r"),
        ("method == \"POST\"", Req::get("/").method("post"), "pass"),
        (
            "method in { GET, HEAD }",
            Req::get("/").method("HEAD"),
            "deny:r",
        ),
        (
            "host == \"fr.wikipedia.org\"",
            Req::get("/").host("FR.Wikipedia.org:443"),
            "deny:r",
        ),
        (
            "host ~ \"^fr\\.\"",
            Req::get("/").host("FR.wikipedia.org"),
            "deny:r",
        ),
        ("path == \"/sparql\"", Req::get("/%73parql?x=1"), "deny:r"),
        (
            "path == \"/page/html/%EA%9D%AE\"",
            Req::get("/page/html/%ea%9d%ae"),
            "deny:r",
        ),
        ("path != \"/sparql\"", Req::get("/sparql"), "pass"),
        (
            "path starts_with \"/api/\"",
            Req::get("/api/rest_v1/"),
            "deny:r",
        ),
        (
            "path ends_with \".php\"",
            Req::get("/w/index.php?title=X"),
            "deny:r",
        ),
        ("path contains \"/../\"", Req::get("/a/../etc"), "deny:r"),
        ("query == \"a=1&b=2\"", Req::get("/x?a=1&b=2"), "deny:r"),
        (
            "query contains \"format=json\"",
            Req::get("/x?action=query&format=json"),
            "deny:r",
        ),
        (
            "query(\"action\") == \"purge\"",
            Req::get("/w/api.php?format=json&action=purge"),
            "deny:r",
        ),
        (
            "query(\"q\") ~* \"select\"",
            Req::get("/s?q=SELECT+%3Fx"),
            "deny:r",
        ),
        ("query(\"q\") present", Req::get("/s?q"), "deny:r"),
        ("query(\"q\") absent", Req::get("/s?x=1"), "deny:r"),
        (
            "header(\"User-Agent\") ~* \"^curl/\"",
            Req::get("/").header("user-agent", "CURL/8.0"),
            "deny:r",
        ),
        (
            "header(\"user-agent\") ~ \"^curl/\"",
            Req::get("/").header("User-Agent", "CURL/8.0"),
            "pass",
        ),
        (
            "header(\"user-agent\") !~* \"mozilla\"",
            Req::get("/").header("User-Agent", "python"),
            "deny:r",
        ),
        (
            "header(\"user-agent\") !~* \"mozilla\"",
            Req::get("/"),
            "deny:r",
        ),
        (
            "header(\"x-client\") present",
            Req::get("/").header("X-Client", ""),
            "deny:r",
        ),
        (
            "header(\"x-client\") absent",
            Req::get("/").header("X-Client", "1"),
            "pass",
        ),
        (
            "header(\"accept\") in { \"*/*\", \"text/html\" }",
            Req::get("/").header("Accept", "*/*"),
            "deny:r",
        ),
        (
            "header(\"accept\") not in { \"*/*\" }",
            Req::get("/").header("Accept", "*/*"),
            "pass",
        ),
        ("ip == 198.51.100.1", Req::get("/"), "deny:r"),
        ("ip != 198.51.100.0/24", Req::get("/"), "pass"),
        (
            "ip in { 10.0.0.0/8, 2001:db8::/32 }",
            Req::get("/").ip("2001:db8::5"),
            "deny:r",
        ),
        (
            "ip in { 10.0.0.0/8 }",
            Req::get("/").ip("::ffff:10.1.2.3"),
            "deny:r",
        ),
        (
            "ip in { 2001:db8::/32 }",
            Req::get("/").ip("10.1.2.3"),
            "pass",
        ),
        (
            "dst_ip == 208.80.154.224",
            Req::get("/").dst("208.80.154.224"),
            "deny:r",
        ),
        (
            "dst_ip in { 2620:0:861:ed1a::/64 }",
            Req::get("/").dst("2620:0:861:ed1a::1"),
            "deny:r",
        ),
        (
            "dst_ip in { 10.0.0.0/8 }",
            Req::get("/").dst("::ffff:10.1.2.3"),
            "deny:r",
        ),
        (
            "dst_ip in { 208.80.154.224/27 }",
            Req::get("/").dst("208.80.155.1"),
            "pass",
        ),
        // An unknown destination is in no set.
        ("dst_ip in { 0.0.0.0/0, ::/0 }", Req::get("/"), "pass"),
        ("dst_ip not in { 0.0.0.0/0 }", Req::get("/"), "deny:r"),
        // The source and the destination are different addresses.
        (
            "ip in { 208.80.154.224/27 }",
            Req::get("/").dst("208.80.154.224"),
            "pass",
        ),
        ("port == 443", Req::get("/"), "deny:r"),
        ("port in { 80, 8000-8999 }", Req::get("/"), "pass"),
        ("true", Req::get("/"), "deny:r"),
        ("false", Req::get("/"), "pass"),
    ];
    for (cond, req, want) in cases {
        let src = format!("rule r {{ when {cond} deny 403 }}");
        assert_eq!(verdict(&src, req), want, "when {cond}");
    }
}

#[test]
fn precedence_and_requestctl_syntax() {
    let src = "pattern ua/bot { header(\"user-agent\") ~* \"bot\" }
        ipblock cloud/aws { 3.5.140.0/22 }
        rule a { when pattern@ua/bot AND NOT ipblock@cloud/aws deny 403 }
        rule b { when path == \"/a\" or path == \"/b\" and method == \"POST\" deny 410 }";
    let e = engine(src);
    let bot = Req::get("/").header("User-Agent", "SomeBot/1");
    assert_eq!(bot.run(&e), "deny:a");
    let bot_aws = Req::get("/")
        .header("User-Agent", "SomeBot/1")
        .ip("3.5.140.9");
    assert_eq!(bot_aws.run(&e), "pass");
    // `and` binds tighter than `or`: /a matches whatever the method.
    assert_eq!(Req::get("/a").run(&e), "deny:b");
    assert_eq!(Req::get("/b").run(&e), "pass");
    assert_eq!(Req::get("/b").method("POST").run(&e), "deny:b");
}

#[test]
fn deny_status_and_reason() {
    let e = engine("rule r { when true deny 451 \"Unavailable\" } rule s { when true deny }");
    let d = Req::get("/").decide(&e);
    assert_eq!(
        d.verdict,
        Verdict::Deny {
            rule: 0,
            status: 451,
            reason: "Unavailable".into()
        }
    );
    let c = compile("rule s { when true deny }");
    assert_eq!(
        c.ruleset.unwrap().rules[0].action,
        Action::Deny {
            status: 403,
            reason: "Forbidden".into()
        }
    );
}

#[test]
fn priority_orders_and_ties_go_by_file_order() {
    let src = "rule late { priority 50 when true deny 403 }
        rule first { priority 5 when path == \"/x\" deny 404 }
        rule tie_a { priority 50 when true deny 405 }";
    let c = compile(src);
    let names: Vec<String> = c
        .ruleset
        .unwrap()
        .rules
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(names, ["first", "late", "tie_a"]);
    let e = engine(&src.replace("rule tie_a { priority 50 when true deny 405 }", ""));
    assert_eq!(Req::get("/x").run(&e), "deny:first");
}

#[test]
fn allow_exempts_from_everything_after_it() {
    let src = "rule ok { priority 1 when header(\"x-trusted\") == \"1\" allow }
        rule limit { when true throttle 1 requests per 1m by ip }
        rule block { when path == \"/x\" deny 403 }
        rule gone { when path == \"/x\" drop }";
    let e = engine(src);
    for i in 0..50 {
        let v = Req::get("/x")
            .header("X-Trusted", "1")
            .at(i)
            .decide(&e)
            .verdict;
        assert_eq!(show(&e, &v), "allow:ok");
    }
    assert_eq!(Req::get("/y").run(&e), "pass");
    assert_eq!(Req::get("/y").run(&e), "throttle:limit");
}

#[test]
fn log_and_shadow_record_but_never_enforce() {
    let src = "rule seen { when path starts_with \"/w/\" log }
        rule trial { shadow when true throttle 2 requests per 1m by ip }
        rule trial_deny { shadow when header(\"user-agent\") absent deny 403 }";
    let e = engine(src);
    let mut would_throttle = 0;
    for i in 0..5 {
        let d = Req::get("/w/index.php").at(i).decide(&e);
        assert_eq!(d.verdict, Verdict::Pass);
        let names: Vec<&str> = d
            .logged
            .iter()
            .map(|(r, _)| e.rule(*r).name.as_str())
            .collect();
        assert_eq!(names, ["seen", "trial", "trial_deny"]);
        would_throttle += d
            .logged
            .iter()
            .filter(|(_, v)| v.kind() == "throttle")
            .count();
    }
    assert_eq!(would_throttle, 3);
}

#[test]
fn throttle_keys_retry_after_and_ban() {
    // Keyed by host and path: different clients share the title's bucket.
    let src = "rule loop { when header(\"cache-control\") contains \"no-cache\"
        throttle 2 requests per 1m by host, path ban 5m status 503 reason \"loop\" }";
    let e = engine(src);
    let r = |ip: &str, path: &str, t: u64| {
        Req::get(path)
            .header("Cache-Control", "no-cache")
            .ip(ip)
            .at(t)
    };
    assert_eq!(r("10.0.0.1", "/t", 0).decide(&e).verdict, Verdict::Pass);
    assert_eq!(r("10.0.0.2", "/t", 1).decide(&e).verdict, Verdict::Pass);
    assert_eq!(
        r("10.0.0.3", "/t", 2).decide(&e).verdict,
        Verdict::Throttle {
            rule: 0,
            status: 503,
            reason: "loop".into(),
            retry_after_s: 300
        }
    );
    assert_eq!(r("10.0.0.3", "/other", 3).decide(&e).verdict, Verdict::Pass);
    // Still banned after the bucket would have refilled.
    assert_eq!(
        r("10.0.0.1", "/t", 120_000).decide(&e).verdict.kind(),
        "throttle"
    );
    assert_eq!(
        r("10.0.0.1", "/t", 302_003).decide(&e).verdict,
        Verdict::Pass
    );

    // Without a ban, Retry-After is the wait for the next token.
    let e = engine("rule t { when true throttle 6 requests per 1m burst 1 by header(\"x-api-key\"), query(\"title\") }");
    let k = |key: &str, t| Req::get("/?title=A").header("X-Api-Key", key).at(t);
    assert_eq!(k("a", 0).decide(&e).verdict, Verdict::Pass);
    assert_eq!(k("b", 0).decide(&e).verdict, Verdict::Pass);
    let Verdict::Throttle {
        retry_after_s,
        status,
        ..
    } = k("a", 1).decide(&e).verdict
    else {
        panic!()
    };
    assert_eq!((retry_after_s, status), (10, 429));
}

/// Each part of a key has its length in front, so that no two different
/// lists of parts make the same key: with the length after each part,
/// `?a=x&b=%05%00%00%00y` and `?a=x%01%00%00%00&b=y` shared a bucket.
#[test]
fn key_parts_never_run_into_each_other() {
    let e = engine(r#"rule t { when true throttle 1 requests per 1h by query("a"), query("b") }"#);
    assert_eq!(Req::get("/?a=x&b=%05%00%00%00y").run(&e), "pass");
    assert_eq!(Req::get("/?a=x%01%00%00%00&b=y").run(&e), "pass");
    assert_eq!(Req::get("/?a=x&b=%05%00%00%00y").run(&e), "throttle:t");
    // Parts that look like lengths, in every pairing: each pair is a
    // bucket of its own.
    let parts = [
        "",
        "x",
        "y",
        "%00",
        "%01%00%00%00",
        "x%01%00%00%00",
        "%05%00%00%00y",
        "%00%00%00%00%00%00%00%00",
        "%01%00%00%00%00%00%00%00x",
    ];
    for a in parts {
        for b in parts {
            let r = Req::get(&format!("/?a={a}&b={b}"));
            let v = r.run(&e);
            let first = (a, b) != ("x", "%05%00%00%00y") && (a, b) != ("x%01%00%00%00", "y");
            assert_eq!(v == "pass", first, "a={a} b={b}: {v}");
        }
    }
}

#[test]
fn global_key_is_one_bucket_per_host() {
    let e = engine("rule g { when true throttle 1 requests per 1h }");
    assert_eq!(
        Req::get("/").host("a.org").decide(&e).verdict,
        Verdict::Pass
    );
    assert_eq!(
        Req::get("/")
            .host("b.org")
            .ip("10.9.9.9")
            .decide(&e)
            .verdict,
        Verdict::Pass
    );
    assert_eq!(
        Req::get("/")
            .host("a.org")
            .ip("10.9.9.9")
            .decide(&e)
            .verdict
            .kind(),
        "throttle"
    );
    let c = compile("rule g { when true throttle 1 requests per 1h }");
    let Action::Throttle(t) = &c.ruleset.unwrap().rules[0].action else {
        panic!()
    };
    assert_eq!(t.keys, vec![Key::Global]);
}

#[test]
fn prefix_key_aggregates_v4_and_v6() {
    let e = engine("rule p { when true throttle 1 requests per 1h by prefix(24, 64) }");
    assert_eq!(
        Req::get("/").ip("192.0.2.1").decide(&e).verdict,
        Verdict::Pass
    );
    assert_eq!(
        Req::get("/").ip("192.0.2.200").decide(&e).verdict.kind(),
        "throttle"
    );
    assert_eq!(
        Req::get("/").ip("192.0.3.1").decide(&e).verdict,
        Verdict::Pass
    );
    assert_eq!(
        Req::get("/").ip("2001:db8:0:1::1").decide(&e).verdict,
        Verdict::Pass
    );
    assert_eq!(
        Req::get("/")
            .ip("2001:db8:0:1:ffff::9")
            .decide(&e)
            .verdict
            .kind(),
        "throttle"
    );
    // The next /64 is a bucket of its own.
    assert_eq!(
        Req::get("/").ip("2001:db8:0:2::1").decide(&e).verdict,
        Verdict::Pass
    );
}

#[test]
fn sites_and_enabled() {
    let src = "rule here { sites { esams } when true deny 403 } rule off { enabled false when true deny 410 }";
    let e = engine_at(src, Some("eqiad"));
    assert_eq!(Req::get("/").decide(&e).verdict, Verdict::Pass);
    let e = engine_at(src, Some("esams"));
    assert_eq!(Req::get("/").run(&e), "deny:here");
}

#[test]
fn ipblocks_inline_and_from_files_merge() {
    let dir = tempdir("lists");
    std::fs::write(dir.join("list.txt"), "# a list\n10.0.0.0/25\n10.0.0.128/25 # adjacent\n\n2001:db8::/33, note\n2001:db8:8000::/33\n").unwrap();
    std::fs::write(
        dir.join("r.rctl"),
        "ipblock x/y { file \"list.txt\" 10.0.1.0/24 }\nrule r { when ipblock@x/y drop }\n",
    )
    .unwrap();
    let c = rctl_compiler::compile_paths(&[dir.join("r.rctl")], &Default::default());
    assert!(!c.diagnostics.has_errors());
    let rs = c.ruleset.unwrap();
    assert_eq!(rs.ipsets[0].prefixes.v4, vec![(0x0a00_0000, 23)]);
    assert_eq!(rs.ipsets[0].prefixes.v6.len(), 1);
    assert_eq!(c.ipblock_sizes, vec![("x/y".to_string(), 1, 1)]);
}

#[test]
fn packet_path_follows_the_plan() {
    let src = "ipblock bad/net { 203.0.113.0/24 }
        ipblock upd/hosts { 203.0.113.8/29 }
        rule updater { priority 1 when ipblock@upd/hosts and header(\"user-agent\") == \"updater\" allow }
        rule bad { priority 2 when ipblock@bad/net drop }
        rule syn { priority 3 when proto == tcp throttle 2 connections per 1m by ip }";
    let e = engine(src);
    let p = |ip: &str, syn: bool| Packet {
        src: ip.parse().unwrap(),
        dst: None,
        proto: Proto::Tcp,
        dst_port: 443,
        syn,
        time_ns: 1,
    };
    // The updater's addresses are exempted in XDP (its projection), so its
    // packets reach user space, which sees the User-Agent.
    assert_eq!(pkt(&e, &p("203.0.113.9", true)), "allow:updater");
    assert_eq!(pkt(&e, &p("203.0.113.1", true)), "drop:bad");
    // In user space, a request from the updater range without the UA is dropped.
    assert_eq!(Req::get("/").ip("203.0.113.9").run(&e), "drop:bad");
    // Connections count SYNs only.
    for _ in 0..10 {
        assert_eq!(
            e.decide_packet(&p("198.51.100.7", false)).verdict,
            Verdict::Pass
        );
    }
    assert_eq!(
        e.decide_packet(&p("198.51.100.7", true)).verdict,
        Verdict::Pass
    );
    assert_eq!(
        e.decide_packet(&p("198.51.100.7", true)).verdict,
        Verdict::Pass
    );
    assert_eq!(pkt(&e, &p("198.51.100.7", true)), "throttle:syn");
    // Packet limits are not request rules.
    assert_eq!(
        Req::get("/").ip("198.51.100.7").decide(&e).verdict,
        Verdict::Pass
    );
}

#[test]
fn shipped_rules_check_and_pass_their_tests() {
    let c = rctl_compiler::compile_paths(&[root().join("rules")], &Default::default());
    assert_eq!(c.diagnostics.iter().count(), 0, "rules/ must be clean");
    let rs = c.ruleset.unwrap();
    assert!(c.tests.len() >= 10);
    for t in &c.tests {
        let r = rctl_dataplane::testing::run_test(&rs, t).unwrap();
        assert!(r.passed(), "{}: {:?}", r.name, r.failures);
    }
}

#[test]
fn a_test_block_that_should_fail_does() {
    let src = "rule r { when true throttle 1 requests per 1m by ip }
        test \"wrong\" { request { repeat 3 } expect all pass }";
    let c = compile(src);
    let r = rctl_dataplane::testing::run_test(c.ruleset.as_ref().unwrap(), &c.tests[0]).unwrap();
    assert!(!r.passed());
    assert!(
        r.failures[0].1.contains("1 pass, 2 throttle by r"),
        "{:?}",
        r.failures
    );
}

/// Header names of any length a rule can name are matched, in any case:
/// names past 64 bytes (the matcher's stack buffer) were skipped, so such
/// a rule compiled and never matched.
#[test]
fn long_header_names_match_in_any_case() {
    for len in [63usize, 64, 65, 80, 300] {
        let name: &'static str = Box::leak(format!("x-{}", "a".repeat(len - 2)).into_boxed_str());
        let e = engine(&format!(
            "rule long {{ when header(\"{name}\") == \"1\" deny 403 }}"
        ));
        assert_eq!(
            Req::get("/").header(name, "1").run(&e),
            "deny:long",
            "{len} bytes"
        );
        let upper: &'static str = Box::leak(name.to_ascii_uppercase().into_boxed_str());
        assert_eq!(
            Req::get("/").header(upper, "1").run(&e),
            "deny:long",
            "{len}, upper"
        );
        // One byte longer than any the rules name: not the same header.
        let longer: &'static str = Box::leak(format!("{name}a").into_boxed_str());
        assert_eq!(
            Req::get("/").header(longer, "1").run(&e),
            "pass",
            "{len} + 1"
        );
    }
}

/// Only the first header of each name counts, however many names the
/// rules mention and the request carries (past the matcher's eight
/// remembered on the stack).
#[test]
fn only_the_first_of_each_header_counts_past_eight_names() {
    let names: Vec<&'static str> = (0..12)
        .map(|i| &*Box::leak(format!("x-h{i}").into_boxed_str()))
        .collect();
    let rules: String = names
        .iter()
        .map(|n| {
            format!(
                "rule r_{} {{ when header(\"{n}\") == \"1\" deny 403 }}\n",
                &n[2..]
            )
        })
        .collect();
    let e = engine(&rules);
    let mut req = Req::get("/");
    for n in &names {
        req = req.header(n, "0");
    }
    // Second occurrences of every name, each saying "1": ignored.
    for n in &names {
        req = req.header(n, "1");
    }
    assert_eq!(req.run(&e), "pass");
    // The first occurrence of the eleventh name decides.
    let mut req = Req::get("/");
    for (i, n) in names.iter().enumerate() {
        req = req.header(n, if i == 10 { "1" } else { "0" });
    }
    assert_eq!(req.run(&e), "deny:r_h10");
}
