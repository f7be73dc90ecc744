//! Parity: the requests of the dry-run fixtures (real captures), replayed
//! byte for byte from their own client addresses through HAProxy to the
//! agent, get the verdicts `rctl dry-run` reports for the same ruleset
//! and captures: per rule, the same allow, deny, throttle, drop and log
//! counts. The agent's verdicts are read from HAProxy's log.

use super::rctl_ok;
use super::stack::{client_py, compile, Front, Line, Stack};
use crate::util::{root, tempdir, TempDir};
use rctl_dataplane::dryrun::requests_in;
use std::collections::BTreeMap;
use std::path::Path;

use crate::dryrun::FIXTURES;

/// (rule, verdict) -> requests, from a dry-run JSON report.
fn dry_run_counts(rules: &Path, pcap: &Path) -> (u64, BTreeMap<(String, String), u64>) {
    let (out, _) = rctl_ok(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut m = BTreeMap::new();
    for r in v["rules"].as_array().unwrap() {
        for (verdict, n) in r["requests"].as_object().unwrap() {
            let n = n.as_u64().unwrap();
            if n > 0 {
                m.insert(
                    (r["name"].as_str().unwrap().to_string(), verdict.clone()),
                    n,
                );
            }
        }
    }
    (v["totals"]["requests"].as_u64().unwrap(), m)
}

/// The same counts from the proxy's log lines.
fn agent_counts(lines: &[Line]) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for l in lines {
        if !l.rule.is_empty() && l.action != "pass" {
            *m.entry((l.rule.clone(), l.action.clone())).or_default() += 1;
        }
        for t in l.tags.split(',').filter(|t| !t.is_empty()) {
            *m.entry((t.to_string(), "log".to_string())).or_default() += 1;
        }
    }
    m
}

/// The replay spec for `client.py replay`: each request's head as it
/// was captured (request line in HTTP/1.1, headers in order), a body of
/// its Content-Length (or an empty chunked one), from its client address.
fn replay_spec(pcap: &Path, front: std::net::SocketAddr) -> serde_json::Value {
    let (reqs, err) = requests_in(std::fs::File::open(pcap).unwrap());
    assert!(err.is_none(), "{err:?}");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let requests: Vec<serde_json::Value> = reqs
        .iter()
        .map(|r| {
            let mut head = Vec::new();
            head.extend_from_slice(r.method());
            head.push(b' ');
            head.extend_from_slice(r.target());
            head.extend_from_slice(b" HTTP/1.1\r\n");
            for (n, v) in r.headers() {
                head.extend_from_slice(n);
                head.extend_from_slice(b": ");
                head.extend_from_slice(v);
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(b"\r\n");
            let chunked = r
                .header("transfer-encoding")
                .is_some_and(|v| v.eq_ignore_ascii_case(b"chunked"));
            let len: usize = r
                .header("content-length")
                .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
                .unwrap_or(0);
            let body = if chunked {
                b"0\r\n\r\n".to_vec()
            } else {
                vec![b'x'; len]
            };
            serde_json::json!({"src": r.client.0.to_string(), "head_hex": hex(&head), "body_hex": hex(&body)})
        })
        .collect();
    serde_json::json!({"target": [front.ip().to_string(), front.port()], "requests": requests})
}

fn unhex(h: &str) -> String {
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn replay(dir: &Path, spec: &serde_json::Value) -> Vec<u16> {
    let path = dir.join("replay.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    serde_json::from_slice(&client_py("replay", &path)).unwrap()
}

/// Replays every fixture capture through HAProxy and the agent and
/// compares with `rctl dry-run`; returns the verdicts seen.
fn parity(front: Front, rules: &Path, name: &str) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    let dir = tempdir(&format!("parity-{name}"));
    let art = compile(&dir, "rules", &[rules.to_path_buf()]);
    for f in FIXTURES {
        let pcap = root().join(format!("tests/fixtures/pcap/{f}.pcap"));
        let (total, want) = dry_run_counts(&art, &pcap);
        // A fresh agent per capture: its limiters start empty, as the
        // dry-run's do.
        let s = Stack::start(front, &art, &[], &["--timeout-ms", "1000"]);
        let spec = replay_spec(&pcap, s.front);
        let statuses = replay(&dir, &spec);
        assert_eq!(statuses.len() as u64, total, "{f}: requests");
        let lines: Vec<Line> = s
            .log()
            .into_iter()
            .filter(|l| l.uri != "/rctl-probe")
            .collect();
        let ctx = || format!("{f}: statuses {statuses:?}\n{}", s.logs());
        assert_eq!(lines.len() as u64, total, "{}", ctx());
        assert!(lines.iter().all(|l| !l.unchecked), "{}", ctx());
        assert_eq!(agent_counts(&lines), want, "{}", ctx());
        seen.extend(want.keys().map(|(_, verdict)| verdict.clone()));
        // And the clients got what the verdicts say: the same (client,
        // method, target, status) for each request, in any order (the
        // requests were in flight together).
        let mut by_client: Vec<(String, String, String, u16)> = spec["requests"]
            .as_array()
            .unwrap()
            .iter()
            .zip(&statuses)
            .map(|(r, st)| {
                let head = unhex(r["head_hex"].as_str().unwrap());
                let line = head.split("\r\n").next().unwrap().to_string();
                let mut w = line.split(' ');
                let (m, t) = (w.next().unwrap().to_string(), w.next().unwrap().to_string());
                (r["src"].as_str().unwrap().to_string(), m, t, *st)
            })
            .collect();
        let mut by_log: Vec<(String, String, String, u16)> = lines
            .iter()
            .map(|l| {
                let st = match l.action.as_str() {
                    "pass" | "allow" => 200,
                    "drop" => 0,
                    _ => l.status as u16,
                };
                (l.ip.clone(), l.method.clone(), l.uri.clone(), st)
            })
            .collect();
        by_client.sort();
        by_log.sort();
        assert_eq!(by_client, by_log, "{}", ctx());
    }
    seen
}

#[test]
fn agent_verdicts_equal_dry_run_on_the_fixture_captures() {
    if !super::stack::available() {
        return;
    }
    let seen = parity(
        Front::Haproxy,
        &root().join("tests/fixtures/rules"),
        "fixture",
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["allow", "log", "throttle"]
    );
}

/// The fixture rules plus a rule of every other kind, each matching some
/// of the captured traffic: deny with a status of its own, drop, shadow.
const EVERY_ACTION: &str = r#"
rule wget_denied {
  priority 5
  when header("user-agent") ~* "^wget/"
  deny 451 "no wget"
}
rule ab_dropped {
  priority 6
  when header("user-agent") starts_with "ApacheBench/"
  drop
}
rule curl_shadow {
  priority 25
  shadow
  when header("user-agent") ~* "^curl/"
  throttle 1 requests per 1m by ip
}
rule wrk_pages {
  priority 40
  when query("title") in { "Page_1", "Page_3" }
  throttle 3 requests per 1m by query("title")
}
"#;

/// The fixture rules and [`EVERY_ACTION`] in one directory (`rules`
/// in the directory returned, which holds it).
fn every_action_rules() -> (TempDir, std::path::PathBuf) {
    let dir = tempdir("parity-rules");
    let rules = dir.join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/rules/fixture.rctl"),
        rules.join("fixture.rctl"),
    )
    .unwrap();
    std::fs::write(rules.join("more.rctl"), EVERY_ACTION).unwrap();
    (dir, rules)
}

#[test]
fn agent_verdicts_equal_dry_run_for_every_action() {
    if !super::stack::available() {
        return;
    }
    let (_dir, rules) = every_action_rules();
    let seen = parity(Front::Haproxy, &rules, "every-action");
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["allow", "deny", "drop", "log", "throttle"]
    );
}

/// The same through nginx with rctl's module, two workers sharing the
/// zone: per rule the verdicts `rctl dry-run` reports, from nginx's log.
#[test]
fn module_verdicts_equal_dry_run_for_every_action() {
    if !super::stack::module_available() {
        return;
    }
    let (_dir, rules) = every_action_rules();
    let seen = parity(Front::NginxModule, &rules, "module");
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["allow", "deny", "drop", "log", "throttle"]
    );
}
