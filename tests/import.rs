//! `rctl import requestctl`: requestctl trees (tests/fixtures/requestctl,
//! written for these tests in the shape of conftool's own fixtures) import,
//! check, and decide as requestctl's translation does: the `test` blocks in
//! tests/fixtures/requestctl/expect were worked out by reading conftool's
//! translate.py and view.py, not by running rctl.

use crate::util::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/requestctl").join(name)
}

fn import(input: &Path, extra: &[&str]) -> (TempDir, std::process::Output) {
    let out = tempdir("import");
    let mut args = vec![
        "import",
        "requestctl",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = rctl(&args);
    (out, o)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Copies an expectation file into an imported ruleset and runs `rctl
/// test` on it.
fn passes(ruleset: &Path, expect: &str) {
    std::fs::copy(
        fixture("expect").join(expect),
        ruleset.join("zz-requestctl-expectations.rctl"),
    )
    .unwrap();
    let check = rctl(&["check", ruleset.to_str().unwrap()]);
    assert!(check.status.success(), "{}", stderr(&check));
    let t = rctl(&["test", ruleset.to_str().unwrap()]);
    let so = String::from_utf8_lossy(&t.stdout);
    assert!(t.status.success(), "{so}{}", stderr(&t));
    assert!(!so.contains("FAIL") && so.contains(" 0 failed"), "{so}");
}

#[test]
fn a_requestctl_tree_imports_checks_and_decides_as_requestctl() {
    let (out, o) = import(&fixture("tree"), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // Non-YAML files are skipped with a note, as requestctl skips them.
    assert!(
        err.contains("note: skipped") && err.contains("request-patterns/param"),
        "{err}"
    );
    assert!(err.contains("request-actions/README.txt"), "{err}");
    // The one enabled-or-logging action left on cache misses only says so.
    assert_eq!(
        err.matches("warning[W0106]: cache_miss_only").count(),
        1,
        "{err}"
    );
    assert!(err.contains("requests_ua_api.yaml:1:18"), "{err}");
    for dir in ["varnish/cache-text", "haproxy/cache-text", "objects"] {
        assert!(
            err.contains(&format!("{dir}: ")),
            "{dir} not written: {err}"
        );
    }
    let varnish = out.join("varnish/cache-text");
    let rules = std::fs::read_to_string(varnish.join("cache-text.rctl")).unwrap();
    // requestctl's order at a site: hit-global, hit-<site>, global, <site>,
    // each by name.
    let order: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.strip_prefix("rule "))
        .map(|l| l.trim_end_matches(" {"))
        .collect();
    assert_eq!(
        order,
        [
            "abusers",
            "bad_param_q",
            "enwiki_api_cloud",
            "off",
            "per_ip_requests.log",
            "per_ip_requests",
            "referer_enwiki",
            "no_ua_api",
            "requests_ua_api"
        ]
    );
    // Names, comments, sites, enabled and log_matching are kept.
    assert!(rules.contains("comment \"Known abusers, except on the docroot\""));
    assert!(rules.contains("sites { dc1, dc2 }") && rules.contains("shadow"));
    assert!(rules.contains("enabled false"));
    let fmt = rctl(&["fmt", "--check", varnish.to_str().unwrap()]);
    assert!(fmt.status.success(), "not rctl fmt style: {}", stderr(&fmt));
    passes(&varnish, "varnish-cache-text.rctl");
    passes(&out.join("haproxy/cache-text"), "haproxy-cache-text.rctl");
    dry_runs(&varnish);
}

/// The imported ruleset dry-runs on the captures: every python-requests
/// request (counted from the captures' access logs, not by rctl) matches
/// `per_ip_requests` (and its log_matching rule), and nothing else does.
fn dry_runs(ruleset: &Path) {
    let pcaps = root().join("tests/fixtures/pcap");
    let o = rctl(&[
        "dry-run",
        ruleset.to_str().unwrap(),
        "--pcap",
        pcaps.join("python-requests.pcap").to_str().unwrap(),
        "--pcap",
        pcaps.join("incidents.pcap").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (mut total, mut python) = (0, 0);
    for log in ["python-requests.access.log", "incidents.access.log"] {
        for line in std::fs::read_to_string(pcaps.join(log)).unwrap().lines() {
            total += 1;
            python += usize::from(
                line.split('|')
                    .nth(4)
                    .unwrap()
                    .starts_with("python-requests"),
            );
        }
    }
    assert_eq!(v["totals"]["requests"], total);
    let mut seen = 0;
    for r in v["rules"].as_array().unwrap() {
        let ours = r["name"].as_str().unwrap().starts_with("per_ip_requests");
        seen += usize::from(ours);
        assert_eq!(r["matches"], if ours { python } else { 0 }, "{}", r["name"]);
    }
    assert!(python > 100 && seen == 2, "{python} {seen}");
}

#[test]
fn the_old_header_schema_reads_an_empty_value_as_absent() {
    let (out, o) = import(&fixture("old-schema"), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    passes(
        &out.join("varnish/cache-upload"),
        "old-schema-varnish-cache-upload.rctl",
    );
    // Forcing the newer schema reads a missing header_is_set as false:
    // both patterns then mean "no User-Agent", and the import says so.
    let (out, o) = import(&fixture("old-schema"), &["--header-schema", "new"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("header_is_set is missing") && err.contains("curl.yaml:2:15"),
        "{err}"
    );
    let p = std::fs::read_to_string(out.join("varnish/cache-upload/pattern-ua.rctl")).unwrap();
    assert_eq!(p.matches("header(\"User-Agent\") absent").count(), 2, "{p}");
}

/// The error codes and `file:line:col` of every diagnostic of an import.
fn located(err: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = err.lines().collect();
    let mut v = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(code) = l.split(']').next().and_then(|s| s.strip_prefix("error[")) {
            let at = lines[i + 1].trim_start().trim_start_matches("--> ");
            let at = at.rsplit('/').next().unwrap_or(at);
            v.push((code.to_string(), at.to_string()));
        }
    }
    v.sort();
    v
}

#[test]
fn bad_expressions_and_dangling_references_fail_at_their_place() {
    let (out, o) = import(&fixture("bad_expr"), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let want: Vec<(String, String)> = [
        ("E0001", "lowercase.yaml:2:43"),
        ("E0001", "unclosed.yaml:2:47"),
        ("E0011", "dangling.yaml:2:48"),
        ("E0011", "dangling.yaml:2:84"),
        ("E0021", "lookahead.yaml:1:18"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(located(&err), want, "{err}");
    assert!(
        err.contains("the ipblock cloud/pinkunicorn is not defined"),
        "{err}"
    );
    assert!(
        err.contains("a negative lookahead has no rctl equivalent"),
        "{err}"
    );
    // Nothing is written.
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
}

#[test]
fn bad_cidrs_fail_or_with_lossy_are_left_out_as_requestctl_does() {
    let (_, o) = import(&fixture("bad_ip"), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let located = located(&err);
    assert_eq!(
        located,
        [
            ("E0020".to_string(), "invalid.yaml:2:5".to_string()),
            ("E0020".to_string(), "invalid.yaml:4:5".to_string()),
            ("E0020".to_string(), "invalid.yaml:7:5".to_string()),
        ],
        "{err}"
    );
    // requestctl keeps 1.1.1.1, 2.2.2.2/8 (as 2.0.0.0/8) and 2001:db8::1
    // and drops the rest: so does --lossy, saying so.
    let (out, o) = import(&fixture("bad_ip"), &["--lossy"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        err.matches("left out, as requestctl does").count(),
        3,
        "{err}"
    );
    let b = std::fs::read_to_string(out.join("objects/ipblock-cloud.rctl")).unwrap();
    for kept in ["1.1.1.1", "2.2.2.2/8", "2001:db8::1"] {
        assert!(b.contains(kept), "{b}");
    }
    assert!(!b.contains("1.1.1.1.1") && !b.contains("not an ip"), "{b}");
}

#[test]
fn what_rctl_cannot_do_fails_or_with_lossy_is_a_warning_and_a_comment() {
    let (_, o) = import(&fixture("lossy"), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        located(&err),
        [
            ("E0071".to_string(), "bad_body.yaml:2:15".to_string()),
            ("E0071".to_string(), "bad_body.yaml:2:15".to_string()),
            ("E0071".to_string(), "slow_clients.yaml:3:14".to_string()),
        ],
        "{err}"
    );
    let (out, o) = import(&fixture("lossy"), &["--lossy"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let v =
        std::fs::read_to_string(out.join("varnish/cache-text/pattern-cache-text.rctl")).unwrap();
    assert!(
        v.contains("requestctl's VCL drops it") && v.contains("method == \"POST\""),
        "{v}"
    );
    let h = std::fs::read_to_string(out.join("haproxy/cache-text/cache-text.rctl")).unwrap();
    assert!(h.contains("bw_throttle") && h.contains("  log\n"), "{h}");
}

#[test]
fn a_requestctl_dump_imports_too() {
    let (out, o) = import(&fixture("dump.yaml"), &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("note: skipped a `vcl` object (cache-text/global)"),
        "{err}"
    );
    let r = std::fs::read_to_string(out.join("varnish/cache-text/cache-text.rctl")).unwrap();
    assert!(r.contains("rule requests_abusers {"), "{r}");
    let e = rctl(&[
        "eval",
        out.join("varnish/cache-text").to_str().unwrap(),
        "--url",
        "/",
        "-H",
        "User-Agent: python-requests/2",
        "--ip",
        "203.0.113.9",
    ]);
    let so = String::from_utf8_lossy(&e.stdout);
    assert!(
        so.contains("deny 403") && so.contains("by requests_abusers"),
        "{so}"
    );
}

/// Names become directory and file names under `-o`: a dump whose paths
/// are `..` (or start with a dot) is refused with its position, and
/// nothing is written outside, or hidden inside, the output directory.
/// Failed before: `..` was a valid name (`.` is allowed inside names), and
/// an action of cluster `..` was written to `OUT/varnish/../` = `OUT/`.
#[test]
fn names_that_would_leave_or_hide_in_the_output_directory_are_refused() {
    let dir = tempdir("import-dots");
    for (i, path) in ["../x", "cache-text/..", ".hidden/x", "a/.b"]
        .iter()
        .enumerate()
    {
        let dump = dir.join(format!("dump{i}.yaml"));
        std::fs::write(
            &dump,
            format!(
                "data:\n  cidrs:\n  - 203.0.113.0/24\nmetadata:\n  path: abuse/bad\n  type: ipblock\n---\n\
                 data:\n  expression: ipblock@abuse/bad\n  resp_status: 403\n  resp_reason: No\n\
                 metadata:\n  path: {path}\n  type: action\n"
            ),
        )
        .unwrap();
        let (out, o) = import(&dump, &[]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{path}: {err}");
        assert!(
            err.contains(&format!("dump{i}.yaml:")),
            "{path}: position: {err}"
        );
        let written: Vec<_> = walk(&out);
        assert!(written.is_empty(), "{path}: wrote {written:?}");
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// Found by the importer's fuzz target (compiler/import/fuzz): each dump
/// imported "successfully" into a ruleset `rctl check` refuses. Now each
/// is refused at import, with its YAML position, and nothing is written.
#[test]
fn what_rctl_check_would_refuse_is_refused_at_import() {
    let dir = tempdir("import-fuzzed");
    let block =
        "data:\n  cidrs:\n  - 203.0.113.0/24\nmetadata:\n  path: abuse/bad\n  type: ipblock\n---\n";
    let action = |extra: &str, name: &str| {
        format!(
            "data:\n  expression: ipblock@abuse/bad\n  resp_status: 403\n{extra}\
             metadata:\n  path: cache-text/{name}\n  type: action\n"
        )
    };
    let cases = [
        // A reason with a control character (E0026 in rctl check).
        (
            action("  resp_reason: \"No\\x10\"\n", "a"),
            "control or bidi character",
        ),
        // A priority past rctl's range (E0024 in rctl check).
        (
            action("  priority: 504444444\n", "a"),
            "out of rctl's range",
        ),
        // The same object twice (E0010 in rctl check).
        (
            format!("{}---\n{}", action("", "a"), action("", "a")),
            "defined twice",
        ),
    ];
    for (i, (doc, want)) in cases.iter().enumerate() {
        let dump = dir.join(format!("dump{i}.yaml"));
        std::fs::write(&dump, format!("{block}{doc}")).unwrap();
        let (out, o) = import(&dump, &[]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(err.contains(&format!("dump{i}.yaml:")), "{want}: {err}");
        assert!(walk(&out).is_empty(), "{want}");
    }
}

/// The importer reads as the compiler does: a link out of the tree is
/// refused without being read (its target is never quoted), a FIFO named
/// as the dump is refused at once, and nothing is written either way.
#[test]
fn links_out_of_the_tree_and_fifos_are_refused_unread() {
    let base = tempdir("import-confined");
    let tree = base.join("tree");
    let dir = tree.join("request-ipblocks/abuse");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ok.yaml"), "cidrs:\n- 192.0.2.0/24\n").unwrap();
    let secret = base.join("secret");
    std::fs::write(&secret, "root:SECRET-HASH:19000::\n[unclosed\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("x.yaml")).unwrap();
    let (out, o) = import(&tree, &[]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("E0007") && err.contains("x.yaml` leads outside"),
        "{err}"
    );
    assert!(!err.contains("SECRET"), "{err}");
    assert!(walk(&out).is_empty());

    let fifo = base.join("dump.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let t = std::time::Instant::now();
    let (_, o) = import(&fifo, &[]);
    let err = stderr(&o);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t.elapsed()
    );
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("E0008") && err.contains("is a FIFO"), "{err}");
}
