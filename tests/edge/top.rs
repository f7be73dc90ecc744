//! `rctl top` on a live agent: `rctl serve` behind real HAProxy, a heavy
//! client on /sparql (throttled by the rules) among readers, and `rctl
//! top --once --format json` shows the heavy client, its /24, its
//! User-Agent family and its path template first, with their verdicts.

use super::rctl_ok;
use super::stack::{Front, Stack};
use crate::suggest::FIREFOX;
use crate::util::tempdir;
use serde_json::{json, Value};

const HEAVY: &str = "185.220.101.7";
const READERS: [&str; 3] = ["93.184.216.34", "151.101.1.1", "104.16.1.1"];

/// The proxy sends the agent what the rules read: one rule reads the
/// User-Agent, so that it is sent, and counted.
const RULES: &str = r#"
rule bad_bot {
  when header("user-agent") starts_with "BadBot/"
  deny 403 "no"
}

rule sparql_per_ip {
  when path == "/sparql"
  throttle 20 requests per 1m by ip
}
"#;

/// The entry of `kind` whose key is `key` (or ends with it).
fn entry<'a>(top: &'a Value, kind: &str, key: &str) -> &'a Value {
    top["keys"][kind]
        .as_array()
        .and_then(|v| {
            v.iter()
                .find(|e| e["key"].as_str().is_some_and(|k| k.ends_with(key)))
        })
        .unwrap_or_else(|| panic!("{kind} {key}: {top:#}"))
}

#[test]
fn the_heavy_client_and_its_path_are_on_top_with_their_verdicts() {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("top-live");
    let rules = dir.join("rules.rctl");
    std::fs::write(&rules, RULES).unwrap();
    let art = dir.join("rules.rctlc");
    rctl_ok(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        art.to_str().unwrap(),
    ]);
    let mut addrs = vec![HEAVY];
    addrs.extend(READERS);
    let s = Stack::start_serving(Front::Haproxy, &art, &addrs, &[], &["--top"]);
    let got = s.load(json!({"duration": 4, "groups": [
        {"name": "readers", "sources": READERS, "threads": 3, "rate": 3,
         "paths": ["/wiki/Q42", "/wiki/Q64"],
         "headers": {"User-Agent": FIREFOX, "Accept-Language": "en"}},
        {"name": "heavy", "sources": [HEAVY], "threads": 2, "rate": 50,
         "path": "/sparql?query=SELECT%201"},
    ]}));
    let heavy = got["heavy"]["sent"].as_u64().unwrap();
    assert!(heavy > 60, "{got}");
    let control = s.agent.control.to_str().unwrap().to_string();
    let (out, err) = rctl_ok(&[
        "top", "--agent", &control, "--once", "--format", "json", "--window", "60s",
    ]);
    let top: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    // Every request the agent decided is counted (the probes besides).
    let readers = got["readers"]["sent"].as_u64().unwrap();
    assert!(
        top["requests"].as_u64().unwrap() >= heavy + readers,
        "{top:#}"
    );
    let ip = &top["keys"]["ip"][0];
    assert_eq!(ip["key"], HEAVY, "{top:#}");
    // Few keys: the counts are exact. The first 20 pass, the rest are
    // throttled but for what the bucket refills (20 a minute: at most 2
    // in the 4 s).
    assert_eq!(ip["error"], 0, "{ip}");
    assert_eq!(ip["requests"], heavy, "{ip}");
    let throttled = ip["verdicts"]["throttle"].as_u64().unwrap();
    assert!((20..=22).contains(&(heavy - throttled)), "{ip}");
    assert_eq!(ip["verdicts"]["pass"], heavy - throttled, "{ip}");
    let path = entry(&top, "path_template", "/sparql");
    assert_eq!(path["requests"], heavy, "{path}");
    assert_eq!(path["verdicts"]["throttle"], throttled, "{path}");
    assert_eq!(&top["keys"]["path_template"][0], path, "{top:#}");
    let wiki = entry(&top, "path_template", "/wiki/*");
    assert_eq!(wiki["verdicts"]["pass"], readers, "{wiki}");
    assert_eq!(
        top["keys"]["prefix"][0]["key"], "185.220.101.0/24",
        "{top:#}"
    );
    let fam = entry(&top, "ua_family", "browser:firefox");
    assert_eq!(fam["requests"], readers, "{fam}");
    // The text screen, once.
    let (text, _) = rctl_ok(&["top", "--agent", &control, "--once"]);
    assert!(text.contains(HEAVY) && text.contains("throttle"), "{text}");
}

#[test]
fn an_agent_started_without_top_says_how_to_count() {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir("edge-top-off");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    let art = dir.join("r.rctlc");
    rctl_ok(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        art.to_str().unwrap(),
    ]);
    let s = Stack::start(Front::Haproxy, &art, &[HEAVY], &[]);
    let control = s.agent.control.to_str().unwrap().to_string();
    let o = crate::util::rctl(&["top", "--agent", &control, "--once", "--format", "json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("start it with --top"), "{err}");
}
