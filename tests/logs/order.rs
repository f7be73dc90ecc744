//! A real HAProxy writes a request's line when the request ends, with
//! `%tr`, when it came: a slow request is written after the requests that
//! came while it ran. The dry run says how many lines came late and by
//! how much; with `--reorder-window` it judges them in the order the
//! requests came, as the live agent did, and its throttle counts are the
//! ones the arrival times give, on the whole log or followed live.

use super::per_rule;
use crate::util::tempdir;
use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::haproxy::{base, Haproxy};
use rctl_testkit::skip::require;
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One token, one more every 4 s. As the requests of [`traffic`] came:
/// /slow takes the token, /fast/1 (0.5 of a token) is refused, /fast/2
/// (1.25) passes. In file order: /fast/1 passes, /fast/2 (0.75) is
/// refused, and /slow, judged last with an earlier time, is refused too.
const RULES: &str =
    "rule per_ip {\n  when path starts_with \"/\"\n  throttle 1 requests per 4s burst 1 by ip\n}\n";

/// Requests throttled by the one rule of a JSON report.
fn throttled(v: &Value) -> u64 {
    per_rule(v)[0].1[3]
}

/// A backend that answers `/slow` after `delay`, anything else at once.
fn backend(delay: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                if head.starts_with(b"GET /slow") {
                    std::thread::sleep(delay);
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    at
}

fn get(to: SocketAddr, path: &str) {
    let mut s = TcpStream::connect(to).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
}

/// `%tr` of an httplog line, in seconds of its minute.
fn tr(line: &str) -> f64 {
    let t = line.split('[').nth(1).unwrap().split(']').next().unwrap();
    let sec = t.rsplit(':').next().unwrap();
    let min: f64 = t.rsplit(':').nth(1).unwrap().parse().unwrap();
    min * 60.0 + sec.parse::<f64>().unwrap()
}

/// HAProxy (httplog, `%tr`) in front of a backend that answers `/slow`
/// after 6 s; the rules file [`RULES`] beside it.
fn start(dir: &Path) -> (Haproxy, SocketAddr, PathBuf) {
    let origin = backend(Duration::from_secs(6));
    let at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = format!(
        "{}frontend edge\n    bind {at}\n    default_backend origin\nbackend origin\n    server o {origin}\n",
        base(dir)
    );
    let server = Haproxy::start(dir, &cfg, &[], &[at]);
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    (server, at, rules)
}

/// One client: /slow at 0 s (answered, and written, at 6 s), /fast/1 at
/// 2 s and /fast/2 at 5 s.
fn traffic(at: SocketAddr) {
    let t0 = Instant::now();
    let slow = std::thread::spawn(move || get(at, "/slow"));
    for (t, path) in [(2.0, "/fast/1"), (5.0, "/fast/2")] {
        std::thread::sleep(Duration::from_secs_f64(t).saturating_sub(t0.elapsed()));
        get(at, path);
    }
    slow.join().unwrap();
}

#[test]
fn a_slow_request_written_late_is_judged_when_it_came_with_a_reorder_window() {
    if !require("haproxy") {
        return;
    }
    let dir = tempdir("logs-order");
    let (server, at, rules) = start(&dir);
    traffic(at);
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" edge ")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    // HAProxy's own record: the slow request is written last, with the
    // earliest %tr, and the arrivals are as sent (to within 0.5 s).
    assert!(lines[2].contains("GET /slow"), "{log}");
    let came: Vec<f64> = lines.iter().map(|l| tr(l) - tr(lines[2])).collect();
    for (c, want) in came.iter().zip([2.0, 5.0, 0.0]) {
        assert!((c - want).abs() < 0.5, "arrivals {came:?}: {log}");
    }
    let file = dir.join("haproxy.log");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec![
            "dry-run",
            rules.to_str().unwrap(),
            "--log",
            file.to_str().unwrap(),
            "--format",
            "json",
        ];
        a.extend_from_slice(extra);
        let o = crate::util::rctl(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let in_file_order = run(&[]);
    let l = &in_file_order["inputs"][0]["log"];
    assert_eq!(l["late_lines"], 1, "{l}");
    let late = l["max_late_ns"].as_u64().unwrap() as f64 / 1e9;
    assert!((late - 5.0).abs() < 0.5, "{l}");
    assert_eq!(throttled(&in_file_order), 2, "{in_file_order}");
    let in_time_order = run(&["--reorder-window", "10s"]);
    let l = &in_time_order["inputs"][0]["log"];
    assert!(l["late_lines"].is_null(), "{l}");
    assert_eq!(throttled(&in_time_order), 1, "{in_time_order}");
    // The text says what came late, and what judges it in time order.
    let o = crate::util::rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        file.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    let window = format!(
        "--reorder-window {}s judges them in time order",
        late.ceil()
    );
    assert!(
        text.contains(&format!(
            "1 lines came after a later one (by up to {late:.1} s)"
        )) && text.contains(&window),
        "{text}"
    );
    // The window it names is enough.
    let v = run(&["--reorder-window", &format!("{}s", late.ceil())]);
    assert_eq!(throttled(&v), 1, "{v}");
}

/// Followed live, the same: the window holds the lines that came first
/// until the slow request's line, written last, has come, and once the
/// log is quiet, lets them go after a window of wall time, before the
/// follower is stopped. A follower without the window judges in file
/// order.
#[test]
fn a_followed_log_with_a_reorder_window_judges_late_lines_in_time_order() {
    if !require("haproxy") {
        return;
    }
    let dir = tempdir("logs-order-follow");
    let (server, at, rules) = start(&dir);
    // HAProxy's traffic log, as it writes it (its stdout).
    let log = dir.join("haproxy.stdout");
    let follower = |name: &str, extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
        cmd.arg("dry-run")
            .arg(&rules)
            .arg("--log")
            .arg(&log)
            .args([
                "--log-format",
                "haproxy-httplog",
                "--follow",
                "--every",
                "1",
            ])
            .args(["--format", "json"])
            .args(extra);
        Proc::spawn(name, &dir, cmd)
    };
    let mut windowed = follower("rctl-window", &["--reorder-window", "7s"]);
    let mut plain = follower("rctl-plain", &[]);
    let so_far = |p: &Proc, n: u32| p.stderr().contains(&format!("({n} so far)"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(so_far(&windowed, 0) && so_far(&plain, 0)) {
        assert!(
            Instant::now() < deadline,
            "{}{}",
            windowed.logs(),
            plain.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = Instant::now();
    traffic(at);
    // The window: every line is judged 7 s of wall time after the last
    // came (at 5 s), with no later line to push it out.
    while !so_far(&windowed, 3) {
        assert!(
            sent.elapsed() < Duration::from_secs(25),
            "the held lines were not let go: {}\n{}",
            windowed.logs(),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        sent.elapsed() > Duration::from_secs(8),
        "judged before the window had passed: {}",
        windowed.logs()
    );
    let report = |p: &mut Proc| {
        p.signal("INT");
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.exited().is_none() {
            assert!(Instant::now() < deadline, "{}", p.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
        serde_json::from_str::<Value>(&p.stdout()).unwrap_or_else(|e| panic!("{e}: {}", p.logs()))
    };
    let (w, p) = (report(&mut windowed), report(&mut plain));
    let (wl, pl) = (&w["inputs"][0]["log"], &p["inputs"][0]["log"]);
    assert_eq!(
        (wl["judged"].as_u64(), pl["judged"].as_u64()),
        (Some(3), Some(3)),
        "{w}\n{p}"
    );
    assert!(wl["late_lines"].is_null(), "{wl}");
    assert_eq!(throttled(&w), 1, "{w}");
    assert_eq!(pl["late_lines"], 1, "{pl}");
    assert_eq!(throttled(&p), 2, "{p}");
}
