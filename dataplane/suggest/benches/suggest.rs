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

fn main() {
    let mb: u64 = std::env::var("RCTL_BENCH_CAPTURE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
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
        let mut traffic: Vec<Obs> = reqs.iter().map(Obs::from_http).collect();
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
    let (d, s) = (median(dry), median(sug));
    println!(
        "capture: {mb} MB, {requests} requests; findings: {found}\n\
         dry run:  {d:.2} s ({:.0} requests/s)\n\
         suggest:  {s:.2} s ({:.0} requests/s)\n\
         ratio suggest/dry-run: {:.2}x\npeak RSS: {} MB",
        requests as f64 / d,
        requests as f64 / s,
        s / d,
        peak_rss_mb()
    );
}
