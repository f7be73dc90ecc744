//! `shared` throttles in the language: parsed, lowered, formatted,
//! encoded with their own artifact tag, shown by `rctl explain`, and
//! refused where they cannot be enforced (packet and connection limits
//! live in XDP, per host).

use crate::util::{codes, compile, rctl, tempdir};
use rctl_compiler::artifact::{decode, encode};
use rctl_compiler::ir::{Action, Throttle};

const SRC: &str = r#"
rule site_wide {
  when path starts_with "/api/"
  throttle 100 requests per 1s burst 20 by path ban 1m shared
}
rule per_host {
  when path starts_with "/w/"
  throttle 100 requests per 1s by path
}
"#;

fn throttle(rs: &rctl_compiler::ir::Ruleset, name: &str) -> Throttle {
    match &rs.rules.iter().find(|r| r.name == name).unwrap().action {
        Action::Throttle(t) => t.clone(),
        a => panic!("{a:?}"),
    }
}

#[test]
fn shared_is_a_throttle_option_and_survives_the_artifact() {
    let c = compile(SRC);
    let rs = c.ruleset.expect("compiles");
    assert!(throttle(&rs, "site_wide").shared);
    assert!(!throttle(&rs, "per_host").shared);
    // Its own tag (5), so an older reader refuses it rather than count
    // per host; the rest of the throttle reads as before.
    let bytes = encode(&rs);
    let back = decode(&bytes).expect("decodes");
    assert_eq!(back, rs);
    let per_host_only = compile(&SRC.replace(" shared", "")).ruleset.unwrap();
    let old = encode(&per_host_only);
    assert_eq!(old.len(), bytes.len(), "same fields, another tag");
    assert_ne!(old, bytes);
    // The shipped v1 fixture, written before `shared`, still reads.
    let v1 = decode(&std::fs::read("tests/data/artifact-v1.rctlc").unwrap()).unwrap();
    assert!(v1
        .rules
        .iter()
        .all(|r| !matches!(&r.action, Action::Throttle(t) if t.shared)));
}

#[test]
fn shared_in_any_case_and_position_among_the_options() {
    for opts in [
        "shared by ip",
        "by ip SHARED burst 5",
        "burst 5 shared ban 1m status 503",
    ] {
        let c = compile(&format!(
            "rule r {{ when path == \"/x\" throttle 10 requests per 1s {opts} }}"
        ));
        let rs = c
            .ruleset
            .unwrap_or_else(|| panic!("{opts}: {:?}", c.diagnostics));
        assert!(throttle(&rs, "r").shared, "{opts}");
    }
}

#[test]
fn shared_packet_and_connection_limits_are_refused_where_written() {
    let src = "rule syn {\n  when proto == tcp\n  throttle 10 connections per 1s by ip shared\n}\n";
    assert_eq!(codes(src), [("E0033", 3, 40)]);
    let src = "rule p { when proto == udp throttle 10 packets per 1s shared }";
    assert_eq!(codes(src), [("E0033", 1, 55)]);
}

/// Shared limits are GCRA: a vsthrottle bucket is counted per host, so
/// asking for both is an error at the throttle, whichever comes first.
#[test]
fn a_shared_vsthrottle_bucket_is_refused_at_the_throttle() {
    let src = "rule r {\n  when true\n  throttle 5 requests per 1m bucket vsthrottle shared\n}\n";
    assert_eq!(codes(src), [("E0033", 3, 3)]);
    let src = "rule r { when true throttle 5 requests per 1m shared bucket vsthrottle }";
    assert_eq!(codes(src), [("E0033", 1, 20)]);
    let d = compile(src);
    let d = d.diagnostics.iter().next().unwrap();
    assert!(
        d.message.contains("vsthrottle bucket cannot be shared"),
        "{d:?}"
    );
    assert!(
        d.hint
            .as_deref()
            .is_some_and(|h| h.contains("drop `shared`")),
        "{d:?}"
    );
    // Each alone is fine.
    for opts in ["shared", "bucket vsthrottle", "bucket gcra shared"] {
        let src = format!("rule r {{ when true throttle 5 requests per 1m {opts} }}");
        assert_eq!(codes(&src), [], "{opts}");
    }
}

#[test]
fn fmt_keeps_shared_and_explain_says_which_limits_are_site_wide() {
    let dir = tempdir("shared-throttle");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, SRC).unwrap();
    let o = rctl(&["fmt", rules.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let formatted = std::fs::read_to_string(&rules).unwrap();
    assert!(
        formatted.contains("throttle 100 requests per 1s burst 20 by path ban 1m shared"),
        "{formatted}"
    );
    let o = rctl(&["explain", rules.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    let line = |name: &str| {
        let at = text.find(&format!(". {name}")).unwrap();
        text[at..].lines().nth(1).unwrap().to_string()
    };
    assert!(line("site_wide").contains("counted site-wide"), "{text}");
    assert!(line("per_host").contains("counted per host"), "{text}");
    let o = rctl(&["explain", rules.to_str().unwrap(), "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shared: Vec<(&str, bool)> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["shared"].as_bool().unwrap()))
        .collect();
    assert_eq!(shared, [("site_wide", true), ("per_host", false)]);
    let _ = std::fs::remove_dir_all(&dir);
}
