//! `rctl emit`: what it writes passes `haproxy -c` and `nginx -t` for
//! every ruleset we ship or test, is deterministic, and fails open.

use super::*;
use crate::util::{corpus_files, tempdir};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::{haproxy::Haproxy, nginx::Nginx};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// Header names HAProxy's configuration quotes differently, every
/// status a block may have, headers nginx or HAProxy never forward.
const STRESS: &str = r#"
rule odd_names {
  when header("x!#$%&'*+-.^_`|~9") present or header("a'b") == "1" or header("c$d") == "$x" or header("e#f") present
  log
}
rule untransmissible { when header("x(y)") present or header("x_under") present log }
rule keyed { when path == "/k" throttle 5 requests per 1m by header("x-key"), query("q") status 503 }
"#;

fn stress_rules(dir: &std::path::Path) -> PathBuf {
    let mut src = STRESS.to_string();
    for st in 400..=599 {
        let action = if st % 2 == 0 {
            format!("deny {st} \"status {st}\"")
        } else {
            format!("throttle 1 requests per 1s status {st} reason \"status {st}\"")
        };
        src.push_str(&format!(
            "rule s{st} {{ when path == \"/{st}\" {action} }}\n"
        ));
    }
    let p = dir.join("stress.rctl");
    std::fs::write(&p, src).unwrap();
    p
}

#[test]
fn every_ruleset_emits_configs_haproxy_and_nginx_accept() {
    if !have_proxies() {
        return;
    }
    let dir = tempdir("emit-check");
    let mut rulesets = vec![
        shipped(),
        shipped().join("wdqs.rctl"),
        shipped().join("restbase.rctl"),
        shipped().join("general.rctl"),
        root().join("tests/fixtures/rules"),
        stress_rules(&dir),
    ];
    rulesets.extend(corpus_files());
    for (i, rules) in rulesets.iter().enumerate() {
        let d = dir.join(i.to_string());
        std::fs::create_dir(&d).unwrap();
        let h = emit_haproxy(rules, &d, &["--agent", "tcp:127.0.0.1:9000"]);
        if let Err(e) = haproxy_check(&d, &h) {
            panic!(
                "haproxy -c refuses what rctl emit wrote for {}:\n{e}",
                rules.display()
            );
        }
        let n = emit_nginx(rules, &d, &[]);
        if let Err(e) = nginx_check(&d, &n) {
            panic!(
                "nginx -t refuses what rctl emit wrote for {}:\n{e}",
                rules.display()
            );
        }
    }
    // The stress ruleset: one deny rule per status in HAProxy and one
    // return in nginx, for all 200 statuses.
    let last = dir.join((rulesets.len() - 1 - corpus_files().len()).to_string());
    let fe = std::fs::read_to_string(last.join("haproxy-rctl/rctl-frontend.cfg")).unwrap();
    let server = std::fs::read_to_string(last.join("nginx-rctl/rctl-server.conf")).unwrap();
    for st in 400..=599 {
        assert!(fe.contains(&format!("deny status {st} ")), "{st}");
        assert!(server.contains(&format!("return {st} ")), "{st}");
    }
}

#[test]
fn emit_warns_about_headers_the_proxies_never_forward() {
    let dir = tempdir("emit-warn");
    let rules = stress_rules(&dir);
    let (_, err) = rctl_ok(&["emit", "haproxy-spoe", rules.to_str().unwrap()]);
    assert!(err.contains(r#"header("x(y)") is never sent"#), "{err}");
    assert!(!err.contains("x_under"), "HAProxy forwards x_under: {err}");
    let (_, err) = rctl_ok(&["emit", "nginx", rules.to_str().unwrap()]);
    for h in ["x(y)", "x_under", "a'b", "x-key"] {
        assert_eq!(
            err.contains(&format!("header({h:?}) never reaches")),
            h != "x-key",
            "{h}: {err}"
        );
    }
}

#[test]
fn emit_is_the_same_from_sources_and_from_their_artifact() {
    let dir = tempdir("emit-same");
    let art = dir.join("r.rctlc");
    rctl_ok(&[
        "compile",
        shipped().to_str().unwrap(),
        "-o",
        art.to_str().unwrap(),
    ]);
    for target in ["haproxy-spoe", "nginx"] {
        let (a, _) = rctl_ok(&["emit", target, shipped().to_str().unwrap()]);
        let (b, _) = rctl_ok(&["emit", target, art.to_str().unwrap()]);
        assert_eq!(a, b, "{target}");
        assert!(a.contains("ruleset sha256 "), "{a}");
    }
    // -o writes the same files stdout shows.
    let out = emit_haproxy(&art, &dir, &["--config-dir", "/etc/haproxy/rctl"]);
    let (shown, _) = rctl_ok(&["emit", "haproxy-spoe", art.to_str().unwrap()]);
    for name in ["spoe-rctl.conf", "rctl-backends.cfg", "rctl-frontend.cfg"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(shown.contains(&text), "{name}");
    }
}

/// One HTTP/1.1 request; the status code (0 if the connection closed
/// without an answer).
pub fn get(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn without_an_agent_haproxy_serves_everything_and_counts_it_unchecked() {
    if !have_proxies() {
        return;
    }
    let dir = tempdir("emit-noagent-haproxy");
    let emitted = emit_haproxy(
        &shipped().join("wdqs.rctl"),
        &dir,
        &["--agent", &format!("unix:{}/nobody.sock", dir.display())],
    );
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let front = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app_dir = dir.join("app");
    std::fs::create_dir(&app_dir).unwrap();
    let app_conf = nginx::conf(&app_dir, 1, &origin(&app_dir, app));
    let ngx = Nginx::start(&app_dir, &app_conf, &[app]);
    let hap = Haproxy::start(
        &dir,
        &haproxy_config(&dir, &emitted, front, app),
        &[emitted.join("rctl-backends.cfg")],
        &[front],
    );
    let t0 = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(
            get(front, "/sparql?query=x", &[("User-Agent", "curl/8")]),
            200
        );
    }
    // The agent's server is down from the first check on: no request
    // waits for the processing timeout.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let served = ngx.log("app.log").lines().count();
    assert_eq!(served, 20, "{}", ngx.log("app.log"));
    // Each request is logged with the SPOE error (2: no agent) as the
    // third captured field, and counted in the table under that code.
    let log = hap.log();
    let unchecked = log
        .lines()
        .filter(|l| l.contains(" {||2} \"GET /sparql"))
        .count();
    assert_eq!(unchecked, 20, "{log}");
    let table = hap.command("show table rctl-unchecked");
    assert!(
        table.contains("key=2 ") && table.contains("http_req_cnt=20"),
        "{table}"
    );
}

#[test]
fn without_an_agent_nginx_serves_everything_and_logs_it_unchecked() {
    if !have_proxies() {
        return;
    }
    let dir = tempdir("emit-noagent-nginx");
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let emitted = emit_nginx(
        &shipped().join("wdqs.rctl"),
        &dir,
        &["--agent", &dead.to_string()],
    );
    let front = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let ngx = Nginx::start(
        &dir,
        &nginx::conf(&dir, 1, &nginx_http(&dir, &emitted, front, app)),
        &[front, app],
    );
    for _ in 0..20 {
        assert_eq!(
            get(front, "/sparql?query=x", &[("User-Agent", "curl/8")]),
            200
        );
    }
    assert_eq!(ngx.log("app.log").lines().count(), 20);
    let front_log = ngx.log("front.log");
    let unchecked = front_log
        .lines()
        .filter(|l| l.ends_with(" check=502"))
        .count();
    assert_eq!(unchecked, 20, "{front_log}");
}

#[test]
fn odd_header_names_reach_the_agent_through_haproxy() {
    if !super::stack::available() {
        return;
    }
    use super::stack::{compile, Front, Stack};
    // Each name needs its own quoting in HAProxy's configuration: `'` is
    // a quote to its sample-argument parser, `#` starts a comment and `$`
    // a variable to its line parser.
    let names = ["x'y", "a#b", "c$d", "e!%&*+.^_`|~9"];
    let dir = tempdir("odd-headers");
    let mut src = String::new();
    for (i, n) in names.iter().enumerate() {
        src.push_str(&format!(
            "rule odd{i} {{ when header(\"{n}\") == \"v{i}\" deny {} \"odd {i}\" }}\n",
            451 + i
        ));
    }
    let rules = dir.join("odd.rctl");
    std::fs::write(&rules, src).unwrap();
    let art = compile(&dir, "odd", &[rules]);
    let s = Stack::start(Front::Haproxy, &art, &[], &["--timeout-ms", "500"]);
    for (i, n) in names.iter().enumerate() {
        let v = format!("v{i}");
        assert_eq!(
            get(s.front, "/", &[(n, &v)]),
            451 + i as u16,
            "{n}\n{}",
            s.logs()
        );
        assert_eq!(get(s.front, "/", &[(n, "other")]), 200, "{n}");
    }
    assert_eq!(get(s.front, "/", &[]), 200);
}

#[test]
fn emit_refuses_option_values_a_configuration_cannot_hold_naming_the_flag() {
    let rules = shipped().join("wdqs.rctl");
    let rules = rules.to_str().unwrap();
    // Each of these used to be written as given, and passed haproxy -c
    // or nginx -t while meaning something else: a server line with
    // `disabled`, an ACL whose end is a comment, a second upstream server.
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "haproxy-spoe",
                "--agent",
                "unix:/run/rctl/spoe.sock disabled #",
            ],
            "--agent",
        ),
        (&["haproxy-spoe", "--backend", "rctl-agent #"], "--backend"),
        (
            &["haproxy-spoe", "--config-dir", "/etc/haproxy/rctl x"],
            "--config-dir",
        ),
        (&["haproxy-spoe", "--header", "x-a b"], "--header"),
        (&["haproxy-spoe", "--timeout-ms", "0"], "--timeout-ms"),
        (
            &["nginx", "--agent", "unix:/run/rctl/http.sock;server"],
            "--agent",
        ),
        (
            &[
                "haproxy",
                "--skip-unsupported",
                "--config-dir",
                "/x),ipmask(0) -m found #",
            ],
            "--config-dir",
        ),
        (
            &[
                "haproxy",
                "--skip-unsupported",
                "--client-ip-header",
                "X-IP #",
            ],
            "--client-ip-header",
        ),
        (
            &["haproxy", "--skip-unsupported", "--site", "eqiad #"],
            "--site",
        ),
        (
            &["vcl", "--skip-unsupported", "--backend", "a\"b:80"],
            "--backend",
        ),
        (
            &["vcl", "--skip-unsupported", "--client-ip-header", "X-IP;"],
            "--client-ip-header",
        ),
    ];
    for (args, flag) in cases {
        let mut all = vec!["emit", args[0], rules];
        all.extend(&args[1..]);
        let o = crate::util::rctl(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{all:?} was accepted:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(o.stdout.is_empty(), "{all:?}: nothing is written");
        assert!(err.contains(flag), "{all:?}: the error names {flag}: {err}");
    }
}
