//! Every diagnostic: its code, and the line and column it points at.

use crate::util::*;

#[track_caller]
fn expect(src: &str, want: &[(&str, u32, u32)]) {
    let got = codes(src);
    let got: Vec<(&str, u32, u32)> = got.iter().map(|&(c, l, k)| (c, l, k)).collect();
    let shown: String = src.chars().take(300).collect();
    assert_eq!(got, want, "for source:\n{shown}");
}

#[test]
fn syntax_errors_are_all_reported() {
    expect(
        "rule a {\n  when path ==\n}\nrule b { when true deny 403 }\nrule c {\n  when (path == \"/\"\n  deny\n}\n",
        &[("E0001", 3, 1), ("E0001", 7, 3)],
    );
    expect("action x { }\n", &[("E0001", 1, 1)]);
}

#[test]
fn names() {
    expect(
        "pattern a/b { true }\npattern a/b { false }\nrule r { when pattern@a/b deny }\nrule r { when pattern@a/c deny }\n",
        &[("E0010", 2, 9), ("E0010", 4, 6), ("E0011", 4, 15)],
    );
    expect("rule r { when ipblock@nope/x deny }", &[("E0011", 1, 15)]);
    expect("pattern a/x { pattern@a/y }\npattern a/y { pattern@a/x }\nrule r { when pattern@a/x deny }\n", &[("E0012", 2, 15)]);
    expect(
        "ipblock u/x { 10.0.0.0/8 }\npattern p/y { true }\nrule r { when true deny }\n",
        &[("W0102", 1, 9), ("W0102", 2, 9)],
    );
}

#[test]
fn did_you_mean() {
    let c = compile("pattern ua/bot { true }\nrule r { when pattern@ua/bott deny }");
    let d = c.diagnostics.iter().find(|d| d.code == "E0011").unwrap();
    assert_eq!(d.hint.as_deref(), Some("did you mean `pattern@ua/bot`?"));
}

#[test]
fn values() {
    expect(
        "ipblock a/b { 10.0.0.300/8 10.0.0.1/8 ::1/200 }\nrule r { when ipblock@a/b drop }",
        &[("E0020", 1, 15), ("W0101", 1, 28), ("E0020", 1, 39)],
    );
    expect(
        "rule r {\n  when path ~ \"a(b\"\n  deny\n}",
        &[("E0021", 2, 17)],
    );
    expect(
        "rule r { when header(\"ua\") ~* \"[z-a]\" deny }",
        &[("E0021", 1, 33)],
    );
    expect(
        "rule r { when true throttle 5 requests per 5 }",
        &[("E0022", 1, 44)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1y }",
        &[("E0022", 1, 44)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m ban 0s }",
        &[("E0022", 1, 51)],
    );
    expect("rule r { when true deny 200 }", &[("E0023", 1, 25)]);
    expect("rule r { when true deny 4o3 }", &[("E0023", 1, 25)]);
    expect(
        "rule r { when true throttle 5 requests per 1m status 302 }",
        &[("E0023", 1, 54)],
    );
    expect(
        "rule r { priority high when true deny }",
        &[("E0024", 1, 19)],
    );
    expect("rule r { when port == 70000 deny }", &[("E0024", 1, 23)]);
    expect(
        "rule r { when true throttle 0 requests per 1m }",
        &[("E0024", 1, 29)],
    );
    expect("rule r { when proto == sctp drop }", &[("E0026", 1, 24)]);
    expect(
        "rule r { enabled maybe when true deny }",
        &[("E0026", 1, 18)],
    );
}

#[test]
fn types() {
    // A CIDR set on a string field.
    expect(
        "rule r { when path in { 10.0.0.0/8 } deny }",
        &[("E0025", 1, 25)],
    );
    expect(
        "ipblock a/b { 10.0.0.0/8 }\nrule r { when header(\"x\") in ipblock@a/b deny }",
        &[("E0025", 2, 30)],
    );
    expect("rule r { when ip ~ \"10\\.\" deny }", &[("E0025", 1, 18)]);
    expect(
        "rule r { when dst_ip ~ \"10\\.\" deny }",
        &[("E0025", 1, 22)],
    );
    expect(
        "rule r { when dst_ip == 10.0.0.300 drop }",
        &[("E0020", 1, 25)],
    );
    expect(
        "rule r { when ip == \"10.0.0.1\" deny }",
        &[("E0025", 1, 21)],
    );
    expect("rule r { when path == sparql deny }", &[("E0025", 1, 23)]);
    expect("rule r { when path present deny }", &[("E0025", 1, 20)]);
    expect("rule r { when port ~ \"80\" deny }", &[("E0025", 1, 20)]);
}

#[test]
fn rule_shape() {
    expect("rule r { deny }", &[("E0030", 1, 6)]);
    expect("rule r { when true }", &[("E0031", 1, 6)]);
    expect("rule r { when true deny allow }", &[("E0031", 1, 25)]);
    expect("rule r { when true when false deny }", &[("E0032", 1, 20)]);
    expect(
        "rule r { when true throttle 5 lollipops per 1m }",
        &[("E0033", 1, 31)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m by ip, ip }",
        &[("E0033", 1, 54)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m by global, ip }",
        &[("E0033", 1, 47)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m by colour }",
        &[("E0033", 1, 50)],
    );
    expect(
        "rule r { when header(\"ua\") present throttle 5 packets per 1s }",
        &[("E0033", 1, 15)],
    );
    expect(
        "rule r { when true throttle 5 packets per 1s by path }",
        &[("E0033", 1, 49)],
    );
    // requestctl's bucket and key.
    expect(
        "rule r { when true throttle 5 requests per 1m by server, ip }",
        &[("E0033", 1, 47)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m bucket leaky }",
        &[("E0033", 1, 54)],
    );
    expect(
        "rule r { when port == 80 throttle 5 packets per 1s bucket vsthrottle }",
        &[("E0033", 1, 37)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m burst 9 bucket vsthrottle }",
        &[("E0033", 1, 53)],
    );
    expect(
        "rule r { when true throttle 5 requests per 1m burst 5 by server bucket vsthrottle }",
        &[],
    );
}

#[test]
fn analysis() {
    // Unreachable: an earlier terminal rule covers a later one.
    expect(
        "rule wide { when path starts_with \"/w/\" deny }\nrule narrow { when path == \"/w/index.php\" and method == \"GET\" deny 410 }",
        &[("W0103", 2, 6)],
    );
    // Exemption conflict: the allow comes after a throttle that overlaps it;
    // both spans are labelled.
    let src = "rule limit { when path == \"/sparql\" throttle 10 requests per 1m }\nrule updater { when header(\"user-agent\") == \"updater\" allow }";
    expect(src, &[("E0050", 2, 21)]);
    let c = compile(src);
    let d = c.diagnostics.iter().next().unwrap();
    assert_eq!(d.labels.len(), 3);
    assert_eq!((d.labels[1].span.line, d.labels[1].span.col), (1, 19));
    // No conflict when the earlier rule provably excludes the allowed traffic.
    expect(
        "ipblock u/x { 10.0.0.0/8 }\nrule limit { when path == \"/sparql\" and not ipblock@u/x throttle 10 requests per 1m }\nrule updater { when ipblock@u/x allow }",
        &[],
    );
    // ...nor when the allow comes first.
    expect("rule updater { priority 1 when header(\"user-agent\") == \"updater\" allow }\nrule limit { when true throttle 10 requests per 1m }", &[]);
    // Different sites never conflict.
    expect(
        "rule a { sites { x } when true deny }\nrule b { sites { y } when true allow }",
        &[],
    );
}

#[test]
fn exemption_conflicts_on_address_sets() {
    // Sets that overlap only in part (neither holds the other) conflict;
    // disjoint ones do not. Client and destination addresses alike, and
    // an allow inside or across an enforcing rule's excluded addresses.
    let pair = |earlier: &str, later: &str| {
        codes(&format!(
            "rule limit {{ when path == \"/w\" and {earlier} throttle 1 requests per 1h }}\nrule ok {{ when {later} allow }}"
        ))
        .iter()
        .map(|c| c.0)
        .collect::<Vec<_>>()
    };
    let conflict = ["E0050"];
    let none: [&str; 0] = [];
    let cases = [
        (
            "ip in { 10.0.0.0/16, 10.2.0.0/16 }",
            "ip in { 10.0.0.0/24, 10.1.0.0/16 }",
            &conflict[..],
        ),
        (
            "ip in { 10.0.0.0/16, 10.2.0.0/16 }",
            "ip in { 10.1.0.0/16, 10.3.0.0/16 }",
            &none[..],
        ),
        (
            "ip in { 2001:db8::/48, 2001:db8:2::/48 }",
            "ip in { 2001:db8::/64, 2001:db8:1::/48 }",
            &conflict[..],
        ),
        (
            "ip in { 2001:db8::/48 }",
            "ip in { 2001:db8:1::/48, 10.0.0.0/8 }",
            &none[..],
        ),
        (
            "dst_ip in { 192.0.2.0/25, 198.51.100.0/24 }",
            "dst_ip in { 192.0.2.64/26, 203.0.113.0/24 }",
            &conflict[..],
        ),
        (
            "dst_ip in { 192.0.2.0/25 }",
            "dst_ip in { 192.0.2.128/25 }",
            &none[..],
        ),
        // The client and the destination are different addresses.
        (
            "dst_ip in { 192.0.2.0/25 }",
            "ip in { 198.51.100.0/24 } and not dst_ip in { 192.0.2.0/24 }",
            &none[..],
        ),
        (
            "not ip in { 10.0.0.0/8 }",
            "ip in { 10.0.0.0/7 }",
            &conflict[..],
        ),
        (
            "not ip in { 10.0.0.0/8 }",
            "ip in { 10.1.0.0/16 }",
            &none[..],
        ),
    ];
    for (earlier, later, want) in cases {
        assert_eq!(pair(earlier, later), want, "{earlier} / {later}");
    }
    // The same through ipblocks.
    let src = "ipblock a/x { 10.0.0.0/16\n 10.2.0.0/16 }\nipblock a/y { 10.0.0.0/24\n 10.1.0.0/16 }\nrule limit { when ipblock@a/x throttle 1 requests per 1h }\nrule ok { when ipblock@a/y allow }";
    expect(src, &[("E0050", 6, 16)]);
}

#[test]
fn limits() {
    let deep = format!(
        "rule r {{ when {}true{} deny }}",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    expect(&deep, &[("E0004", 1, 79)]);
    let mut opts = rctl_compiler::Options {
        max_rules: 2,
        ..Default::default()
    };
    let c = rctl_compiler::compile_str(
        "t",
        "rule a { when true deny }\nrule b { when false deny }\nrule c { when false deny }",
        &opts,
    );
    assert_eq!(c.diagnostics.iter().next().unwrap().code, "E0040");
    opts.max_regex_bytes = 1000;
    let c = rctl_compiler::compile_str(
        "t",
        "rule a { when path ~ \"[a-z]{100}x{50}\" deny }",
        &opts,
    );
    assert_eq!(c.diagnostics.iter().next().unwrap().code, "E0021");
    assert!(c
        .diagnostics
        .iter()
        .next()
        .unwrap()
        .message
        .contains("size limit"));
    // Patterns that double at each level are stopped, not inlined forever.
    let mut src = String::from("pattern p/0 { path == \"/\" }\n");
    for i in 1..30 {
        src += &format!(
            "pattern p/{i} {{ pattern@p/{} or pattern@p/{} }}\n",
            i - 1,
            i - 1
        );
    }
    src += "rule r { when pattern@p/29 deny }";
    assert!(codes(&src).iter().any(|c| c.0 == "E0040"));
}

#[test]
fn tests_are_checked() {
    expect(
        "rule r { when true deny }\ntest \"t\" { request { ip nope } expect all deny by rr }",
        &[("E0060", 2, 25), ("E0060", 2, 51)],
    );
    expect("test \"t\" { }", &[("E0060", 1, 6), ("E0060", 1, 6)]);
    expect(
        "rule r { when true deny }\ntest \"t\" { packet { path \"/\" } expect all pass }",
        &[("E0060", 2, 21)],
    );
    // A replay: its network must read, its label is one `for` may name,
    // and a test does not mix replayed traffic with written samples.
    expect(
        "rule r { when true deny }\ntest \"t\" { replay a \"x.log\" ip 10.0.0.0/99 expect for b all deny }",
        &[("E0060", 2, 32), ("E0060", 2, 55)],
    );
    expect(
        "rule r { when true deny }\ntest \"t\" { replay a \"x.log\"\n  request { path \"/\" } expect for a all deny }",
        &[("E0060", 3, 3)],
    );
    // A replay reads below the ruleset's roots only, as `include` does;
    // `format` and `ip` come once.
    let c =
        compile("rule r { when true deny }\ntest \"t\" { replay \"/etc/passwd\" expect all deny }");
    let d: Vec<_> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(d, ["E0007"], "{:?}", c.diagnostics);
    expect(
        "rule r { when true deny }\ntest \"t\" { replay \"x.log\" ip 10.0.0.1 ip 10.0.0.2 expect all deny }",
        &[("E0060", 2, 42)],
    );
    let c = compile("rule r { when true deny }\ntest \"t\" { replay a \"day.log\" format \"nginx-combined\" ip 45.83.64.0/24 expect for a all deny }");
    assert!(!c.diagnostics.has_errors());
    let r = &c.tests[0].replays[0];
    assert_eq!(r.path, std::path::Path::new("day.log"));
    assert_eq!(r.format.as_deref(), Some("nginx-combined"));
    assert!(r.selects("45.83.64.200".parse().unwrap()));
    assert!(!r.selects("45.83.65.1".parse().unwrap()));
    // The captured headers: names in slot order, lengths optional.
    let c = compile("rule r { when true deny }\ntest \"t\" { replay \"edge.log\" captured \"User-Agent:64,,Host\" expect all deny }");
    assert!(!c.diagnostics.has_errors(), "{:?}", c.diagnostics);
    assert_eq!(
        c.tests[0].replays[0].captured,
        [
            ("user-agent".to_string(), Some(64)),
            (String::new(), None),
            ("host".to_string(), None)
        ]
    );
    expect(
        "rule r { when true deny }\ntest \"t\" { replay \"x.log\" captured \"User Agent:0\" expect all deny }",
        &[("E0060", 2, 36)],
    );
}

#[test]
fn a_megabyte_line_is_fine() {
    let long = format!(
        "rule r {{ when path == \"/{}\" deny }}  rule s {{ when path == bad deny }}",
        "a".repeat(1 << 20)
    );
    let c = compile(&long);
    let d: Vec<_> = c.diagnostics.iter().collect();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].code, "E0025");
    assert!(d[0].render(&c.sources).len() < 2000);
}

#[test]
fn rendering_has_everything_an_operator_needs() {
    let c = compile("rule r {\n  when path == \"/x\" and header(\"ua\") ~ \"(\"\n  deny\n}\n");
    let text = c.diagnostics.iter().next().unwrap().render(&c.sources);
    let want = "error[E0021]: invalid regex: unclosed group
 --> t.rctl:2:41
  |
2 |   when path == \"/x\" and header(\"ua\") ~ \"(\"
  |                                         ^ unclosed group
  = hint: regexes use regex-automata syntax (like Rust's regex crate); escape literal metacharacters with \\
";
    assert_eq!(text, want);
}
