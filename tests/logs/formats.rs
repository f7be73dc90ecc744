//! HAProxy's formats against what a real HAProxy writes: `option
//! httplog` without and with captured headers, and custom `log-format`s
//! with every variable the reader takes, escapes included, and flags set
//! for the variables after them (`%o`).

use rctl_logs::detect::{by_name, Spec};
use rctl_logs::haproxy::captures_in_config;
use rctl_logs::record::parse_owned;
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::haproxy::{base, Haproxy};
use rctl_testkit::skip::require;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

const CUSTOM: &str = r#""%ci %fi:%fp [%tr] %{+Q}HM %{+Q}HU %HP %HQ %ST %[capture.req.hdr(0)] %{+Q}[capture.req.hdr(1)] %Ts.%ms %{+Q,+E}[capture.req.hdr(0)] %hr %{+Q}r %T %t %[src] %[dst] %[dst_port] %[method]""#;

/// `%o` sets the flags of every variable after it: HAProxy then quotes
/// only the variables it writes as text (not `%ST` or `%Ts`), and writes
/// nothing for `%o`. A run of spaces it writes as one, and none at the
/// start of the line or after another.
const CUSTOM_O: &str = r#""  %{+Q}o %ci:%cp  [%tr] %{+Q}ST %B   %{-Q}HM %hr %[capture.req.hdr(1)] %{+Q}Ts %ft %{-Q}o %b %HV %HPO%HQ %fi:%fp""#;

/// A real HAProxy with a frontend for each of `frontends` (its name and
/// the lines after its `bind`), on a free port, answering 200 itself:
/// the server, the frontends' addresses and the configuration.
fn answering(dir: &Path, frontends: &[(&str, String)]) -> (Haproxy, Vec<SocketAddr>, String) {
    let at: Vec<SocketAddr> = frontends
        .iter()
        .map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap())
        .collect();
    let mut cfg = base(dir);
    for ((name, lines), a) in frontends.iter().zip(&at) {
        cfg += &format!("frontend {name}\n    bind {a}\n{lines}    http-request return status 200 content-type text/plain string ok\n");
    }
    (Haproxy::start(dir, &cfg, &[], &at), at, cfg)
}

fn send(to: SocketAddr, target: &str, ua: &str, referer: &str) {
    let mut s = TcpStream::connect(to).unwrap();
    // No Referer header at all when `referer` is empty.
    let referer = if referer.is_empty() {
        String::new()
    } else {
        format!("Referer: {referer}\r\n")
    };
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {ua}\r\n{referer}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
}

#[test]
fn haproxy_httplog_and_custom_log_format_against_its_own_output() {
    if !require("haproxy") {
        return;
    }
    let dir = crate::util::tempdir("logs-haproxy-formats");
    let ua_host =
        "    capture request header User-Agent len 200\n    capture request header Host len 100\n";
    let ua_referer = "    capture request header User-Agent len 200\n    capture request header Referer len 200\n";
    let (server, at, cfg) = answering(
        &dir,
        &[
            ("f1", String::new()),
            ("f2", ua_host.into()),
            ("f3", format!("    log-format {CUSTOM}\n{ua_referer}")),
            ("f4", format!("    log-format {CUSTOM_O}\n{ua_referer}")),
        ],
    );
    let sent = [
        ("/a?b=1", "plain/1.0", "http://r/1"),
        ("/p%20q?x=%22y%22", "Mo\"z|i{l}la [#x]\\", "http://r/\"q\""),
        ("/w/index.php", "tab\tua", ""),
    ];
    for to in &at {
        for (t, ua, r) in sent {
            send(*to, t, ua, r);
        }
    }
    let log = server.log();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 12, "{log}");
    let caps = captures_in_config(&cfg);
    let caps_of = |f: &str| caps.iter().find(|(n, _)| n == f).unwrap().1.clone();
    let formats = [
        by_name("haproxy-httplog", &Spec::default()).unwrap(),
        by_name(
            "haproxy-httplog",
            &Spec {
                captures: caps_of("f2"),
            },
        )
        .unwrap(),
        by_name(
            &format!("haproxy:{CUSTOM}"),
            &Spec {
                captures: caps_of("f3"),
            },
        )
        .unwrap(),
        by_name(
            &format!("haproxy:{CUSTOM_O}"),
            &Spec {
                captures: caps_of("f4"),
            },
        )
        .unwrap(),
    ];
    for (i, f) in formats.iter().enumerate() {
        let port = at[i].port().to_string();
        let mine: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| {
                l.contains(&format!(" f{} ", i + 1))
                    || l.contains(&format!(":{port} ["))
                    || l.contains(&format!(" \"f{}\" ", i + 1))
            })
            .collect();
        assert_eq!(mine.len(), 3, "f{}: {log}", i + 1);
        for (l, (t, ua, r)) in mine.iter().zip(sent) {
            let rec =
                parse_owned(f, l.as_bytes()).unwrap_or_else(|e| panic!("f{}: {e:?}: {l}", i + 1));
            assert_eq!(String::from_utf8_lossy(&rec.target), t, "{l}");
            assert_eq!(String::from_utf8_lossy(&rec.method), "GET");
            assert_eq!(rec.ip.to_string(), "127.0.0.1");
            assert!(rec.time_ns > 1_700_000_000_000_000_000);
            match i {
                0 => assert_eq!(rec.header("user-agent"), None, "not logged: {l}"),
                1 => assert_eq!(rec.header("user-agent").as_deref(), Some(ua), "{l}"),
                _ => {
                    assert_eq!(rec.header("user-agent").as_deref(), Some(ua), "{l}");
                    let want = if r.is_empty() {
                        None
                    } else {
                        Some(r.to_string())
                    };
                    assert_eq!(rec.header("referer"), want, "{l}");
                    assert_eq!(rec.port, Some(at[i].port()));
                    assert_eq!(rec.dst.unwrap().to_string(), "127.0.0.1");
                }
            }
        }
        // Millisecond time on all of them.
        assert!(f.resolution_ns <= 1_000_000, "f{}", i + 1);
    }
    for f in &formats[2..] {
        assert!(f.known.port && f.known.dst_ip && f.known.url, "{}", f.name);
    }
}

/// HAProxy's own syslog headers (RFC 3164, and RFC 5424 as HAProxyKafka
/// reads it) before `option httplog` lines: the header is skipped, the
/// line read as without it, and the format detected from such lines.
#[test]
fn haproxy_httplog_behind_its_own_syslog_headers() {
    if !require("haproxy") {
        return;
    }
    for rfc in ["rfc3164", "rfc5424"] {
        let dir = crate::util::tempdir(&format!("logs-haproxy-{rfc}"));
        let port = free_port();
        let at: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let cfg = format!(
            "{}frontend edge\n    bind {at}\n    capture request header User-Agent len 200\n    capture request header Host len 100\n    http-request return status 200 content-type text/plain string ok\n",
            base(&dir).replace("format raw", &format!("format {rfc}"))
        );
        let server = Haproxy::start(&dir, &cfg, &[], &[at]);
        let sent = [
            ("/a?b=1", "plain/1.0"),
            ("/w/index.php", "Mozilla/5.0 (X11)"),
        ];
        for (t, ua) in sent {
            send(at, t, ua, "");
        }
        let log = server.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(" edge ")).collect();
        assert_eq!(lines.len(), 2, "{log}");
        for l in &lines {
            assert!(l.starts_with('<'), "{rfc}: a syslog header: {l}");
        }
        let f = by_name(
            "haproxy-httplog",
            &Spec {
                captures: vec!["user-agent".into(), "host".into()],
            },
        )
        .unwrap();
        for (l, (t, ua)) in lines.iter().zip(sent) {
            let rec = parse_owned(&f, l.as_bytes()).unwrap_or_else(|e| panic!("{rfc}: {e:?}: {l}"));
            assert_eq!(String::from_utf8_lossy(&rec.target), t, "{l}");
            assert_eq!(rec.header("user-agent").as_deref(), Some(ua), "{l}");
            assert_eq!(rec.ip.to_string(), "127.0.0.1");
            // The time is %tr's (milliseconds), not the header's.
            assert!(rec.time_ns % 1_000_000 == 0 && rec.time_ns > 1_700_000_000_000_000_000);
        }
        // Detected from the lines themselves, every one judged.
        let file = dir.join("haproxy.log");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let o = crate::util::rctl(&[
            "dry-run",
            crate::util::root().join("rules").to_str().unwrap(),
            "--log",
            file.to_str().unwrap(),
            "--capture-request-header",
            "User-Agent,Host",
            "--format",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{rfc}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
        let log = &v["inputs"][0]["log"];
        assert_eq!(log["format"], "haproxy-httplog", "{rfc}: {log}");
        assert_eq!(
            (log["lines"].as_u64(), log["judged"].as_u64()),
            (Some(2), Some(2)),
            "{rfc}: {log}"
        );
    }
}

/// `%hr` and `%hs` quoted by `%o` (`"{…}"`) or left out whole, quotes
/// and all, by a frontend without captures; the space after an absent
/// `%hr` written only after something else than a space; a capture with
/// the E flag (`\"`, `\\` and `\]`): read as a real HAProxy writes them.
#[test]
fn haproxy_captures_quoted_or_absent_against_its_own_output() {
    if !require("haproxy") {
        return;
    }
    let dir = crate::util::tempdir("logs-haproxy-absent");
    let quoted = r#""%{+Q}o %{-Q}ci [%tr] %hr %hs %r""#;
    let after = r#""%ci [%tr] %ST|%hr %{+Q}r""#;
    let escaped = r#""%ci [%tr] %{+Q,+E}[capture.req.hdr(0)] %{+Q}r""#;
    let cap = "    capture request header User-Agent len 200\n";
    let (server, at, _) = answering(
        &dir,
        &[
            ("a", format!("    log-format {quoted}\n")),
            ("b", format!("    log-format {quoted}\n{cap}")),
            ("c", format!("    log-format {after}\n")),
            ("d", format!("    log-format {escaped}\n{cap}")),
        ],
    );
    let odd = r#"Mo"z [#x]\ ok"#;
    for (to, ua) in at.iter().zip(["ua/1", "ua/1", "ua/1", odd]) {
        send(*to, "/a?b=1", ua, "");
    }
    let log = server.log();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert!(lines[3].contains(r#""Mo\"z [#x\]\\ ok""#), "{log}");
    let spec = Spec {
        captures: vec!["user-agent".into()],
    };
    for (l, (format, ua)) in lines.iter().zip([
        (quoted, None),
        (quoted, Some("ua/1")),
        (after, None),
        (escaped, Some(odd)),
    ]) {
        let f = by_name(&format!("haproxy:{format}"), &spec).unwrap();
        let rec = parse_owned(&f, l.as_bytes()).unwrap_or_else(|e| panic!("{e:?}: {l}"));
        assert_eq!(String::from_utf8_lossy(&rec.target), "/a?b=1", "{l}");
        assert_eq!(rec.header("user-agent").as_deref(), ua, "{l}");
    }
}

/// `option httplog clf`, as a real HAProxy writes it: named
/// `haproxy-clf` or detected, its captured headers (`%hrl`, one quoted
/// value each) read when named and skipped whole when not. Its format is
/// HAProxy's own string, flags set by `%o`.
#[test]
fn haproxy_httplog_clf_against_its_own_output() {
    if !require("haproxy") {
        return;
    }
    let dir = crate::util::tempdir("logs-haproxy-clf");
    let at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // And a frontend without captures, for which HAProxy writes nothing
    // where they would be.
    let bare: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = format!(
        "{}frontend edge\n    option httplog clf\n    bind {at}\n    capture request header User-Agent len 200\n    capture request header Referer len 100\n    http-request return status 200 content-type text/plain string ok\n\
         frontend bare\n    option httplog clf\n    bind {bare}\n    http-request return status 200 content-type text/plain string ok\n",
        base(&dir)
    );
    let server = Haproxy::start(&dir, &cfg, &[], &[at, bare]);
    let sent = [
        ("/a?b=1", "plain/1.0", ""),
        (
            "/w/index.php?title=X&action=raw",
            "Mozilla/5.0 (X11; Linux) \"quoted\" #1",
            "https://en.wikipedia.org/",
        ),
        (
            "/sparql?query=SELECT",
            "sqlmap/1.7.2#stable (https://sqlmap.org)",
            "",
        ),
    ];
    for (t, ua, r) in sent {
        send(at, t, ua, r);
    }
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("\"edge\"")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    let spec = Spec {
        captures: vec!["user-agent".into(), "referer".into()],
    };
    let f = by_name("haproxy-clf", &spec).unwrap();
    for (l, (t, ua, r)) in lines.iter().zip(sent) {
        let rec = parse_owned(&f, l.as_bytes()).unwrap_or_else(|e| panic!("{e:?}: {l}"));
        assert_eq!(String::from_utf8_lossy(&rec.target), t, "{l}");
        assert_eq!(rec.header("user-agent").as_deref(), Some(ua), "{l}");
        let want = (!r.is_empty()).then_some(r);
        assert_eq!(rec.header("referer").as_deref(), want, "{l}");
        assert_eq!(rec.ip.to_string(), "127.0.0.1");
        // `%trg` has whole seconds; `%ms` is the accept date's, not added.
        assert_eq!(rec.time_ns % 1_000_000_000, 0, "{l}");
    }
    let file = dir.join("clf.log");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    // From loopback, which the shipped rules drop as a bogon: a rule of
    // its own on the User-Agent.
    let rules = dir.join("r.rctl");
    std::fs::write(
        &rules,
        "rule attack_tools {\n  when header(\"user-agent\") ~* \"sqlmap|nikto\"\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    let (rules, file) = (rules.to_str().unwrap(), file.to_str().unwrap());
    let run = |extra: &[&str]| {
        let mut a = vec!["dry-run", rules, "--log", file, "--format", "json"];
        a.extend_from_slice(extra);
        let o = crate::util::rctl(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    // Detected; with the names, the scanner's User-Agent is denied.
    let v = run(&["--capture-request-header", "User-Agent,Referer"]);
    let l = &v["inputs"][0]["log"];
    assert_eq!(l["format"], "haproxy-clf", "{l}");
    assert_eq!(
        (l["lines"].as_u64(), l["judged"].as_u64()),
        (Some(3), Some(3)),
        "{l}"
    );
    assert_eq!(
        super::rule(&v, "attack_tools")["requests"]["deny"],
        1,
        "{v}"
    );
    // Without them, every line is still read, the headers skipped and
    // counted as unnamed.
    let v = run(&[]);
    let l = &v["inputs"][0]["log"];
    assert_eq!(
        (l["format"].as_str(), l["judged"].as_u64()),
        (Some("haproxy-clf"), Some(3)),
        "{l}"
    );
    assert_eq!(l["unnamed_captures"], 3, "{l}");
    // Without captures: every line read, detected, nothing unnamed.
    for (t, ua, r) in sent {
        send(bare, t, ua, r);
    }
    let log = server.log();
    let bare_lines: Vec<&str> = log.lines().filter(|l| l.contains("\"bare\"")).collect();
    assert_eq!(bare_lines.len(), 3, "{log}");
    std::fs::write(file, bare_lines.join("\n") + "\n").unwrap();
    let v = run(&[]);
    let l = &v["inputs"][0]["log"];
    assert_eq!(
        (l["format"].as_str(), l["judged"].as_u64()),
        (Some("haproxy-clf"), Some(3)),
        "{l}"
    );
    assert!(l["unnamed_captures"].is_null(), "{l}");
}

/// HAProxy keeps `len` bytes of a captured header: a value that long may
/// be the start of a longer one. A rule the kept start decides is judged
/// (`starts_with "sqlmap"`); one it leaves open (`contains "zgrab"` on
/// `Mozilla/5.0 (X11`) makes the verdict unknown, never a pass; values
/// shorter than `len` are whole. Read from the configuration and given
/// as `NAME:LEN` alike; without the length, the cut values are taken as
/// whole, as HAProxy's own log shows them.
#[test]
fn a_capture_cut_at_its_len_is_judged_only_as_far_as_its_start_tells() {
    if !require("haproxy") {
        return;
    }
    let dir = crate::util::tempdir("logs-haproxy-cut");
    let at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = format!(
        "{}frontend edge\n    bind {at}\n    capture request header User-Agent len 16\n    http-request return status 200 content-type text/plain string ok\n",
        base(&dir)
    );
    let server = Haproxy::start(&dir, &cfg, &[], &[at]);
    let sent = [
        ("sqlmap/1.7.2#stable (https://sqlmap.org)", 5),
        ("Mozilla/5.0 (X11; Linux) zgrab/0.x", 4),
        ("curl/8.4.0", 3),
        ("Mozilla/5.0 zgrab", 2),
        ("zgrab/0.x", 2),
    ];
    for (ua, n) in sent {
        for _ in 0..n {
            send(at, "/", ua, "");
        }
    }
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" edge ")).collect();
    assert_eq!(lines.len(), 16, "{log}");
    // HAProxy's own record of the cut: 16 bytes kept of each longer value
    // (`#` written as `#23`, so the line holds more than 16).
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("{sqlmap/1.7.2#23sta}"))
            .count(),
        5,
        "{log}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("{Mozilla/5.0 (X11}"))
            .count(),
        4
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("{Mozilla/5.0 zgra}"))
            .count(),
        2
    );
    let file = dir.join("haproxy.log");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let rules = dir.join("r.rctl");
    std::fs::write(
        &rules,
        "rule sqlmap {\n  priority 1\n  when header(\"user-agent\") starts_with \"sqlmap\"\n  deny 403 \"no\"\n}\n\
         rule zgrab {\n  priority 2\n  when header(\"user-agent\") contains \"zgrab\"\n  deny 403 \"scanner\"\n}\n\
         rule curl {\n  priority 0\n  when header(\"user-agent\") ~ \"^curl/\"\n  allow\n}\n",
    )
    .unwrap();
    let cfg_file = dir.join("haproxy.cfg");
    std::fs::write(&cfg_file, &cfg).unwrap();
    let (file, rules, cfg_file) = (
        file.to_str().unwrap(),
        rules.to_str().unwrap(),
        cfg_file.to_str().unwrap(),
    );
    let run = |how: &[&str]| {
        let mut a = vec!["dry-run", rules, "--log", file, "--format", "json"];
        a.extend_from_slice(how);
        let o = crate::util::rctl(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    for how in [
        &["--haproxy-config", cfg_file][..],
        &["--capture-request-header", "User-Agent:16"][..],
    ] {
        let v = run(how);
        let r = |name| super::rule(&v, name);
        assert_eq!(r("sqlmap")["requests"]["deny"], 5, "{how:?}: {v}");
        // The two whole zgrab values; the six cut ones are unknown.
        assert_eq!(r("zgrab")["requests"]["deny"], 2, "{how:?}: {v}");
        assert_eq!(r("zgrab")["unknown"], 6, "{how:?}: {v}");
        assert_eq!(r("curl")["requests"]["allow"], 3, "{how:?}: {v}");
        assert_eq!(v["totals"]["unknown_requests"], 6, "{how:?}: {v}");
        assert_eq!(v["inputs"][0]["log"]["cut_lines"], 11, "{how:?}: {v}");
        assert!(v["inputs"][0]["log"]["unnamed_captures"].is_null(), "{v}");
    }
    // Without the names the values are not read, and both the report and
    // stderr say so and what to give.
    let o = crate::util::rctl(&["dry-run", rules, "--log", file, "--format", "json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("16 lines hold captured request headers {…} whose names were not given, so they were not read: name them with --haproxy-config"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["inputs"][0]["log"]["unnamed_captures"], 16, "{v}");
    // No User-Agent: the first rule, on it, leaves every verdict unknown.
    assert_eq!(v["totals"]["unknown_requests"], 16, "{v}");
    // Without the length, the cut values are taken as they are logged.
    let v = run(&["--capture-request-header", "User-Agent"]);
    assert_eq!(v["rules"][2]["name"], "zgrab");
    assert_eq!(v["rules"][2]["requests"]["deny"], 2, "{v}");
    assert_eq!(
        v["totals"]
            .get("unknown_requests")
            .and_then(|u| u.as_u64())
            .unwrap_or(0),
        0
    );
    let text = crate::util::rctl(&[
        "dry-run",
        rules,
        "--log",
        file,
        "--capture-request-header",
        "User-Agent:16",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("11 lines have a captured header as long as its capture's len"),
        "{text}"
    );
    assert!(
        text.contains(
            "zgrab: reads a captured header that may have been cut; 6 requests left unknown"
        ),
        "{text}"
    );
    let bad = crate::util::rctl(&[
        "dry-run",
        rules,
        "--log",
        file,
        "--capture-request-header",
        "User-Agent:x",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NAME:LEN"));
    // `rctl test` replays the same log with its capture slots named on the
    // `replay` line: the known verdicts count, and the cut values count
    // as what they may be.
    let rules_text = std::fs::read_to_string(rules).unwrap();
    let test = |captured: &str, expect: &str| {
        let t = format!(
            "{rules_text}test \"the edge's log\" {{\n  replay \"haproxy.log\" format \"haproxy-httplog\"{captured}\n  {expect}\n}}\n"
        );
        std::fs::write(rules, t).unwrap();
        let o = crate::util::rctl(&["test", rules]);
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.success(), text)
    };
    let known = "expect 5 deny by sqlmap\n  expect 3 allow by curl";
    let (ok, out) = test(" captured \"User-Agent:16\"", known);
    assert!(ok, "{out}");
    // The six cut values may be zgrab's: two denials are not proven.
    let (ok, out) = test(" captured \"User-Agent:16\"", "expect 2 deny by zgrab");
    assert!(
        !ok && out.contains("6 of them could not be judged"),
        "{out}"
    );
    // Without the slots' names the log's User-Agents are not read at all.
    let (ok, out) = test("", known);
    assert!(!ok && out.contains("could not be judged"), "{out}");
    let (ok, out) = test(" captured \"User-Agent:x\"", known);
    assert!(!ok && out.contains("positive number"), "{out}");
    // A file has one list, and only HAProxy's formats have slots.
    let (ok, out) = test(
        " captured \"User-Agent:16\"\n  replay all \"haproxy.log\" format \"haproxy-httplog\"",
        known,
    );
    assert!(!ok && out.contains("a file has one"), "{out}");
    let t = format!(
        "{rules_text}test \"t\" {{\n  replay \"haproxy.log\" format \"nginx-combined\" captured \"User-Agent:16\"\n  {known}\n}}\n"
    );
    std::fs::write(rules, t).unwrap();
    let o = crate::util::rctl(&["test", rules]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("which has none"),
        "{err}"
    );
}
