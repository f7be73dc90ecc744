//! rctl's nginx module in Debian's nginx, on loopback: every emitted
//! configuration passes `nginx -t` with the module loaded; one key's
//! limit holds across two workers; `nginx -s reload` and a new artifact
//! renamed over the watched file under load fail no request and keep
//! bans; hostile requests are answered and no worker crashes. Outcomes
//! are counted from nginx's own access log and from what clients got.

use super::stack::serial;
use super::{emit_nginx, nginx_http, rctl_ok};
use crate::util::tempdir;
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::skip::require;
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The module, if it is built and nginx is installed (never skipped
/// under CI).
fn module() -> Option<PathBuf> {
    if !require(nginx::BIN) {
        return None;
    }
    nginx::module()
}

/// Compiles `src` (one rule file's text) into `DIR/NAME.rctlc`.
fn compile_text(dir: &Path, name: &str, src: &str) -> PathBuf {
    let rules = dir.join(format!("{name}.rctl"));
    std::fs::write(&rules, src).unwrap();
    let out = dir.join(format!("{name}.rctlc"));
    rctl_ok(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    out
}

/// One request on a new connection: the status, or `None` when the
/// connection closed without an answer (a drop).
fn request(addr: SocketAddr, head: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(head).ok()?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let line = std::str::from_utf8(buf.split(|&b| b == b'\r').next()?).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

fn get(addr: SocketAddr, path: &str) -> Option<u16> {
    request(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: t.example\r\nUser-Agent: test/1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
}

/// A server on `addr` (one listening socket per worker: connections
/// spread over both) with rctl on, logging `$pid $status $rctl_action
/// $rctl_rule $rctl_generation $rctl_check $request_uri` to
/// `access.log`, serving files from `DIR/www`.
fn server(dir: &Path, artifact: &Path, addr: SocketAddr) -> String {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    for f in ["index.html", "t", "ban", "new", "x"] {
        std::fs::write(dir.join("www").join(f), "ok\n").unwrap();
    }
    format!(
        "    rctl_artifact {a};
    rctl_watch 200ms;
    log_format t '$pid $status $rctl_action $rctl_rule $rctl_generation $rctl_check $request_uri';
    server {{
        listen {addr} reuseport;
        access_log {d}/access.log t;
        rctl on;
        location / {{ root {d}/www; }}
        location = /rctl-status {{ rctl off; rctl_status; }}
    }}
",
        a = artifact.display()
    )
}

/// The access log's lines, split in words.
fn log(n: &Nginx) -> Vec<Vec<String>> {
    n.log("access.log")
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .filter(|w: &Vec<String>| w.len() == 7 && w[6] != "/rctl-status")
        .collect()
}

fn status_page(addr: SocketAddr) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /rctl-status HTTP/1.0\r\n\r\n").unwrap();
    let mut b = String::new();
    s.read_to_string(&mut b).unwrap();
    let body = b.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {b}"))
}

#[test]
fn every_ruleset_emits_a_module_configuration_nginx_accepts() {
    let Some(module) = module() else {
        return;
    };
    let dir = tempdir("module-check");
    for (i, rules) in super::emit::rulesets_to_check().iter().enumerate() {
        let d = dir.join(i.to_string());
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        let art = d.join("active.rctlc");
        rctl_ok(&[
            "compile",
            rules.to_str().unwrap(),
            "-o",
            art.to_str().unwrap(),
        ]);
        let (a, m) = (art.display().to_string(), module.display().to_string());
        let e = emit_nginx(
            rules,
            &d,
            &[
                "--module",
                "--artifact",
                &a,
                "--module-path",
                &m,
                "--client-ip-header",
                "X-Forwarded-For",
            ],
        );
        let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let conf = format!(
            "include {}/rctl-load-module.conf;\n{}",
            e.display(),
            nginx::conf(&d, 2, &nginx_http(&d, &e, addr(1), addr(2)))
        );
        std::fs::write(d.join("check.conf"), conf).unwrap();
        match nginx::check(&d, "check.conf") {
            Ok(out) if !out.contains("[warn]") && !out.contains("[emerg]") => {}
            Ok(out) | Err(out) => panic!(
                "nginx -t refuses the module configuration for {}:\n{out}",
                rules.display()
            ),
        }
    }
    // A corrupt artifact is refused by nginx -t, naming it.
    let d = dir.join("corrupt");
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    std::fs::write(d.join("bad.rctlc"), b"not an artifact").unwrap();
    let conf = nginx::conf_with_module(
        &module,
        &d,
        1,
        &format!(
            "    rctl_artifact {}/bad.rctlc;\n    server {{ listen 127.0.0.1:1; rctl on; }}\n",
            d.display()
        ),
    );
    std::fs::write(d.join("bad.conf"), conf).unwrap();
    let err = nginx::check(&d, "bad.conf").unwrap_err();
    assert!(
        err.contains("bad.rctlc: not a valid rctl artifact"),
        "{err}"
    );
}

const ONE_KEY: &str = r#"
rule per_ip {
  when path == "/t"
  throttle 20 requests per 1h burst 20 by ip reason "slow down"
}
"#;

#[test]
fn one_keys_limit_holds_across_two_workers() {
    let Some(module) = module() else {
        return;
    };
    let _turn = serial();
    let dir = tempdir("module-workers");
    let art = compile_text(&dir, "one", ONE_KEY);
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = nginx::conf_with_module(&module, &dir, 2, &server(&dir, &art, addr));
    let n = Nginx::start(&dir, &conf, &[addr]);
    let got: Vec<Option<u16>> = (0..300).map(|_| get(addr, "/t")).collect();
    let lines = log(&n);
    assert_eq!(lines.len(), 300, "{}", n.proc.logs());
    // nginx's own log: which worker took each, and what it answered.
    let mut by_worker: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for w in &lines {
        let e = by_worker.entry(w[0].as_str()).or_default();
        match (w[1].as_str(), w[2].as_str()) {
            ("200", "pass") => e.0 += 1,
            ("429", "throttle") => e.1 += 1,
            other => panic!("unexpected {other:?}: {w:?}"),
        }
    }
    assert_eq!(
        by_worker.len(),
        2,
        "both workers took requests: {by_worker:?}"
    );
    for (pid, (_, seen)) in &by_worker {
        let total = by_worker[pid].0 + seen;
        assert!(total >= 50, "worker {pid} took {total}: {by_worker:?}");
    }
    let served: u32 = by_worker.values().map(|v| v.0).sum();
    assert_eq!(
        served, 20,
        "one bucket of 20 for the key, not one per worker: {by_worker:?}"
    );
    assert_eq!(got.iter().filter(|s| **s == Some(200)).count(), 20);
    assert_eq!(got.iter().filter(|s| **s == Some(429)).count(), 280);
    let st = status_page(addr);
    assert_eq!(st["requests"]["throttle"], 280, "{st}");
    assert_eq!(st["workers"].as_array().unwrap().len(), 2, "{st}");
}

const GEN1: &str = r#"
rule banned {
  when path == "/ban"
  throttle 1 requests per 1h burst 1 by ip ban 1h reason "banned"
}
"#;

const GEN2: &str = r#"
rule banned {
  when path == "/ban"
  throttle 1 requests per 1h burst 1 by ip ban 1h reason "banned"
}
rule new_rule {
  when path == "/new"
  deny 403 "new"
}
"#;

/// Load on `addr` from `threads` clients until `stop`: (sent, statuses
/// other than 200).
fn load(
    addr: SocketAddr,
    threads: usize,
    until: Instant,
) -> Vec<std::thread::JoinHandle<(u32, Vec<Option<u16>>)>> {
    (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut sent, mut bad) = (0, Vec::new());
                while Instant::now() < until {
                    sent += 1;
                    let s = get(addr, "/x");
                    if s != Some(200) {
                        bad.push(s);
                    }
                }
                (sent, bad)
            })
        })
        .collect()
}

#[test]
fn reloads_and_a_new_artifact_under_load_fail_no_request_and_keep_bans() {
    let Some(module) = module() else {
        return;
    };
    let _turn = serial();
    let dir = tempdir("module-reload");
    let one = compile_text(&dir, "one", GEN1);
    let two = compile_text(&dir, "two", GEN2);
    let active = dir.join("active.rctlc");
    std::fs::copy(&one, &active).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = nginx::conf_with_module(&module, &dir, 2, &server(&dir, &active, addr));
    let mut n = Nginx::start(&dir, &conf, &[addr]);
    assert_eq!(get(addr, "/ban"), Some(200));
    assert_eq!(get(addr, "/ban"), Some(429), "banned in generation 1");
    assert_eq!(get(addr, "/new"), Some(200));
    let clients = load(addr, 3, Instant::now() + Duration::from_secs(8));
    // Two reloads of nginx, then a new artifact renamed over the file,
    // then one more reload.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1200));
        n.proc.signal("HUP");
    }
    std::thread::sleep(Duration::from_millis(1200));
    // rctl apply installs it (one rename) and waits until every worker
    // runs it, as the status page says.
    let url = format!("http://{addr}/rctl-status");
    let (out, _) = rctl_ok(&[
        "apply",
        two.to_str().unwrap(),
        "--nginx-artifact",
        active.to_str().unwrap(),
        "--nginx-status",
        &url,
    ]);
    assert!(out.contains("all 2 workers run it"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    n.proc.signal("HUP");
    let mut sent = 0;
    for c in clients {
        let (s, bad) = c.join().unwrap();
        sent += s;
        assert!(
            bad.is_empty(),
            "failed requests under reload: {bad:?}\n{}",
            n.proc.logs()
        );
    }
    assert!(sent > 100, "{sent} requests");
    std::thread::sleep(Duration::from_millis(800));
    assert!(n.proc.running(), "{}", n.proc.logs());
    // The ban of generation 1 holds; generation 2's rule answers.
    assert_eq!(get(addr, "/ban"), Some(429), "{}", n.log("error.log"));
    assert_eq!(get(addr, "/new"), Some(403));
    // Every worker runs the new artifact, one generation for it.
    let st = status_page(addr);
    let shas: Vec<&str> = st["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["artifact_sha256"].as_str().unwrap())
        .collect();
    assert!(shas.len() >= 2, "{st}");
    assert_eq!(
        shas.iter().collect::<std::collections::BTreeSet<_>>().len(),
        1,
        "{st}"
    );
    // Every request was decided by one generation: 1 (the first
    // artifact, through two reloads) or 2 (the new one); the last ones
    // by 2.
    let gens: Vec<String> = log(&n).iter().map(|w| w[4].clone()).collect();
    assert!(gens.iter().all(|g| g == "1" || g == "2"), "{gens:?}");
    assert!(gens.iter().rev().take(2).all(|g| g == "2"), "{gens:?}");
    let errors = n.log("error.log");
    assert!(!errors.contains("exited on signal"), "{errors}");
    // rctl status shows the module: both workers on generation 2, all
    // well (exit 0); the check line says so.
    let (code, text, err) = status(&dir, &url, &[]);
    let text = format!("{text}{err}");
    assert!(
        text.contains(&format!(
            "nginx module at {url}: 2 workers, generation 2, artifact"
        )),
        "{text}"
    );
    assert!(text.contains("throttle 2"), "{text}");
    let (check, line, _) = status(&dir, &url, &["--check"]);
    let (_, json, _) = status(&dir, &url, &["--format", "json"]);
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(v["nginx"]["serving"], true, "{json}");
    assert_eq!(
        v["nginx"]["status"]["workers"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    if !Path::new(AGENT_SOCKET).exists() {
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(check, Some(0), "{line}");
        assert!(
            line.starts_with("RCTL OK - rctl's nginx module runs artifact")
                && line.contains("in 2 workers"),
            "{line}"
        );
    }
    // nginx stopped: what the module does cannot be known (exit 3).
    drop(n);
    let (code, text, _) = status(&dir, &url, &[]);
    assert!(text.contains("NOT ANSWERING"), "{text}");
    assert_eq!(code, Some(3), "{text}");
}

/// The agent's default control socket (`rctl status` asks it when it
/// exists, which would change the outcome).
const AGENT_SOCKET: &str = "/run/rctl/agent.sock";

/// `rctl status --nginx-status URL FLAGS` with empty host directories
/// under `dir` (no packet plane): its exit code, stdout and stderr.
fn status(dir: &Path, url: &str, flags: &[&str]) -> (Option<i32>, String, String) {
    let host = dir.join("host");
    let (b, r, st) = (host.join("bpf"), host.join("run"), host.join("state"));
    for d in [&b, &r, &st] {
        std::fs::create_dir_all(d).unwrap();
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(["status", "--nginx-status", url])
        .args(flags)
        .arg("--bpffs")
        .arg(&b)
        .arg("--run-dir")
        .arg(&r)
        .arg("--state-dir")
        .arg(&st)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    (
        o.status.code(),
        out,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const BY_CLIENT: &str = r#"
rule banned_net {
  when ip in { 198.51.100.0/24 }
  deny 403 "banned"
}
"#;

#[test]
fn the_client_from_a_trusted_header_and_shadow_and_off_locations() {
    let Some(module) = module() else {
        return;
    };
    let _turn = serial();
    let dir = tempdir("module-client");
    let art = compile_text(&dir, "c", BY_CLIENT);
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let d = dir.display();
    std::fs::create_dir_all(dir.join("www/s")).unwrap();
    std::fs::create_dir_all(dir.join("www/o")).unwrap();
    for f in ["x", "s/x", "o/x"] {
        std::fs::write(dir.join("www").join(f), "ok\n").unwrap();
    }
    let http = format!(
        "    rctl_artifact {a};
    log_format t '$status $rctl_action $rctl_shadow $rctl_check $request_uri';
    server {{
        listen {addr};
        access_log {d}/access.log t;
        rctl on;
        rctl_client_ip $http_x_forwarded_for;
        location / {{ root {d}/www; }}
        location /s/ {{ rctl shadow; root {d}/www; }}
        location /o/ {{ rctl off; root {d}/www; }}
        location = /rctl-status {{ rctl off; rctl_status; }}
    }}
",
        a = art.display()
    );
    let conf = nginx::conf_with_module(&module, &dir, 2, &http);
    let n = Nginx::start(&dir, &conf, &[addr]);
    let with = |path: &str, xff: &str| {
        request(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: {xff}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
    };
    // The last address of the header is the client's (the peer is 127.0.0.1).
    assert_eq!(with("/x", "203.0.113.5, 198.51.100.7"), Some(403));
    assert_eq!(with("/x", "198.51.100.7, 203.0.113.5"), Some(200));
    assert_eq!(get(addr, "/x"), Some(200));
    // No address in it: the peer is judged, and the bad value counted.
    assert_eq!(with("/x", "unknown"), Some(200));
    // Shadow: decided, served, and said; off: not decided at all.
    assert_eq!(with("/s/x", "198.51.100.7"), Some(200));
    assert_eq!(with("/o/x", "198.51.100.7"), Some(200));
    // rctl apply checks an artifact before installing it: a corrupt one
    // leaves the workers' file as it was.
    let bad = dir.join("bad.rctlc");
    std::fs::write(&bad, b"not an artifact").unwrap();
    let before = std::fs::read(&art).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"))
        .arg("apply")
        .arg(&bad)
        .arg("--nginx-artifact")
        .arg(&art)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not installed for nginx"), "{err}");
    assert_eq!(std::fs::read(&art).unwrap(), before);
    let page = status_page(addr);
    // Counted twice: "unknown", and the request with no header at all.
    assert_eq!(page["unchecked"]["client-ip-value"], 2, "{page}");
    assert_eq!(page["requests"]["deny"], 1, "{page}");
    assert_eq!(page["shadowed"], 1, "{page}");
    let lines: Vec<String> = n
        .log("access.log")
        .lines()
        .filter(|l| !l.ends_with("/rctl-status"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            "403 deny - ok /x",
            "200 pass - ok /x",
            "200 pass - ok /x",
            "200 pass - ok /x",
            "200 pass deny ok /s/x",
            "200 - - - /o/x",
        ],
        "{}",
        n.proc.logs()
    );
}

const HEADERS: &str = r#"
rule bad_agent {
  when header("user-agent") contains "evil" or header("x-odd") ~* "^\\xff"
  deny 403 "no"
}
rule by_header {
  when path starts_with "/h"
  throttle 1000 requests per 1m by header("x-key")
}
"#;

#[test]
fn hostile_requests_are_answered_and_no_worker_crashes() {
    let Some(module) = module() else {
        return;
    };
    let _turn = serial();
    let dir = tempdir("module-hostile");
    let art = compile_text(&dir, "h", HEADERS);
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = nginx::conf_with_module(&module, &dir, 2, &server(&dir, &art, addr));
    let mut n = Nginx::start(&dir, &conf, &[addr]);
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let mut many = b"GET /h HTTP/1.1\r\nHost: t\r\n".to_vec();
    for i in 0..990 {
        many.extend_from_slice(format!("X-H{i}: {i}\r\n").as_bytes());
    }
    many.extend_from_slice(b"Connection: close\r\n\r\n");
    cases.push(("990 headers".into(), many));
    let mut huge = b"GET /h HTTP/1.1\r\nHost: t\r\nX-Key: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 8000));
    huge.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    cases.push(("an 8 KB header".into(), huge));
    let mut too_big = b"GET /h HTTP/1.1\r\nHost: t\r\nX-Key: ".to_vec();
    too_big.extend(std::iter::repeat_n(b'a', 70_000));
    too_big.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    cases.push(("a 70 KB header".into(), too_big));
    cases.push((
        "non-UTF-8 everywhere".into(),
        b"GET /h\xff\xfe?q=\xc3\x28 HTTP/1.1\r\nHost: \xff\xfe\r\nUser-Agent: \xc3\x28evil\r\nX-Odd: \xff\r\nX-Key: \x80\r\nConnection: close\r\n\r\n".to_vec(),
    ));
    cases.push((
        "no Host, HTTP/1.0".into(),
        b"GET /h HTTP/1.0\r\n\r\n".to_vec(),
    ));
    cases.push((
        "an absurd method".into(),
        b"ZZZZZZZZZZZZZZZZ /h HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec(),
    ));
    cases.push((
        "an absolute URI".into(),
        b"GET http://other.example/h?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec(),
    ));
    for round in 0..20 {
        for (what, head) in &cases {
            let st = request(addr, head);
            assert!(
                st.is_some(),
                "{what} (round {round}) got no answer\n{}",
                n.log("error.log")
            );
        }
    }
    // The non-UTF-8 User-Agent holding "evil" is denied by the rule.
    assert_eq!(request(addr, &cases[3].1), Some(403));
    assert_eq!(get(addr, "/"), Some(200));
    assert!(n.proc.running());
    let errors = n.log("error.log");
    assert!(
        !errors.contains("exited on signal"),
        "a worker crashed:\n{errors}"
    );
    let st = status_page(addr);
    assert_eq!(st["unchecked"]["panic"], 0, "{st}");
}
