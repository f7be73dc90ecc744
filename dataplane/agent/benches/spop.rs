//! The SPOE agent alone: NOTIFY frames per second per core.
//!
//! A load generator (two plain threads: one writes pre-encoded NOTIFY
//! frames, one reads the ACKs) pipelines frames over a unix socket to an
//! agent running on one tokio runtime thread, keeping `WINDOW` frames in
//! flight. The agent decides each `rctl-req` with the generated rulesets
//! of `rctl_testkit::gen` (10, 1,000 and 10,000 rules) and
//! the engine bench's request mix. In the same run, the same generator drives
//! the protocol's floor: a minimal agent on the same codec and frame I/O
//! that acks every NOTIFY without deciding (no fields, no engine, no
//! set-var).
//!
//! Frames per second are counted over a measured window after a warm-up;
//! "per core" divides by the agent thread's own CPU time in that window
//! (from /proc/self/task/TID/schedstat). The decision's share is the time
//! the observer is told each decision took over the agent thread's CPU
//! time.
//!
//! Each ruleset runs twice, with the observer counting each decision for
//! `rctl top` (as `rctl serve --top` does) and without, and the cost of
//! counting on the request path is their ratio per agent-CPU-second. The
//! counting itself runs on a thread of its own (`rctl-top`), whose CPU
//! time is reported beside it, so that the whole cost is stated too.
//!
//! And a third time with a tap open (`rctl tap`): the request path
//! records each decision for it, and a thread of its own (`rctl-tap`,
//! as the tap's connection does) takes the records every 50 ms and
//! writes their webrequest lines. Every run records for taps as `rctl
//! serve` does, so the first (none open) has the one load a decision
//! costs when nobody taps.
//!
//! `cargo bench -p rctl-agent --bench spop` (RCTL_BENCH_SECS sets the
//! window, default 3 s; RCTL_BENCH_RULES the sizes, default 10,1000,10000).

use rctl_agent::judge::{Fields, Generation, Judge, Observer, Outcome};
use rctl_agent::spop::conn::{FrameReader, FrameWriter};
use rctl_agent::spop::data::Value;
use rctl_agent::spop::frame::{encode_agent_hello, Encoder, FrameType, Limits};
use rctl_agent::spop::{serve_with, Config, Listener};
use rctl_dataplane::{Decision, Engine, EngineConfig};
use rctl_testkit::{gen, mix};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NOTIFY frames in flight.
const WINDOW: u64 = 512;
/// Frames per write.
const BATCH: usize = 64;

/// Sums what the observer is told; with `top`, also counts each
/// decision for `rctl top`, and records it for the open taps, as `rctl
/// serve` does.
#[derive(Default)]
struct Timing {
    decisions: AtomicU64,
    decision_ns: AtomicU64,
    top: Option<rctl_agent::top::TopCounts>,
    taps: Arc<rctl_agent::tap::Taps>,
}

/// What the agent does besides deciding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing (no tap open: one load per decision).
    Plain,
    /// Counts for `rctl top`.
    Top,
    /// Records for one open tap, whose lines a thread writes.
    Tap,
}

impl Observer for Timing {
    fn decided(
        &self,
        g: &Generation,
        f: &Fields<'_>,
        o: &Outcome,
        d: &Decision,
        elapsed: Duration,
    ) {
        if let Some(t) = &self.top {
            t.decided(g, f, o, d, elapsed);
        }
        self.taps.record(f);
        self.decisions.fetch_add(1, Ordering::Relaxed);
        self.decision_ns
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
    fn failed(&self, kind: &'static str, detail: &str) {
        eprintln!("agent failure: {kind}: {detail}");
    }
}

/// `n` NOTIFY frames, one `rctl-req` each, carrying the engine bench's
/// request mix (`rctl_testkit::mix`) as HAProxy would send
/// it: method, host, target, addresses, port and the headers as `h.*`.
fn notify_frames(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in mix::requests(n).iter().enumerate() {
        let IpAddr::V4(src) = r.ip else {
            unreachable!("the mix is IPv4")
        };
        let names: Vec<String> = r
            .headers
            .iter()
            .map(|(h, _)| format!("h.{}", h.to_ascii_lowercase()))
            .collect();
        let mut args: Vec<(&[u8], Value<'_>)> = vec![
            (b"method", Value::String(r.method.as_bytes())),
            (b"host", Value::String(r.host.as_bytes())),
            (b"target", Value::String(r.target.as_bytes())),
            (b"src", Value::Ipv4(src)),
            (b"dst", Value::Ipv4([10, 0, 0, 1].into())),
            (b"dst_port", Value::Int64(443)),
            (b"h.cache-control", Value::Null),
        ];
        for (name, (_, v)) in names.iter().zip(&r.headers) {
            args.push((name.as_bytes(), Value::String(v.as_bytes())));
        }
        let mut e = Encoder::new(&mut out, FrameType::Notify, i as u64 + 1, 1);
        e.message(b"rctl-req", &args);
        e.finish();
    }
    out
}

/// The generated ruleset with `rules` rules, as the engine bench builds it.
fn judge(rules: usize) -> Arc<Judge> {
    let dir = std::env::temp_dir().join(format!("rctl-spop-bench-{rules}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    gen::write_ruleset(&dir, (rules / 20).clamp(1, 50), 2_000, rules, rules);
    let c = rctl_compiler::compile_paths(&[dir.join("rules.rctl")], &Default::default());
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::new(
        c.ruleset.expect("generated ruleset compiles"),
        &EngineConfig::default(),
    )
    .unwrap();
    let g = Generation {
        engine,
        sha256: String::new(),
        number: 1,
        installed_unix: 0,
    };
    Arc::new(Judge::new(g, false))
}

/// The protocol's floor: answers the HELLO, then acks every frame with
/// no action, on the same frame reader and writer as the agent.
async fn floor_agent(listener: tokio::net::UnixListener) {
    let (s, _) = listener.accept().await.unwrap();
    let (r, w) = s.into_split();
    let (mut r, mut w) = (FrameReader::new(r), FrameWriter::new(w));
    let limits = Limits::default();
    let long = Duration::from_secs(60);
    let mut first = true;
    while let Ok(Some(f)) = r.read_frame(&limits, long, long).await {
        if first {
            encode_agent_hello(w.buffer(), "2.0", limits.max_frame_size, "pipelining,async");
            first = false;
        } else {
            let (sid, fid) = (f.stream_id, f.frame_id);
            Encoder::new(w.buffer(), FrameType::Ack, sid, fid).finish();
        }
        if !r.has_buffered_frame(&limits) && w.flush(long).await.is_err() {
            return;
        }
    }
}

/// CPU nanoseconds of a thread of this process.
fn cpu_ns(tid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// The thread named `name` (`rctl top`'s counter, or the tap's writer:
/// off the request path), if one runs.
fn counter_tid(name: &str) -> Option<String> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_string_lossy().into_owned())
    })
}

/// Opens a tap on `taps` and writes its lines on a thread of its own
/// until `stop`: how many it wrote and lost.
fn tap_writer(
    taps: &Arc<rctl_agent::tap::Taps>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    let tap = taps.open().unwrap();
    std::thread::Builder::new()
        .name("rctl-tap".into())
        .spawn(move || {
            let (mut spare, mut out, mut sink) = (Vec::new(), Vec::new(), std::io::sink());
            let mut written = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(rctl_agent::tap::DRAIN_EVERY);
                written += tap.take(&mut spare, &mut out).0.requests;
                sink.write_all(&out).unwrap();
                out.clear();
            }
            let (w, lost) = tap.close(&mut out);
            (written + w.requests, lost)
        })
        .unwrap()
}

struct Run {
    frames_per_s: f64,
    frames_per_cpu_s: f64,
    cpu_share: f64,
    decision_share: f64,
    /// The counter thread's CPU time over the agent thread's.
    counter_share: f64,
    /// The share of decided requests the counters dropped (their buffer
    /// full: the counter thread behind).
    dropped: f64,
}

/// Runs the generator against an agent on one runtime thread: `judge`
/// decides (and counts for `rctl top` or writes a tap, by `mode`), or
/// with `None` the floor agent acks.
fn run(judge: Option<Arc<Judge>>, frames: &[u8], secs: f64, mode: Mode) -> Run {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("rctl-spop-bench-sock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sock = dir.join("spoe.sock");
    let timing = Arc::new(Timing {
        top: (mode == Mode::Top).then(Default::default),
        ..Default::default()
    });
    let stop_tap = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = (mode == Mode::Tap).then(|| tap_writer(&timing.taps, Arc::clone(&stop_tap)));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (sock2, timing2) = (sock.clone(), timing.clone());
    let server = std::thread::spawn(move || {
        let tid = std::fs::read_link("/proc/thread-self").unwrap();
        let tid = tid.file_name().unwrap().to_string_lossy().into_owned();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            match judge {
                Some(j) => {
                    let l = Listener::bind(&format!("unix:{}", sock2.display())).unwrap();
                    tid_tx.send(tid).unwrap();
                    let stop = async move {
                        let _ = stop_rx.await;
                    };
                    serve_with(l, j, timing2, Config::default(), stop)
                        .await
                        .unwrap();
                }
                None => {
                    std::fs::create_dir_all(sock2.parent().unwrap()).unwrap();
                    let l = tokio::net::UnixListener::bind(&sock2).unwrap();
                    tid_tx.send(tid).unwrap();
                    floor_agent(l).await;
                }
            }
        });
    });
    let tid = tid_rx.recv().unwrap();
    let name = if mode == Mode::Tap {
        "rctl-tap"
    } else {
        "rctl-top"
    };
    let mut r = generate(&sock, frames, secs, &tid, &timing, name);
    let _ = stop_tx.send(());
    server.join().unwrap();
    if let Some(w) = writer {
        stop_tap.store(true, Ordering::Relaxed);
        let (written, lost) = w.join().unwrap();
        assert_eq!(
            written + lost,
            timing.decisions.load(Ordering::Relaxed),
            "every decision written or lost"
        );
        r.dropped = lost as f64 / (written + lost).max(1) as f64;
    }
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Offsets of each frame in `frames`.
fn offsets(frames: &[u8]) -> Vec<usize> {
    let mut v = vec![0];
    let mut at = 0;
    while at < frames.len() {
        at += 4 + u32::from_be_bytes(frames[at..at + 4].try_into().unwrap()) as usize;
        v.push(at);
    }
    v
}

fn generate(
    sock: &Path,
    frames: &[u8],
    secs: f64,
    tid: &str,
    timing: &Timing,
    counter_name: &str,
) -> Run {
    let mut s = UnixStream::connect(sock).unwrap();
    let mut hello = Vec::new();
    let mut e = Encoder::new(&mut hello, FrameType::HaproxyHello, 0, 0);
    e.kv(b"supported-versions", Value::String(b"2.0"))
        .kv(b"max-frame-size", Value::Uint32(16380))
        .kv(b"capabilities", Value::String(b"pipelining,async"));
    e.finish();
    s.write_all(&hello).unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let (mut rs, a2) = (s.try_clone().unwrap(), acked.clone());
    // The reader counts frames by their length prefixes; the first is the
    // AGENT-HELLO.
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let (mut have, mut count) = (0usize, 0u64);
        loop {
            let n = match rs.read(&mut buf[have..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            have += n;
            let mut at = 0;
            while have - at >= 4 {
                let len = 4 + u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
                if have - at < len {
                    break;
                }
                at += len;
                count += 1;
            }
            buf.copy_within(at..have, 0);
            have -= at;
            a2.store(count.saturating_sub(1), Ordering::Release);
        }
    });
    let offs = offsets(frames);
    let nframes = offs.len() - 1;
    let (mut sent, mut i) = (0u64, 0usize);
    let start = Instant::now();
    let warm = Duration::from_millis(500);
    let mut window: Option<(Instant, u64, u64, u64, u64)> = None;
    // Looked up once counting has begun: a thread names itself when it
    // first runs.
    let mut counter = None;
    let counter_ns = |c: &Option<String>| c.as_deref().map_or(0, cpu_ns);
    loop {
        let now = Instant::now();
        if window.is_none() && now - start >= warm {
            let t = &timing;
            counter = counter_tid(counter_name);
            window = Some((
                now,
                acked.load(Ordering::Acquire),
                cpu_ns(tid),
                t.decision_ns.load(Ordering::Relaxed),
                counter_ns(&counter),
            ));
        }
        if let Some((t0, ..)) = window {
            if (now - t0).as_secs_f64() >= secs {
                break;
            }
        }
        if sent - acked.load(Ordering::Acquire) >= WINDOW {
            std::thread::yield_now();
            continue;
        }
        let j = (i + BATCH).min(nframes);
        s.write_all(&frames[offs[i]..offs[j]]).unwrap();
        sent += (j - i) as u64;
        i = if j == nframes { 0 } else { j };
    }
    let end = Instant::now();
    let (t0, a0, c0, d0, k0) = window.unwrap();
    let (a1, c1, d1, k1) = (
        acked.load(Ordering::Acquire),
        cpu_ns(tid),
        timing.decision_ns.load(Ordering::Relaxed),
        counter_ns(&counter),
    );
    let wait = Instant::now();
    while acked.load(Ordering::Acquire) < sent {
        assert!(
            wait.elapsed() < Duration::from_secs(30),
            "{} of {sent} frames acked after 30 s",
            acked.load(Ordering::Acquire)
        );
        std::thread::yield_now();
    }
    // Both directions: the reader holds a clone of the socket, so a drop
    // alone would not close it.
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = reader.join();
    let wall = (end - t0).as_secs_f64();
    let cpu = (c1 - c0) as f64 / 1e9;
    let n = (a1 - a0) as f64;
    Run {
        frames_per_s: n / wall,
        frames_per_cpu_s: n / cpu,
        cpu_share: cpu / wall,
        decision_share: (d1 - d0) as f64 / 1e9 / cpu,
        counter_share: (k1 - k0) as f64 / 1e9 / cpu,
        dropped: timing.top.as_ref().map_or(0.0, |t| {
            t.top(rctl_agent::top::WINDOW_S, 1).dropped as f64
                / timing.decisions.load(Ordering::Relaxed).max(1) as f64
        }),
    }
}

fn main() {
    let secs: f64 = std::env::var("RCTL_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let frames = notify_frames(4096);
    eprintln!(
        "{} NOTIFY frames, {} bytes each on average",
        4096,
        frames.len() / 4096
    );
    let floor = run(None, &frames, secs, Mode::Plain);
    println!("| agent | frames/s | frames per agent-CPU-second | agent thread busy | decision's share of agent CPU | vs floor (per CPU-second) |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, r: &Run| {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0}% | {:.0}% | {:.2}× |",
            r.frames_per_s,
            r.frames_per_cpu_s,
            r.cpu_share * 100.0,
            r.decision_share * 100.0,
            r.frames_per_cpu_s / floor.frames_per_cpu_s
        );
    };
    row("floor: ack without deciding", &floor);
    let sizes: Vec<usize> = match std::env::var("RCTL_BENCH_RULES") {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![10, 1_000, 10_000],
    };
    let (mut costs, mut tapped) = (Vec::new(), Vec::new());
    // Off and on alternate, three times each: the ratio is their
    // medians', so that one noisy window does not make it.
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for rules in sizes {
        let j = judge(rules);
        let (mut offs, mut ons, mut counters, mut dropped) =
            (Vec::new(), Vec::new(), Vec::new(), 0f64);
        let (mut taps, mut writers, mut lost) = (Vec::new(), Vec::new(), 0f64);
        for round in 0..3 {
            let off = run(Some(Arc::clone(&j)), &frames, secs, Mode::Plain);
            let on = run(Some(Arc::clone(&j)), &frames, secs, Mode::Top);
            let tap = run(Some(Arc::clone(&j)), &frames, secs, Mode::Tap);
            if round == 0 {
                row(&format!("rctl agent, {rules} rules"), &off);
                row(
                    &format!("rctl agent, {rules} rules, `rctl top` counting"),
                    &on,
                );
                row(&format!("rctl agent, {rules} rules, a tap open"), &tap);
            }
            offs.push(off.frames_per_cpu_s);
            ons.push(on.frames_per_cpu_s);
            counters.push(on.counter_share);
            dropped = dropped.max(on.dropped);
            taps.push(tap.frames_per_cpu_s);
            writers.push(tap.counter_share);
            lost = lost.max(tap.dropped);
        }
        costs.push((
            rules,
            median(offs.clone()) / median(ons),
            median(counters),
            dropped,
        ));
        tapped.push((rules, median(offs) / median(taps), median(writers), lost));
    }
    for (rules, c, k, d) in costs {
        println!("{rules} rules: the request path with `rctl top` counting costs {c:.2}× it without (per agent-CPU-second, medians of 3 alternating runs); the counter thread, off the request path, adds {k:.2}× the agent thread's CPU (in all {:.2}×); at most {:.2}% of the requests not counted", c + k * c, d * 100.0);
    }
    for (rules, c, k, d) in tapped {
        println!("{rules} rules: the request path with a tap open costs {c:.2}× it with none (per agent-CPU-second, medians of 3 alternating runs); the tap's writer thread, off the request path, adds {k:.2}× the agent thread's CPU (in all {:.2}×); at most {:.2}% of the requests lost to the tap", c + k * c, d * 100.0);
    }
}
