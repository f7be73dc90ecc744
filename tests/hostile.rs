//! Hostile requests: none may panic or stall, and both evaluators agree.

use crate::util::*;
use rctl_dataplane::Request;

const RULES: &str = "
ipblock t/v6 { 2001:db8::/32 }
ipblock t/v4 { 192.0.2.0/24 }
rule v6 { when ipblock@t/v6 and path == \"/v6\" deny 403 }
rule v4 { when ip in { 10.0.0.0/8 } and path == \"/v4\" deny 403 }
rule ua { when header(\"user-agent\") ~* \"^(curl|wget)/\" and not ipblock@t/v4 deny 403 }
rule big { when header(\"x-big\") contains \"needle\" deny 413 }
rule meth { when method in { GET, HEAD } and path == \"/m\" deny 405 }
rule title { when query(\"title\") == \"\u{e9}t\u{e9}\" deny 451 }
rule limit { when true throttle 1000 requests per 1s by header(\"user-agent\"), query(\"q\") }
";

fn decide(e: &Both, method: &[u8], target: &[u8], headers: &[(&[u8], &[u8])], ip: &str) -> String {
    let r = Request {
        method,
        host: b"example.org",
        target,
        headers,
        ip: ip.parse().unwrap(),
        dst: None,
        port: 443,
        time_ns: 1,
    };
    let d = e.decide_request(&r);
    show(e, &d.verdict)
}

#[test]
fn invalid_utf8_everywhere() {
    let e = engine(RULES);
    let bad: &[u8] = b"\xff\xfe\xc3\x28";
    assert_eq!(
        decide(
            &e,
            bad,
            b"/\xff?\xfe=\xff",
            &[(bad, bad), (b"User-Agent", b"curl/\xff")],
            "198.51.100.1"
        ),
        "deny:ua"
    );
    assert_eq!(decide(&e, b"GET", b"/m\xff", &[], "198.51.100.1"), "pass");
    // %C3%A9 is é: query values are decoded before comparison.
    assert_eq!(
        decide(&e, b"GET", b"/?title=%C3%A9t%C3%A9", &[], "198.51.100.1"),
        "deny:title"
    );
    assert_eq!(
        decide(&e, b"GET", b"/?title=%E9t%E9", &[], "198.51.100.1"),
        "pass"
    );
}

#[test]
fn huge_and_many_headers() {
    let e = engine(RULES);
    let mut big = vec![b'a'; 64 * 1024];
    assert_eq!(
        decide(&e, b"GET", b"/", &[(b"X-Big", &big)], "198.51.100.1"),
        "pass"
    );
    big.extend_from_slice(b"needle");
    assert_eq!(
        decide(&e, b"GET", b"/", &[(b"X-Big", &big)], "198.51.100.1"),
        "deny:big"
    );
    let names: Vec<Vec<u8>> = (0..5_000)
        .map(|i| format!("X-Header-{i}").into_bytes())
        .collect();
    let mut headers: Vec<(&[u8], &[u8])> =
        names.iter().map(|n| (n.as_slice(), &b"v"[..])).collect();
    headers.push((b"user-agent", b"wget/1.21"));
    assert_eq!(
        decide(&e, b"GET", b"/", &headers, "198.51.100.1"),
        "deny:ua"
    );
    // A 64 KB header name, and only the first User-Agent counts.
    let long_name = vec![b'U'; 65_536];
    let h: Vec<(&[u8], &[u8])> = vec![
        (&long_name, b"curl/1"),
        (b"User-Agent", b"Mozilla"),
        (b"User-Agent", b"curl/8"),
    ];
    assert_eq!(decide(&e, b"GET", b"/", &h, "198.51.100.1"), "pass");
    let long_query = format!("/?{}q=1", "a=b&".repeat(20_000));
    assert_eq!(
        decide(&e, b"GET", long_query.as_bytes(), &[], "198.51.100.1"),
        "pass"
    );
}

#[test]
fn empty_and_absurd_methods() {
    let e = engine(RULES);
    assert_eq!(decide(&e, b"", b"/m", &[], "198.51.100.1"), "pass");
    let absurd = vec![b'G'; 100_000];
    assert_eq!(decide(&e, &absurd, b"/m", &[], "198.51.100.1"), "pass");
    assert_eq!(decide(&e, b"HEAD", b"/m", &[], "198.51.100.1"), "deny:meth");
    assert_eq!(decide(&e, b"GET", b"", &[], "198.51.100.1"), "pass");
    assert_eq!(decide(&e, b"GET", b"*", &[], "198.51.100.1"), "pass");
}

#[test]
fn addresses_of_either_family_against_rules_of_the_other() {
    let e = engine(RULES);
    assert_eq!(decide(&e, b"GET", b"/v6", &[], "2001:db8::5"), "deny:v6");
    assert_eq!(decide(&e, b"GET", b"/v6", &[], "192.0.2.1"), "pass");
    assert_eq!(decide(&e, b"GET", b"/v4", &[], "10.1.1.1"), "deny:v4");
    assert_eq!(
        decide(&e, b"GET", b"/v4", &[], "::ffff:10.1.1.1"),
        "deny:v4"
    );
    assert_eq!(decide(&e, b"GET", b"/v4", &[], "2001:db8::a01:101"), "pass");
    assert_eq!(decide(&e, b"GET", b"/v4", &[], "::"), "pass");
    assert_eq!(decide(&e, b"GET", b"/v6", &[], "0.0.0.0"), "pass");
}
