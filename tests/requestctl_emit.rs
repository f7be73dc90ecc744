//! `rctl emit requestctl` checked two ways, on the shipped rules, the
//! dry-run fixture's rules, the corpus and the imported requestctl
//! fixtures (every rule the writer accepts):
//!
//! - the round trip: the tree written, imported again with `rctl import
//!   requestctl`, compiled, and both rulesets run in-process on every
//!   test block's requests (each test on fresh engines, at its own
//!   times): the same verdict and the same shadow verdicts (but of `log`
//!   rules and shadow allows, which requestctl cannot record), request by
//!   request;
//! - requestctl itself: the tree rendered into VCL by conftool 5.3.0.1's
//!   own code (tests/requestctl_oracle.py), run in varnishd in front of
//!   nginx, and each answer compared with the engine's verdict for the
//!   same site.

use crate::native::{
    backend, conftool_source, decide, replay, requests, requests_upto, rulesets, sendable, without,
};
use crate::util::*;
use rctl_compiler::ir::{Action, Ruleset};
use rctl_compiler::spec::TestCase;
use rctl_dataplane::{Decision, Engine, EngineConfig, Request, Verdict};
use rctl_emit::requestctl::{self, Tree};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::nginx;
use rctl_testkit::servers::varnish::{self, Varnish};
use rctl_testkit::skip::require;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Writes the tree for `rs` (leaving out what requestctl cannot express)
/// into `dir`.
pub(crate) fn write_tree(dir: &Path, rs: &Ruleset) -> Tree {
    let t = requestctl::emit(
        rs,
        &requestctl::Options {
            skip_unsupported: true,
            ..Default::default()
        },
    )
    .expect("emit requestctl");
    for (name, text) in &t.files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    t
}

fn actions(t: &Tree) -> usize {
    t.files
        .iter()
        .filter(|f| f.0.starts_with("request-actions/"))
        .count()
}

/// `rctl import requestctl TREE`, its Varnish ruleset compiled.
pub(crate) fn import(tree: &Path, out: &Path) -> Ruleset {
    let o = rctl(&[
        "import",
        "requestctl",
        tree.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "import {}: {}",
        tree.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let c = rctl_compiler::compile_paths(&[out.join("varnish/cache-text")], &Default::default());
    c.ruleset
        .unwrap_or_else(|| panic!("{} compiles", out.display()))
}

/// A verdict as requestctl can tell it: pass (an allow is folded into
/// later rules), deny or throttle with the status, drop.
fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Pass | Verdict::Allow { .. } => "pass".into(),
        Verdict::Deny { status, .. } => format!("deny {status}"),
        Verdict::Throttle { status, .. } => format!("throttle {status}"),
        Verdict::Drop { .. } => "drop".into(),
    }
}

/// The verdict, then each shadow rule's would-be verdict by name, but
/// for the rules in `logs`.
fn outcome(rs: &Ruleset, d: &Decision, logs: &[String]) -> String {
    let mut shadow: Vec<String> = d
        .logged
        .iter()
        .filter_map(|(i, v)| {
            let name = &rs.rules.get(*i)?.name;
            (!logs.contains(name)).then(|| format!("{name}: {}", verdict(v)))
        })
        .collect();
    shadow.sort();
    format!("{} [{}]", verdict(&d.verdict), shadow.join(", "))
}

/// Every test's requests decided by `rs`, each test on a fresh engine at
/// its samples' times (as `rctl test` runs them, at most 200 copies of a
/// sample), with a Host header as the wire has it.
pub(crate) fn decisions(
    rs: &Ruleset,
    tests: &[TestCase],
    logs: &[String],
) -> Vec<(String, String)> {
    let to: SocketAddr = "192.0.2.80:80".parse().unwrap();
    let mut out = Vec::new();
    for t in tests {
        let cfg = EngineConfig {
            site: t.site.clone(),
            ..EngineConfig::default()
        };
        let e = Engine::new(rs.clone(), &cfg).expect("engine");
        for w in requests_upto(std::slice::from_ref(t), 200) {
            let d = decide(&e, &w, to, 1_000_000_000_000 + w.ms * 1_000_000);
            out.push((
                format!(
                    "{:?}: {} {} from {} at {} ms",
                    t.name, w.method, w.target, w.ip, w.ms
                ),
                outcome(rs, &d, logs),
            ));
        }
    }
    out
}

/// The rules whose shadow verdict requestctl has no way to record: `log`
/// rules (written as log-only actions) and shadow `allow`s (left out:
/// requestctl has no exemptions).
pub(crate) fn log_rules(rs: &Ruleset) -> Vec<String> {
    rs.rules
        .iter()
        .filter(|r| matches!(r.action, Action::Log | Action::Allow))
        .map(|r| r.name.clone())
        .collect()
}

#[test]
fn emitted_then_imported_requestctl_decides_as_the_rules() {
    let dir = tempdir("rq-roundtrip");
    let (mut rules, mut written, mut compared) = (0, 0, 0);
    let mut bad = Vec::new();
    for (i, (name, rs, tests)) in rulesets().into_iter().enumerate() {
        let tree = dir.join(format!("tree{i}"));
        let t = write_tree(&tree, &rs);
        rules += rs.rules.len();
        if actions(&t) == 0 {
            eprintln!("{name}: no rule requestctl can express");
            continue;
        }
        written += actions(&t);
        let back = import(&tree, &dir.join(format!("imported{i}")));
        let logs = log_rules(&rs);
        let want = decisions(&without(&rs, &t.skipped), &tests, &logs);
        let got = decisions(&back, &tests, &logs);
        assert_eq!(want.len(), got.len());
        for ((what, a), (_, b)) in want.iter().zip(&got) {
            compared += 1;
            if a != b {
                bad.push(format!("{name}: {what}: rctl {a}, imported {b}"));
            }
        }
    }
    eprintln!("actions written {written} of {rules} rules; requests compared {compared}");
    assert!(written > 20 && compared > 300, "{written} {compared}");
    assert!(
        bad.is_empty(),
        "{} differences:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The site to render requestctl's VCL for: the first a rule names.
fn site_of(rs: &Ruleset) -> String {
    let mut sites: Vec<&String> = rs.rules.iter().flat_map(|r| &r.sites).collect();
    sites.sort();
    sites.first().map_or("eqiad".into(), |s| s.to_string())
}

#[test]
fn emitted_requestctl_tree_decides_in_requestctls_own_vcl_as_rctl() {
    if !(varnish::require() && require(nginx::BIN)) {
        return;
    }
    let dir = tempdir("rq-live");
    let Some(conftool) = conftool_source(&dir) else {
        return;
    };
    let (_nginx, be) = backend(&dir);
    // Every tree first, then requestctl's VCL for all of them from one
    // run of conftool's code.
    let mut runs = Vec::new();
    let mut oracle = std::process::Command::new("python3");
    oracle
        .arg(root().join("tests/requestctl_oracle.py"))
        .arg(&conftool);
    for (i, (name, rs, tests)) in rulesets().into_iter().enumerate() {
        let tree = dir.join(format!("tree{i}"));
        let t = write_tree(&tree, &rs);
        let reqs: Vec<_> = requests(&tests).into_iter().filter(sendable).collect();
        if actions(&t) == 0 || reqs.is_empty() {
            continue;
        }
        let site = site_of(&rs);
        let vcl: PathBuf = dir.join(format!("requestctl{i}.vcl"));
        oracle
            .arg(&tree)
            .arg(&site)
            .arg(be.port().to_string())
            .arg(&vcl);
        runs.push((i, name, without(&rs, &t.skipped), site, vcl, reqs));
    }
    let o = oracle.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (mut compared, mut bad) = (0, Vec::new());
    for (i, name, rs, site, vcl, reqs) in &runs {
        let vdir = dir.join(format!("v{i}"));
        std::fs::create_dir_all(&vdir).unwrap();
        let front: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let varnishd = Varnish::start(&vdir, vcl, front);
        for (what, want, got) in replay(rs, Some(site), front, reqs) {
            compared += 1;
            if want != got {
                bad.push(format!(
                    "{name} at {site}: {what}: rctl {want}, requestctl's VCL {got}"
                ));
            }
        }
        drop(varnishd);
    }
    eprintln!(
        "rulesets {}; requests compared through requestctl's VCL: {compared}",
        runs.len()
    );
    assert!(compared > 200, "too few requests compared: {compared}");
    assert!(
        bad.is_empty(),
        "{} differences:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A capture's requests decided by `rs` on one engine, in order, at their
/// capture times.
pub(crate) fn capture_decisions(
    rs: &Ruleset,
    reqs: &[rctl_dataplane::capture::stream::HttpRequest],
) -> Vec<String> {
    let e = Engine::new(rs.clone(), &EngineConfig::default()).expect("engine");
    reqs.iter()
        .map(|r| {
            let hs: Vec<(&[u8], &[u8])> = r.headers().collect();
            let d = e.decide_request(&Request {
                method: r.method(),
                host: r.header("host").unwrap_or(b""),
                target: r.target(),
                headers: &hs,
                ip: r.client.0,
                dst: Some(r.server.0),
                port: r.server.1,
                time_ns: r.time_ns,
            });
            outcome(rs, &d, &[])
        })
        .collect()
}

/// The CLI: refused rules named with the reason (exit 1, nothing
/// written), `--skip-unsupported` writing the rest in requestctl's layout,
/// a bad `--cluster` named as the flag.
#[test]
fn rctl_emit_requestctl_refuses_with_reasons_or_writes_the_tree() {
    let rules = root().join("rules");
    let o = rctl(&["emit", "requestctl", rules.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("emit requestctl: drop_bogons: drop: requestctl's VCL answers every request")
            && err.contains("--skip-unsupported"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing written when refused");
    let out = tempdir("rq-cli");
    let o = rctl(&[
        "emit",
        "requestctl",
        rules.to_str().unwrap(),
        "--skip-unsupported",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("rule drop_bogons left out: drop"), "{err}");
    let action = std::fs::read_to_string(out.join("request-actions/cache-text/attack_tools.yaml"))
        .unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(
        action.contains("resp_status: 403") && action.contains("enabled: true"),
        "{action}"
    );
    let o = rctl(&[
        "emit",
        "requestctl",
        rules.to_str().unwrap(),
        "--cluster",
        "../x",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--cluster: \"../x\" is not a cluster name") && !err.contains("rule(s)"),
        "{err}"
    );
}
