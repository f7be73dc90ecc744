//! The agent's life under load: killed (traffic keeps flowing, unchecked
//! and counted; checked again once it is back) and switched to a new
//! ruleset by `rctl apply` (no failed request, the new rules in force,
//! bans carried over).

use super::incidents::swarm;
use super::stack::{compile, count, Front, Stack};
use super::{rctl_ok, shipped};
use crate::util::tempdir;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const READERS: [&str; 2] = ["93.184.216.34", "151.101.1.1"];

fn readers(duration: f64, rate: u32) -> Value {
    json!({"name": "readers", "sources": READERS, "paths": ["/wiki/Main_Page", "/w/index.php?title=X"],
           "headers": {"User-Agent": "Reader/1.0 (https://example.org)"}, "rate": rate, "threads": 2,
           "duration": duration})
}

fn swarm_group(ips: &[String], rate: u32) -> Value {
    json!({"name": "swarm", "sources": ips, "path": "/sparql?query=SELECT%201", "rate": rate, "threads": 2})
}

fn all_ok(g: &Value) -> bool {
    g["status"].as_object().unwrap().keys().all(|k| k == "200")
}

fn kill_agent_under_load(front: Front) {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("kill");
    let art = compile(&dir, "shipped", &[shipped()]);
    let ips = swarm(4);
    let mut addrs: Vec<&str> = ips.iter().map(String::as_str).collect();
    addrs.extend(READERS);
    let mut s = Stack::start(front, &art, &addrs, &["--timeout-ms", "500"]);
    let plan = json!({"duration": 9, "groups": [readers(9.0, 20), swarm_group(&ips, 10)]});
    let client = s.client();
    let got = std::thread::scope(|t| {
        let load = t.spawn(|| client.load(plan));
        std::thread::sleep(Duration::from_millis(2500));
        // A crash: SIGKILL, sockets left behind.
        s.agent.proc.kill();
        let cpu0 = front_cpu(&s);
        std::thread::sleep(Duration::from_secs(3));
        let cpu = front_cpu(&s) - cpu0;
        eprintln!("{front:?}: front proxy CPU while the agent was down: {cpu:.2} s of 3 s");
        s.agent.restart();
        load.join().unwrap()
    });
    let log = s.log();
    let ctx = || format!("client: {got}\n{}", s.logs());
    // Traffic kept flowing: every reader request served, no errors.
    assert!(all_ok(&got["readers"]), "{}", ctx());
    let swarm_codes: Vec<&String> = got["swarm"]["status"].as_object().unwrap().keys().collect();
    assert!(
        swarm_codes.iter().all(|k| *k == "200" || *k == "429"),
        "{}",
        ctx()
    );
    // Unchecked while the agent was away, and counted.
    let unchecked = count(&log, |l| l.unchecked);
    assert!(unchecked >= 20, "{unchecked} unchecked\n{}", ctx());
    if let Some(h) = &s.haproxy {
        let table = h.command("show table rctl-unchecked");
        let counted: usize = table
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("http_req_cnt="))
            .map(|n| n.parse::<usize>().unwrap())
            .sum();
        assert_eq!(counted, unchecked, "{table}");
    }
    // No request waited longer than the proxy's timeout for the agent
    // (500 ms here; checked below): skipped at once where the proxy knew
    // the agent was down (SPOE error 2; nginx 502), else after the
    // timeout (SPOE error 1, nginx 504). HAProxy 2.6.12 times out every
    // request of a thread that had requests queued when the agent died:
    // see compiler/emit/README.md.
    let timeouts = count(&log, |l| l.error == "1" || l.error == "504");
    eprintln!("{front:?}: {unchecked} unchecked, {timeouts} of them after the timeout");
    // Checked before, and again after: the swarm is throttled again by
    // the new process (fresh buckets: its 10, then 429s).
    let first = log.iter().position(|l| l.unchecked).unwrap();
    let last = log.iter().rposition(|l| l.unchecked).unwrap();
    assert!(log[..first].iter().any(|l| l.status == 429), "{}", ctx());
    let after = &log[last + 1..];
    assert!(count(after, |l| !l.action.is_empty()) >= 20, "{}", ctx());
    assert!(
        count(after, |l| l.status == 429
            && l.rule == "wdqs_generic_clients")
            >= 5,
        "{}",
        ctx()
    );
    // Nobody waited much longer than the 500 ms timeout for a dead agent.
    for g in ["readers", "swarm"] {
        let slowest = got[g]["max_ms"].as_f64().unwrap();
        assert!(
            slowest < 900.0,
            "slowest {g} request {slowest} ms\n{}",
            ctx()
        );
    }
}

/// CPU seconds the front proxy (HAProxy, or nginx's master and
/// workers) has used so far.
fn front_cpu(s: &Stack) -> f64 {
    let pids: Vec<u32> = match &s.haproxy {
        Some(h) => vec![h.proc.pid()],
        None => rctl_testkit::proc::group(s.nginx.proc.pid()),
    };
    pids.iter()
        .map(|p| rctl_testkit::proc::cpu_seconds(*p))
        .sum()
}

fn apply_under_load(front: Front) {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("apply");
    let r1 = compile(&dir, "r1", &[shipped()]);
    let extra = dir.join("new.rctl");
    std::fs::write(
        &extra,
        r#"
rule new_block {
  priority 50
  when path starts_with "/new-rule"
  deny 403 "blocked by the new rule"
}
rule new_status {
  priority 51
  when path starts_with "/new-status"
  throttle 1 requests per 1h burst 1 status 503 reason "a status the proxy was not configured for"
}
"#,
    )
    .unwrap();
    let r2 = compile(&dir, "r2", &[shipped(), extra]);
    let ips = swarm(4);
    let mut addrs: Vec<&str> = ips.iter().map(String::as_str).collect();
    addrs.extend(READERS);
    let s = Stack::start(front, &r1, &addrs, &["--timeout-ms", "500"]);
    // The swarm uses its 10 and is banned for 10 minutes.
    let before = s.load(json!({"duration": 2, "groups": [swarm_group(&ips, 10)]}));
    assert_eq!(before["swarm"]["status"]["200"], 10, "{before}");
    let new_rule = super::emit::get(s.front, "/new-rule/x", &[("User-Agent", "probe/1.0 (ops)")]);
    assert_eq!(new_rule, 200, "not in force yet");
    let plan = json!({"duration": 6, "groups": [readers(6.0, 30), swarm_group(&ips, 5)]});
    let control = s.agent.control.display().to_string();
    let (got, applied) = std::thread::scope(|t| {
        let load = t.spawn(|| s.load(plan));
        std::thread::sleep(Duration::from_secs(2));
        let apply = ["apply", r2.to_str().unwrap(), "--agent", &control];
        // The configuration has no line for 503: rctl apply refuses it,
        // and changes nothing, until told to go on. nginx says what it
        // covers on every check; HAProxy on one request in 256, so the
        // agent may not know yet, and then the apply goes through.
        let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(apply)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        let applied = if o.status.success() {
            assert_eq!(
                front,
                Front::Haproxy,
                "nginx's stale configuration went through: {e}"
            );
            (String::from_utf8_lossy(&o.stdout).into_owned(), e)
        } else {
            assert_eq!(o.status.code(), Some(1), "{e}");
            assert!(e.contains("no line for status 503"), "{e}");
            rctl_ok(&[&apply[..], &["--allow-stale-proxy"]].concat())
        };
        (load.join().unwrap(), applied)
    });
    let log = s.log();
    let ctx = || format!("apply: {applied:?}\nclient: {got}\n{}", s.logs());
    // No failed request: readers all served, nothing unchecked.
    assert!(all_ok(&got["readers"]), "{}", ctx());
    assert_eq!(count(&log, |l| l.unchecked), 0, "{}", ctx());
    // The ban carried over: the swarm got no request through after its
    // first 10, before, during or after the apply.
    assert!(
        got["swarm"]["status"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| k == "429"),
        "{}",
        ctx()
    );
    let served = s.served().iter().filter(|r| ips.contains(&r.0)).count();
    assert_eq!(served, 10, "{}", ctx());
    // The new rules are in force, the one with a status the proxy's
    // configuration was written without too (blocked as 429).
    let probe = [("User-Agent", "probe/1.0 (ops)")];
    assert_eq!(
        super::emit::get(s.front, "/new-rule/x", &probe),
        403,
        "{}",
        ctx()
    );
    assert_eq!(super::emit::get(s.front, "/new-status", &probe), 200);
    assert_eq!(
        super::emit::get(s.front, "/new-status", &probe),
        429,
        "{}",
        ctx()
    );
    if front == Front::Haproxy {
        // Every request was decided by one generation or the other; the
        // last ones by the new.
        let log = s.log();
        assert!(
            log.iter()
                .all(|l| l.generation == "1" || l.generation == "2"),
            "{}",
            ctx()
        );
        assert!(count(&log, |l| l.generation == "1") > 20, "{}", ctx());
        assert!(
            log[log.len() - 3..].iter().all(|l| l.generation == "2"),
            "{}",
            ctx()
        );
    }
}

#[test]
fn agent_killed_under_load_haproxy_fails_open_then_checks_again() {
    kill_agent_under_load(Front::Haproxy);
}

#[test]
fn agent_killed_under_load_nginx_fails_open_then_checks_again() {
    kill_agent_under_load(Front::Nginx);
}

#[test]
fn apply_under_load_through_haproxy_keeps_serving_and_carries_bans() {
    apply_under_load(Front::Haproxy);
}

#[test]
fn apply_under_load_through_nginx_keeps_serving_and_carries_bans() {
    apply_under_load(Front::Nginx);
}
