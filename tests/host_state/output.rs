//! Closed pipes, rules past the counter table, `--site`.

use super::*;
use std::process::Stdio;

/// Runs `cmd` with stdout (and, with `both`, stderr) a pipe nobody reads.
fn closed_pipes(mut cmd: Command, both: bool) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    if both {
        drop(child.stderr.take());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn closed_pipes_never_panic_and_never_undo_a_change() {
    let Some(mut lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    // --mode auto on a bridge falls back to skb with a warning on stderr:
    // both pipes are closed.
    lab.ifaces = vec!["hsbr".into()];
    lab.add_iface("hsbr");
    let i = lab.iface().to_string();
    let mut args = lab.apply_args(&v1, &i);
    args.truncate(args.len() - 4);
    args.extend_from_slice(&["--object", lab.object.to_str().unwrap()]);
    let o = closed_pipes(lab.cmd(&args), true);
    assert!(o.status.success(), "apply: {:?}", o.status);
    lab.enforcing(&i);
    let o = closed_pipes(lab.cmd(&lab.apply_args(&v1, &i)), false);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("panicked"));
    assert_eq!(lab.enforcing(&i)["attached"]["generation"], 2);
    for args in [
        vec!["status"],
        vec!["status", "--format", "json"],
        vec!["status", "--iface", &i],
    ] {
        let o = closed_pipes(lab.cmd(&args), false);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"), "{args:?}");
    }
    let o = closed_pipes(lab.cmd(&["detach", "--iface", &i]), true);
    assert!(o.status.success(), "detach: {:?}", o.status);
    assert_eq!(lab.kernel_prog(&i), None);
    // The rest of the CLI.
    let src = lab.dir.join("unformatted.rctl");
    std::fs::write(&src, "rule   x { when ip in { 192.0.2.1/32 } drop }\n").unwrap();
    let s = src.to_str().unwrap();
    for args in [
        vec!["fmt", "--check", s],
        vec!["explain", s],
        vec!["eval", s],
        vec!["debug", "plan", s],
        vec!["test", s],
        vec!["--help"],
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rctl"));
        c.args(&args);
        let o = closed_pipes(c, false);
        assert!(
            !text(&o.stderr).contains("panicked"),
            "{args:?}: {}",
            text(&o.stderr)
        );
        assert!(
            o.status.code().is_some_and(|c| c < 101),
            "{args:?}: {:?}",
            o.status
        );
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_rctl"));
    c.args(["fmt", s]);
    let o = closed_pipes(c, true);
    assert!(o.status.success(), "fmt: {:?}", o.status);
}

#[test]
fn rules_beyond_the_counter_table_do_not_break_status() {
    let Some(lab) = lab(1) else { return };
    let mut src = String::from(V1);
    for n in 0..2500 {
        src.push_str(&format!(
            "rule http_{n} {{\n  when path == \"/p/{n}\"\n  deny\n}}\n"
        ));
    }
    let big = lab.compile("big", &src);
    let i = lab.iface().to_string();
    lab.apply_ok(&big);
    let st = lab.enforcing(&i);
    let counters = st["counters"].as_array().unwrap();
    assert_eq!(counters.len(), 2502);
    assert_eq!(counters[0]["rule"], "flood");
    assert_eq!(counters[0]["packets"], 0);
    assert_eq!(counters[1023]["packets"], 0, "the last rule with a counter");
    assert_eq!(counters[1024]["packets"], serde_json::Value::Null);
    assert_eq!(counters[2501]["rule"], "http_2499");
    lab.ban(&i, BANNED);
    let flood = lab.enforcing(&i)["counters"][0]["packets"]
        .as_u64()
        .unwrap();
    assert!(flood >= 2, "the flood rule counted its drops");
    let o = lab.rctl(&["status", "--iface", &i]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("1478 rules have no counter"),
        "{}",
        text(&o.stdout)
    );
    // And the counters carry across a re-apply.
    lab.apply_ok(&big);
    assert_eq!(lab.enforcing(&i)["counters"][0]["packets"], flood);
}

#[test]
fn a_site_no_rule_names_is_a_warning() {
    let Some(lab) = lab(1) else { return };
    let src = format!(
        "{V1}\nrule eqiad_only {{\n  sites {{ eqiad, codfw }}\n  when path == \"/x\"\n  deny\n}}\n"
    );
    let art = lab.compile("sites", &src);
    let i = lab.iface().to_string();
    let mut args = lab.apply_args(&art, &i);
    args.extend_from_slice(&["--site", "eqaid"]);
    let o = lab.rctl(&args);
    let e = text(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("warning") && e.contains("eqaid") && e.contains("codfw, eqiad"),
        "{e}"
    );
    args.pop();
    args.push("eqiad");
    let o = lab.rctl(&args);
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
    // eval and dry-run take --site too.
    let a = art.to_str().unwrap();
    let some_pcap = root().join("tests/fixtures/pcap/curl.pcap");
    for args in [
        vec!["eval", a, "--site", "eqaid"],
        vec![
            "dry-run",
            a,
            "--pcap",
            some_pcap.to_str().unwrap(),
            "--site",
            "eqaid",
        ],
    ] {
        let o = rctl(&args);
        let e = text(&o.stderr);
        assert!(
            e.contains("warning") && e.contains("eqaid"),
            "{args:?}: {e}"
        );
    }
}
