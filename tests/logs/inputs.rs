//! The inputs of a dry run on logs: compressed files, directories,
//! standard input, several hosts' logs merged in time order; where the
//! client address comes from; sampled logs; what each format carries.

use super::{dry_run, per_rule, piped};
use crate::util::{rctl, tempdir};
use rctl_testkit::proc::must;
use serde_json::Value;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// A throttle whose verdicts depend on the order requests come in, and
/// a rule on the client address.
const RULES: &str = "rule scraper_net {
  priority 1
  when ip in { 45.83.64.0/24 }
  deny 403 \"no\"
}
rule per_ip {
  priority 2
  when path starts_with \"/w/\"
  throttle 10 requests per 1m burst 5 by ip status 429 reason \"slow down\"
}
";

/// One nginx combined line at second `s` of 12:00 (s < 3600).
fn line(ip: &str, s: u32, path: &str) -> String {
    format!(
        "{ip} - - [13/May/2026:12:{:02}:{:02} +0000] \"GET {path} HTTP/1.1\" 200 1 \"-\" \"ua/1\"\n",
        s / 60,
        s % 60
    )
}

fn run(dir: &Path, args: &[&str]) -> Value {
    dry_run(&dir.join("r.rctl"), args).0
}

#[test]
fn compressed_directories_stdin_and_hosts_merged_in_time_order() {
    let dir = tempdir("logs-inputs");
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    // One client over two minutes, its requests served by one host and
    // then by another: the whole traffic in one file, and each host's.
    let (mut all, mut a, mut b) = (String::new(), String::new(), String::new());
    for s in 0..120 {
        let l = line("198.51.100.7", s, "/w/index.php");
        all.push_str(&l);
        if s < 60 { &mut a } else { &mut b }.push_str(&l);
    }
    std::fs::write(dir.join("all.log"), &all).unwrap();
    let hosts = dir.join("hosts");
    std::fs::create_dir_all(&hosts).unwrap();
    std::fs::write(hosts.join("a.log"), &a).unwrap();
    std::fs::write(hosts.join("b.log"), &b).unwrap();
    let p = |f: &Path| f.display().to_string();
    let want = run(&dir, &["--log", &p(&dir.join("all.log"))]);
    let w = per_rule(&want);
    // 5 of burst and a token every 6 s over 2 minutes: 24 allowed. Read
    // one host's after the other, the second minute first, the first
    // minute's tokens would be lost (time does not go back).
    assert_eq!(w[1].1[3], 96, "{want}");
    // Host b's log named first: merged by time, not read one after the other.
    let merged = run(
        &dir,
        &[
            "--log",
            &p(&hosts.join("b.log")),
            "--log",
            &p(&hosts.join("a.log")),
        ],
    );
    assert_eq!(
        per_rule(&merged),
        w,
        "two hosts merged in time order\n{merged}"
    );
    assert_eq!(merged["totals"]["captured_requests"], 120);
    // Compressed as logrotate leaves them: gzip and zstd, in a directory.
    must("gzip", &[&p(&hosts.join("a.log"))]);
    must("zstd", &["-q", "--rm", &p(&hosts.join("b.log"))]);
    // And the log the server reopened at rotation, still empty: read,
    // with nothing to judge, its format left undetected.
    std::fs::write(hosts.join("c.log"), "").unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&hosts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.log.gz", "b.log.zst", "c.log"]);
    let compressed = run(&dir, &["--log", &p(&hosts)]);
    assert_eq!(per_rule(&compressed), w, "{compressed}");
    let inputs = compressed["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 3);
    for i in &inputs[..2] {
        assert_eq!(i["log"]["judged"], 60, "{i}");
        assert_eq!(i["log"]["format"], "nginx-combined");
    }
    assert_eq!(
        (&inputs[2]["log"]["format"], &inputs[2]["log"]["lines"]),
        (&"empty".into(), &0.into()),
        "{}",
        inputs[2]
    );
    // It lacks nothing, so it leaves no rule unjudged.
    assert_eq!(inputs[2]["log"]["missing_fields"], serde_json::json!([]));
    // Standard input, compressed too.
    let gz = std::fs::read(hosts.join("a.log.gz")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    cmd.args([
        "dry-run",
        &p(&dir.join("r.rctl")),
        "--log",
        "-",
        "--format",
        "json",
    ]);
    let o = piped(cmd, move |stdin| stdin.write_all(&gz).unwrap());
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"]["captured_requests"], 60, "{v}");
    assert_eq!(v["inputs"][0]["log"]["judged"], 60);
}

#[test]
fn the_client_address_from_a_logged_header() {
    let dir = tempdir("logs-client-ip");
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    // Behind a load balancer: every $remote_addr is the balancer's, the
    // client is in X-Forwarded-For (a spoofed hop first, then the real
    // client, then the balancer itself).
    let fmt =
        r#"nginx:'$remote_addr - - [$time_local] "$request" $status "$http_x_forwarded_for"'"#;
    let mut log = String::new();
    for s in 0..20 {
        let client = if s < 5 { "45.83.64.7" } else { "192.0.2.9" };
        log.push_str(&format!(
            "10.0.0.2 - - [13/May/2026:12:00:{s:02} +0000] \"GET /a HTTP/1.1\" 200 \"203.0.113.1, {client}, 10.1.2.3\"\n"
        ));
    }
    std::fs::write(dir.join("lb.log"), &log).unwrap();
    let l = dir.join("lb.log").display().to_string();
    let plain = run(&dir, &["--log", &l, "--log-format", fmt]);
    assert_eq!(plain["rules"][0]["matches"], 0, "{plain}");
    let v = run(
        &dir,
        &[
            "--log",
            &l,
            "--log-format",
            fmt,
            "--client-ip-field",
            "X-Forwarded-For",
            "--trusted-proxy",
            "10.0.0.0/8",
        ],
    );
    assert_eq!(v["rules"][0]["matches"], 5, "{v}");
    assert_eq!(v["rules"][0]["requests"]["deny"], 5);
    assert_eq!(v["rules"][0]["top_ips"][0]["key"], "45.83.64.7");
    // Without the trusted proxy, the last hop is the balancer's address.
    let v = run(
        &dir,
        &[
            "--log",
            &l,
            "--log-format",
            fmt,
            "--client-ip-field",
            "X-Forwarded-For",
        ],
    );
    assert_eq!(v["rules"][0]["matches"], 0, "{v}");
    // A header the format does not log cannot be the client's address.
    let o = rctl(&[
        "dry-run",
        dir.join("r.rctl").to_str().unwrap(),
        "--log",
        &l,
        "--log-format",
        fmt,
        "--client-ip-field",
        "X-Client-IP",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.to_lowercase().contains("x-client-ip"), "{err}");
}

#[test]
fn a_sampled_log_is_scaled_and_its_throttles_not_simulated() {
    let dir = tempdir("logs-sampled");
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    let mut log = String::new();
    for s in 0..100 {
        let ip = if s % 4 == 0 {
            "45.83.64.7"
        } else {
            "198.51.100.7"
        };
        log.push_str(&line(ip, s, "/w/index.php"));
    }
    std::fs::write(dir.join("s.log"), &log).unwrap();
    let l = dir.join("s.log").display().to_string();
    let v = run(&dir, &["--log", &l, "--sampled", "128"]);
    assert_eq!(v["totals"]["captured_requests"], 100 * 128, "{v}");
    assert_eq!(v["rules"][0]["requests"]["deny"], 25 * 128);
    let s = &v["sampling"];
    assert_eq!(s["every"], 128);
    assert_eq!(s["throttles_simulated"], false);
    // The rule on addresses: e^(-3200/128) that its top client left no line.
    let top = &s["rules"][0]["top_ips_missed_chance"][0];
    assert_eq!(top["key"], "45.83.64.7");
    let missed = top["missed"].as_f64().unwrap();
    assert!((missed - (-25.0f64).exp()).abs() < 1e-15, "{top}");
    // No throttle verdict is made up from a sample: its matches are
    // counted and scaled, what it did to them is unknown.
    assert_eq!(v["rules"][1]["requests"]["throttle"], 0, "{v}");
    assert_eq!(v["rules"][1]["matches"], 75 * 128, "{v}");
    assert_eq!(v["rules"][1]["unknown"], 75 * 128, "{v}");
    assert_eq!(v["rules"][1]["passed"], 0, "{v}");
    assert_eq!(v["totals"]["unknown_requests"], 75 * 128, "{v}");
    // Its buckets were not run: no key is shown as passed or limited.
    assert_eq!(
        v["rules"][1]["throttle"]["top"],
        serde_json::json!([]),
        "{v}"
    );
    // A shadow throttle leaves its own verdict unknown, and no request's.
    std::fs::write(
        dir.join("r.rctl"),
        RULES.replace("  priority 2\n", "  priority 2\n  shadow\n"),
    )
    .unwrap();
    let v = run(&dir, &["--log", &l, "--sampled", "128"]);
    assert_eq!(v["rules"][1]["shadow"], true, "{v}");
    assert_eq!(v["rules"][1]["matches"], 75 * 128, "{v}");
    assert_eq!(v["rules"][1]["unknown"], 75 * 128, "{v}");
    assert_eq!(v["rules"][1]["would"]["throttle"], 0, "{v}");
    assert_eq!(v["rules"][1]["passed"], 0, "{v}");
    assert_eq!(
        v["totals"]
            .get("unknown_requests")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        0,
        "{v}"
    );
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    let text = rctl(&[
        "dry-run",
        dir.join("r.rctl").to_str().unwrap(),
        "--log",
        &l,
        "--sampled",
        "128",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("sampled 1 in 128"), "{text}");
    assert!(
        text.contains("throttle verdicts are not simulated"),
        "{text}"
    );
}

#[test]
fn explain_input_lists_each_formats_fields() {
    let o = rctl(&["dry-run", "--explain-input"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = String::from_utf8_lossy(&o.stdout);
    for f in [
        "haproxy-httplog",
        "nginx-combined",
        "varnishncsa",
        "webrequest",
    ] {
        assert!(t.contains(&format!("{f}:")), "{f}\n{t}");
    }
    // nginx combined logs neither Host nor a millisecond time.
    let nginx = t
        .split("nginx-combined:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    let lacks = nginx
        .lines()
        .find(|l| l.trim_start().starts_with("lacks:"))
        .unwrap();
    assert!(lacks.contains("host"), "{nginx}");
    assert!(nginx.contains("1 s"), "{nginx}");
    let o = rctl(&["dry-run", "--explain-input", "--log-format", "webrequest"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("header(\"user-agent\")") && t.contains("1 ms"),
        "{t}"
    );
    assert!(!t.contains("nginx"), "{t}");
}

/// A week of hourly rotated logs is many files one after another: each
/// is opened when its turn comes, not all at once, so 200 of them are
/// read within 64 open descriptors, with the same report as one file of
/// all their lines.
#[test]
fn many_rotated_files_are_read_within_a_few_descriptors() {
    let dir = tempdir("logs-many-files");
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    let logs = dir.join("logs");
    std::fs::create_dir(&logs).unwrap();
    let mut all = String::new();
    for f in 0..200u32 {
        let mut text = String::new();
        for k in 0..15 {
            let s = f * 15 + k;
            let ip = if k % 5 == 0 {
                "45.83.64.9"
            } else {
                "198.51.100.7"
            };
            text.push_str(&line(ip, s, "/w/index.php"));
        }
        std::fs::write(logs.join(format!("access.log.{:03}", 200 - f)), &text).unwrap();
        all.push_str(&text);
    }
    std::fs::write(dir.join("all.log"), &all).unwrap();
    let rules = dir.join("r.rctl");
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_rctl"))
        .arg("dry-run")
        .arg(&rules)
        .arg("--log")
        .arg(&logs)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let many: Value = serde_json::from_slice(&out.stdout).unwrap();
    let one = run(&dir, &["--log", dir.join("all.log").to_str().unwrap()]);
    assert_eq!(many["totals"]["captured_requests"], 3000, "{many}");
    assert_eq!(many["inputs"].as_array().unwrap().len(), 200);
    assert_eq!(per_rule(&many), per_rule(&one));
}

/// A rotated log compressed by the real gzip and zstd: two files back
/// to back (`cat`) are read whole, and one cut short (a copy taken while
/// it was being compressed) gives the lines the tools themselves decode
/// from it, with an error saying where it ends.
#[test]
fn compressed_logs_back_to_back_or_cut_short_read_as_gzip_and_zstd_do() {
    let dir = tempdir("logs-compressed-cut");
    std::fs::write(dir.join("r.rctl"), RULES).unwrap();
    let mut log = String::new();
    for i in 0..20_000u32 {
        let ip = format!("198.51.{}.{}", i % 200, i % 250);
        log.push_str(&line(
            &ip,
            i % 3600,
            &format!("/wiki/T{}", i.wrapping_mul(2654435761)),
        ));
    }
    let plain = dir.join("access.log");
    std::fs::write(&plain, &log).unwrap();
    let p = |f: &Path| f.display().to_string();
    for (tool, ext) in [("gzip", "gz"), ("zstd", "zst")] {
        must(tool, &["-q", "-k", "-f", &p(&plain)]);
        let packed = std::fs::read(dir.join(format!("access.log.{ext}"))).unwrap();
        // Back to back: every line of both.
        let two = dir.join(format!("two.{ext}"));
        std::fs::write(&two, [packed.clone(), packed.clone()].concat()).unwrap();
        let v = run(&dir, &["--log", &p(&two)]);
        let l = &v["inputs"][0]["log"];
        assert_eq!(
            (l["lines"].as_u64(), l["judged"].as_u64()),
            (Some(40_000), Some(40_000)),
            "{tool}: {l}"
        );
        // Cut at 60%: what the tool decodes before it gives up.
        let at = packed.len() * 6 / 10;
        let cut = dir.join(format!("cut.{ext}"));
        std::fs::write(&cut, &packed[..at]).unwrap();
        let o = rctl_testkit::proc::sh(tool, &["-d", "-c", &p(&cut)]);
        assert!(
            !o.status.success(),
            "{tool} decodes a file cut short without an error"
        );
        let decoded = o.stdout;
        assert!(
            log.as_bytes().starts_with(&decoded) && decoded.len() > log.len() / 3,
            "{tool}: {} bytes",
            decoded.len()
        );
        let whole = decoded.iter().filter(|&&b| b == b'\n').count() as u64;
        let partial = u64::from(!decoded.ends_with(b"\n"));
        let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
            .current_dir(&dir)
            .args(["dry-run", "r.rctl", "--format", "json", "--log", &p(&cut)])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{tool}: {err}");
        assert!(
            err.contains(&format!("{ext}: {tool}: "))
                && err.contains(&format!("after {at} compressed bytes"))
                && err.contains("cut short"),
            "{err}"
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let l = &v["inputs"][0]["log"];
        assert_eq!(l["lines"].as_u64(), Some(whole + partial), "{tool}: {l}");
        assert!(l["judged"].as_u64().unwrap() >= whole, "{tool}: {l}");
        assert_eq!(v["totals"]["captured_requests"], l["judged"], "{v}");
    }
}
