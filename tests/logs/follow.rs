//! `--follow` on the log a real nginx writes, through both rotations
//! logrotate does: rename and reopen (nginx's USR1), and copytruncate.
//! No line is lost and none counted twice: the report's requests are the
//! requests sent, and the lines in nginx's files. The log is followed
//! from the moment nginx opens it, empty, its format detected from the
//! first lines that come.

use crate::util::{root, tempdir};
use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::skip::require;
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn get(to: SocketAddr, n: usize, path: &str) {
    for i in 0..n {
        let mut s = TcpStream::connect(to).unwrap();
        write!(s, "GET {path}{i} HTTP/1.1\r\nHost: x\r\nUser-Agent: follow/1\r\nConnection: close\r\n\r\n").unwrap();
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
    }
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .count()
}

/// Waits until `f` holds (at most 10 s).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn follow_through_rename_and_copytruncate_loses_and_repeats_nothing() {
    if !require("nginx") {
        return;
    }
    let dir = tempdir("logs-follow");
    let port = free_port();
    let at: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = dir.join("access.log");
    let http = format!(
        "    server {{\n        listen {at};\n        access_log {} combined;\n        location / {{ return 200 \"ok\\n\"; }}\n    }}",
        log.display()
    );
    let server = Nginx::start(&dir, &nginx::conf(&dir, 1, &http), &[at]);
    // A rule the /a/ requests match, so the screens count something.
    let rules = dir.join("r.rctl");
    std::fs::write(
        &rules,
        "rule first_batch {\n  priority 1\n  when path starts_with \"/a/\"\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    // No --log-format: nginx has just opened its log, still empty, so
    // the format is detected from the first lines once they come.
    assert_eq!(lines(&log), 0, "nginx's new log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    cmd.arg("dry-run")
        .arg(&rules)
        .arg("--log")
        .arg(&log)
        .args(["--follow", "--every", "1", "--format", "json"]);
    let mut rctl = Proc::spawn("rctl", &dir, cmd);
    let screens = |rctl: &Proc| rctl.stderr().matches("--- last 1 s").count();
    until("rctl waits for the first lines", || {
        rctl.stderr()
            .contains("is empty: waiting for its first lines")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        screens(&rctl),
        0,
        "no screen before a format: {}",
        rctl.logs()
    );
    get(at, 30, "/a/");
    until("the first screen", || screens(&rctl) >= 1);
    // Rename, a few more lines into the renamed file, then nginx reopens.
    std::fs::rename(&log, dir.join("access.log.1")).unwrap();
    get(at, 10, "/b/");
    server.proc.signal("USR1");
    until("nginx reopened its log", || log.exists());
    get(at, 30, "/c/");
    // nginx's master reopens the log before its worker does: the first
    // of these may still go to the renamed file.
    let old = dir.join("access.log.1");
    until("the new file", || lines(&old) + lines(&log) == 70);
    let seen = screens(&rctl);
    until("read on", || screens(&rctl) >= seen + 2);
    // copytruncate: copied, cut in place; nginx appends at the new end.
    std::fs::copy(&log, dir.join("access.log.2")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    get(at, 3, "/d/");
    std::thread::sleep(Duration::from_millis(500));
    get(at, 27, "/e/");
    until("the last lines", || lines(&log) == 30);
    let seen = screens(&rctl);
    until("read on", || screens(&rctl) >= seen + 2);
    rctl.signal("INT");
    until("rctl reports", || rctl.exited().is_some());
    let out = rctl.stdout();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {}", rctl.logs()));
    let on_disk = lines(&dir.join("access.log.1")) + lines(&dir.join("access.log.2")) + lines(&log);
    assert_eq!(on_disk, 100, "nginx's own files");
    assert_eq!(v["totals"]["captured_requests"], 100, "{}", rctl.logs());
    let l = &v["inputs"][0]["log"];
    assert_eq!(
        (l["lines"].as_u64(), l["judged"].as_u64()),
        (Some(100), Some(100)),
        "{l}"
    );
    assert_eq!(l["format"], "nginx-combined", "{l}");
    // The screens: each rule's interval counts and the talkers.
    let err = rctl.stderr();
    assert!(err.contains("addresses      127.0.0.1 "), "{err}");
    // Over the screens: the 30 /a/ requests, all denied by the rule.
    let (mut matches, mut deny) = (0, 0);
    for row in err.lines().filter(|l| l.starts_with("first_batch ")) {
        let n: Vec<u64> = row
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        (matches, deny) = (matches + n[0], deny + n[2]);
    }
    assert_eq!((matches, deny), (30, 30), "{err}");
    // Intervals without /a/ requests: no rule matched; an idle one is empty.
    assert!(err.contains("(no rule matched in the interval)"), "{err}");
    assert!(err.contains("--- last 1 s: 0 requests"), "{err}");
    assert!(err.contains("user agents    follow/1 "), "{err}");
}

#[test]
fn follow_on_stdin_ends_with_it() {
    let dir = tempdir("logs-follow-stdin");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    cmd.arg("dry-run").arg(root().join("rules")).args([
        "--log",
        "-",
        "--follow",
        "--log-format",
        "nginx-combined",
        "--format",
        "json",
    ]);
    let o = super::piped(cmd, |stdin| {
        for i in 0..20 {
            writeln!(
                stdin,
                "192.0.2.{i} - - [13/May/2026:12:00:{i:02} +0000] \"GET /x HTTP/1.1\" 200 1 \"-\" \"ua\""
            )
            .unwrap();
        }
        // The last line has no newline: at the end of a pipe it still
        // counts.
        write!(
            stdin,
            "192.0.2.99 - - [13/May/2026:12:00:59 +0000] \"GET /x HTTP/1.1\" 200 1 \"-\" \"ua\""
        )
        .unwrap();
    });
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"]["captured_requests"], 21, "{v}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Follows stdin with the shipped rules (`--every 1`), writes `lines`
/// to it, waits until `ready` holds of what it wrote on stderr, then
/// sends SIGINT with the pipe still open: the report it prints.
fn interrupted_on_stdin(name: &str, lines: &[String], ready: impl Fn(&str) -> bool) -> Value {
    let dir = tempdir(name);
    let (out, err) = (dir.join("out"), dir.join("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .arg("dry-run")
        .arg(root().join("rules"))
        .args(["--log", "-", "--follow", "--every", "1", "--format", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    until("rctl is ready", || {
        ready(&std::fs::read_to_string(&err).unwrap_or_default())
    });
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    until("rctl reports at the signal", || {
        child.try_wait().unwrap().is_some()
    });
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", std::fs::read_to_string(&err).unwrap()));
    let _ = std::fs::remove_dir_all(dir);
    v
}

/// A signal before anything came on stdin (`ssh edge 'tail -F …' | rctl`
/// on a quiet log) ends the run with its (empty) report.
#[test]
fn follow_on_stdin_stops_at_a_signal_before_its_first_line() {
    let t0 = Instant::now();
    let v = interrupted_on_stdin("logs-follow-nothing", &[], |_| {
        // Time to set its signal handlers up (nothing is written).
        t0.elapsed() > Duration::from_secs(2)
    });
    assert_eq!(v["totals"]["captured_requests"], 0, "{v}");
}

/// `--follow` on a pipe that stays open and quiet (`tail -F … | rctl`):
/// the screens go on, and SIGINT prints the report, without waiting for
/// another line or the pipe's end.
#[test]
fn follow_on_a_quiet_stdin_shows_its_screens_and_stops_at_a_signal() {
    let lines: Vec<String> = (0..5)
        .map(|i| {
            format!("192.0.2.{i} - - [13/May/2026:12:00:0{i} +0000] \"GET /x HTTP/1.1\" 200 1 \"-\" \"ua\"")
        })
        .collect();
    let v = interrupted_on_stdin("logs-follow-quiet", &lines, |err| {
        err.matches("--- last 1 s").count() >= 2
    });
    assert_eq!(v["totals"]["captured_requests"], 5, "{v}");
}

/// What cannot grow as a log does is refused with what to do instead: a
/// compressed file (rotated, and read whole without `--follow`), and a
/// directory.
#[test]
fn follow_refuses_compressed_files_and_directories() {
    let dir = tempdir("logs-follow-refused");
    let log = dir.join("access.log");
    std::fs::write(
        &log,
        "192.0.2.1 - - [13/May/2026:12:00:00 +0000] \"GET /x HTTP/1.1\" 200 1 \"-\" \"ua\"\n",
    )
    .unwrap();
    rctl_testkit::proc::must("gzip", &["-k", log.to_str().unwrap()]);
    rctl_testkit::proc::must("zstd", &["-q", "-k", log.to_str().unwrap()]);
    for (input, says) in [
        ("access.log.gz", "is a gzip file: --follow reads a plain log as it grows; read this one without --follow"),
        ("access.log.zst", "is a zstd file: --follow reads a plain log as it grows"),
        (".", "--follow follows one log file (or -); . is a directory"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
            .current_dir(&dir)
            .arg("dry-run")
            .arg(root().join("rules"))
            .args(["--log", input, "--follow"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{input}: {err}");
        assert!(err.contains(says), "{input}: {err}");
        // Read whole, the compressed file is judged.
        if input != "." {
            let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
                .current_dir(&dir)
                .arg("dry-run")
                .arg(root().join("rules"))
                .args(["--log", input, "--format", "json"])
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["totals"]["captured_requests"], 1, "{input}: {v}");
        }
    }
}

/// Followed on stdin with a reorder window, lines out of order are
/// judged in time order, and those still held when the writer closes the
/// pipe are judged before the report.
#[test]
fn follow_on_stdin_with_a_reorder_window_judges_in_time_order() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    cmd.arg("dry-run").arg(root().join("rules")).args([
        "--log",
        "-",
        "--follow",
        "--reorder-window",
        "60s",
        "--format",
        "json",
    ]);
    let o = super::piped(cmd, |stdin| {
        for s in [5, 1, 3] {
            writeln!(
                stdin,
                "192.0.2.{s} - - [13/May/2026:12:00:0{s} +0000] \"GET /x HTTP/1.1\" 200 1 \"-\" \"ua\""
            )
            .unwrap();
        }
    });
    let err = String::from_utf8_lossy(&o.stderr);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    let l = &v["inputs"][0]["log"];
    assert_eq!(l["judged"], 3, "{v}");
    assert!(l["late_lines"].is_null(), "{l}");
    assert_eq!(v["totals"]["captured_requests"], 3, "{v}");
}

/// A gzip or zstd stream on stdin (`ssh edge 'tail -F … | zstd'`) is
/// decoded as it comes, by the tools' own files; one cut short gives its
/// lines, then the error.
#[test]
fn follow_on_stdin_decodes_gzip_and_zstd_streams() {
    let dir = tempdir("logs-follow-compressed-stdin");
    let log = dir.join("access.log");
    // More than one zstd block (128 KiB), so that one cut short has
    // blocks to give before the cut.
    let text: String = (0..4000)
        .map(|i| format!("192.0.2.{} - - [13/May/2026:12:{:02}:{:02} +0000] \"GET /x/{i} HTTP/1.1\" 200 1 \"-\" \"ua\"\n", i % 256, i / 100, i % 100 * 6 / 10))
        .collect();
    std::fs::write(&log, &text).unwrap();
    rctl_testkit::proc::must("gzip", &["-k", log.to_str().unwrap()]);
    rctl_testkit::proc::must("zstd", &["-q", "-k", log.to_str().unwrap()]);
    for (file, cut) in [
        ("access.log.gz", false),
        ("access.log.zst", false),
        ("access.log.zst", true),
    ] {
        let mut bytes = std::fs::read(dir.join(file)).unwrap();
        if cut {
            bytes.truncate(bytes.len() - 8);
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
        cmd.arg("dry-run")
            .arg(root().join("rules"))
            .args(["--log", "-", "--follow", "--format", "json"]);
        let o = super::piped(cmd, move |stdin| stdin.write_all(&bytes).unwrap());
        let err = String::from_utf8_lossy(&o.stderr);
        let v: Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{file}: {e}: {err}"));
        let l = &v["inputs"][0]["log"];
        assert_eq!(l["format"], "nginx-combined", "{file}: {v}");
        if cut {
            // The line the cut ends, as far as it came.
            assert!(l["bad_lines"].as_u64() <= Some(1), "{l}");
            let judged = l["judged"].as_u64().unwrap();
            assert!(judged > 1000 && judged < 4000, "{l}");
            assert!(err.contains("zstd: incomplete frame"), "{err}");
            assert_eq!(o.status.code(), Some(1), "{err}");
        } else {
            assert_eq!(l["bad_lines"], 0, "{file}: {l}");
            assert_eq!(l["judged"], 4000, "{file}: {l}");
            assert!(o.status.success(), "{file}: {err}");
        }
    }
}
