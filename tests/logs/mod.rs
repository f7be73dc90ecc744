//! Dry runs on logs, on logs the real programs wrote: one traffic seen
//! three ways (a capture, HAProxy's log, nginx's log) must be judged
//! alike; every format's parser against the server's own output; rules
//! reading what a log lacks are not judged; bad lines are reported with
//! their positions in bounded memory.

use crate::util::{rctl, root, tempdir};
mod follow;
mod formats;
mod inputs;
mod order;
mod parquet;
mod test_blocks;

use rctl_testkit::lab;
use rctl_testkit::proc::{free_port, settled, Proc};
use rctl_testkit::servers::{self, haproxy::Haproxy, nginx::Nginx, varnish::Varnish};
use rctl_testkit::skip::{require, skip_unless};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const UPDATER: &str = "208.80.154.230";
const SCRAPER: &str = "45.83.64.7";
const READER: &str = "93.184.216.34";

fn swarm() -> Vec<String> {
    (1..=10).map(|i| format!("185.220.101.{i}")).collect()
}

/// nginx's format with every variable the dry run reads.
const NGINX_FULL: &str = r#"'$remote_addr $server_addr $server_port [$time_local] $msec $time_iso8601 "$request" "$request_method" "$request_uri" "$uri$is_args$args" $status "$host" "$http_host" "$http_user_agent" "$http_referer" "$http_cache_control" "$http_pragma" "$http_x_client_ip"'"#;

/// The same in JSON.
const NGINX_JSON: &str = r#"escape=json '{"ip":"$remote_addr","port":"$server_port","t":"$msec","m":"$request_method","u":"$request_uri","h":"$host","ua":"$http_user_agent","ref":"$http_referer","cc":"$http_cache_control","pragma":"$http_pragma"}'"#;

fn dry_run(rules: &Path, args: &[&str]) -> (Value, String) {
    let mut a = vec!["dry-run", rules.to_str().unwrap(), "--format", "json"];
    a.extend_from_slice(args);
    let o = rctl(&a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "rctl {a:?}: {e}\n{err}\n{}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    (v, err)
}

/// Runs `cmd` with pipes on stdin, stdout and stderr; `feed` writes its
/// stdin on a thread of its own (closed when `feed` returns).
fn piped(
    mut cmd: Command,
    feed: impl FnOnce(&mut std::process::ChildStdin) + Send + 'static,
) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || feed(&mut stdin));
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    o
}

/// The report of the rule named `name`.
fn rule<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap()
}

/// The requests a throttle limited for one key, from its report.
fn limited(rule: &Value, key: &str) -> u64 {
    rule["throttle"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == key)
        .unwrap_or_else(|| panic!("no key {key} in {rule}"))["limited"]
        .as_u64()
        .unwrap()
}

/// Per rule: (matches, allow, deny, throttle, drop, log).
fn per_rule(v: &Value) -> Vec<(String, [u64; 6])> {
    v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let q = &r["requests"];
            let n = |k: &str| q[k].as_u64().unwrap();
            (
                r["name"].as_str().unwrap().to_string(),
                [
                    r["matches"].as_u64().unwrap(),
                    n("allow"),
                    n("deny"),
                    n("throttle"),
                    n("drop"),
                    n("log"),
                ],
            )
        })
        .collect()
}

fn start_tcpdump(dir: &Path, port: u16) -> Proc {
    let mut cmd = Command::new("tcpdump");
    // A 32 MiB kernel buffer: with the machine busy running other tests,
    // the default one dropped a packet of a request now and then.
    cmd.args([
        "-i",
        "lo",
        "-U",
        "--immediate-mode",
        "-B",
        "32768",
        "-s",
        "0",
        "-w",
    ])
    .arg(dir.join("cap.pcap"))
    .args(["tcp", "port", &port.to_string()]);
    let mut p = Proc::spawn("tcpdump", dir, cmd);
    p.wait_ready("listening", Duration::from_secs(10), |p| {
        p.stderr().contains("listening on")
    });
    p
}

/// Real clients shaped like the WDQS incident (tests/edge/client.py):
/// the updater POSTing, a generic-client swarm on one /24, a scraper
/// with a browser User-Agent, a reader; and a re-render loop.
fn plan(target: SocketAddr) -> Value {
    serde_json::json!({
        "target": format!("http://{target}"),
        "duration": 4,
        "groups": [
            {"name": "updater", "sources": [UPDATER], "method": "POST", "path": "/sparql",
             "headers": {"User-Agent": "wmf-streaming-updater-consumer/0.3.140 (query-service)",
                         "Host": "query.wikidata.org"},
             "body": "INSERT DATA { }", "rate": 10},
            {"name": "swarm", "sources": swarm(), "path": "/sparql?query=SELECT%20%3Fitem",
             "headers": {"Host": "query.wikidata.org"}, "rate": 25, "threads": 5},
            {"name": "scraper", "sources": [SCRAPER], "path": "/sparql?query=SELECT%201",
             "headers": {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Scraper/1.0",
                         "Host": "query.wikidata.org", "Referer": "https://example.org/\"x\""},
             "rate": 15, "threads": 2},
            {"name": "reader", "sources": [READER], "paths": ["/wiki/Main_Page", "/sparql?query=ASK%7B%7D"],
             "headers": {"User-Agent": "WDQS-reader/1.0 (ops@example.org)", "Host": "query.wikidata.org"},
             "rate": 3},
            {"name": "rerender", "sources": ["208.80.154.21"], "path": "/api/rest_v1/page/html/%EA%9D%AE",
             "headers": {"Host": "fr.wikipedia.org", "Cache-Control": "no-cache",
                         "User-Agent": "ChangePropagation/WMF"}, "rate": 8},
        ]
    })
}

fn client(dir: &Path, plan: &Value) -> Value {
    let path = dir.join("plan.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let o = Command::new("python3")
        .arg(root().join("tests/edge/client.py"))
        .arg("load")
        .arg(&path)
        .output()
        .expect("run client.py");
    assert!(
        o.status.success(),
        "client.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// How many keys each shipped rule the clients reach throttles.
fn keys(rule: &str) -> u64 {
    match rule {
        "wdqs_generic_clients" | "restbase_rerender_loop" => 1,
        "wdqs_sparql_per_ip" => 1 + swarm().len() as u64,
        _ => 0,
    }
}

/// `got` against `want` per rule: the same matches and the same
/// verdicts but throttles, and those within `bound(rule, keys)`.
fn within(
    got: &[(String, [u64; 6])],
    want: &[(String, [u64; 6])],
    bound: impl Fn(&str, u64) -> u64,
    what: &str,
) {
    assert_eq!(got.len(), want.len(), "{what}");
    for ((name, c), (_, w)) in got.iter().zip(want) {
        let b = bound(name, keys(name));
        let d = c[3].abs_diff(w[3]);
        assert_eq!(c[0], w[0], "{what}: {name}: matches do not depend on time");
        assert_eq!(
            (c[1], c[2], c[4], c[5]),
            (w[1], w[2], w[4], w[5]),
            "{what}: {name}"
        );
        assert!(
            d <= b,
            "{what}: {name}: throttles {} against {} (bound {b})",
            c[3],
            w[3]
        );
    }
}

/// The largest difference a 1 s resolution can make to one throttle's
/// verdicts: ⌈rate × 1 s⌉ + 1 per key it throttles (see the logs manual).
fn bound(rule: &str, keys: u64) -> u64 {
    let per_s: f64 = match rule {
        // 30 and 60 requests per minute; 10 per minute.
        "wdqs_generic_clients" => 0.5,
        "wdqs_sparql_per_ip" => 1.0,
        "restbase_rerender_loop" => 10.0 / 60.0,
        _ => 0.0,
    };
    (per_s.ceil() as u64 + 1) * keys
}

/// What `read` returns once it holds `n` lines containing `mark` (waiting
/// 10 s at most; the caller's counts then say what is missing).
fn with_requests(n: u64, mark: &str, read: impl Fn() -> String) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = read();
        let lines = text.lines().filter(|l| l.contains(mark)).count() as u64;
        if lines >= n || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_traffic_three_inputs_are_judged_alike() {
    if !lab::available()
        || !require("haproxy")
        || !require("nginx")
        || !skip_unless(
            Path::new("/usr/bin/tcpdump").exists(),
            "tcpdump (apt-get install tcpdump)",
        )
    {
        return;
    }
    let _turn = crate::edge::stack::serial();
    let dir = tempdir("logs-three");
    let mut addrs = swarm();
    addrs.extend([UPDATER, SCRAPER, READER, "208.80.154.21"].map(String::from));
    let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let _ns = lab::Inside::private(&refs);
    let (hp, np) = (free_port(), free_port());
    let front: SocketAddr = format!("127.0.0.1:{hp}").parse().unwrap();
    let origin: SocketAddr = format!("127.0.0.1:{np}").parse().unwrap();
    let d = dir.display();
    let http = format!(
        "    log_format full {NGINX_FULL};\n    log_format full_json {NGINX_JSON};\n    server {{\n        listen {origin};\n        set_real_ip_from 127.0.0.1;\n        real_ip_header X-Forwarded-For;\n        access_log {d}/combined.log combined;\n        access_log {d}/full.log full;\n        access_log {d}/json.log full_json;\n        location / {{ return 200 \"ok\\n\"; }}\n    }}"
    );
    std::fs::create_dir_all(dir.join("nginx")).unwrap();
    let ndir = dir.join("nginx");
    let nginx = Nginx::start(&ndir, &servers::nginx::conf(&ndir, 1, &http), &[origin]);
    let hdir = dir.join("haproxy");
    std::fs::create_dir_all(&hdir).unwrap();
    let cfg = format!(
        "{}frontend edge\n    bind {front}\n    capture request header User-Agent len 200\n    capture request header Host len 100\n    capture request header Referer len 200\n    capture request header Cache-Control len 50\n    capture request header Pragma len 50\n    option forwardfor\n    default_backend origin\n\nbackend origin\n    server o {origin}\n",
        servers::haproxy::base(&hdir),
    );
    let haproxy = Haproxy::start(&hdir, &cfg, &[], &[front]);
    let mut tcpdump = start_tcpdump(&dir, hp);
    let got = client(&dir, &plan(front));
    // Packets reach the file as they come (--immediate-mode: no kernel
    // block held back at stop); stopped once the file has stopped growing.
    let pcap = dir.join("cap.pcap");
    settled(|| std::fs::metadata(&pcap).map_or(0, |m| m.len()).to_string());
    tcpdump.stop();
    let sent: u64 = got
        .as_object()
        .unwrap()
        .values()
        .map(|g| g["sent"].as_u64().unwrap())
        .sum();
    assert!(sent > 150, "{got}");
    // A server writes a request's line after its response: each log is
    // read once it holds every request sent (the proxies stopped after;
    // nginx's logs hold nothing but requests).
    let hlog = with_requests(sent, " HTTP/1.", || haproxy.log());
    std::fs::write(dir.join("haproxy.log"), &hlog).unwrap();
    for log in ["combined.log", "full.log", "json.log"] {
        with_requests(sent, "", || {
            std::fs::read_to_string(dir.join(log)).unwrap_or_default()
        });
    }
    drop(haproxy);
    drop(nginx);

    let rules = root().join("rules");
    let (cap, _) = dry_run(&rules, &["--pcap", dir.join("cap.pcap").to_str().unwrap()]);
    let hcfg = hdir.join("haproxy.cfg");
    let p = |n: &str| dir.join(n).display().to_string();
    let (hap, herr) = dry_run(
        &rules,
        &[
            "--log",
            &p("haproxy.log"),
            "--haproxy-config",
            hcfg.to_str().unwrap(),
            "--haproxy-frontend",
            "edge",
        ],
    );
    let (full, _) = dry_run(
        &rules,
        &[
            "--log",
            &p("full.log"),
            "--log-format",
            &format!("nginx:{NGINX_FULL}"),
        ],
    );
    let (json, _) = dry_run(
        &rules,
        &[
            "--log",
            &p("json.log"),
            "--log-format",
            &format!("nginx:{NGINX_JSON}"),
        ],
    );
    let (comb, _) = dry_run(&rules, &["--log", &p("combined.log")]);
    for (name, v) in [
        ("capture", &cap),
        ("haproxy", &hap),
        ("nginx full", &full),
        ("nginx json", &json),
        ("nginx combined", &comb),
    ] {
        assert_eq!(
            v["totals"]["captured_requests"].as_u64(),
            Some(sent),
            "{name}: every request\n{herr}\n{v}"
        );
    }
    // Every log line judged.
    assert_eq!(hap["inputs"][0]["log"]["bad_lines"], 0, "{hap}");
    assert_eq!(hap["inputs"][0]["log"]["format"], "haproxy-httplog");
    // Millisecond formats: the same matches and verdicts as the capture.
    let want = per_rule(&cap);
    assert_eq!(per_rule(&hap), want, "haproxy %tr against the capture");
    // nginx's $msec is when it writes the line (the response's end,
    // behind HAProxy), not when the request came: a few ms late, by a
    // different amount each time, so a throttle can be one request off
    // per key at a refill (see the logs manual); everything else equal.
    for (name, v) in [("nginx $msec json", &json), ("nginx $msec", &full)] {
        within(&per_rule(v), &want, |_, keys| keys, name);
    }
    // The incident's shape holds: the updater all allowed, the swarm and
    // the scraper throttled.
    let by = |v: &Value, n: &str| {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by(&cap, "wdqs_updater_exempt")["requests"]["allow"],
        got["updater"]["sent"]
    );
    assert!(
        by(&cap, "wdqs_sparql_per_ip")["requests"]["throttle"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        by(&cap, "restbase_rerender_loop")["requests"]["throttle"]
            .as_u64()
            .unwrap()
            > 0
    );
    // nginx combined: 1 s timestamps, no Host and no Cache-Control: the
    // re-render rule is not judged there; its requests are unknown,
    // never passes; the WDQS rules within the derived bound.
    let rr = by(&comb, "restbase_rerender_loop");
    assert_eq!(rr["matches"], 0);
    assert_eq!(rr["unknown"], got["rerender"]["sent"], "{rr}");
    assert_eq!(comb["totals"]["unknown_requests"], got["rerender"]["sent"]);
    assert!(rr["missing_fields"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "host"));
    let comb: Vec<_> = per_rule(&comb)
        .into_iter()
        .filter(|(n, _)| n != "restbase_rerender_loop")
        .collect();
    let want: Vec<_> = want
        .into_iter()
        .filter(|(n, _)| n != "restbase_rerender_loop")
        .collect();
    within(&comb, &want, bound, "nginx combined (1 s)");
    let text = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        &p("combined.log"),
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("limiters ran on 1 s timestamps"), "{text}");
    assert!(
        text.contains("restbase_rerender_loop: reads header(\"cache-control\")"),
        "{text}"
    );
}

#[test]
fn nginx_and_varnishncsa_formats_against_their_own_output() {
    if !require("nginx") || !servers::varnish::require() {
        return;
    }
    let dir = tempdir("logs-formats");
    let port = free_port();
    let origin: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let d = dir.display();
    // nginx.org's packages' `main`, as their nginx.conf writes it.
    let main = rctl_logs::nginx::MAIN;
    let http = format!(
        "    log_format full {NGINX_FULL};\n    log_format full_json {NGINX_JSON};\n    log_format main '{main}';\n    server {{\n        listen {origin};\n        access_log {d}/full.log full;\n        access_log {d}/json.log full_json;\n        access_log {d}/combined.log combined;\n        access_log {d}/main.log main;\n        location / {{ return 200 \"ok\\n\"; }}\n    }}"
    );
    let nginx = Nginx::start(&dir, &servers::nginx::conf(&dir, 1, &http), &[origin]);
    // Varnish in front, its own log by varnishncsa: default and -F.
    let vport = free_port();
    let vcl = dir.join("v.vcl");
    std::fs::write(&vcl, format!("vcl 4.1;\nbackend o {{ .host = \"127.0.0.1\"; .port = \"{port}\"; }}\nsub vcl_recv {{ return (pass); }}\n")).unwrap();
    let listen: SocketAddr = format!("127.0.0.1:{vport}").parse().unwrap();
    let varnish = Varnish::start(&dir, &vcl, listen);
    let vf = r#"%h %{msec}t %m "%U%q" "%{Host}i" "%{User-Agent}i" "%{Referer}i""#;
    let mut ncsa = Vec::new();
    for (name, f) in [("ncsa.log", None), ("ncsa-f.log", Some(vf))] {
        let mut c = Command::new("varnishncsa");
        c.arg("-n")
            .arg(dir.join("varnish"))
            .arg("-w")
            .arg(dir.join(name));
        if let Some(f) = f {
            c.arg("-F").arg(f);
        }
        ncsa.push(Proc::spawn(name, &dir, c));
    }
    std::thread::sleep(Duration::from_secs(2));
    let uas = ["plain/1.0", "quote\"back\\slash", "tab\té", "-"];
    let targets = ["/a", "/w/api.php?action=purge&x=%22y%22", "/%EA%9D%AE?q=1"];
    let mut sent = Vec::new();
    for (i, ua) in uas.iter().enumerate() {
        let t = targets[i % targets.len()];
        for p in [port, vport] {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
            use std::io::{Read as _, Write as _};
            write!(s, "GET {t} HTTP/1.1\r\nHost: Example.ORG\r\nUser-Agent: {ua}\r\nReferer: http://r/{i}\r\nConnection: close\r\n\r\n").unwrap();
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
        }
        sent.push((t, *ua));
    }
    std::thread::sleep(Duration::from_secs(3));
    let spec = rctl_logs::detect::Spec::default();
    let check = |file: &str, fmt: &str, host_case: bool| {
        let text = settled(|| std::fs::read_to_string(dir.join(file)).unwrap_or_default());
        let f = rctl_logs::detect::by_name(fmt, &spec).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // nginx sees each request twice: sent to it, and through Varnish.
        let copies = if file.starts_with("ncsa") { 1 } else { 2 };
        assert_eq!(lines.len(), sent.len() * copies, "{file}:\n{text}");
        let sent: Vec<_> = sent
            .iter()
            .flat_map(|s| std::iter::repeat_n(s, copies))
            .collect();
        for (l, (t, ua)) in lines.iter().zip(sent) {
            let r = rctl_logs::record::parse_owned(&f, l.as_bytes())
                .unwrap_or_else(|e| panic!("{file}: {e:?}: {l}"));
            assert_eq!(String::from_utf8_lossy(&r.target), *t, "{file}: {l}");
            assert_eq!(r.ip.to_string(), "127.0.0.1");
            let want = if *ua == "-" {
                None
            } else {
                Some(ua.to_string())
            };
            assert_eq!(r.header("user-agent"), want, "{file}: {l}");
            if host_case && f.known.host {
                assert!(
                    String::from_utf8_lossy(&r.host).eq_ignore_ascii_case("example.org"),
                    "{file}: {l}"
                );
            }
            assert!(r.time_ns > 1_700_000_000_000_000_000);
        }
    };
    check("full.log", &format!("nginx:{NGINX_FULL}"), true);
    check("json.log", &format!("nginx:{NGINX_JSON}"), true);
    check("combined.log", "nginx-combined", false);
    check("main.log", "nginx-main", false);
    // `main` is `combined` with one more quoted field: combined must not
    // take it (its User-Agent would swallow that field).
    let main_text = std::fs::read_to_string(dir.join("main.log")).unwrap();
    let combined = rctl_logs::detect::by_name("nginx-combined", &spec).unwrap();
    for l in main_text.lines() {
        assert!(
            rctl_logs::record::parse_owned(&combined, l.as_bytes()).is_err(),
            "combined took a main line: {l}"
        );
    }
    check("ncsa.log", "varnishncsa", true);
    check("ncsa-f.log", &format!("varnishncsa:{vf}"), true);
    // Detection names the predefined ones, and the same logs with CRLF
    // line ends are detected and judged alike.
    for (file, name) in [
        ("combined.log", "nginx-combined"),
        ("main.log", "nginx-main"),
        ("ncsa.log", "varnishncsa"),
    ] {
        let lf = dir.join(file);
        let crlf = dir.join(format!("{file}.crlf"));
        let text = std::fs::read_to_string(&lf).unwrap();
        std::fs::write(&crlf, text.replace('\n', "\r\n")).unwrap();
        let (v, err) = dry_run(&root().join("rules"), &["--log", lf.to_str().unwrap()]);
        assert_eq!(v["inputs"][0]["log"]["format"], name, "{err}");
        let (w, err) = dry_run(&root().join("rules"), &["--log", crlf.to_str().unwrap()]);
        assert_eq!(w["inputs"][0]["log"]["format"], name, "CRLF: {err}");
        assert_eq!(
            w["inputs"][0]["log"]["judged"], v["inputs"][0]["log"]["judged"],
            "{err}"
        );
        assert_eq!(per_rule(&w), per_rule(&v), "CRLF: {err}");
    }
    drop(ncsa);
    drop(varnish);
    drop(nginx);
}

#[test]
fn a_rule_reading_an_unlogged_header_is_not_judged() {
    let dir = tempdir("logs-unknown");
    std::fs::write(
        dir.join("r.rctl"),
        "rule by_ref {\n  priority 1\n  when header(\"x-debug\") present\n  deny 403 \"no\"\n}\nrule ua_deny {\n  priority 2\n  when header(\"user-agent\") starts_with \"evil\"\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    let mut log = String::new();
    for i in 0..50 {
        let ua = if i % 5 == 0 { "evil/1" } else { "good/1" };
        log.push_str(&format!("192.0.2.{} - - [13/May/2026:12:00:{:02} +0000] \"GET /p{i} HTTP/1.1\" 200 1 \"-\" \"{ua}\"\n", i % 7, i % 60));
    }
    std::fs::write(dir.join("a.log"), &log).unwrap();
    let (v, _) = dry_run(
        &dir.join("r.rctl"),
        &["--log", dir.join("a.log").to_str().unwrap()],
    );
    // header("x-debug") is not in nginx's combined format: every request
    // is unknown from the first rule on; none passes, none is denied.
    assert_eq!(v["totals"]["unknown_requests"], 50, "{v}");
    assert_eq!(v["rules"][0]["unknown"], 50);
    assert_eq!(v["rules"][0]["missing_fields"][0], "header(\"x-debug\")");
    assert_eq!(v["unmatched"]["requests"], 0);
    assert_eq!(v["rules"][1]["matches"], 0);
    // With the rules the other way round, the User-Agent rule decides
    // first where it can: only the others are unknown.
    std::fs::write(
        dir.join("s.rctl"),
        "rule ua_deny {\n  priority 1\n  when header(\"user-agent\") starts_with \"evil\"\n  deny 403 \"no\"\n}\nrule by_ref {\n  priority 2\n  when header(\"x-debug\") present\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    let (v, _) = dry_run(
        &dir.join("s.rctl"),
        &["--log", dir.join("a.log").to_str().unwrap()],
    );
    assert_eq!(v["rules"][0]["requests"]["deny"], 10, "{v}");
    assert_eq!(v["totals"]["unknown_requests"], 40);
    assert_eq!(v["unmatched"]["requests"], 0);
}

#[test]
fn bad_lines_have_positions_and_a_1gb_line_takes_no_gigabyte() {
    use std::io::Write as _;
    let dir = tempdir("logs-bad");
    let good =
        "192.0.2.1 - - [13/May/2026:12:00:00 +0000] \"GET /a HTTP/1.1\" 200 1 \"-\" \"ua\"\n";
    // A small file: good, binary, truncated, good.
    let mut f = Vec::new();
    f.extend_from_slice(good.as_bytes());
    let binary = b"\x00\xff\xfe binary \x1b[31m\n";
    f.extend_from_slice(binary);
    f.extend_from_slice(&good.as_bytes()[..40]);
    f.push(b'\n');
    f.extend_from_slice(good.as_bytes());
    std::fs::write(dir.join("bad.log"), &f).unwrap();
    let rules = root().join("rules");
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        dir.join("bad.log").to_str().unwrap(),
        "--log-format",
        "nginx-combined",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &v["inputs"][0]["log"];
    assert_eq!(
        (
            l["lines"].as_u64(),
            l["judged"].as_u64(),
            l["bad_lines"].as_u64()
        ),
        (Some(4), Some(2), Some(2)),
        "{l}"
    );
    assert_eq!(l["bad"][0]["line"], 2);
    assert_eq!(l["bad"][0]["excerpt"], "\\x00\\xff\\xfe binary \\x1b[31m");
    assert_eq!(l["bad"][1]["line"], 3);
    assert_eq!(l["bad"][1]["offset"], (good.len() + binary.len()) as u64);
    // --max-bad-lines: the run fails past it, the report is still there.
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        dir.join("bad.log").to_str().unwrap(),
        "--log-format",
        "nginx-combined",
        "--max-bad-lines",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 of 4 lines judged, 2 bad"), "{text}");
    // A run over logs alone tells no capture's packets, flows or stream
    // memory.
    assert!(
        text.contains("dry run: 1 log input(s), 2 HTTP requests"),
        "{text}"
    );
    for capture_only in ["packets (", "TCP flows", "not decoded:", "stream data held"] {
        assert!(!text.contains(capture_only), "{capture_only}: {text}");
    }
    // A 1 GiB line between good ones, through stdin, gzip-free: peak RSS
    // stays far below it.
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_rctl"))
        .args([
            "dry-run",
            rules.to_str().unwrap(),
            "--log",
            "-",
            "--log-format",
            "nginx-combined",
            "--format",
            "json",
        ]);
    let o = piped(cmd, move |stdin| {
        stdin.write_all(good.as_bytes()).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..1024 {
            stdin.write_all(&chunk).unwrap();
        }
        stdin.write_all(b"\n").unwrap();
        stdin.write_all(good.as_bytes()).unwrap();
    });
    let err = String::from_utf8_lossy(&o.stderr);
    let rss_kb: u64 = err.lines().last().unwrap().trim().parse().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &v["inputs"][0]["log"];
    assert_eq!(
        (l["lines"].as_u64(), l["judged"].as_u64()),
        (Some(3), Some(2)),
        "{l}"
    );
    assert_eq!(l["bad"][0]["line"], 2);
    assert_eq!(l["bad"][0]["offset"], good.len() as u64);
    assert!(l["bad"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("1073741824 bytes long"));
    assert!(rss_kb < 150_000, "peak RSS {rss_kb} kB for a 1 GiB line");
}
