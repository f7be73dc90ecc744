//! `rctl status` as monitoring reads it, against Debian's HAProxy with
//! the configuration `rctl emit haproxy-spoe` writes: green while the
//! agent answers; red, with the plugin's exit code, once the agent is
//! killed and HAProxy serves unchecked (HAProxy's own log is the count);
//! unknown for a user who may not ask; and the proxy's count on the
//! agent's /metrics.

use super::stack::{compile, Front, Stack};
use crate::agent::{parse_metrics, Conn};
use crate::util::tempdir;
use rctl_testkit::proc::free_port;
use std::process::Command;
use std::time::{Duration, Instant};

const RULES: &str = "rule r { when path == \"/denied\" deny }\n";

/// `rctl status --check` with `args`, as `user` (None: root): (exit
/// code, the line).
fn check(args: &[&str], user: Option<&str>) -> (i32, String) {
    let rctl = env!("CARGO_BIN_EXE_rctl");
    let mut c = match user {
        None => Command::new(rctl),
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                "--regid=nogroup",
                "--clear-groups",
                "--",
                rctl,
            ]);
            c
        }
    };
    let o = c.args(["status", "--check"]).args(args).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        out.lines().count(),
        1,
        "one line: {out:?} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), out.trim_end().to_string())
}

#[test]
fn status_goes_red_when_haproxy_serves_unchecked_and_says_so_on_metrics() {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("monitoring");
    let src = dir.join("r.rctl");
    std::fs::write(&src, RULES).unwrap();
    let art = compile(&dir, "r", &[src]);
    let mut s = Stack::start(Front::Haproxy, &art, &[], &[]);
    let stats = s.haproxy.as_ref().unwrap().stats.clone();
    let (control, stats) = (
        s.agent.control.display().to_string(),
        stats.display().to_string(),
    );
    let both = [
        "--agent",
        control.as_str(),
        "--haproxy-socket",
        stats.as_str(),
    ];
    let unchecked = |s: &Stack| s.log().iter().filter(|l| l.unchecked).count();

    // Green while every request is checked (start-up's unchecked probes,
    // if any, are older than this minute's: wait them out only then).
    let before = unchecked(&s);
    let (code, line) = check(&both, None);
    if before == 0 {
        assert_eq!(code, 0, "{line}");
        assert!(line.starts_with("RCTL OK - "), "{line}");
        assert!(line.contains("the agent runs generation 1"), "{line}");
    }
    // A user who may not use the control socket cannot tell: unknown.
    let (code, line) = check(&["--agent", control.as_str()], Some("nobody"));
    assert_eq!(code, 3, "{line}");
    assert!(line.starts_with("RCTL UNKNOWN - the agent at "), "{line}");

    // The agent is killed (its socket stays, as a crash leaves it):
    // HAProxy serves unchecked, and status is critical on both counts.
    s.agent.proc.kill();
    for _ in 0..20 {
        super::emit::get(s.front, "/denied", &[]);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while unchecked(&s) < before + 20 {
        assert!(
            Instant::now() < deadline,
            "HAProxy logged {} unchecked",
            unchecked(&s)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, line) = check(&both, None);
    assert_eq!(code, 2, "{line}");
    assert!(line.starts_with("RCTL CRITICAL - "), "{line}");
    assert!(
        line.contains(&format!("the agent at {control} is down")),
        "{line}"
    );
    assert!(
        line.contains("requests through unchecked in the last minute"),
        "{line}"
    );
    // The total HAProxy counted is what its log shows.
    let logged = unchecked(&s);
    assert!(
        line.ends_with(&format!("unchecked={logged}")),
        "{line} (log: {logged})"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(["status"])
        .args(both)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains("state: CRITICAL"));

    // An agent told where HAProxy's stats socket is shows the proxy's
    // count on /metrics, equal to HAProxy's log.
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let m = metrics.to_string();
    let other = tempdir("monitoring-metrics");
    let _watcher = crate::util::serve(
        &other,
        &art,
        ([127, 0, 0, 1], free_port()).into(),
        &["--haproxy-socket", stats.as_str(), "--metrics", m.as_str()],
    );
    let scrape = || {
        let r = Conn::open(metrics).send("GET", "/metrics", &[]).unwrap();
        parse_metrics(std::str::from_utf8(&r.body).unwrap())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        let v = scrape();
        if v.contains_key("rctl_proxy_stats_up{proxy=\"haproxy\"}") {
            break v;
        }
        assert!(Instant::now() < deadline, "no proxy stats: {v:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(got["rctl_proxy_stats_up{proxy=\"haproxy\"}"], 1.0);
    assert_eq!(got["rctl_up{plane=\"http\"}"], 1.0);
    let total: f64 = got
        .iter()
        .filter(|(k, _)| k.starts_with("rctl_proxy_unchecked_requests_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total, logged as f64, "{got:?}");
    let minute: f64 = got
        .iter()
        .filter(|(k, _)| k.starts_with("rctl_proxy_unchecked_last_minute{"))
        .map(|(_, v)| v)
        .sum();
    assert!(minute >= 20.0, "{got:?}");
}
