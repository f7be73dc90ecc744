//! The `rctl` binary, run the way an operator runs it.

use crate::util::*;

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_test_compile_explain_on_the_shipped_rules() {
    let rules = root().join("rules");
    let rules = rules.to_str().unwrap();
    let o = rctl(&["check", "--deny-warnings", rules]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = rctl(&["test", rules]);
    let (out, _) = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(
            "ok   the updater is never throttled, even at 10,000 requests a minute (10600 sent)"
        ),
        "{out}"
    );
    assert!(out.contains(" passed, 0 failed"));

    let dir = tempdir("compile");
    let art = dir.join("r.rctlc");
    let o = rctl(&["compile", rules, "-o", art.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", text(&o));
    let first = std::fs::read(&art).unwrap();
    let o = rctl(&["compile", rules, "-o", art.to_str().unwrap()]);
    assert!(o.status.success());
    assert_eq!(std::fs::read(&art).unwrap(), first, "byte-identical output");
    // No temporary files are left behind by the atomic write.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

    let o = rctl(&["explain", art.to_str().unwrap()]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(out.contains("wdqs_updater_exempt  priority 10"), "{out}");
    assert!(out.contains("why:    request limits need HTTP parsing"));
    assert!(
        out.contains("abuse/bogons             13 IPv4         8 IPv6"),
        "{out}"
    );
    let o = rctl(&["explain", "--format", "json", "--site", "esams", rules]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "monitoring_exempt");
    assert!(names.contains(&"cloud_without_ua"));
    let o = rctl(&["explain", "--site", "nowhere", rules]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("cloud_without_ua"));
}

#[test]
fn errors_exit_1_with_every_diagnostic() {
    let dir = tempdir("errors");
    std::fs::write(
        dir.join("a.rctl"),
        "rule a { when path == x deny }\nrule b { when ipblock@no/pe deny }\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.rctl"), "rule a { when true deny 999 }\n").unwrap();
    let o = rctl(&["check", dir.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("error[E0025]: `x` must be a quoted string"),
        "{err}"
    );
    assert!(err.contains("a.rctl:1:23"), "{err}");
    assert!(err.contains("error[E0011]: unknown ipblock `no/pe`"));
    assert!(err.contains("error[E0010]: rule `a` is defined twice"));
    assert!(err.contains("error[E0023]"));
    assert!(err.contains("4 errors, 0 warnings"), "{err}");
}

#[test]
fn warnings_fail_only_when_denied() {
    let dir = tempdir("warn");
    std::fs::write(
        dir.join("w.rctl"),
        "ipblock x/y { 10.0.0.1/8 }\nrule r { when ipblock@x/y drop }\n",
    )
    .unwrap();
    let p = dir.to_str().unwrap();
    assert_eq!(rctl(&["check", p]).status.code(), Some(0));
    let o = rctl(&["check", "--deny-warnings", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o)
        .1
        .contains("warning[W0101]: CIDR has host bits set"));
}

#[test]
fn bad_inputs_get_clear_errors() {
    let dir = tempdir("bad");
    // Non-UTF-8, pointing at the byte.
    std::fs::write(
        dir.join("latin1.rctl"),
        b"rule r { when path == \"/caf\xe9\" deny }\n",
    )
    .unwrap();
    let o = rctl(&["check", dir.join("latin1.rctl").to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("error[E0003]")
            && err.contains("byte offset 27")
            && err.contains("latin1.rctl:1:28"),
        "{err}"
    );
    // A missing include and a missing list file, at the naming span.
    std::fs::write(dir.join("inc.rctl"), "include \"nope.rctl\"\nipblock a/b { file \"missing.txt\" }\nrule r { when ipblock@a/b drop }\n").unwrap();
    let o = rctl(&["check", dir.join("inc.rctl").to_str().unwrap()]);
    let (_, err) = text(&o);
    assert!(
        err.contains("cannot read") && err.contains("nope.rctl") && err.contains("inc.rctl:1:9"),
        "{err}"
    );
    assert!(
        err.contains("missing.txt") && err.contains("inc.rctl:2:20"),
        "{err}"
    );
    // An empty directory.
    let empty = tempdir("empty");
    let o = rctl(&["check", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("error[E0005]: no .rctl files in"));
    // A corrupt or foreign artifact for explain.
    let art = dir.join("x.rctlc");
    std::fs::write(&art, b"RCTLC\0\r\n\x07\0").unwrap();
    let o = rctl(&["explain", art.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("version 7 is not supported"),
        "{:?}",
        text(&o)
    );
}

#[test]
fn includes_are_followed_once() {
    let dir = tempdir("include");
    std::fs::write(
        dir.join("main.rctl"),
        "include \"lib.rctl\"\ninclude \"lib.rctl\"\nrule r { when pattern@lib/x deny }\n",
    )
    .unwrap();
    std::fs::write(dir.join("lib.rctl"), "pattern lib/x { path == \"/x\" }\n").unwrap();
    let o = rctl(&[
        "check",
        "--deny-warnings",
        dir.join("main.rctl").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    // The directory form reads lib.rctl once as well.
    assert!(rctl(&["check", dir.to_str().unwrap()]).status.success());
}

#[test]
fn failing_tests_exit_1_and_say_why() {
    let dir = tempdir("failing");
    std::fs::write(dir.join("t.rctl"), "rule r { when true throttle 1 requests per 1m by ip }\ntest \"too strict\" {\n  request { repeat 3 }\n  expect all pass\n}\n").unwrap();
    let o = rctl(&["test", dir.to_str().unwrap()]);
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(out.contains("FAIL too strict"), "{out}");
    assert!(
        out.contains("line 4: expected all pass of 3, matched 1; got 1 pass, 2 throttle by r"),
        "{out}"
    );
    assert!(out.contains("test result: 0 passed, 1 failed"));
}

#[test]
fn fmt_check_and_write() {
    let dir = tempdir("fmt");
    let f = dir.join("a.rctl");
    std::fs::write(&f, "rule r{when true deny}\n").unwrap();
    assert_eq!(
        rctl(&["fmt", "--check", dir.to_str().unwrap()])
            .status
            .code(),
        Some(1)
    );
    assert!(rctl(&["fmt", dir.to_str().unwrap()]).status.success());
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "rule r {\n  when true\n  deny\n}\n"
    );
    assert!(rctl(&["fmt", "--check", dir.to_str().unwrap()])
        .status
        .success());
}

#[test]
fn debug_shows_each_stage() {
    let rules = root().join("rules");
    let rules = rules.to_str().unwrap();
    let o = rctl(&["debug", "ast", rules]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("span: Span {"));
    let o = rctl(&["debug", "ir", rules]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["atoms"].as_array().unwrap().len() > 10);
    let o = rctl(&["debug", "plan", rules]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["rule"], "monitoring_exempt");
}

#[test]
fn eval_traces_one_request() {
    let rules = root().join("rules");
    let rules = rules.to_str().unwrap();
    let o = rctl(&[
        "eval",
        rules,
        "--url",
        "https://query.wikidata.org/sparql?query=SELECT",
        "-H",
        "User-Agent: python-requests/2.31",
        "--ip",
        "185.220.101.3",
        "--count",
        "20",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("path in { \"/bigdata/namespace/wdq/sparql\", \"/bigdata/namespace/wdq/sparql/\", \"/sparql\" }"), "{out}");
    assert!(
        out.contains("wdqs_generic_clients         priority 100   matched: throttle"),
        "{out}"
    );
    assert!(
        out.contains("Retry-After: 600, by wdqs_generic_clients"),
        "{out}"
    );
    assert!(
        out.contains("      10 requests  pass (no rule decided)"),
        "{out}"
    );

    let o = rctl(&[
        "eval",
        rules,
        "--url",
        "/sparql",
        "--host",
        "query.wikidata.org",
        "-X",
        "POST",
        "-H",
        "User-Agent: wmf-streaming-updater-consumer/0.3",
        "--ip",
        "208.80.154.230",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"]["kind"], "allow");
    assert_eq!(v["verdict"]["rule"], "wdqs_updater_exempt");
    assert_eq!(v["evaluated"][0], "wdqs_updater_exempt");

    let o = rctl(&[
        "eval",
        rules,
        "--url",
        "/",
        "-H",
        "User-Agent: x",
        "--ip",
        "3.5.140.10",
        "--count",
        "700",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["shadow"][0]["rule"], "cloud_per_prefix");
    assert_eq!(v["shadow"][0]["would"], "throttle");
    assert_eq!(v["verdict"]["kind"], "pass");

    let o = rctl(&["eval", rules, "--url", "nonsense"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The command reference beside the CLI's code is what `rctl generate
/// reference` writes from the flag definitions (RCTL_BLESS=1 rewrites it).
#[test]
fn the_command_reference_is_the_programs_own_help() {
    let o = rctl(&["generate", "reference"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let now = String::from_utf8(o.stdout).unwrap();
    let path = root().join("dataplane/cli/README.md");
    if std::env::var_os("RCTL_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == now,
        "dataplane/cli/README.md is stale: run `RCTL_BLESS=1 cargo test --test integration \
         cli::the_command_reference` (or `rctl generate reference > dataplane/cli/README.md`)"
    );
    for sub in [
        "## `rctl check`",
        "## `rctl serve`",
        "### `rctl emit nginx`",
        "### `rctl fleet status`",
    ] {
        assert!(now.contains(sub), "{sub} missing from the reference");
    }
    // Every subcommand `rctl --help` lists has its section.
    let help = String::from_utf8(rctl(&["--help"]).stdout).unwrap();
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(listed.len() >= 18, "{listed:?}");
    for c in listed {
        assert!(
            now.contains(&format!("## `rctl {c}`")),
            "no section for {c}"
        );
    }
}

/// Man pages render without a warning from man(1), one a subcommand, and
/// say what `--help` says.
#[test]
fn man_pages_for_every_subcommand_render_cleanly() {
    let dir = tempdir("man");
    let o = rctl(&["generate", "man", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", text(&o));
    let pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for p in [
        "rctl.1",
        "rctl-check.1",
        "rctl-serve.1",
        "rctl-emit-haproxy-spoe.1",
        "rctl-fleet-status.1",
    ] {
        assert!(pages.iter().any(|x| x == p), "{p} not in {pages:?}");
    }
    let o = std::process::Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l"])
        .arg(dir.join("rctl-serve.1"))
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .expect("man(1) runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.trim().is_empty(), "man warns: {err}");
    assert!(out.contains("--spoe-group"), "{out}");
}

/// The bash completion completes subcommands and a subcommand's flags.
#[test]
fn bash_completion_completes_subcommands_and_flags() {
    let o = rctl(&["generate", "completions", "bash"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let dir = tempdir("completion");
    let script = dir.join("rctl.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    let complete = |words: &str| {
        let cmd = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _rctl rctl \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let o = std::process::Command::new("bash")
            .args(["-c", &cmd])
            .output()
            .unwrap();
        assert!(o.status.success(), "{:?}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let subs = complete("rctl st");
    assert_eq!(subs.lines().collect::<Vec<_>>(), ["status"], "{subs}");
    let flags = complete("rctl serve --spoe-");
    for f in ["--spoe-group", "--spoe-mode"] {
        assert!(flags.lines().any(|l| l == f), "{f} not in {flags}");
    }
}

/// `rctl --version` names the commit, the artifact format and the XDP
/// program built in.
#[test]
fn version_says_what_was_built() {
    let o = rctl(&["--version"]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("rctl {}", env!("CARGO_PKG_VERSION")));
    assert_eq!(
        lines[2],
        format!(
            "artifact format: {}",
            rctl_compiler::artifact::FORMAT_VERSION
        )
    );
    let commit = lines[1].strip_prefix("commit: ").expect("a commit line");
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );
    let xdp = lines[3].strip_prefix("XDP program: ").expect("an XDP line");
    // With an object built in, its id is its SHA-256's first 16 digits.
    if let Ok(object) = std::env::var("RCTL_XDP_OBJECT") {
        use sha2::Digest as _;
        let bytes = std::fs::read(object).unwrap();
        let id: String = sha2::Sha256::digest(&bytes)[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(xdp, id);
    }
    assert_eq!(text(&rctl(&["-V"])).0.trim(), lines[0]);
}

/// rctl with `env` in its environment (and no other RCTL_* setting).
fn rctl_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"));
    for (k, _) in std::env::vars() {
        if k.starts_with("RCTL_") && k != "RCTL_XDP_OBJECT" {
            c.env_remove(k);
        }
    }
    c.args(args).envs(env.iter().copied()).output().unwrap()
}

/// The configuration file sets a host command's flags; the environment
/// wins over it and the command line over both; a misspelt name is
/// pointed out, a bad line stops the run with its number, and the rule
/// commands read none of it.
#[test]
fn the_configuration_file_is_read_and_overridden_in_order() {
    let dir = tempdir("config");
    let file = dir.join("rctl");
    std::fs::write(
        &file,
        "# a host\nRCTL_AGENT=/nonexistent/from-file.sock\nRCTL_SPOE_GRUOP=haproxy\n\
         RCTL_DENY_WARNINGS=true\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let agent_line = |o: &std::process::Output| {
        text(o)
            .0
            .lines()
            .find(|l| l.starts_with("agent at "))
            .unwrap_or_default()
            .to_string()
    };
    let o = rctl_env(&["status"], &[("RCTL_CONFIG", f)]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "critical: no agent: {:?}",
        text(&o)
    );
    assert!(
        agent_line(&o).starts_with("agent at /nonexistent/from-file.sock: NOT SERVING"),
        "{:?}",
        text(&o)
    );
    assert!(
        text(&o).1.contains(&format!(
            "{f}:3: no flag reads RCTL_SPOE_GRUOP (did you mean RCTL_SPOE_GROUP?)"
        )),
        "{}",
        text(&o).1
    );
    let o = rctl_env(
        &["status"],
        &[
            ("RCTL_CONFIG", f),
            ("RCTL_AGENT", "/nonexistent/from-env.sock"),
        ],
    );
    assert!(
        agent_line(&o).starts_with("agent at /nonexistent/from-env.sock:"),
        "{:?}",
        text(&o)
    );
    let o = rctl_env(
        &["status", "--agent", "/nonexistent/flag.sock"],
        &[
            ("RCTL_CONFIG", f),
            ("RCTL_AGENT", "/nonexistent/from-env.sock"),
        ],
    );
    assert!(
        agent_line(&o).starts_with("agent at /nonexistent/flag.sock:"),
        "{:?}",
        text(&o)
    );

    // `check` is a rule command: RCTL_DENY_WARNINGS is not its setting.
    std::fs::write(
        dir.join("w.rctl"),
        "ipblock x/y { 10.0.0.1/8 }\nrule r { when ipblock@x/y drop }\n",
    )
    .unwrap();
    let o = rctl_env(
        &["check", dir.join("w.rctl").to_str().unwrap()],
        &[("RCTL_CONFIG", f)],
    );
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));

    // A list is comma-separated; a boolean takes yes/no as well.
    let o = rctl_env(
        &["fleet", "status"],
        &[
            ("RCTL_CONFIG", "/dev/null"),
            ("RCTL_ETCD", "http://127.0.0.1:1,http://127.0.0.1:2"),
        ],
    );
    assert!(
        text(&o).1.contains("none of 2 endpoints answered"),
        "{:?}",
        text(&o)
    );
    let serve = |shadow: &str| {
        let o = rctl_env(
            &[
                "serve",
                "--artifact",
                "/nonexistent/r.rctlc",
                "--no-control",
            ],
            &[("RCTL_CONFIG", "/dev/null"), ("RCTL_SHADOW", shadow)],
        );
        text(&o).1
    };
    assert!(
        serve("yes").contains("reading /nonexistent/r.rctlc"),
        "{}",
        serve("yes")
    );
    assert!(
        serve("maybe").contains("invalid value 'maybe' for '--shadow'"),
        "{}",
        serve("maybe")
    );

    std::fs::write(&file, "RCTL_AGENT=/x\nnot a setting\nRCTL_SITE='eqiad\n").unwrap();
    let o = rctl_env(&["status"], &[("RCTL_CONFIG", f)]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o).1;
    assert!(
        err.contains(&format!("{f}:2: `not a setting` is not NAME=value")),
        "{err}"
    );
    assert!(err.contains(&format!("{f}:3: the quote")), "{err}");
    let o = rctl_env(&["status"], &[("RCTL_CONFIG", "/nonexistent/rctl")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o)
        .1
        .contains("reading the configuration file /nonexistent/rctl"));
}

/// Every setting the shipped /etc/default/rctl names, commented out or
/// not, is one a flag reads.
#[test]
fn the_shipped_configuration_names_only_real_settings() {
    let shipped = std::fs::read_to_string(root().join("dataplane/cli/debian/default")).unwrap();
    let all: String = shipped
        .lines()
        .map(|l| {
            l.strip_prefix('#')
                .filter(|r| r.starts_with("RCTL_"))
                .unwrap_or(l)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(all.matches("RCTL_").count() >= 15, "{all}");
    let dir = tempdir("shipped");
    std::fs::write(dir.join("rctl"), all).unwrap();
    let o = rctl_env(
        &["detach", "--help"],
        &[("RCTL_CONFIG", dir.join("rctl").to_str().unwrap())],
    );
    assert!(o.status.success());
    assert_eq!(
        text(&o).1,
        "",
        "the shipped file names a setting no flag reads"
    );
}

/// rctl with `stdin` on its standard input.
fn rctl_stdin(args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin).unwrap();
    c.wait_with_output().unwrap()
}

/// A path that is not there is an I/O error (exit 2, as a usage error),
/// with a hint about the path named, not about `include`.
#[test]
fn a_missing_path_exits_2_with_a_hint_about_it() {
    for cmd in ["check", "test", "explain", "fmt"] {
        let o = rctl(&[cmd, "/nonexistent/rules.rctl"]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("hint: `/nonexistent` does not exist either"),
            "{cmd}: {err}"
        );
        assert!(!err.contains("include"), "{cmd}: {err}");
    }
    let rules = root().join("rules/wdqs.rct");
    let o = rctl(&["check", rules.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("did you mean `"), "{err}");
    assert!(err.contains("rules/wdqs.rctl`?"), "{err}");
    // An `include` that is missing is the rule's error (exit 1, at its
    // file:line:col), with the hint about where it is read.
    let dir = tempdir("missing-include");
    std::fs::write(dir.join("a.rctl"), "include \"nope.rctl\"\n").unwrap();
    let o = rctl(&["check", dir.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a.rctl:1:9"), "{err}");
    assert!(
        err.contains("relative to the file that names them"),
        "{err}"
    );
}

#[test]
fn fmt_reads_standard_input_and_shows_a_diff() {
    let messy = b"rule r {\nwhen path == \"/x\"   deny }\n";
    let o = rctl_stdin(&["fmt", "-"], messy);
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(text(&o).0, "rule r {\n  when path == \"/x\"\n  deny\n}\n");
    let o = rctl_stdin(&["fmt", "--check", "-"], messy);
    assert_eq!((o.status.code(), text(&o).0.as_str()), (Some(1), ""));
    let o = rctl_stdin(
        &["fmt", "--check", "-"],
        b"rule r {\n  when true\n  deny\n}\n",
    );
    assert_eq!(o.status.code(), Some(0));
    let o = rctl_stdin(&["fmt", "-"], b"rule r { when path = \"/x\" deny }\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("--> <stdin>:1:20"), "{}", text(&o).1);

    // --diff on a file: a unified diff that `patch` applies, and the file
    // untouched.
    let dir = tempdir("fmt-diff");
    let f = dir.join("a.rctl");
    std::fs::write(&f, messy).unwrap();
    let o = rctl(&["fmt", "--diff", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let diff = text(&o).0;
    assert!(
        diff.starts_with(&format!(
            "--- a/{}\n+++ b/{}\n@@ ",
            f.display(),
            f.display()
        )),
        "{diff}"
    );
    assert_eq!(std::fs::read(&f).unwrap(), messy);
    let patched = dir.join("b.rctl");
    std::fs::write(&patched, messy).unwrap();
    let o = std::process::Command::new("patch")
        .arg(&patched)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(diff.as_bytes())?;
            c.wait()
        });
    if let Ok(status) = o {
        assert!(status.success());
        assert_eq!(
            std::fs::read_to_string(&patched).unwrap(),
            "rule r {\n  when path == \"/x\"\n  deny\n}\n"
        );
    }
}

#[test]
fn check_and_test_speak_json_and_junit_for_ci() {
    let o = rctl(&[
        "check",
        "--format",
        "json",
        root().join("compiler/examples/conflict").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["errors"].as_u64()),
        (Some(false), Some(1)),
        "{v}"
    );
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "E0050");
    assert_eq!(
        d["file"],
        "compiler/examples/conflict/wdqs.rctl"
            .replace("compiler", &format!("{}/compiler", root().display()))
    );
    assert_eq!(
        (d["line"].as_u64(), d["col"].as_u64()),
        (Some(7), Some(8)),
        "{d}"
    );
    assert!(
        v["witnesses"][0].as_str().unwrap().starts_with("test "),
        "{v}"
    );
    let o = rctl(&[
        "check",
        "--format",
        "json",
        root().join("rules").to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        o.status.success() && v["ok"] == true && v["ruleset"]["tests"].as_u64() >= Some(10),
        "{v}"
    );

    let dir = tempdir("junit");
    std::fs::write(
        dir.join("t.rctl"),
        "rule r { when true throttle 1 requests per 1m by ip }\n\
         test \"too <strict>\" {\n  request { repeat 3 }\n  expect all pass\n}\n\
         test \"fine\" {\n  request { }\n  expect all pass\n}\n",
    )
    .unwrap();
    let xml = dir.join("report.xml");
    let o = rctl(&[
        "test",
        "--format",
        "json",
        "--junit",
        xml.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(v["tests"][0]["failures"][0]["line"], 4);
    // An XML parser that is not rctl's reads the report.
    let script = "import sys, xml.etree.ElementTree as E\n\
        s = E.parse(sys.argv[1]).getroot().find('testsuite')\n\
        cases = s.findall('testcase')\n\
        print(s.get('tests'), s.get('failures'), cases[0].get('name'), cases[0].get('line'))\n\
        print(cases[0].find('failure').get('message'))\n\
        print(cases[1].find('failure') is None)\n";
    let o = std::process::Command::new("python3")
        .args(["-c", script, xml.to_str().unwrap()])
        .output()
        .expect("python3 runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2 1 too <strict> 2");
    assert!(
        lines[1].starts_with("expected all pass of 3, matched 1"),
        "{out}"
    );
    assert_eq!(lines[2], "True");
}

#[test]
fn eval_count_says_whose_verdict_it_shows_and_counts_read_as_english() {
    let dir = tempdir("count");
    std::fs::write(
        dir.join("r.rctl"),
        "rule r { when path == \"/x\" throttle 2 requests per 1m by ip }\n",
    )
    .unwrap();
    let p = dir.to_str().unwrap();
    let o = rctl(&["eval", p, "--url", "http://h/x", "--count", "5"]);
    let (out, _) = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("the trace above and the verdict below are the last of 5 requests'"),
        "{out}"
    );
    assert!(out.contains("verdict of request 5:  throttle"), "{out}");
    assert!(out.contains("       2 requests  pass"), "{out}");
    assert!(out.contains("       3 requests  throttle"), "{out}");
    let o = rctl(&["eval", p, "--url", "http://h/x"]);
    assert!(text(&o).0.contains("\nverdict:  pass"), "{}", text(&o).0);
    let o = rctl(&["check", p]);
    assert_eq!(
        text(&o).1.trim_end(),
        "ok: 1 file, 1 rule, 1 predicate, 0 prefixes, 0 tests"
    );
}
