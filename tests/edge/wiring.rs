//! The proxies wired as an edge host runs them: behind a TLS terminator
//! that names the client in a header (`emit --client-ip-header`), and
//! with a configuration that tells the agent what it covers, so that a
//! ruleset needing a header the proxy does not send, or a status it has
//! no line for, shows as stale in `rctl status` and the metrics.

use super::emit::get;
use super::stack::{compile, Front, Stack};
use crate::util::{rctl, tempdir};
use std::time::{Duration, Instant};

const RULES: &str = r#"
ipblock edge/bad { 203.0.113.5/32 }
rule bad_client { when ipblock@edge/bad deny 451 "go away" }
"#;

/// What `rctl status --format json` says of the agent.
fn agent_status(s: &Stack) -> serde_json::Value {
    let o = rctl(&[
        "status",
        "--format",
        "json",
        "--agent",
        s.agent.control.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["agent"]["status"].clone()
}

/// What `rctl status` says of the proxies the agent heard from.
fn proxies(s: &Stack) -> serde_json::Value {
    agent_status(s)["proxies"].clone()
}

fn client_header_and_coverage(front: Front) {
    if !super::stack::available() {
        return;
    }
    let dir = tempdir(&format!("wiring-{front:?}"));
    let src = dir.join("r.rctl");
    std::fs::write(&src, RULES).unwrap();
    let art = compile(&dir, "r", &[src]);
    let s = Stack::start(front, &art, &[], &["--client-ip-header", "X-Forwarded-For"]);
    let xff = |v: &str| get(s.front, "/", &[("X-Forwarded-For", v)]);
    // The last address is the one the proxy in front added.
    assert_eq!(xff("198.51.100.1, 203.0.113.5"), 451, "{}", s.logs());
    assert_eq!(
        xff("203.0.113.5, 198.51.100.1"),
        200,
        "a client's own entry is not trusted"
    );
    assert_eq!(
        xff("not an address"),
        200,
        "unreadable: the connection's peer"
    );
    assert_eq!(get(s.front, "/", &[]), 200);
    // HAProxy says what it covers on about one request in 256.
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxies(&s).as_array().is_none_or(|a| a.is_empty()) {
        assert!(
            Instant::now() < deadline,
            "the agent never heard what the proxy covers"
        );
        for _ in 0..64 {
            get(s.front, "/", &[]);
        }
    }
    let p = proxies(&s);
    assert_eq!(p[0]["stale"], serde_json::json!([]), "{p}");
    // A ruleset that reads a header the proxy does not send (HAProxy
    // sends only what the first one read) and denies with a new status.
    let newer = dir.join("newer.rctl");
    std::fs::write(
        &newer,
        format!("{RULES}rule keyed {{ when header(\"x-api-key\") == \"leaked\" deny 418 }}\n"),
    )
    .unwrap();
    let newer = compile(&dir, "newer", &[newer]);
    let generation = |s: &Stack| agent_status(s)["generation"].clone();
    let before = generation(&s);
    // Refused: nothing changes, and the operator is told why and how on.
    let o = rctl(&[
        "apply",
        newer.to_str().unwrap(),
        "--agent",
        s.agent.control.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not applied") && err.contains("status 418"),
        "{err}"
    );
    assert!(err.contains("--allow-stale-proxy"), "{err}");
    assert_eq!(generation(&s), before);
    assert_eq!(xff("198.51.100.1, 203.0.113.5"), 451);
    let o = rctl(&[
        "apply",
        newer.to_str().unwrap(),
        "--agent",
        s.agent.control.to_str().unwrap(),
        "--allow-stale-proxy",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let p = proxies(&s);
    let stale: Vec<String> = p[0]["stale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    let name = if front == Front::Haproxy {
        "haproxy"
    } else {
        "nginx"
    };
    let mut want = vec![format!(
        "the {name} configuration has no line for status 418, which rule keyed answers with (it answers 403 or 429 instead)"
    )];
    if front == Front::Haproxy {
        want.insert(
            0,
            "the haproxy configuration does not send header(\"x-api-key\"), which rule keyed reads"
                .to_string(),
        );
    }
    assert_eq!(stale, want, "{p}");
    assert!(err.contains("418"), "apply says what is stale: {err}");
}

#[test]
fn haproxy_takes_the_client_from_the_trusted_header_and_says_what_it_covers() {
    client_header_and_coverage(Front::Haproxy);
}

#[test]
fn nginx_takes_the_client_from_the_trusted_header_and_says_what_it_covers() {
    client_header_and_coverage(Front::Nginx);
}
