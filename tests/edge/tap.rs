//! The running agent's traffic as input: `rctl serve` behind real
//! HAProxy, a python-requests swarm, browsers, a bot and one heavy
//! client through it, and three taps open at once for the same load:
//! `rctl tap` (every request once, with its fields, none lost),
//! `rctl dry-run --agent` (each rule's verdicts are the agent's own, as
//! HAProxy logged them) and `rctl suggest --agent` (the swarm is found).

use super::rctl_ok;
use super::stack::{Front, Stack};
use crate::suggest::{EXISTING, FIREFOX};
use crate::util::tempdir;
use rctl_testkit::proc::{settled, Proc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const HEAVY: &str = "185.220.101.7";
const BOT: &str = "45.33.32.156";
/// Browsers, each from its own network.
const READERS: [&str; 6] = [
    "93.184.216.40",
    "151.101.129.1",
    "199.232.1.1",
    "104.17.2.2",
    "172.65.3.3",
    "192.0.79.4",
];
const REFERER: &str = "https://www.wikidata.org/wiki/Q42";
const BOT_UA: &str = "BadBot/2.0";
const HEAVY_UA: &str = "api-crawler/1.0";

/// The rules before the incident, a bot denied by its User-Agent, a
/// per-address limit on the API that refills too slowly to matter in a
/// few seconds (its verdicts do not depend on timing), and a log rule
/// reading Accept-Language, so that HAProxy sends it (and `rctl suggest`
/// can tell browsers by it).
fn rules() -> String {
    format!(
        r#"{EXISTING}
rule bad_bot {{
  when header("user-agent") starts_with "BadBot/"
  deny 403 "no"
}}

rule with_language {{
  when header("accept-language") present
  log
}}

rule api_per_ip {{
  when path == "/w/api.php"
  throttle 30 requests per 1h by ip
}}
"#
    )
}

/// `rctl ARGS` started now (stopped if the test fails); returns once it
/// says its tap is open.
fn tapping(dir: &std::path::Path, name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    cmd.args(args);
    let mut p = Proc::spawn(name, dir, cmd);
    p.wait_ready("the tap open", Duration::from_secs(20), |p| {
        p.stderr().contains("rctl: tapping the agent at")
    });
    p
}

/// Waits for `p` to end; its stdout and stderr, asserting it succeeded.
fn finished(mut p: Proc) -> (String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = p.exited() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "{}", p.logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{}", p.logs());
    (p.stdout(), p.stderr())
}

#[test]
fn three_taps_see_every_request_and_read_as_the_agent_decided() {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("tap-live");
    let rules_path = dir.join("rules.rctl");
    std::fs::write(&rules_path, rules()).unwrap();
    let art = dir.join("rules.rctlc");
    let (r, a) = (rules_path.to_str().unwrap(), art.to_str().unwrap());
    rctl_ok(&["compile", r, "-o", a]);
    let swarm: Vec<String> = (1..=12).map(|i| format!("185.{}.101.7", 100 + i)).collect();
    let mut addrs: Vec<&str> = swarm.iter().map(String::as_str).collect();
    addrs.extend(READERS);
    addrs.extend([HEAVY, BOT]);
    let s = Stack::start(Front::Haproxy, &art, &addrs, &[]);
    let control = s.agent.control.to_str().unwrap().to_string();
    let tapped = dir.join("tap.jsonl");
    let t = tapped.to_str().unwrap();
    let secs = "7s";
    let tap = tapping(
        &dir,
        "tap",
        &["tap", "--agent", &control, "--for", secs, "-o", t],
    );
    let dry = tapping(
        &dir,
        "dry-run",
        &[
            "dry-run", r, "--agent", &control, "--for", secs, "--format", "json",
        ],
    );
    let suggested = dir.join("suggested.rctl");
    let sug = tapping(
        &dir,
        "suggest",
        &[
            "suggest",
            r,
            "--agent",
            &control,
            "--for",
            secs,
            "--trusted",
            "ipblock@wdqs/updater",
            "--budget",
            "0",
            "-o",
            suggested.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    let got = s.load(json!({"duration": 3, "groups": [
        {"name": "readers", "sources": READERS, "threads": 6, "rate": 6,
         "paths": ["/wiki/Q42", "/sparql?query=SELECT%201"],
         "headers": {"User-Agent": FIREFOX, "Accept-Language": "de-DE,de;q=0.9",
                     "Referer": REFERER}},
        {"name": "swarm", "sources": swarm, "threads": 12, "rate": 90,
         "path": "/sparql?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D"},
        {"name": "heavy", "sources": [HEAVY], "threads": 2, "rate": 30,
         "path": "/w/api.php?action=query", "headers": {"User-Agent": HEAVY_UA}},
        {"name": "bot", "sources": [BOT], "threads": 1, "rate": 5,
         "path": "/wiki/Q1", "headers": {"User-Agent": BOT_UA}},
    ]}));
    let sent: u64 = ["readers", "swarm", "heavy", "bot"]
        .iter()
        .map(|g| got[g]["sent"].as_u64().unwrap())
        .sum();
    assert!(got["heavy"]["sent"].as_u64().unwrap() > 40, "{got}");
    let spool_owners = [dry.pid(), sug.pid()];
    let (_, tap_err) = finished(tap);
    let (dry_out, dry_err) = finished(dry);
    let (sug_out, sug_err) = finished(sug);

    // What HAProxy logged the agent deciding, probes left out: the
    // independent reference.
    let text = settled(|| s.haproxy.as_ref().unwrap().log());
    assert!(!text.is_empty());
    let logged: Vec<_> = s
        .log()
        .into_iter()
        .filter(|l| l.uri != "/rctl-probe")
        .collect();
    assert_eq!(logged.len() as u64, sent, "{got}");
    assert!(logged.iter().all(|l| !l.unchecked), "{logged:?}");

    // rctl tap: every request sent, exactly once, with its fields.
    assert!(
        tap_err.contains(&format!("{sent} requests")) && tap_err.contains(" 0 lost"),
        "{tap_err}"
    );
    let lines = std::fs::read_to_string(&tapped).unwrap();
    let mut tap_reqs: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for l in lines.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let uri = format!(
            "{}{}",
            v["uri_path"].as_str().unwrap(),
            v["uri_query"].as_str().unwrap()
        );
        let ip = v["ip"].as_str().unwrap().to_string();
        assert_eq!(v["uri_host"], super::stack::EDGE, "{l}");
        assert!(v["dt"].as_str().unwrap().ends_with('Z'), "{l}");
        // The proxy sends the agent the User-Agent and Accept-Language
        // (rules read them), not the Referer (none does): the tap has no
        // such field.
        let ua = v["user_agent"].as_str().unwrap_or("");
        if READERS.contains(&ip.as_str()) {
            assert_eq!(ua, FIREFOX, "{l}");
            assert_eq!(v["accept_language"], "de-DE,de;q=0.9", "{l}");
        } else if ip == BOT {
            assert_eq!(ua, BOT_UA, "{l}");
        } else if ip == HEAVY {
            assert_eq!(ua, HEAVY_UA, "{l}");
        } else {
            assert!(ua.starts_with("python-requests/"), "{l}");
        }
        assert!(v.get("referer").is_none(), "{l}");
        let key = (ip, v["http_method"].as_str().unwrap().to_string(), uri);
        *tap_reqs.entry(key).or_default() += 1;
    }
    let mut sent_reqs: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for l in &logged {
        *sent_reqs
            .entry((l.ip.clone(), l.method.clone(), l.uri.clone()))
            .or_default() += 1;
    }
    assert_eq!(tap_reqs, sent_reqs);
    assert!(
        tap_err.contains("does not send the agent referer, x-analytics, accept, range:"),
        "{tap_err}"
    );

    // rctl dry-run --agent: each rule's verdicts are the agent's.
    assert!(dry_err.contains(" 0 lost"), "{dry_err}");
    let d: Value = serde_json::from_str(&dry_out).unwrap_or_else(|e| panic!("{e}: {dry_err}"));
    assert_eq!(d["totals"]["captured_requests"], sent, "{}", d["totals"]);
    for (rule, action) in [("bad_bot", "deny"), ("api_per_ip", "throttle")] {
        let agent = logged
            .iter()
            .filter(|l| l.rule == rule && l.action == action)
            .count() as u64;
        assert!(agent > 0, "{rule}: {logged:?}");
        let r = crate::suggest::rule_in(&d, rule);
        assert_eq!(r["requests"][action], agent, "{rule}: {r}");
        assert_eq!(r["unknown"].as_u64().unwrap_or(0), 0, "{rule}: {r}");
    }
    // The limit let through what the agent let through: its first 30 of
    // each address.
    let api_passed = logged
        .iter()
        .filter(|l| l.uri.split('?').next() == Some("/w/api.php") && l.action == "pass")
        .count() as u64;
    assert_eq!(api_passed, 30, "{logged:?}");
    let r = crate::suggest::rule_in(&d, "api_per_ip");
    assert_eq!(r["passed"], api_passed, "{r}");
    assert_eq!(
        d["totals"]["unknown_requests"].as_u64().unwrap_or(0),
        0,
        "{}",
        d["totals"]
    );

    // rctl suggest --agent: the swarm, by its User-Agent, all twelve.
    assert!(sug_err.contains(" 0 lost"), "{sug_err}");
    let v: Value = serde_json::from_str(&sug_out).unwrap_or_else(|e| panic!("{e}: {sug_err}"));
    let written: Vec<&Value> = v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["written"] == true)
        .collect();
    let swarm_rule = written
        .iter()
        .find(|w| {
            w["what"]
                .as_str()
                .unwrap_or("")
                .contains("python-requests/")
        })
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(swarm_rule["key"], "user-agent", "{swarm_rule}");
    assert_eq!(swarm_rule["effect"]["clients_limited"], 12, "{swarm_rule}");
    // The spools are gone.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("rctl-tap-"))
        .collect();
    for pid in spool_owners {
        let prefix = format!("rctl-tap-{pid}-");
        assert!(left.iter().all(|n| !n.starts_with(&prefix)), "{left:?}");
    }
}
