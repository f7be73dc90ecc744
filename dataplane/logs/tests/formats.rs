//! The format parsers on lines the servers wrote themselves (fixtures
//! recorded from HAProxy 2.6; the integration tests record nginx's and
//! varnishncsa's afresh).

use rctl_logs::detect::{by_name, detect, Spec};
use rctl_logs::record::parse_owned;

fn s(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

#[test]
fn haproxy_httplog_with_and_without_captures() {
    let log = std::fs::read_to_string("tests/fixtures/haproxy-2.6.log").unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let spec = Spec {
        captures: vec!["User-Agent".into(), "Host".into()],
    };
    let f = by_name("haproxy-httplog", &spec).unwrap();
    // No captures in the first frontend: `%hr %hs` are left out.
    let a = parse_owned(&f, lines[0].as_bytes()).unwrap();
    assert_eq!(a.ip.to_string(), "127.0.0.1");
    assert_eq!(
        (s(&a.method), s(&a.target)),
        ("GET".into(), "/a?b=1".into())
    );
    assert_eq!(a.header("user-agent"), None);
    assert_eq!(a.time_ns % 1_000_000_000, 929_000_000);
    // Captures, HAProxy's #HH escapes decoded.
    let b = parse_owned(&f, lines[1].as_bytes()).unwrap();
    assert_eq!(b.header("user-agent").as_deref(), Some("Mo\"z|i{l}la #x"));
    assert_eq!(s(&b.host), "127.0.0.1:18082");
    assert_eq!(s(&b.target), "/p%20q?x=\"y\"");
    // Control and non-ASCII bytes, as bytes.
    let d = parse_owned(&f, lines[3].as_bytes()).unwrap();
    assert_eq!(d.headers[0].1, b"a\x01b\xffc");
    assert_eq!(s(&d.host), "h");
    assert!(f.known.host && f.known.has_header("user-agent") && !f.known.has_header("referer"));
    assert!(!f.known.port && !f.known.dst_ip);
    // Detected as httplog.
    let det = detect(&[lines[0].as_bytes(), lines[1].as_bytes()], &spec).unwrap();
    assert_eq!(det.name, "haproxy-httplog");
}

#[test]
fn haproxy_custom_log_format_every_variable() {
    let cfg = std::fs::read_to_string("tests/fixtures/haproxy-2.6.cfg").unwrap();
    let fmt = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("log-format "))
        .unwrap();
    let caps = rctl_logs::haproxy::captures_in_config(&cfg);
    let f3 = &caps.iter().find(|(n, _)| n == "f3").unwrap().1;
    let f = by_name(
        &format!("haproxy:{fmt}"),
        &Spec {
            captures: f3.clone(),
        },
    )
    .unwrap();
    let log = std::fs::read_to_string("tests/fixtures/haproxy-2.6.log").unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(":18083 [")).collect();
    let a = parse_owned(&f, lines[0].as_bytes()).unwrap();
    assert_eq!(a.port, Some(18083));
    assert_eq!(a.dst.unwrap().to_string(), "127.0.0.1");
    assert_eq!(
        (s(&a.method), s(&a.target)),
        ("GET".into(), "/s?t=1".into())
    );
    assert_eq!(a.header("user-agent").as_deref(), Some("Mo\"z|i{l}la #x\\"));
    assert_eq!(a.header("referer").as_deref(), Some("http://r/\"q\""));
    // HTTP/2: HAProxy logs the absolute URL; the target is its path.
    let b = parse_owned(&f, lines[1].as_bytes()).unwrap();
    assert_eq!(s(&b.target), "/h2");
    assert_eq!(b.header("referer"), None);
    assert!(f.known.port && f.known.dst_ip && f.known.method && f.known.url);
}

#[test]
fn nginx_formats() {
    let f = by_name("nginx-combined", &Spec::default()).unwrap();
    let line = br#"192.0.2.7 - - [13/May/2026:12:00:00 +0000] "GET /sparql?query=SELECT HTTP/1.1" 200 12 "-" "python-requests/2.31 \x22x\x22""#;
    let r = parse_owned(&f, line).unwrap();
    assert_eq!(
        r.header("user-agent").as_deref(),
        Some("python-requests/2.31 \"x\"")
    );
    assert_eq!(r.header("referer"), None);
    assert_eq!(r.time_ns, 1_778_673_600_000_000_000);
    assert!(!f.known.host && !f.known.port);
    let j = by_name(
        r#"nginx:escape=json '{"ip":"$remote_addr","t":"$msec","r":"$request_method $uri$is_args$args","h":"$host","ua":"$http_user_agent","p":"$server_port"}'"#,
        &Spec::default(),
    )
    .unwrap();
    let r = parse_owned(&j, br#"{"ip":"2001:db8::1","t":"1778673600.250","r":"POST /w/api.php?action=purge","h":"en.wikipedia.org","ua":"a\"b\u0001","p":"443"}"#).unwrap();
    assert_eq!(r.ip.to_string(), "2001:db8::1");
    assert_eq!(
        (s(&r.method), s(&r.target)),
        ("POST".into(), "/w/api.php?action=purge".into())
    );
    assert_eq!(r.header("user-agent").as_deref(), Some("a\"b\u{1}"));
    assert_eq!((s(&r.host), r.port), ("en.wikipedia.org".into(), Some(443)));
    assert_eq!(r.time_ns, 1_778_673_600_250_000_000);
}

#[test]
fn webrequest_json() {
    let f = by_name("webrequest", &Spec::default()).unwrap();
    let line = br#"{"hostname":"cp3050","sequence":1,"dt":"2026-05-13T12:00:00.125Z","time_firstbyte":0.01,"ip":"198.51.100.4","http_status":"200","http_method":"GET","uri_host":"query.wikidata.org","uri_path":"/sparql","uri_query":"?query=SELECT%20%3Fx","user_agent":"curl/8.0 \"q\"","accept_language":"en","referer":"-","x_analytics":"https=1;nocookies=1","tags":["a","b"],"nested":{"k":"}"}}"#;
    let r = parse_owned(&f, line).unwrap();
    assert_eq!(s(&r.target), "/sparql?query=SELECT%20%3Fx");
    assert_eq!(s(&r.host), "query.wikidata.org");
    assert_eq!(r.header("user-agent").as_deref(), Some("curl/8.0 \"q\""));
    assert_eq!(r.header("referer"), None);
    assert_eq!(
        r.header("x-analytics").as_deref(),
        Some("https=1;nocookies=1")
    );
    assert_eq!(r.time_ns, 1_778_673_600_125_000_000);
    let empty_query = br#"{"dt":"2026-05-13T12:00:00Z","ip":"198.51.100.4","http_method":"GET","uri_host":"h","uri_path":"/a","uri_query":""}"#;
    assert_eq!(s(&parse_owned(&f, empty_query).unwrap().target), "/a");
    for bad in [
        &b"{"[..],
        b"{\"dt\":\"x\"}",
        b"[]",
        b"{\"ip\":\"1.2.3.4\"}",
        b"{\"dt\":\"2026-05-13T12:00:00Z\",\"ip\":\"1.2.3.4\"",
        b"\xff\xfe",
    ] {
        assert!(parse_owned(&f, bad).is_err(), "{}", s(bad));
    }
}

#[test]
fn varnishncsa_default_and_custom() {
    let f = by_name("varnishncsa", &Spec::default()).unwrap();
    let line = br#"192.0.2.9 - - [13/May/2026:12:00:01 +0000] "GET http://query.wikidata.org/sparql?query=x HTTP/1.1" 200 5 "-" "curl/8.0""#;
    let r = parse_owned(&f, line).unwrap();
    assert_eq!(s(&r.host), "query.wikidata.org");
    assert_eq!(s(&r.target), "/sparql?query=x");
    assert!(f.known.host);
    assert_eq!(
        detect(&[line], &Spec::default()).unwrap().name,
        "varnishncsa"
    );
    let c = by_name(
        r#"varnishncsa:%h %{msec}t %m "%U%q" "%{Host}i" "%{X-Client-IP}i""#,
        &Spec::default(),
    )
    .unwrap();
    let r = parse_owned(
        &c,
        br#"192.0.2.9 1778673600123 GET "/a?b=1" "h.org" "203.0.113.1""#,
    )
    .unwrap();
    assert_eq!(
        (s(&r.target), s(&r.host)),
        ("/a?b=1".into(), "h.org".into())
    );
    assert_eq!(r.time_ns, 1_778_673_600_123_000_000);
    let mut c2 = c.clone();
    c2.set_client_ip_field("X-Client-IP", vec![]).unwrap();
    let r = parse_owned(
        &c2,
        br#"192.0.2.9 1778673600123 GET "/a?b=1" "h.org" "203.0.113.1""#,
    )
    .unwrap();
    assert_eq!(r.ip.to_string(), "203.0.113.1");
    assert!(c2
        .clone()
        .set_client_ip_field("X-Forwarded-For", vec![])
        .is_err());
}
