//! Dry-run throughput on a large capture, against tshark on the same file.
//!
//! `cargo bench -p rctl-dataplane --bench dryrun` writes (once) a capture
//! of `RCTL_BENCH_CAPTURE_MB` megabytes (default 1024) under the target
//! directory, replays it through the shipped rules three times, and runs
//! `tshark -Y http.request -T fields` on it once (skip with
//! RCTL_BENCH_NO_TSHARK=1).
//!
//! Every replay is timed twice: as shipped (two threads, on any CPU) and
//! with the process pinned to one CPU (both threads share it), for the
//! per-core figure.
//!
//! Then a capture of the same size with `RCTL_BENCH_FLOWS` flows live at
//! once (default 50,000, against 64 in the first), so that the flow table
//! holds tens of thousands of flows.
//!
//! Then pcap-parser and etherparse against rctl's reader and decoder on
//! the same capture, interleaved (`libs.rs`; only that, seven
//! times, with RCTL_BENCH_ONLY_LIBS=1).
//!
//! Then the same traffic with every request cut into 1-byte segments (as a
//! trickling or hostile client sends it), with ordinary heads and with
//! 8 and 60 KiB heads, `RCTL_BENCH_TRICKLE_MB` megabytes each (default 10): the
//! reassembler's cost per byte must not grow with the head's length.

mod libs;

use rctl_testkit::capgen;
use std::time::Instant;

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) of this process's threads (`self`) and of
/// its waited-for children, from /proc/self/stat (clock ticks of 10 ms).
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime is field 14.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let tick = 100.0;
    let at = |i: usize| f.get(i - 3).copied().unwrap_or(0.0) / tick;
    (at(14) + at(15), at(16) + at(17))
}

/// What three replays of one capture measured.
struct Replay {
    /// Median wall seconds.
    median: f64,
    /// CPU seconds per replay (all threads).
    cpu: f64,
    requests: u64,
    packets: u64,
    flows: u64,
    evicted: u64,
}

/// Runs `f` with this thread (and the threads it starts) pinned to the
/// first CPU it may run on, then restores its CPUs.
fn on_one_cpu<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: cpu_set_t is plain data; the calls read and write only the
    // set passed, for the calling thread (pid 0).
    unsafe {
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut all), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &all))
            .expect("some CPU");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
        let out = f();
        assert_eq!(libc::sched_setaffinity(0, size, &all), 0);
        out
    }
}

/// Replays `path` three times.
fn replay3(rs: &rctl_compiler::ir::Ruleset, path: &std::path::Path) -> Replay {
    let mut times = Vec::new();
    let mut r = Replay {
        median: 0.0,
        cpu: 0.0,
        requests: 0,
        packets: 0,
        flows: 0,
        evicted: 0,
    };
    let cpu_before = cpu_seconds().0;
    for _ in 0..3 {
        let mut run = rctl_dataplane::dryrun::DryRun::new(rs.clone(), None).unwrap();
        let t = Instant::now();
        let file = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).unwrap());
        run.replay("bench", file).unwrap();
        let report = run.finish();
        times.push(t.elapsed().as_secs_f64());
        r.requests = report.totals.requests;
        r.packets = report.totals.packets;
        r.flows = report.totals.flows;
        r.evicted = report.totals.evicted_flows;
    }
    r.cpu = (cpu_seconds().0 - cpu_before) / 3.0;
    times.sort_by(f64::total_cmp);
    r.median = times[1];
    r
}

/// Replays `path` three times as shipped and three times on one CPU, and
/// prints both.
fn replay_both(rs: &rctl_compiler::ir::Ruleset, path: &std::path::Path, what: &str) -> Replay {
    let size = std::fs::metadata(path).unwrap().len() as f64 / 1e6;
    let two = replay3(rs, path);
    let one = on_one_cpu(|| replay3(rs, path));
    println!(
        "{what}: {size:.0} MB, {} packets, {} requests, {} flows ({} evicted); peak RSS so far {} MB",
        two.packets,
        two.requests,
        two.flows,
        two.evicted,
        peak_rss_kb() / 1024
    );
    for (how, r) in [("two threads", &two), ("one CPU", &one)] {
        println!(
            "  rctl dry-run, {how}: median {:.2} s of 3: {:.0} MB/s, {:.0} requests/s; CPU {:.2} s per run: {:.0} MB per CPU-second",
            r.median,
            size / r.median,
            r.requests as f64 / r.median,
            r.cpu,
            size / r.cpu
        );
    }
    assert_eq!(one.requests, two.requests);
    two
}

/// Captures whose requests come in 1-byte segments: ordinary heads (about
/// 450 bytes), 8 KiB and 60 KiB heads (the limit is 64 KiB).
fn trickle(rs: &rctl_compiler::ir::Ruleset, dir: &std::path::Path) {
    let mb: u64 = std::env::var("RCTL_BENCH_TRICKLE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for padding in [0, 8 << 10, 60 << 10] {
        let path = dir.join(format!("trickle-{mb}mb-{padding}.pcap"));
        let shape = capgen::Shape {
            segment: Some(1),
            padding,
        };
        let (_, generated) = capgen::write_shaped(&path, mb << 20, shape).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let r = replay3(rs, &path);
        assert_eq!(r.requests, generated, "every trickled request is parsed");
        println!(
            "1-byte segments, {} B padding in each head: {:.0} MB, {} packets, {} requests: median {:.3} s of 3, {:.1} MB/s",
            padding,
            size as f64 / 1e6,
            r.packets,
            r.requests,
            r.median,
            size as f64 / 1e6 / r.median
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let mb: u64 = std::env::var("RCTL_BENCH_CAPTURE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = capgen::bench_dir();
    let path = capgen::cached(mb);
    let size = std::fs::metadata(&path).unwrap().len();
    if std::env::var_os("RCTL_BENCH_ONLY_LIBS").is_some() {
        libs::compare(&path, 7);
        return;
    }
    let c = rctl_compiler::compile_paths(&[root.join("rules")], &Default::default());
    let rs = c.ruleset.expect("rules compile");
    let Replay {
        median,
        cpu,
        requests,
        ..
    } = replay_both(
        &rs,
        &path,
        &format!("capture, {} flows live", capgen::FLOWS),
    );
    // pcap-parser and etherparse against the hand-written reader and
    // decoder, on the same capture (skip with RCTL_BENCH_NO_LIBS=1).
    if std::env::var_os("RCTL_BENCH_NO_LIBS").is_none() {
        libs::compare(&path, 5);
    }
    let flows: usize = std::env::var("RCTL_BENCH_FLOWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let many = dir.join(format!("large-{mb}mb-{flows}flows.pcap"));
    if !many.exists() {
        let shape = capgen::Shape::default();
        let (_, r) = capgen::write_live(&many, mb << 20, shape, flows).unwrap();
        eprintln!("wrote {} ({r} requests)", many.display());
    }
    let m = replay_both(&rs, &many, &format!("capture, {flows} flows live"));
    assert!(m.flows as usize > flows, "the flows are all seen");
    trickle(&rs, &dir);
    if std::env::var_os("RCTL_BENCH_NO_TSHARK").is_some() {
        return;
    }
    let t = Instant::now();
    let child_cpu = cpu_seconds().1;
    let out = std::process::Command::new("tshark")
        .args([
            "-r",
            path.to_str().unwrap(),
            "-Y",
            "http.request",
            "-T",
            "fields",
            "-e",
            "http.request.method",
            "-e",
            "http.request.uri",
            "-e",
            "http.host",
            "-e",
            "http.user_agent",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let secs = t.elapsed().as_secs_f64();
            let tcpu = cpu_seconds().1 - child_cpu;
            let lines = o.stdout.iter().filter(|&&b| b == b'\n').count();
            println!(
                "tshark: {secs:.1} s ({:.1} MB/s, {lines} request lines, rctl found {requests}), CPU {tcpu:.1} s: rctl (two threads) is {:.0}x faster by wall time, {:.0}x by CPU time",
                size as f64 / 1e6 / secs,
                secs / median,
                tcpu / cpu
            );
        }
        Ok(o) => println!("tshark failed: {}", o.status),
        Err(e) => println!("tshark not run: {e}"),
    }
}
