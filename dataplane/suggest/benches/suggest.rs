//! `rctl suggest` against `rctl dry-run` on the same input, in the same
//! run: both are the release binary (`RCTL_BIN`, default
//! `target/release/rctl`: `cargo build --release -p rctl` first), run as
//! an operator runs them, three times each, interleaved; each run's wall
//! time, CPU time (user + system) and peak RSS come from `wait4`.
//!
//! `RCTL_BENCH_INPUT=log` (the default) generates an nginx log of
//! `RCTL_BENCH_LOG_REQUESTS` requests (default 10,000,000; a day of
//! traffic in the format the suggest manual gives: millisecond time,
//! Host, User-Agent, Accept-Language, Cache-Control; browsers with
//! Accept-Language on many addresses, a python-requests swarm on
//! /sparql, one heavy address) into the temporary directory, deleted
//! afterwards. `RCTL_BENCH_INPUT=capture` uses the generated capture of
//! `RCTL_BENCH_CAPTURE_MB` megabytes (default 256) instead.
//!
//! Both get the shipped rules; suggest's output goes to a file in the
//! temporary directory.

use rctl_testkit::capgen;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// One run's figures.
struct Run {
    wall_s: f64,
    cpu_s: f64,
    max_rss_mb: f64,
}

/// Runs `cmd` to its end; its figures, from `wait4`.
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also gives its rusage"
)]
fn measure(cmd: &mut Command) -> Run {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // A process group of its own: nothing else is waited for.
    cmd.process_group(0);
    let t = Instant::now();
    let child = cmd.spawn().expect("the rctl binary runs");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for our child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, status and ru are valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    let wall_s = t.elapsed().as_secs_f64();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed ({status})"
    );
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Run {
        wall_s,
        cpu_s: secs(ru.ru_utime) + secs(ru.ru_stime),
        max_rss_mb: ru.ru_maxrss as f64 / 1024.0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Writes `n` requests as the nginx log of the suggest manual: browsers
/// with Accept-Language on many addresses, a python-requests swarm on
/// /sparql, one heavy address, over a day.
fn generate_log(path: &Path, n: u64) {
    use std::io::Write as _;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    let step_ms = (86_400_000 / n.max(1)).max(1);
    for i in 0..n {
        let t = 1_790_000_000_000 + i * step_ms;
        let (ip, host, target, ua, lang) = match i % 10 {
            0..=5 => (
                format!(
                    "93.{}.{}.{}",
                    i % 200,
                    (i / 200) % 250,
                    1 + (i / 50_000) % 250
                ),
                "www.wikidata.org",
                format!("/wiki/Q{}", i % 100_000),
                firefox,
                "en-GB,en;q=0.8",
            ),
            6 | 7 => (
                format!("185.{}.101.7", 100 + i % 100),
                "query.wikidata.org",
                format!("/sparql?query=SELECT%20{}", i % 1000),
                "python-requests/2.31.0",
                "-",
            ),
            8 => (
                "45.83.64.7".to_string(),
                "query.wikidata.org",
                format!("/sparql?query=ASK%20{}", i % 1000),
                "Go-http-client/1.1",
                "-",
            ),
            _ => (
                format!("151.101.{}.{}", i % 250, 1 + (i / 250) % 250),
                "fr.wikipedia.org",
                format!("/api/rest_v1/page/html/Titre_{}", i % 5000),
                firefox,
                "fr",
            ),
        };
        writeln!(
            w,
            "{}.{:03} {ip} \"{host}\" \"GET {target} HTTP/1.1\" 200 \"{ua}\" \"{lang}\" \"-\"",
            t / 1000,
            t % 1000
        )
        .unwrap();
    }
    w.flush().unwrap();
}

const NGINX: &str = "nginx:$msec $remote_addr \"$host\" \"$request\" $status \"$http_user_agent\" \"$http_accept_language\" \"$http_cache_control\"";

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::env::var_os("RCTL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/rctl"));
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p rctl (or set RCTL_BIN)",
        bin.display()
    );
    let rules = root.join("rules");
    let tmp = std::env::temp_dir().join(format!("rctl-suggest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (input, what, generated): (Vec<String>, String, Option<PathBuf>) =
        if std::env::var("RCTL_BENCH_INPUT").as_deref() == Ok("capture") {
            let mb: u64 = std::env::var("RCTL_BENCH_CAPTURE_MB")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(256);
            let path = capgen::cached(mb);
            (
                vec!["--pcap".into(), path.display().to_string()],
                format!("capture of {mb} MB"),
                None,
            )
        } else {
            let n: u64 = std::env::var("RCTL_BENCH_LOG_REQUESTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(10_000_000);
            let path = tmp.join("access.log");
            generate_log(&path, n);
            let mb = std::fs::metadata(&path).unwrap().len() >> 20;
            (
                vec![
                    "--log".into(),
                    path.display().to_string(),
                    "--log-format".into(),
                    NGINX.into(),
                ],
                format!("nginx log of {n} requests, {mb} MB"),
                Some(path),
            )
        };
    let out = tmp.join("suggested.rctl");
    let (mut dry, mut sug) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        dry.push(measure(
            Command::new(&bin)
                .arg("dry-run")
                .arg(&rules)
                .args(&input)
                .args(["--format", "json"]),
        ));
        sug.push(measure(
            Command::new(&bin)
                .arg("suggest")
                .arg(&rules)
                .args(&input)
                .args(["--format", "json", "-o"])
                .arg(&out),
        ));
    }
    let found = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .matches("\nrule ")
        .count();
    if let Some(p) = generated {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let fig = |v: &[Run]| {
        (
            median(v.iter().map(|r| r.wall_s).collect()),
            median(v.iter().map(|r| r.cpu_s).collect()),
            v.iter().map(|r| r.max_rss_mb).fold(0.0, f64::max),
        )
    };
    let (dw, dc, dm) = fig(&dry);
    let (sw, sc, sm) = fig(&sug);
    println!(
        "{what}; rules suggested: {found}\n\
         | | wall (median) | CPU (median) | peak RSS (max) |\n\
         |---|---|---|---|\n\
         | `rctl dry-run` (the baseline) | {dw:.2} s | {dc:.2} s | {dm:.0} MB |\n\
         | `rctl suggest` | {sw:.2} s | {sc:.2} s | {sm:.0} MB |\n\
         | ratio | **{:.2}×** | **{:.2}×** | {:.2}× |",
        sw / dw,
        sc / dc,
        sm / dm
    );
}
