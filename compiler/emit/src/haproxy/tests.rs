//! Unit tests of the HAProxy writer: how values, names and addresses are
//! written, and how conditions flatten.

use super::*;

#[test]
fn ipv4_mapped_addresses_are_left_out_of_maps() {
    assert!(without_mapped(MAPPED.0, 96).is_empty());
    assert_eq!(
        without_mapped(0x2001_0db8 << 96, 32),
        vec![(0x2001_0db8 << 96, 32)]
    );
    // ::/80 holds ::ffff:0:0/96: what is left is 16 prefixes.
    let rest = without_mapped(0, 80);
    assert_eq!(rest.len(), 16);
    let size: u128 = rest
        .iter()
        .map(|&(_, l)| 1u128 << (128 - u32::from(l)))
        .sum();
    assert_eq!(size, (1u128 << 48) - (1u128 << 32));
    assert!(rest
        .iter()
        .all(|&(n, l)| (n >> (128 - u32::from(l))) != (MAPPED.0 >> (128 - u32::from(l)))));
}

fn front(src: &str) -> String {
    let rs = crate::test_ruleset(src);
    let h = emit(&rs, &Options::default()).unwrap();
    h.files[0].1.clone()
}

fn acls(front: &str) -> Vec<&str> {
    front.lines().filter(|l| l.starts_with("acl ")).collect()
}

#[test]
fn values_are_patterns_never_flags_and_the_empty_string_is_matched() {
    let f = front(
        r#"
rule a { when header("x-a") in { "-f", "/etc/hostname" } deny }
rule b { when header("x-b") in { "-m", "found" } deny }
rule c { when header("x-c") in { "", "badbot" } deny }
rule d { when header("x-d") == "" deny }
rule e { when header("x-e") == "-i" deny }
rule f { when header("x-f") contains "" deny }
"#,
    );
    assert_eq!(
        acls(&f),
        [
            "acl rctl_a0 req.fhdr(x-a,1) -m str -- '-f' '/etc/hostname'",
            "acl rctl_a1 req.fhdr(x-b,1) -m str -- '-m' 'found'",
            "acl rctl_a2 req.fhdr(x-c,1) -m str -- 'badbot'",
            "acl rctl_a2 req.fhdr(x-c,1) -m len 0",
            "acl rctl_a3 req.fhdr(x-d,1) -m len 0",
            "acl rctl_a4 req.fhdr(x-e,1) -m str -- '-i'",
            "acl rctl_a5 req.fhdr(x-f,1) -m reg -- '(?:)'",
        ]
    );
}

#[test]
fn quotes_dollars_and_hashes_in_values_and_header_names() {
    let f = front(
        r#"
rule a { when header("x'y") in { "it's", "$HOME", "a#b", "\\" } deny "" }
rule b { when header("c$d#") present throttle 2 requests per 1m by header("e'f") reason "-f" }
"#,
    );
    assert_eq!(
        acls(&f),
        [
            r#"acl rctl_a0 "req.fhdr(x\\'y,1)" -m str -- '$HOME' '\' 'a#b' "it's""#,
            r#"acl rctl_a1 "req.fhdr(c\$d#,1)" -m found"#,
        ]
    );
    // An empty reason is an empty body (`string ''` would end the line).
    assert!(
        f.contains("http-request return status 403 if rctl_a0\n"),
        "{f}"
    );
    // A request without the key's header is counted under "", as rctl
    // counts it.
    assert!(f.contains(
        "http-request set-var(txn.rctl_k0) str('')\nhttp-request set-var(txn.rctl_k0) \"req.fhdr(e\\\\'f,1)\" if { \"req.fhdr(e\\\\'f,1)\" -m found }\nhttp-request track-sc0 var(txn.rctl_k0) table rctl_t_0 if rctl_a1\n"
    ), "{f}");
    assert!(f.contains("string '-f' hdr Retry-After"), "{f}");
}

#[test]
fn the_query_is_empty_without_a_question_mark_and_the_host_without_a_header() {
    let f = front(r#"rule a { when query == "" or host == "" deny }"#);
    assert!(
        f.contains("http-request set-var(txn.rctl_query) \"url,regsub('\\\\A[^?]*\\\\??','')\"\n"),
        "{f}"
    );
    assert!(
        f.contains("http-request set-var(txn.rctl_host) str('')\n"),
        "{f}"
    );
    assert_eq!(
        acls(&f),
        [
            "acl rctl_a0 var(txn.rctl_query) -m len 0",
            "acl rctl_a1 var(txn.rctl_host) -m len 0"
        ]
    );
}

#[test]
fn ipv4_prefixes_are_written_as_mapped_ipv6_ones() {
    let rs = crate::test_ruleset(
        r#"rule a { when ip in { 10.0.0.0/8, 192.0.2.1, 2001:db8::/32 } deny }"#,
    );
    let h = emit(&rs, &Options::default()).unwrap();
    let (name, map) = &h.files[2];
    assert_eq!(name, "rctl-set0.map");
    let lines: Vec<&str> = map.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "::ffff:10.0.0.0/104 1",
            "::ffff:192.0.2.1/128 1",
            "2001:db8::/32 1"
        ]
    );
}

#[test]
fn options_the_configuration_cannot_hold_are_refused_by_name() {
    let rs = crate::test_ruleset(r#"rule a { when ip in { 10.0.0.0/8 } deny }"#);
    for (o, flag) in [
        (
            Options {
                config_dir: "/x),ipmask(0) -m found #".into(),
                ..Options::default()
            },
            "--config-dir",
        ),
        (
            Options {
                client_ip_header: Some("X Y".into()),
                ..Options::default()
            },
            "--client-ip-header",
        ),
        (
            Options {
                site: Some("a b".into()),
                ..Options::default()
            },
            "--site",
        ),
    ] {
        let why = emit(&rs, &o).unwrap_err();
        assert_eq!(why.len(), 1);
        assert_eq!(why[0].0, flag);
    }
    let odd = Options {
        client_ip_header: Some("X-Real'IP".into()),
        ..Options::default()
    };
    let f = &emit(&rs, &odd).unwrap().files[0].1;
    assert!(f.contains(r#"http-request set-src "req.hdr_ip(x-real\\'ip,1)" if { "req.hdr_ip(x-real\\'ip,1)" -m found }"#), "{f}");
}

#[test]
fn conditions_flatten_to_or_of_and() {
    let c = Cond::And(vec![
        Cond::Or(vec![Cond::Atom(0), Cond::Atom(1)]),
        Cond::Not(Box::new(Cond::And(vec![Cond::Atom(2), Cond::Atom(3)]))),
    ]);
    let d = dnf(&c, 64).unwrap();
    assert_eq!(
        d,
        vec![
            vec![(0, false), (2, true)],
            vec![(0, false), (3, true)],
            vec![(1, false), (2, true)],
            vec![(1, false), (3, true)]
        ]
    );
    let contradiction = Cond::And(vec![Cond::Atom(0), Cond::Not(Box::new(Cond::Atom(0)))]);
    assert!(dnf(&contradiction, 64).unwrap().is_empty());
    let wide = Cond::And(
        (0..10)
            .map(|i| Cond::Or(vec![Cond::Atom(2 * i), Cond::Atom(2 * i + 1)]))
            .collect(),
    );
    assert!(dnf(&wide, 64).is_none());
}
