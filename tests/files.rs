//! Reading rule files and writing outputs as root: `include` and `file`
//! stay below the ruleset's root, only regular files are read, directory
//! walks end and stay inside, outputs replace only regular files that are
//! not inputs, and nothing from a ruleset, an artifact or a capture
//! reaches the terminal raw.
//!
//! Every run of the binary has a deadline and a memory ceiling, so that a
//! regression (a FIFO that blocks, `/dev/zero` read to the end, a symlink
//! loop walked forever) fails the test instead of hanging it or the host.

use crate::util::{root, tempdir};
use std::os::unix::fs::{symlink, FileTypeExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

/// Runs rctl under `ulimit -v` (4 GiB) and kills it after 30 s.
fn run(args: &[&str]) -> Run {
    const SECS: u64 = 30;
    let dir = tempdir("run");
    let (o, e) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .expect("run rctl");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(SECS) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rctl {args:?} did not finish in {SECS} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let r = Run {
        code: status.code(),
        out: read(&o),
        err: read(&e),
    };
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

/// ESC, BEL, C1 CSI and the bidi controls.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            matches!(c, '\x1b' | '\x07' | '\r' | '\u{9b}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
        })
        .collect()
}

#[test]
fn include_and_file_outside_the_root_are_refused_unread() {
    let base = tempdir("confine");
    write(
        &base.join("secret.txt"),
        "SECRET-ONE not a cidr\nSECRET-TWO\n",
    );
    write(
        &base.join("outside.rctl"),
        "rule leak { when path == \"/leak\" deny }\n",
    );
    let rules = base.join("rules");
    write(
        &rules.join("main.rctl"),
        "include \"../outside.rctl\"\n\
         include \"/etc/passwd\"\n\
         ipblock a/b { file \"../secret.txt\" }\n\
         ipblock c/d { file \"/etc/passwd\" }\n\
         ipblock e/f { file \"lists/link.txt\" }\n\
         rule r { when ipblock@a/b or ipblock@c/d or ipblock@e/f deny }\n",
    );
    std::fs::create_dir_all(rules.join("lists")).unwrap();
    symlink("../../secret.txt", rules.join("lists/link.txt")).unwrap();

    let r = run(&["check", s(&rules)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_eq!(r.err.matches("error[E0007]").count(), 5, "{}", r.err);
    for named in [
        "`rules/../outside.rctl` is outside",
        "`/etc/passwd` is outside",
        "`rules/../secret.txt` is outside",
        "`rules/lists/link.txt` is outside the ruleset's root (it leads to",
        "main.rctl:2:9",
        "main.rctl:5:20",
        "--allow-path DIR",
    ] {
        let named = named.replace("rules/", &format!("{}/", s(&rules)));
        assert!(r.err.contains(&named), "{named}: {}", r.err);
    }
    assert!(!r.err.contains("SECRET"), "{}", r.err);
    assert!(!r.err.contains(":0:0:"), "{}", r.err);

    // Allowed explicitly, the files outside are read (and their bad lines
    // reported); /etc stays out.
    let r = run(&["check", "--allow-path", s(&base), s(&rules)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_eq!(r.err.matches("error[E0007]").count(), 2, "{}", r.err);
    assert!(r.err.contains("invalid CIDR `SECRET-ONE`"), "{}", r.err);
    assert!(!r.err.contains(":0:0:"), "{}", r.err);
}

/// Every verb that compiles takes `--allow-path`.
#[test]
fn every_compiling_verb_takes_allow_path() {
    let base = tempdir("allow");
    write(&base.join("shared/block.txt"), "192.0.2.0/24\n");
    let rules = base.join("rules");
    write(
        &rules.join("r.rctl"),
        "ipblock s/b { file \"../shared/block.txt\" }\n\
         rule r { when ipblock@s/b deny }\n\
         test \"blocked\" { request { ip 192.0.2.7 } expect all deny by r }\n",
    );
    let shared = base.join("shared");
    let artifact = base.join("out.rctlc");
    let pcap = root().join("tests/fixtures/pcap/curl.pcap");
    let runs: Vec<Vec<&str>> = vec![
        vec!["check"],
        vec!["compile", "-o", s(&artifact)],
        vec!["test"],
        vec!["eval", "--ip", "192.0.2.7"],
        vec!["explain"],
        vec!["dry-run", "--pcap", s(&pcap)],
        vec!["debug", "ir"],
        vec!["fmt", "--check"],
    ];
    for args in runs {
        let mut without = args.clone();
        without.push(s(&rules));
        let r = run(&without);
        if args[0] != "fmt" {
            assert_eq!(r.code, Some(1), "{args:?}: {}", r.err);
            assert!(r.err.contains("error[E0007]"), "{args:?}: {}", r.err);
        }
        let mut with = args.clone();
        with.extend(["--allow-path", s(&shared), s(&rules)]);
        let r = run(&with);
        if args[0] == "fmt" {
            assert_ne!(r.code, Some(2), "{with:?}: {}{}", r.out, r.err);
        } else {
            assert_eq!(r.code, Some(0), "{with:?}: {}{}", r.out, r.err);
        }
    }
}

#[test]
fn a_bad_line_is_quoted_short_and_escaped() {
    let rules = tempdir("quote");
    let line = format!(
        "10.0.0.0/8\x1b[31m\x07\u{202e}{}TAIL-NOT-SHOWN\n",
        "A".repeat(200)
    );
    write(&rules.join("lists/bad.txt"), &line);
    write(
        &rules.join("r.rctl"),
        "ipblock l/b { file \"lists/bad.txt\" }\nrule r { when ipblock@l/b deny }\n",
    );
    let r = run(&["check", s(&rules)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(raw_controls(&r.err).is_empty(), "{:?}", r.err);
    assert!(
        r.err.contains(r"10.0.0.0/8\u{1b}[31m\u{7}\u{202e}AAA"),
        "{}",
        r.err
    );
    assert!(!r.err.contains("TAIL-NOT-SHOWN"), "{}", r.err);
    let longest = r.err.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(longest < 140, "{longest}: {}", r.err);
}

/// A rule file named with escapes, a test name, a string and a header
/// holding ESC, BEL and U+202E: explain, eval, test, debug and the
/// diagnostics show them escaped. (A deny reason may not hold them at
/// all: it is sent in HTTP responses, so the compiler refuses it.)
#[test]
fn names_strings_and_paths_never_reach_the_terminal_raw() {
    let rules = tempdir("escapes");
    let evil = "\x1b[2J\x07\u{202e}";
    write(
        &rules.join(format!("e{evil}vil.rctl")),
        &format!(
            "ipblock h/b {{ 10.0.0.1/8 }}\n\
             rule u {{ when ipblock@h/b deny }}\n\
             rule r {{ when header(\"x-a\") == \"{evil}\" deny 403 \"no\" }}\n\
             test \"t{evil}\" {{\n  request {{ header \"x-a\" \"{evil}\" }}\n  expect all pass\n}}\n"
        ),
    );
    let artifact = rules.join("out.rctlc");
    let header = format!("x-a: {evil}");
    let runs: Vec<Vec<&str>> = vec![
        vec!["check", s(&rules)],
        vec!["test", s(&rules)],
        vec!["explain", s(&rules)],
        vec!["explain", "--format", "json", s(&rules)],
        vec!["eval", "-H", &header, s(&rules)],
        vec!["eval", "--format", "json", "-H", &header, s(&rules)],
        vec!["debug", "ast", s(&rules)],
        vec!["debug", "ir", s(&rules)],
        vec!["explain", s(&artifact)],
    ];
    let r = run(&["compile", "-o", s(&artifact), s(&rules)]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(raw_controls(&r.err).is_empty(), "{:?}", r.err);
    for args in runs {
        let r = run(&args);
        assert!(
            raw_controls(&r.out).is_empty() && raw_controls(&r.err).is_empty(),
            "{args:?}:\n{:?}\n{:?}",
            r.out,
            r.err
        );
        assert!(
            (r.out.clone() + &r.err).contains(r"\u{1b}[2J")
                || (r.out.clone() + &r.err).contains(r"\u001b[2J"),
            "{args:?}: {}{}",
            r.out,
            r.err
        );
    }
    // The test failed, under its escaped name.
    let r = run(&["test", s(&rules)]);
    assert!(r.out.contains(r"FAIL t\u{1b}[2J\u{7}\u{202e}"), "{}", r.out);
}

/// The captured traffic is the attacker's: a User-Agent with a C1 CSI
/// (`\u{9b}`, which terminals take as ESC `[`) and a bidi override, in the
/// text, JSON and HTML reports. (The HTTP parser already refuses C0
/// controls in a header.)
#[test]
fn dry_run_reports_show_captured_controls_escaped() {
    let dir = tempdir("dryrun-esc");
    let mut pcap = std::fs::read(root().join("tests/fixtures/pcap/curl.pcap")).unwrap();
    let at = pcap.windows(12).position(|w| w == b"User-Agent: ").unwrap() + 12;
    pcap[at..at + 7].copy_from_slice(b"\xc2\x9b2J\xe2\x80\xae");
    let cap = dir.join("ua.pcap");
    std::fs::write(&cap, &pcap).unwrap();
    let rules = root().join("tests/fixtures/rules");
    let html = dir.join("report.html");
    for format in ["text", "json"] {
        let r = run(&[
            "dry-run",
            s(&rules),
            "--pcap",
            s(&cap),
            "--format",
            format,
            "--report",
            s(&html),
        ]);
        assert_eq!(r.code, Some(0), "{}", r.err);
        assert!(raw_controls(&r.out).is_empty(), "{format}: {}", r.out);
        assert!(
            r.out.contains(r"\u{9b}2J\u{202e}") || r.out.contains(r"\u009b2J\u202e"),
            "{format}: {}",
            r.out
        );
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(raw_controls(&page).is_empty());
        assert!(page.contains(r"\u{9b}2J\u{202e}"));
    }
}

#[test]
fn devices_and_fifos_are_refused_promptly() {
    let dir = tempdir("fifos");
    mkfifo(&dir.join("pipe.txt"));
    mkfifo(&dir.join("included.rctl"));
    write(
        &dir.join("main.rctl"),
        "include \"included.rctl\"\nipblock p/p { file \"pipe.txt\" }\nrule r { when ipblock@p/p deny }\n",
    );
    let r = run(&["check", s(&dir.join("main.rctl"))]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_eq!(
        r.err.matches("is a FIFO, not a regular file").count(),
        2,
        "{}",
        r.err
    );
    assert!(r.err.contains("main.rctl:1:9") && r.err.contains("main.rctl:2:20"));
    // Found by a walk, and named on the command line.
    let r = run(&["check", s(&dir)]);
    assert!(r.err.contains("included.rctl` is a FIFO"), "{}", r.err);
    // Named on the command line, it is refused as a usage error (exit 2).
    let r = run(&["check", s(&dir.join("included.rctl"))]);
    assert_eq!(r.code, Some(2), "{}", r.err);
    assert!(r.err.contains("included.rctl` is a FIFO"), "{}", r.err);
    let r = run(&["fmt", s(&dir.join("included.rctl"))]);
    assert_eq!(r.code, Some(2), "{}", r.err);
    assert!(r.err.contains("included.rctl` is a FIFO"), "{}", r.err);

    // A /dev/zero of our own inside the root, where we may make one (root).
    let zero = dir.join("zero.txt");
    let made = Command::new("mknod")
        .args([s(&zero), "c", "1", "5"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made {
        write(
            &dir.join("zero.rctl"),
            "ipblock z/z { file \"zero.txt\" }\nrule r { when ipblock@z/z deny }\n",
        );
        let r = run(&["check", s(&dir.join("zero.rctl"))]);
        assert_eq!(r.code, Some(1), "{}", r.err);
        assert!(
            r.err
                .contains("zero.txt` is a character device, not a regular file"),
            "{}",
            r.err
        );
    } else {
        rctl_testkit::skip::skip_unless(false, "mknod (root), for the device node in the root");
    }

    // The real ones, allowed explicitly.
    for dev in ["/dev/zero", "/dev/urandom"] {
        let main = dir.join("dev.rctl");
        write(
            &main,
            &format!("ipblock d/v {{ file \"{dev}\" }}\nrule r {{ when ipblock@d/v deny }}\n"),
        );
        let r = run(&["check", "--allow-path", "/dev", s(&main)]);
        assert_eq!(r.code, Some(1), "{}", r.err);
        assert!(
            r.err.contains(&format!(
                "error[E0008]: `{dev}` is a character device, not a regular file"
            )),
            "{}",
            r.err
        );
    }
}

#[test]
fn directory_walks_end_and_stay_inside_the_root() {
    let rules = tempdir("loops");
    write(
        &rules.join("a.rctl"),
        "rule a { when path == \"/a\" deny }\n",
    );
    write(
        &rules.join("sub/b.rctl"),
        "rule b { when path == \"/b\" deny }\n",
    );
    symlink(".", rules.join("loop1")).unwrap();
    symlink(".", rules.join("loop2")).unwrap();
    symlink("..", rules.join("sub/up")).unwrap();
    symlink("self", rules.join("self")).unwrap();
    symlink("sub", rules.join("alias")).unwrap();
    let r = run(&["check", s(&rules)]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(r.err.contains("ok: 2 files, 2 rules"), "{}", r.err);
    // fmt walks the same way: each file once.
    let r = run(&["fmt", "--check", s(&rules)]);
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    assert_eq!(r.out.lines().count(), 2, "{}", r.out);

    // A link to / is not walked.
    symlink("/", rules.join("slash")).unwrap();
    let r = run(&["check", s(&rules)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(
        r.err.contains(&format!(
            "error[E0007]: `{}` is outside the ruleset's root (it leads to `/`)",
            s(&rules.join("slash"))
        )),
        "{}",
        r.err
    );

    // Depth is bounded.
    let deep = tempdir("deep");
    let mut d = deep.to_path_buf();
    for i in 0..40 {
        d = d.join(format!("d{i}"));
    }
    write(&d.join("x.rctl"), "rule x { when true deny }\n");
    let r = run(&["check", s(&deep)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert!(
        r.err.contains("error[E0040]") && r.err.contains("nested more than 32 directories deep"),
        "{}",
        r.err
    );
}

/// The target of `-o` or `--report` as it was, for comparing after.
fn state(p: &Path) -> (String, Vec<u8>) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let t = m.file_type();
    let kind = if t.is_symlink() {
        format!("link to {}", std::fs::read_link(p).unwrap().display())
    } else if t.is_fifo() {
        "fifo".into()
    } else if t.is_char_device() {
        "char device".into()
    } else if t.is_dir() {
        "dir".into()
    } else {
        "file".into()
    };
    let bytes = if t.is_file() {
        std::fs::read(p).unwrap()
    } else {
        Vec::new()
    };
    (kind, bytes)
}

#[test]
fn outputs_replace_only_regular_files_that_are_not_inputs() {
    let dir = tempdir("outputs");
    let rules = dir.join("rules");
    write(
        &rules.join("r.rctl"),
        "ipblock l/l { file \"lists/l.txt\" }\nrule r { when ipblock@l/l deny }\n",
    );
    write(&rules.join("lists/l.txt"), "192.0.2.0/24\n");
    write(&dir.join("victim.txt"), "keep me\n");
    symlink("victim.txt", dir.join("link")).unwrap();
    mkfifo(&dir.join("fifo"));
    std::fs::create_dir(dir.join("adir")).unwrap();
    std::fs::hard_link(rules.join("r.rctl"), dir.join("hardlink.rctl")).unwrap();
    let mut refused: Vec<(PathBuf, &str)> = vec![
        (dir.join("link"), "is a symbolic link (to victim.txt)"),
        (dir.join("fifo"), "is a FIFO, not a regular file"),
        (dir.join("adir"), "is a directory, not a regular file"),
        (rules.join("r.rctl"), "is one of this run's inputs"),
        (rules.join("lists/l.txt"), "is one of this run's inputs"),
        (dir.join("hardlink.rctl"), "is one of this run's inputs"),
    ];
    // A device node of our own, where we may make one (root).
    let null = dir.join("null");
    let made = Command::new("mknod")
        .args([s(&null), "c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made {
        refused.push((null, "is a character device, not a regular file"));
    } else {
        rctl_testkit::skip::skip_unless(false, "mknod (root), for the device-node case");
    }
    for (target, why) in &refused {
        let before = state(target);
        let r = run(&["compile", "-o", s(target), s(&rules)]);
        assert_eq!(r.code, Some(2), "{}: {}", target.display(), r.err);
        assert!(
            r.err.contains("refusing to write") && r.err.contains(why),
            "{}: {}",
            target.display(),
            r.err
        );
        assert_eq!(state(target), before, "{}", target.display());
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("victim.txt")).unwrap(),
        "keep me\n"
    );
    // A new path, then the same regular file again.
    let out = dir.join("out.rctlc");
    for _ in 0..2 {
        let r = run(&["compile", "-o", s(&out), s(&rules)]);
        assert_eq!(r.code, Some(0), "{}", r.err);
    }

    // dry-run --report: refused before the replay, for the same reasons and
    // for the capture itself.
    let cap = dir.join("c.pcap");
    std::fs::copy(root().join("tests/fixtures/pcap/curl.pcap"), &cap).unwrap();
    for (target, why) in [
        (dir.join("link"), "is a symbolic link"),
        (dir.join("fifo"), "is a FIFO"),
        (cap.clone(), "is one of this run's inputs"),
        (rules.join("r.rctl"), "is one of this run's inputs"),
        (out.clone(), "is one of this run's inputs"),
    ] {
        let before = state(&target);
        let ruleset = if target == out { &out } else { &rules };
        let r = run(&[
            "dry-run",
            s(ruleset),
            "--pcap",
            s(&cap),
            "--report",
            s(&target),
        ]);
        assert_eq!(r.code, Some(2), "{}: {}", target.display(), r.err);
        assert!(r.err.contains(why), "{}: {}", target.display(), r.err);
        assert!(r.out.is_empty(), "no replay: {}", r.out);
        assert_eq!(state(&target), before, "{}", target.display());
    }
}

#[test]
fn fmt_does_not_write_through_a_symlink() {
    let dir = tempdir("fmt-link");
    let real = dir.join("real.rctl");
    let messy = "rule   r {when path==\"/\"   deny}\n";
    write(&real, messy);
    symlink("real.rctl", dir.join("link.rctl")).unwrap();
    let link = dir.join("link.rctl");
    let r = run(&["fmt", s(&link)]);
    assert_eq!(r.code, Some(2), "{}{}", r.out, r.err);
    assert!(
        r.err
            .contains("is a symbolic link; rctl fmt does not rewrite through links")
            && r.err.contains(&format!(
                "rctl fmt {}",
                s(&std::fs::canonicalize(&real).unwrap())
            )),
        "{}",
        r.err
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), messy);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // Checking reads through the link; formatting the file itself works.
    let r = run(&["fmt", "--check", s(&link)]);
    assert_eq!(r.code, Some(1));
    assert!(r.out.contains("link.rctl is not formatted"), "{}", r.out);
    let r = run(&["fmt", s(&real)]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_ne!(std::fs::read_to_string(&real).unwrap(), messy);
    let r = run(&["fmt", s(&link)]);
    assert_eq!(r.code, Some(0), "already formatted: {}", r.err);
}

/// Artifacts are binary inputs every command reads whole: `/dev/zero`, a
/// FIFO or a directory given as one is refused at once, never read (before,
/// `rctl apply /dev/zero` and `rctl serve --artifact /dev/urandom` read
/// until the memory ran out).
#[test]
fn artifacts_and_objects_are_read_only_from_regular_files() {
    let dir = tempdir("artifact-inputs");
    let fifo = dir.join("pipe.rctlc");
    mkfifo(&fifo);
    let state = |n: &str| dir.join(n).display().to_string();
    let (run_dir, state_dir, bpffs) = (state("run"), state("state"), state("bpffs"));
    write(
        &dir.join("ok.rctl"),
        "rule r { when path == \"/x\" deny }\n",
    );
    let ok = state("ok.rctlc");
    let r = run(&["compile", s(&dir.join("ok.rctl")), "-o", &ok]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    for input in ["/dev/zero", "/dev/urandom", s(&fifo)] {
        let runs: Vec<Vec<&str>> = vec![
            vec![
                "apply",
                input,
                "--iface",
                "lo",
                "--run-dir",
                &run_dir,
                "--state-dir",
                &state_dir,
                "--bpffs",
                &bpffs,
            ],
            vec!["serve", "--artifact", input, "--http", "127.0.0.1:0"],
            vec![
                "apply",
                &ok,
                "--iface",
                "lo",
                "--object",
                input,
                "--run-dir",
                &run_dir,
                "--state-dir",
                &state_dir,
                "--bpffs",
                &bpffs,
            ],
        ];
        for args in runs {
            let r = run(&args);
            assert_ne!(r.code, Some(0), "{args:?}: {}", r.err);
            assert!(r.err.contains("not a regular file"), "{args:?}: {}", r.err);
        }
    }
}

/// A path outside the root is refused the same way whether or not it
/// exists: a rule file cannot probe which files exist elsewhere (before, a
/// missing one said "No such file or directory" and an existing one
/// "outside the ruleset's root"). Inside the root, a missing file still
/// says it is missing.
#[test]
fn missing_and_existing_paths_outside_the_root_look_the_same() {
    let base = tempdir("probe");
    write(&base.join("exists.txt"), "10.0.0.0/8\n");
    let rules = base.join("rules");
    write(
        &rules.join("main.rctl"),
        "ipblock a/b { file \"../exists.txt\" }\n\
         ipblock c/d { file \"../missing.txt\" }\n\
         ipblock e/f { file \"/etc/no-such-file-here\" }\n\
         ipblock g/h { file \"lists/missing.txt\" }\n\
         rule r { when ipblock@a/b or ipblock@c/d or ipblock@e/f or ipblock@g/h deny }\n",
    );
    let r = run(&["check", s(&rules)]);
    assert_eq!(r.code, Some(1), "{}", r.err);
    assert_eq!(r.err.matches("error[E0007]").count(), 3, "{}", r.err);
    for line in ["main.rctl:1:", "main.rctl:2:", "main.rctl:3:"] {
        let at = r
            .err
            .find(line)
            .unwrap_or_else(|| panic!("{line}: {}", r.err));
        let before = &r.err[..at];
        let head = before.rfind("error[").unwrap();
        assert!(
            before[head..].starts_with("error[E0007]"),
            "{line}: {}",
            r.err
        );
    }
    assert_eq!(
        r.err.matches("No such file").count(),
        1,
        "only the missing file inside the root says so: {}",
        r.err
    );
}
