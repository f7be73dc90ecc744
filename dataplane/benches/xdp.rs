//! XDP per-packet cost through BPF_PROG_TEST_RUN, all in one run and one
//! object: `rctl_pass`, the empty program (the harness floor);
//! `rctl_nolookup`, the rules with no source lookup (the work every
//! variant shares, so that the lookups' own cost shows); `rctl` (the
//! interval tables) and `rctl_lpm` (the same rules with the kernel's LPM
//! tries: the baseline); for 0, 1k, 100k and 1M prefixes, without a rate
//! limit and with one on either clock, for IPv4 and IPv6 sources. Needs
//! root and the built object (RCTL_XDP_OBJECT, or the default build path).
//!
//! Warm: one packet repeated (the kernel's loop: caches stay warm), from a
//! source in no list ("miss") and from a listed one ("hit", dropped).
//! Cold: 20,000 packets from distinct random sources, one run each.
//! With a rate limit, a "miss" packet also updates its source's bucket
//! (the limit is never reached).
//!
//! xdp-filter (Debian's xdp-tools) is measured where its features overlap:
//! its `xdpfilt_dny_ip` object (from libxdp1) loaded as is, its IPv4 and
//! IPv6 source filters holding the same N addresses (its maps are per-CPU
//! hashes of exact addresses, sized here to N), one IPv4 source that is in
//! neither. It has no rate limits and no prefixes shorter than /32 or
//! /128.

use rctl_compiler::ir::Proto;
use rctl_dataplane::xdp::{ClockMode, Tables, XdpProgram};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[path = "../../tests/xdp_frame.rs"]
mod xdp_frame;

#[path = "support/xdp_probe.rs"]
mod xdp_probe;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn frame(ip: IpAddr) -> Vec<u8> {
    xdp_frame::frame(ip, Proto::Tcp, 443, false, false)
}

/// Best of 5 mean ns per run of `frame` through `program`.
fn one(prog: &mut XdpProgram, program: &str, frame: &[u8]) -> f64 {
    (0..5)
        .map(|_| prog.bench(program, frame, 1_000_000).unwrap().1)
        .fold(f64::MAX, f64::min)
}

/// Distinct sources in the cold measurement.
const COLD: usize = 20_000;

/// Mean ns per run over `frames`, each run once.
fn once(prog: &mut XdpProgram, program: &str, frames: &[Vec<u8>]) -> f64 {
    let total: f64 = frames
        .iter()
        .map(|f| prog.bench(program, f, 1).unwrap().1)
        .sum();
    total / frames.len() as f64
}

const XDP_FILTER: &str = "/usr/lib/x86_64-linux-gnu/bpf/xdpfilt_dny_ip.o";

/// xdp-filter's deny-IP program with `v4` and `v6` in its source filters,
/// on a private bpffs (its maps are pinned by name); `None` if xdp-tools
/// is not installed.
fn xdp_filter(v4: &[Ipv4Addr], v6: &[Ipv6Addr], bpffs: &std::path::Path) -> Option<aya::Ebpf> {
    use aya::maps::{PerCpuHashMap, PerCpuValues};
    if !std::path::Path::new(XDP_FILTER).exists() {
        return None;
    }
    let cpus = aya::util::nr_cpus().ok()?;
    let n = (v4.len().max(v6.len()).max(1)) as u32;
    let pins: Vec<(&str, std::path::PathBuf)> = ["filter_ipv4", "filter_ipv6", "xdp_stats_map"]
        .into_iter()
        .map(|m| (m, bpffs.join(m)))
        .collect();
    let mut loader = aya::EbpfLoader::new();
    for (m, p) in &pins {
        loader.map_pin_path(m, p.as_path());
    }
    let mut ebpf = loader
        .map_max_entries("filter_ipv4", n)
        .map_max_entries("filter_ipv6", n)
        .load_file(XDP_FILTER)
        .ok()?;
    // MAP_FLAG_SRC: match the packet's source.
    let flag = || PerCpuValues::try_from(vec![1u64; cpus]);
    {
        let mut m: PerCpuHashMap<_, u32, u64> =
            PerCpuHashMap::try_from(ebpf.map_mut("filter_ipv4")?).ok()?;
        for a in v4 {
            m.insert(u32::from_ne_bytes(a.octets()), flag().ok()?, 0)
                .ok()?;
        }
    }
    {
        let mut m: PerCpuHashMap<_, [u8; 16], u64> =
            PerCpuHashMap::try_from(ebpf.map_mut("filter_ipv6")?).ok()?;
        for a in v6 {
            m.insert(a.octets(), flag().ok()?, 0).ok()?;
        }
    }
    let prog: &mut aya::programs::Xdp = ebpf.program_mut("xdpfilt_dny_ip")?.try_into().ok()?;
    prog.load().ok()?;
    Some(ebpf)
}

/// Best of 5 mean ns per run of `frame` through a loaded program.
fn run_other(ebpf: &mut aya::Ebpf, name: &str, frame: &[u8]) -> Option<f64> {
    use aya::programs::{TestRun, TestRunOptions};
    let prog: &mut aya::programs::Xdp = ebpf.program_mut(name)?.try_into().ok()?;
    (0..5)
        .map(|_| {
            prog.test_run(TestRunOptions {
                data_in: Some(frame),
                repeat: 1_000_000,
                ..TestRunOptions::new()
            })
            .map(|r| r.duration.as_nanos() as f64)
        })
        .collect::<Result<Vec<f64>, _>>()
        .ok()
        .map(|v| v.into_iter().fold(f64::MAX, f64::min))
}

/// Median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `COLD` fresh random IPv4 frames (sources never sent before).
fn fresh(r: &mut Rng) -> Vec<Vec<u8>> {
    (0..COLD)
        .map(|_| frame(IpAddr::V4(Ipv4Addr::from(r.next() as u32 | 0x0100_0000))))
        .collect()
}

/// The physical floor: one and two dependent cold loads from tables of
/// each size, against the empty program; median of `rounds`, each over
/// fresh sources.
fn probes(obj: &[u8], sizes_mb: &[usize], rounds: usize) -> String {
    let mut out = String::new();
    let mut r = Rng(0x009e_0be5);
    for &mb in sizes_mb {
        let mut p = xdp_probe::Probe::load(obj, mb << 10);
        let progs = [
            "rctl_pass",
            "rctl_touch",
            "rctl_touch2",
            "rctl_touch_aom",
            "rctl_touch2_aom",
        ];
        let mut m = [(); 5].map(|_| Vec::new());
        for _ in 0..rounds {
            for (i, prog) in progs.iter().enumerate() {
                m[i].push(p.cold(prog, &fresh(&mut r)));
            }
        }
        let [floor, one, two, one_k, two_k] = m.map(median);
        let _ = writeln!(
            out,
            "| {mb} KiB | {floor:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            one - floor,
            two - floor,
            one_k - floor,
            two_k - floor,
        );
    }
    out
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = std::env::var("RCTL_XDP_OBJECT")
        .map(std::path::PathBuf::from)
        .unwrap_or(root.join("ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp"));
    let Ok(obj) = std::fs::read(&path) else {
        eprintln!(
            "no XDP object at {}: build it first (see .ci/test.sh)",
            path.display()
        );
        return;
    };
    if let Ok(v) = std::env::var("RCTL_BENCH_PROBE") {
        let mbs: Vec<usize> = v.split(',').filter_map(|x| x.parse().ok()).collect();
        println!("| table | floor | one load (vmalloc) | two dependent | one load (kmalloc arrays) | two dependent |");
        println!("|---|---|---|---|---|---|");
        print!("{}", probes(&obj, &mbs, 5));
        return;
    }
    let sizes: Vec<usize> = std::env::var("RCTL_BENCH_PREFIXES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or(vec![0, 1_000, 100_000, 1_000_000]);
    let bpffs = std::env::temp_dir().join(format!("rctl-bench-bpffs-{}", std::process::id()));
    std::fs::create_dir_all(&bpffs).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&bpffs)
        .status()
        .is_ok_and(|s| s.success());
    let mut warm = String::new();
    let mut cold = String::new();
    for &n in &sizes {
        for clock in [None, Some(ClockMode::Tick), Some(ClockMode::Exact)] {
            let limited = clock.is_some();
            let mut r = Rng(0x1234_5678);
            let mut src = String::from("ipblock b/x {\n");
            let (mut v4s, mut v6s) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let a = Ipv4Addr::from(r.next() as u32 | 0x0100_0000);
                let _ = writeln!(src, "  {a}/32");
                let b =
                    Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(r.next() as u32) << 64));
                let _ = writeln!(src, "  {b}/64");
                v4s.push(a);
                v6s.push(b);
            }
            src += "  192.0.2.0/24\n}\n\
                    rule d { when ipblock@b/x and port == 443 drop }\n\
                    rule a { when ip in { 198.51.100.0/24 } allow }\n";
            if limited {
                src += "rule t { when proto == tcp throttle 1000000000 packets per 1s by ip }\n";
            }
            let c = rctl_compiler::compile_str("bench.rctl", &src, &Default::default());
            let rs = c.ruleset.expect("bench ruleset compiles");
            let tables = Tables::new(&rs, None).unwrap();
            let t = std::time::Instant::now();
            let mut prog =
                XdpProgram::load(&obj, &tables, rs.rules.len(), false).expect("load (needs root)");
            let load = t.elapsed();
            let mut base = XdpProgram::load(&obj, &tables, rs.rules.len(), true).unwrap();
            if let Some(c) = clock {
                prog.set_clock_mode(c).unwrap();
                base.set_clock_mode(c).unwrap();
            }
            let miss = frame(IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)));
            let hit = frame(IpAddr::V4(
                v4s.get(n / 2)
                    .copied()
                    .unwrap_or(Ipv4Addr::new(192, 0, 2, 7)),
            ));
            let v6 = frame(IpAddr::V6("2606:4700::1111".parse().unwrap()));
            let floor = one(&mut prog, "rctl_pass", &miss);
            let shared = one(&mut prog, "rctl_nolookup", &miss);
            let ours = one(&mut prog, "rctl", &miss);
            let lpm = one(&mut base, "rctl_lpm", &miss);
            let ours_hit = one(&mut prog, "rctl", &hit);
            let lpm_hit = one(&mut base, "rctl_lpm", &hit);
            let ours6 = one(&mut prog, "rctl", &v6);
            let lpm6 = one(&mut base, "rctl_lpm", &v6);
            let filter = if limited || !mounted {
                None
            } else {
                xdp_filter(&v4s, &v6s, &bpffs)
                    .and_then(|mut e| run_other(&mut e, "xdpfilt_dny_ip", &miss))
            };
            let filter = filter.map_or("—".to_string(), |f| format!("{f:.1}"));
            // The pins of this round go; the next round pins afresh.
            if let Ok(d) = std::fs::read_dir(&bpffs) {
                d.flatten().for_each(|e| {
                    let _ = std::fs::remove_file(e.path());
                });
            }
            let limit = match clock {
                None => "no",
                Some(ClockMode::Tick) => "yes, tick clock",
                Some(ClockMode::Exact) => "yes, exact clock",
            };
            // The lookups' own cost: each program less the one without, on
            // the miss path (which all three take alike).
            let ratio = |ours: f64, lpm: f64| (lpm - shared) / (ours - shared).max(0.5);
            let _ = writeln!(
                warm,
                "| {n} + {n} | {limit} | {floor:.1} | {shared:.1} | {ours:.1} | {lpm:.1} | {:.1}× | {ours_hit:.1} | {lpm_hit:.1} | {:.1}× | {:.1}× | {ours6:.1} | {lpm6:.1} | {filter} | {load:.2?} |",
                lpm / ours,
                lpm_hit / ours_hit,
                ratio(ours, lpm),
            );
            // Cold: distinct random sources, one run each.
            let sources: Vec<Vec<u8>> = (0..COLD)
                .map(|_| frame(IpAddr::V4(Ipv4Addr::from(r.next() as u32 | 0x0100_0000))))
                .collect();
            let cf = once(&mut prog, "rctl_pass", &sources);
            let cs = once(&mut prog, "rctl_nolookup", &sources);
            let co = once(&mut prog, "rctl", &sources);
            let cl = once(&mut base, "rctl_lpm", &sources);
            let _ = writeln!(
                cold,
                "| {n} + {n} | {limit} | {cf:.0} | {cs:.0} | {co:.0} | {cl:.0} | {:.1}× | {:.1}× |",
                (cl - cf) / (co - cf).max(0.5),
                (cl - cs) / (co - cs).max(0.5),
            );
        }
    }
    println!("ns per packet (BPF_PROG_TEST_RUN), each figure the best of 5 runs of 1,000,000 repeats of one packet; floor = the empty program; shared = the rules without the source lookup; same object, same run");
    println!();
    println!("| prefixes (v4 + v6) | rate limit | floor | shared | rctl v4 miss | LPM_TRIE v4 miss | LPM / rctl | rctl v4 hit | LPM_TRIE v4 hit | LPM / rctl | lookup alone (miss): LPM / rctl | rctl v6 | LPM_TRIE v6 | xdp-filter v4 (exact /32) | load |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    print!("{warm}");
    println!();
    println!("ns per packet, {COLD} random IPv4 sources, one run each (no repeat: every run finds caches cold after the syscall; the kernel calls the program without its XDP dispatcher)");
    println!();
    println!("| prefixes (v4 + v6) | rate limit | floor | shared | rctl | LPM_TRIE | LPM / rctl above floor | lookup alone: LPM / rctl |");
    println!("|---|---|---|---|---|---|---|---|");
    print!("{cold}");
    if mounted {
        let _ = std::process::Command::new("umount").arg(&bpffs).status();
    }
    let _ = std::fs::remove_dir(&bpffs);
}
