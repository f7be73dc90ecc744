//! Dry runs on access logs: generated logs of about 1 GB (nginx combined,
//! HAProxy httplog, webrequest JSON) through the shipped rules on one
//! thread, against baselines on the same file in the same run: `wc -l`
//! (the floor: reading and counting lines), and, on the nginx log,
//! GoAccess (`goaccess --log-format=COMBINED`) and CrowdSec's replay
//! (`crowdsec -dsn file://… -type nginx`) where installed and configured.
//!
//! `RCTL_BENCH_LOG_MB` sets the size (default 1024); `RCTL_BENCH_KEEP`
//! a directory to write the logs to and keep; `RCTL_BENCH_FORMATS`
//! which logs are run (a comma-separated list of `nginx-combined`,
//! `haproxy-httplog`, `webrequest`; default all three, the Parquet table
//! with `webrequest`); `RCTL_BENCH_CROWDSEC_LINES`
//! how many lines CrowdSec replays (default 5000: it runs at tens to
//! thousands a second, so the full file would take hours; its rate is
//! taken on that prefix). The logs go to the temporary directory and are
//! deleted afterwards. The traffic's values (titles, hosts, User-Agents,
//! clients) follow the distributions described in `traffic/mod.rs`: a
//! million titles and millions of clients, so no per-value cache can
//! serve the whole run from a handful of entries.
//!
//! ```sh
//! cargo bench -p rctl-logs --bench logs
//! ```

use rctl_dataplane::dryrun::DryRun;
use rctl_logs::detect::Spec;
use rctl_logs::run::Options;
use rctl_testkit::Rng;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

mod traffic;

#[derive(Clone, Copy)]
enum Kind {
    Nginx,
    Haproxy,
    Webrequest,
}

fn months(m: u64) -> &'static str {
    [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][m as usize % 12]
}

/// Writes about `mb` MB of `kind` lines; returns the line count.
fn generate(path: &Path, kind: Kind, mb: u64) -> u64 {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut bytes, mut lines) = (0u64, 0u64);
    let mut line = String::with_capacity(512);
    while bytes < mb << 20 {
        // About 10,000 requests a second; a day's clock from noon.
        let ms = lines / 10;
        let (s, frac) = (ms / 1000, ms % 1000);
        let (hh, m, sec) = (12 + s / 3600 % 12, s / 60 % 60, s % 60);
        let h = traffic::hit(&mut r);
        let (ip, host, status) = (&h.ip, &h.host, h.status);
        let method = h.method;
        let target = if h.query.is_empty() {
            h.path.clone()
        } else {
            format!("{}?{}", h.path, h.query)
        };
        let ua = h.ua.as_deref().unwrap_or("-");
        let referer = h.referer.as_deref().unwrap_or("-");
        line.clear();
        use std::fmt::Write as _;
        let _ = match kind {
            Kind::Nginx => writeln!(
                line,
                "{ip} - - [13/{}/2026:{hh:02}:{m:02}:{sec:02} +0000] \"{method} {target} HTTP/1.1\" {status} {} \"{referer}\" \"{ua}\"",
                months(4),
                h.bytes
            ),
            Kind::Haproxy => writeln!(
                line,
                // A header not sent is captured empty.
                "{ip}:{} [13/{}/2026:{hh:02}:{m:02}:{sec:02}.{frac:03}] edge origin/o 0/0/0/1/1 {status} {} - - ---- 1/1/0/0/0 0/0 {{{}|{host}}} \"{method} {target} HTTP/1.1\"",
                1024 + r.below(60_000),
                months(4),
                h.bytes,
                h.ua.as_deref().unwrap_or("")
            ),
            Kind::Webrequest => {
                let p = &h.path;
                let q = if h.query.is_empty() {
                    String::new()
                } else {
                    format!("?{}", h.query)
                };
                let ua = h.ua.as_deref().unwrap_or("");
                writeln!(
                    line,
                    "{{\"dt\":\"2026-05-13T{hh:02}:{m:02}:{sec:02}.{frac:03}Z\",\"ip\":\"{ip}\",\"uri_host\":\"{host}\",\"uri_path\":\"{p}\",\"uri_query\":\"{q}\",\"http_method\":\"{method}\",\"user_agent\":\"{ua}\",\"accept_language\":\"en\",\"referer\":\"{referer}\",\"x_analytics\":\"\",\"http_status\":\"{status}\"}}"
                )
            }
        };
        w.write_all(line.as_bytes()).unwrap();
        bytes += line.len() as u64;
        lines += 1;
    }
    w.flush().unwrap();
    lines
}

/// Wall seconds of `cmd`, its stdout discarded; `None` if it failed.
fn timed(mut cmd: Command) -> Option<f64> {
    let t = Instant::now();
    let ok = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| t.elapsed().as_secs_f64())
}

/// Seconds this thread has run on a CPU (Linux's schedstat), to set
/// beside the wall time on a machine that other work shares: a
/// per-core rate is lines per CPU second. `None` where it is not kept.
fn thread_cpu() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn row(what: &str, lines: u64, bytes: u64, secs: f64) {
    println!(
        "| {what} | {lines} | {:.2} | {:.0} | {:.0} |",
        secs,
        lines as f64 / secs,
        bytes as f64 / secs / 1e6
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let c = rctl_compiler::compile_paths(&[root.join("rules")], &Default::default());
    let rs = c.ruleset.expect("the shipped rules compile");
    let mb: u64 = std::env::var("RCTL_BENCH_LOG_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let cs_lines: u64 = std::env::var("RCTL_BENCH_CROWDSEC_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let formats: Vec<String> = std::env::var("RCTL_BENCH_FORMATS")
        .unwrap_or_else(|_| "nginx-combined,haproxy-httplog,webrequest".into())
        .split(',')
        .map(|f| f.trim().to_string())
        .collect();
    // `RCTL_BENCH_KEEP=DIR` writes the logs there and keeps them (to
    // profile `rctl dry-run --log` on the same traffic).
    let keep = std::env::var_os("RCTL_BENCH_KEEP").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rctl-bench-logs-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap();
    println!("| run | lines | seconds | lines/s | MB/s |");
    println!("|---|---|---|---|---|");
    for (kind, name, format) in [
        (Kind::Nginx, "nginx combined", "nginx-combined"),
        (Kind::Haproxy, "HAProxy httplog", "haproxy-httplog"),
        (Kind::Webrequest, "webrequest JSON", "webrequest"),
    ] {
        if !formats.iter().any(|f| f == format) {
            continue;
        }
        let path = dir.join(format!("{format}.log"));
        let lines = generate(&path, kind, mb);
        let bytes = std::fs::metadata(&path).unwrap().len();
        // Warm the page cache, then the floor.
        let mut wc = Command::new("wc");
        wc.arg("-l").arg(&path);
        let _ = timed(wc);
        let mut wc = Command::new("wc");
        wc.arg("-l").arg(&path);
        let floor = timed(wc).expect("wc -l");
        let opts = Options {
            format: Some(format.to_string()),
            spec: Spec {
                captures: vec!["user-agent".into(), "host".into()],
            },
            ..Options::default()
        };
        let (secs, _) = judged(&rs, &path, &opts, lines, name);
        row(
            &format!("rctl dry-run, {name}, shipped rules"),
            lines,
            bytes,
            secs,
        );
        row(&format!("wc -l, {name}"), lines, bytes, floor);
        if let Kind::Nginx = kind {
            if installed("goaccess") {
                let mut g = Command::new("goaccess");
                g.arg(&path)
                    .args(["--log-format=COMBINED", "-o"])
                    .arg(dir.join("goaccess.html"));
                if let Some(s) = timed(g) {
                    row("goaccess --log-format=COMBINED", lines, bytes, s);
                }
            }
            if installed("crowdsec") {
                let head = dir.join("head.log");
                let text = std::fs::read(&path).unwrap();
                let end = text
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| b == b'\n')
                    .nth(cs_lines.saturating_sub(1) as usize)
                    .map_or(text.len(), |(i, _)| i + 1);
                std::fs::write(&head, &text[..end]).unwrap();
                drop(text);
                let n = cs_lines.min(lines);
                match crowdsec_replay(&head) {
                    Ok(s) => row(
                        &format!("crowdsec -dsn file://… -type nginx (first {n} lines)"),
                        n,
                        end as u64,
                        s,
                    ),
                    Err(why) => println!("| crowdsec replay: did not run ({why}) | | | | |"),
                }
            }
        }
        if let Kind::Webrequest = kind {
            let table = dir.join("webrequest.parquet");
            to_parquet(&path, &table);
            let opts = Options {
                spec: Spec::default(),
                ..Options::default()
            };
            let (secs, l) = judged(&rs, &table, &opts, lines, "webrequest Parquet");
            let size = std::fs::metadata(&table).unwrap().len();
            row(
                &format!(
                    "rctl dry-run, webrequest Parquet (Snappy; columns read: {})",
                    l.columns.join(", ")
                ),
                lines,
                size,
                secs,
            );
            if keep.is_none() {
                std::fs::remove_file(&table).unwrap();
            }
        }
        if keep.is_none() {
            std::fs::remove_file(&path).unwrap();
        }
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// CrowdSec's replay of `log`, in seconds: from its "Starting processing
/// data" to its "Acquisition is finished" (Debian's 1.4.6 stays up to
/// serve its local API after a file is read, and with `-no-api` will not
/// start without one to log in to, so it runs with the in-process API
/// its configuration puts on loopback, and is stopped once it is done).
fn crowdsec_replay(log: &Path) -> Result<f64, String> {
    use std::io::BufRead as _;
    let mut child = Command::new("crowdsec")
        .arg("-dsn")
        .arg(format!("file://{}", log.display()))
        .args(["-type", "nginx"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let err = child.stderr.take().ok_or("no stderr")?;
    let (mut start, mut secs) = (None, Err("it stopped before it was done".to_string()));
    let deadline = Instant::now() + std::time::Duration::from_secs(1800);
    for line in std::io::BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        if line.contains("Starting processing data") {
            start = Some(Instant::now());
        } else if line.contains("Acquisition is finished") {
            secs = start
                .map(|t| t.elapsed().as_secs_f64())
                .ok_or_else(|| "it finished before it started".to_string());
            break;
        } else if line.contains("level=fatal") {
            secs = Err(line);
            break;
        }
        if Instant::now() > deadline {
            secs = Err("over 30 minutes".into());
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    secs
}

/// Times the dry run of `path` (one thread), checking that each of its
/// `lines` was judged; the seconds and what was read.
fn judged(
    rs: &rctl_compiler::ir::Ruleset,
    path: &Path,
    opts: &Options,
    lines: u64,
    name: &str,
) -> (f64, rctl_dataplane::dryrun::LogInput) {
    let mut run = DryRun::new(rs.clone(), None).unwrap();
    let cpu = thread_cpu();
    let t = Instant::now();
    let summary =
        rctl_logs::replay(&mut run, std::slice::from_ref(&path.to_path_buf()), opts).unwrap();
    let report = run.finish();
    let secs = t.elapsed().as_secs_f64();
    if let (Some(a), Some(b)) = (cpu, thread_cpu()) {
        row(
            &format!("rctl dry-run, {name}: CPU time of its thread (wall time below)"),
            lines,
            std::fs::metadata(path).map_or(0, |m| m.len()),
            b - a,
        );
    }
    let (_, l) = summary.inputs.into_iter().next().unwrap();
    assert_eq!(
        (l.lines, l.judged),
        (lines, lines),
        "{name}: every line judged"
    );
    assert_eq!(report.totals.captured_requests, lines);
    (secs, l)
}

/// The webrequest JSON lines at `json` as a refined table (every column
/// text but `ts`, a millisecond timestamp; Snappy; row groups of a
/// million rows, as Spark writes them).
fn to_parquet(json: &Path, out: &Path) {
    use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray};
    use std::io::BufRead as _;
    use std::sync::Arc;
    const COLS: [&str; 11] = [
        "dt",
        "ip",
        "uri_host",
        "uri_path",
        "uri_query",
        "http_method",
        "user_agent",
        "accept_language",
        "referer",
        "x_analytics",
        "http_status",
    ];
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    let mut writer = None;
    let r = std::io::BufReader::new(std::fs::File::open(json).unwrap());
    let mut cols: Vec<Vec<String>> = vec![Vec::new(); COLS.len()];
    let mut ts: Vec<i64> = Vec::new();
    let mut flush = |cols: &mut Vec<Vec<String>>, ts: &mut Vec<i64>| {
        let mut arrays: Vec<(&str, ArrayRef)> = COLS
            .iter()
            .zip(cols.iter_mut())
            .map(|(n, c)| {
                (
                    *n,
                    Arc::new(StringArray::from(std::mem::take(c))) as ArrayRef,
                )
            })
            .collect();
        arrays.push((
            "ts",
            Arc::new(TimestampMillisecondArray::from(std::mem::take(ts))),
        ));
        let batch = RecordBatch::try_from_iter(arrays).unwrap();
        let w = writer.get_or_insert_with(|| {
            parquet::arrow::ArrowWriter::try_new(
                std::fs::File::create(out).unwrap(),
                batch.schema(),
                Some(props.clone()),
            )
            .unwrap()
        });
        w.write(&batch).unwrap();
    };
    for line in r.lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        for (c, n) in cols.iter_mut().zip(COLS) {
            c.push(v[n].as_str().unwrap_or_default().to_string());
        }
        let dt = v["dt"].as_str().unwrap();
        let (ns, _) = rctl_logs::time::TimeFormat::Iso8601
            .parse(dt.as_bytes())
            .unwrap();
        ts.push((ns / 1_000_000) as i64);
        if ts.len() == 1 << 16 {
            flush(&mut cols, &mut ts);
        }
    }
    if !ts.is_empty() {
        flush(&mut cols, &mut ts);
    }
    if let Some(w) = writer {
        w.close().unwrap();
    }
}
