//! `rctl dry-run` keeps what the flows hold within `--max-buffered`,
//! whatever the capture, and says what it dropped; requests that arrive a
//! byte at a time are all found.

use crate::dryrun::listed;
use crate::util::*;
use rctl_testkit::capgen::{self, Endpoint, Pcap};
use std::io::Write;

const SERVER: Endpoint = ([198, 51, 100, 10], 80);
const MSS: usize = 1460;

/// Client `i`, from 11.0.0.0 on (public addresses: no rule drops them).
fn client(i: u32) -> Endpoint {
    ((0x0b00_0000 + i).to_be_bytes(), 40000)
}

/// A capture in memory.
fn capture(f: impl FnOnce(&mut Pcap<Vec<u8>>) -> std::io::Result<()>) -> Vec<u8> {
    let mut p = Pcap::new(Vec::new()).unwrap();
    f(&mut p).unwrap();
    p.finish().unwrap()
}

/// What a hostile capture holds.
struct Hostile {
    pcap: Vec<u8>,
    /// Stream bytes the flows would hold at the end if nothing were
    /// dropped.
    held: u64,
    /// Ordinary requests (each in two segments) among the hostile flows.
    ordinary: u64,
}

/// The two hostile capture shapes, scaled down, all flows at once: `heads`
/// flows each send a 60 KB head that never ends, and `gaps` flows each
/// send 250 KB after a first segment that never comes; between them,
/// ordinary requests in two segments each.
fn hostile(heads: u32, gaps: u32) -> Hostile {
    let head = format!("GET /slow HTTP/1.1\r\nCookie: {}", "c".repeat(60_000)).into_bytes();
    let gap_segments = 250_000 / MSS;
    let ordinary = b"GET /ordinary HTTP/1.1\r\nHost: example.org\r\n\r\n";
    let (o1, o2) = ordinary.split_at(20);
    let mut n = 0;
    let pcap = capture(|p| {
        let mut t = 1_760_000_000_000_000u64;
        let mut tick = || {
            t += 10;
            t
        };
        for i in 0..heads {
            p.tcp(tick(), client(i), SERVER, 0, 0x02, b"")?;
        }
        for i in 0..gaps {
            p.tcp(tick(), client(100_000 + i), SERVER, 0, 0x02, b"")?;
        }
        let rounds = head.len().div_ceil(MSS).max(gap_segments);
        for r in 0..rounds {
            if let Some(part) = head.chunks(MSS).nth(r) {
                for i in 0..heads {
                    p.tcp(tick(), client(i), SERVER, 1 + (r * MSS) as u32, 0x18, part)?;
                }
            }
            if r < gap_segments {
                for i in 0..gaps {
                    let seq = 1 + ((r + 1) * MSS) as u32;
                    p.tcp(tick(), client(100_000 + i), SERVER, seq, 0x18, &[b'g'; MSS])?;
                }
            }
            let c = client(200_000 + r as u32);
            p.tcp(tick(), c, SERVER, 0, 0x02, b"")?;
            p.tcp(tick(), c, SERVER, 1, 0x18, o1)?;
            p.tcp(tick(), c, SERVER, 1 + o1.len() as u32, 0x18, o2)?;
            n += 1;
        }
        Ok(())
    });
    Hostile {
        pcap,
        held: u64::from(heads) * head.len() as u64 + u64::from(gaps) * (gap_segments * MSS) as u64,
        ordinary: n,
    }
}

/// GNU time, which reports a child's peak resident memory as the kernel
/// measured it. (wait4 from this process would not do: a child's peak
/// starts from its parent's, this test process with the capture in
/// memory.)
const TIME: &str = "/usr/bin/time";

/// Runs rctl with `input` on stdin; its stdout, and its peak resident
/// memory in bytes, if GNU time is installed (it must be in CI).
fn rctl_with_rss(args: &[&str], input: &[u8]) -> (Vec<u8>, Option<u64>) {
    let timed = std::path::Path::new(TIME).exists();
    if !timed {
        assert!(
            !rctl_testkit::skip::in_ci(),
            "{TIME} (GNU time) must be installed in CI"
        );
        rctl_testkit::skip::skipped(&format!("{TIME} (GNU time), for the peak RSS check"));
    }
    let rctl = env!("CARGO_BIN_EXE_rctl");
    let mut cmd = if timed {
        let mut c = std::process::Command::new(TIME);
        c.arg("-v").arg(rctl);
        c
    } else {
        std::process::Command::new(rctl)
    };
    let mut child = cmd
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let o = std::thread::scope(|s| {
        s.spawn(move || {
            let _ = stdin.write_all(input);
        });
        child.wait_with_output().unwrap()
    });
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "rctl {args:?}: {err}");
    let rss = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .map(|kb| kb.parse::<u64>().unwrap() * 1024);
    assert_eq!(rss.is_some(), timed, "{err}");
    (o.stdout, rss)
}

const MIB: u64 = 1 << 20;

/// 600 flows holding 60 KB heads (a 1.78 GB RSS at 30,000) and 120 flows
/// holding 250 KB out of order (498 MB at 2,000): about 66 MB held, with
/// buffer slack about 90 MB. With `--max-buffered 8MiB` the report's peak
/// stays under 8 MiB, rctl's peak RSS (as the kernel saw it) under a
/// small-capture run's plus 8 MiB and some slack, and every ordinary
/// request is still found; without a bound that bites, the RSS grows by
/// what the flows hold.
#[test]
fn what_flows_hold_stays_within_max_buffered() {
    let h = hostile(600, 120);
    assert!(h.held > 60 * MIB);
    let rules = root().join("tests/fixtures/rules");
    let rules = rules.to_str().unwrap();
    let run = |bound: &str, pcap: &[u8]| {
        let args = [
            "dry-run",
            rules,
            "--pcap",
            "-",
            "--format",
            "json",
            "--max-buffered",
            bound,
        ];
        let (out, rss) = rctl_with_rss(&args, pcap);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        (v, rss)
    };
    let small = std::fs::read(root().join("tests/fixtures/pcap/curl.pcap")).unwrap();
    let (_, base) = run("8MiB", &small);
    let (v, bounded) = run("8MiB", &h.pcap);
    let t = &v["totals"];
    let num = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("totals.{k}: {t}"));
    assert_eq!(num("max_buffered_bytes"), 8 * MIB);
    assert!(num("buffered_peak_bytes") <= 8 * MIB, "{t}");
    assert!(num("buffered_peak_bytes") > 6 * MIB, "{t}");
    // All but at most 8 MiB of what the hostile flows sent was dropped
    // (held, then shed), or skipped (a shed flow's next bytes, until a
    // request line), and counted; the ordinary requests never were.
    let lost = num("shed_bytes") + num("unparsable_bytes");
    assert!(lost >= h.held - 8 * MIB, "{t} of {}", h.held);
    assert!(lost <= h.held, "{t} of {}", h.held);
    assert!(num("shed_bytes") > 8 * MIB, "{t}");
    assert!(num("shed_flows") >= (h.held - 8 * MIB) / 250_000, "{t}");
    assert_eq!(num("requests"), h.ordinary, "{t}");
    // The same capture with a bound it never reaches.
    let (v, unbounded) = run("1GiB", &h.pcap);
    assert_eq!(v["totals"]["shed_flows"], 0);
    assert!(v["totals"]["buffered_peak_bytes"].as_u64().unwrap() > h.held);
    let (Some(base), Some(bounded), Some(unbounded)) = (base, bounded, unbounded) else {
        return;
    };
    let mib = |b: u64| b / MIB;
    let (base, bounded, unbounded) = (mib(base), mib(bounded), mib(unbounded));
    // What the kernel saw: the bounded run stays within the bound (plus
    // allocator slack) of a run on a tiny capture; the unbounded one grows
    // by what the flows hold, so this check sees it.
    assert!(
        bounded <= base + 8 + 8,
        "peak RSS {bounded} MiB with an 8 MiB bound, {base} MiB on a small capture"
    );
    assert!(
        unbounded >= base + mib(h.held),
        "peak RSS {unbounded} MiB unbounded, {base} MiB on a small capture"
    );
}

/// `rctl dry-run` of the fixture rules over `pcap`, with `args` after.
fn dry_run(pcap: &std::path::Path, args: &[&str]) -> std::process::Output {
    let rules = root().join("tests/fixtures/rules");
    let mut all = vec![
        "dry-run",
        rules.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    rctl(&all)
}

/// The text report and the HTML page say what was dropped.
#[test]
fn the_reports_count_what_was_dropped() {
    let h = hostile(40, 0);
    let dir = tempdir("shed");
    let pcap = dir.join("heads.pcap");
    std::fs::write(&pcap, &h.pcap).unwrap();
    let html = dir.join("report.html");
    let o = dry_run(
        &pcap,
        &["--max-buffered", "1MiB", "--report", html.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("memory:"))
        .unwrap_or_else(|| panic!("{text}"));
    let o = dry_run(&pcap, &["--max-buffered", "1MiB", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &v["totals"];
    let (flows, bytes) = (&t["shed_flows"], &t["shed_bytes"]);
    assert!(flows.as_u64().unwrap() > 0, "{t}");
    assert!(
        line.contains(&format!("dropped {flows} times"))
            && line.contains(&format!("({bytes} stream bytes"))
            && line.contains("(bound 1.00 MiB)"),
        "{line}"
    );
    // The page marks each figure with its place in the JSON.
    let page = std::fs::read_to_string(&html).unwrap();
    for (pointer, n) in [("shed_flows", flows), ("shed_bytes", bytes)] {
        let n = n.as_u64().unwrap();
        let fig = format!("<data value=\"{n}\" data-f=\"/totals/{pointer}\"");
        assert!(page.contains(&fig), "{fig}");
    }
    assert!(page.contains("to stay within it"), "{page}");
}

#[test]
fn max_buffered_takes_sizes_and_refuses_nonsense() {
    let pcap = root().join("tests/fixtures/pcap/curl.pcap");
    let run = |size: &str| dry_run(&pcap, &["--format", "json", "--max-buffered", size]);
    for (size, bytes) in [
        ("1GiB", 1u64 << 30),
        ("64MiB", 64 << 20),
        ("2097152", 2 << 20),
        ("5MB", 5_000_000),
    ] {
        let o = run(size);
        assert!(o.status.success(), "{size}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["totals"]["max_buffered_bytes"], bytes, "{size}");
    }
    for (size, msg) in [
        ("lots", "is not a size"),
        ("12XB", "is not a size"),
        ("4KiB", "at least 1MiB"),
        ("99999999999GiB", "too large"),
    ] {
        let o = run(size);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{size}");
        assert!(err.contains(msg), "{size}: {err}");
    }
}

/// The generator's traffic with every request in 1-byte segments holds the
/// same requests, in the same order, as with ordinary segments.
#[test]
fn requests_in_one_byte_segments_are_all_found() {
    let dir = tempdir("trickle");
    let (normal, trickled) = (dir.join("normal.pcap"), dir.join("trickled.pcap"));
    let (_, all) = capgen::write(&normal, 1 << 20).unwrap();
    let shape = capgen::Shape {
        segment: Some(1),
        padding: 1000,
    };
    let (_, n) = capgen::write_shaped(&trickled, 3 << 20, shape).unwrap();
    let padded = capgen::Shape {
        segment: None,
        padding: 1000,
    };
    let whole = dir.join("whole.pcap");
    capgen::write_shaped(&whole, 1 << 20, padded).unwrap();
    assert!(n >= 20 && all > n, "{n} of {all}");
    let got = listed(&trickled);
    assert_eq!(got.len() as u64, n);
    assert_eq!(got, listed(&whole)[..n as usize]);
    assert!(listed(&normal).len() as u64 == all);
}
