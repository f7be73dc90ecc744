//! `rctl suggest`'s analysis against the dry run, on the same capture in
//! the same run.
//!
//! `cargo bench -p rctl-suggest --bench suggest` writes (once) a capture
//! of `RCTL_BENCH_CAPTURE_MB` megabytes (default 256) under the target
//! directory, then times, three times each and interleaved, the dry run
//! of it through the shipped rules (`DryRun::replay`) and the suggester
//! on it with the same rules (read, decide by the existing rules, find,
//! write and measure the suggestions), and prints the medians, their
//! ratio and the peak memory.
//!
//! With `RCTL_BENCH_INPUT=log`, the input is instead a generated nginx
//! log of `RCTL_BENCH_LOG_REQUESTS` requests (default 1,000,000; a day of
//! traffic in the format the suggest manual gives: millisecond time,
//! Host, User-Agent, Accept-Language, Cache-Control), timed the same way
//! against the dry run of it (`rctl_logs::replay`); the log goes to the
//! temporary directory and is deleted afterwards. Peak RSS is the
//! process's (`VmHWM`), so the memory of two sizes is compared by two
//! runs.

use rctl_dataplane::dryrun::{requests_in, DryRun};
use rctl_suggest::Obs;
use rctl_testkit::capgen;
use std::path::Path;
use std::time::Instant;

fn peak_rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
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

/// The log mode: the dry run and the suggester on the same nginx log.
fn on_log(ruleset: &rctl_compiler::ir::Ruleset) {
    let n: u64 = std::env::var("RCTL_BENCH_LOG_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let path = std::env::temp_dir().join(format!("rctl-suggest-bench-{}.log", std::process::id()));
    generate_log(&path, n);
    let opts = rctl_logs::Options {
        format: Some(
            "nginx:$msec $remote_addr \"$host\" \"$request\" $status \"$http_user_agent\" \"$http_accept_language\" \"$http_cache_control\""
                .into(),
        ),
        ..Default::default()
    };
    let paths = [path.clone()];
    let keep = rctl_suggest::headers_read(Some(ruleset));
    let (mut dry, mut sug) = (Vec::new(), Vec::new());
    let mut found = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let mut run = DryRun::new(ruleset.clone(), None).unwrap();
        rctl_logs::replay(&mut run, &paths, &opts).unwrap();
        std::hint::black_box(run.finish());
        dry.push(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let mut traffic = Vec::new();
        let (_, formats) = rctl_logs::read_requests(&paths, &opts, |i, req| {
            traffic.push(Obs::from_request(i as u32, req, Some(&keep)));
        })
        .unwrap();
        traffic.sort_by_key(|r| r.time_ns);
        let inputs: Vec<_> = formats.into_iter().map(|f| f.known).collect();
        let seen = rctl_suggest::existing(Some(ruleset.clone()), &traffic, &inputs).unwrap();
        let no = |_| false;
        let findings = rctl_suggest::find(&traffic, &seen, &no, &Default::default());
        let names: Vec<String> = (1..=findings.len())
            .map(|i| format!("suggested_{i}"))
            .collect();
        let effects =
            rctl_suggest::measure(ruleset.clone(), &traffic, &inputs, &names, &no).unwrap();
        std::hint::black_box(&effects);
        sug.push(t.elapsed().as_secs_f64());
        found = findings.len();
    }
    let _ = std::fs::remove_file(&path);
    print_figures(&format!("log: {n} requests"), n as usize, found, dry, sug);
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if std::env::var("RCTL_BENCH_INPUT").as_deref() == Ok("log") {
        let rules = rctl_compiler::compile_paths(&[root.join("rules")], &Default::default());
        on_log(&rules.ruleset.expect("the shipped rules compile"));
        return;
    }
    let mb: u64 = std::env::var("RCTL_BENCH_CAPTURE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let path = capgen::cached(mb);
    let rules = rctl_compiler::compile_paths(&[root.join("rules")], &Default::default());
    let ruleset = rules.ruleset.expect("the shipped rules compile");
    let (mut dry, mut sug) = (Vec::new(), Vec::new());
    let mut requests = 0;
    let mut found = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let mut run = DryRun::new(ruleset.clone(), None).unwrap();
        let f = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        run.replay("bench", f).unwrap();
        let report = run.finish();
        std::hint::black_box(&report);
        dry.push(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let f = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let (reqs, err) = requests_in(f);
        assert!(err.is_none());
        let keep = rctl_suggest::headers_read(Some(&ruleset));
        let mut traffic: Vec<Obs> = reqs
            .iter()
            .map(|r| Obs::from_http_keeping(r, Some(&keep)))
            .collect();
        drop(reqs);
        traffic.sort_by_key(|r| r.time_ns);
        let read = t.elapsed();
        let seen = rctl_suggest::existing(Some(ruleset.clone()), &traffic, &[]).unwrap();
        let decided = t.elapsed();
        let no = |_| false;
        let findings = rctl_suggest::find(&traffic, &seen, &no, &Default::default());
        let counted = t.elapsed();
        let names: Vec<String> = (1..=findings.len())
            .map(|i| format!("suggested_{i}"))
            .collect();
        let effects = rctl_suggest::measure(ruleset.clone(), &traffic, &[], &names, &no).unwrap();
        eprintln!(
            "read {read:.2?}, decided {decided:.2?}, found {counted:.2?}, measured {:.2?}",
            t.elapsed()
        );
        std::hint::black_box(&effects);
        sug.push(t.elapsed().as_secs_f64());
        requests = traffic.len();
        found = findings.len();
    }
    let what = format!("capture: {mb} MB, {requests} requests");
    print_figures(&what, requests, found, dry, sug);
}

/// Prints the medians of the runs, their ratio and the peak memory.
fn print_figures(what: &str, requests: usize, found: usize, dry: Vec<f64>, sug: Vec<f64>) {
    let (d, s) = (median(dry), median(sug));
    println!(
        "{what}; findings: {found}\n\
         dry run:  {d:.2} s ({:.0} requests/s)\n\
         suggest:  {s:.2} s ({:.0} requests/s)\n\
         ratio suggest/dry-run: {:.2}x\npeak RSS: {} MB",
        requests as f64 / d,
        requests as f64 / s,
        s / d,
        peak_rss_mb()
    );
}
