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
use rctl_dataplane::xdp::dir::DirConfig;
use rctl_dataplane::xdp::{ClockMode, Tables};
use rctl_loader::XdpProgram;
use rctl_testkit::lab::Mount;
use rctl_testkit::xdp::{bench_object, bench_ruleset};
use rctl_testkit::{median, Rng};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod probe;

fn frame(ip: IpAddr) -> Vec<u8> {
    rctl_testkit::frame::frame(ip, Proto::Tcp, 443, false, false)
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

/// The warm columns for one table: miss, hit and IPv6 through `rctl`,
/// `rctl_lpm` (with `base`) and xdp-filter, against the floor and the
/// shared work.
fn warm_row(
    prog: &mut XdpProgram,
    mut base: Option<&mut XdpProgram>,
    v4s: &[Ipv4Addr],
    v6s: &[Ipv6Addr],
    limited: bool,
    mounted: bool,
    bpffs: &std::path::Path,
) -> String {
    let miss = frame(IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)));
    let hit = frame(IpAddr::V4(
        v4s.get(v4s.len() / 2)
            .copied()
            .unwrap_or(Ipv4Addr::new(192, 0, 2, 7)),
    ));
    let v6 = frame(IpAddr::V6("2606:4700::1111".parse().unwrap()));
    let floor = one(prog, "rctl_pass", &miss);
    let shared = one(prog, "rctl_nolookup", &miss);
    let ours = one(prog, "rctl", &miss);
    let ours_hit = one(prog, "rctl", &hit);
    let ours6 = one(prog, "rctl", &v6);
    let mut lpm = |f: &[u8]| base.as_mut().map_or(f64::NAN, |b| one(b, "rctl_lpm", f));
    let (lpm_miss, lpm_hit, lpm6) = (lpm(&miss), lpm(&hit), lpm(&v6));
    let filter = if limited || !mounted {
        None
    } else {
        xdp_filter(v4s, v6s, bpffs).and_then(|mut e| run_other(&mut e, "xdpfilt_dny_ip", &miss))
    };
    let filter = filter.map_or("—".to_string(), |f| format!("{f:.1}"));
    // The pins of this round go; the next round pins afresh.
    if let Ok(d) = std::fs::read_dir(bpffs) {
        d.flatten().for_each(|e| {
            let _ = std::fs::remove_file(e.path());
        });
    }
    // The lookups' own cost: each program less the one without, on the
    // miss path (which all three take alike).
    let ratio = (lpm_miss - shared) / (ours - shared).max(0.5);
    format!(
        "{floor:.1} | {shared:.1} | {ours:.1} | {lpm_miss:.1} | {:.1}× | {ours_hit:.1} | {lpm_hit:.1} | {:.1}× | {ratio:.1}× | {ours6:.1} | {lpm6:.1} | {filter} |",
        lpm_miss / ours,
        lpm_hit / ours_hit,
    )
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
        let mut p = probe::Probe::load(obj, mb << 10);
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
    let Some(obj) = bench_object() else {
        return;
    };
    if let Ok(v) = std::env::var("RCTL_BENCH_PROBE") {
        let mbs: Vec<usize> = v.split(',').filter_map(|x| x.parse().ok()).collect();
        println!("| table | floor | one load (vmalloc) | two dependent | one load (kmalloc arrays) | two dependent |");
        println!("|---|---|---|---|---|---|");
        print!("{}", probes(&obj, &mbs, 5));
        return;
    }
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.to_string())
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let sizes: Vec<usize> = list("RCTL_BENCH_PREFIXES", "0,1000,100000,1000000")
        .iter()
        .filter_map(|x| x.parse().ok())
        .collect();
    let limits = list("RCTL_BENCH_LIMITS", "none,tick,exact");
    let flag = |name: &str| std::env::var(name).map_or(true, |v| v != "0");
    let (warm_on, lpm_on) = (flag("RCTL_BENCH_WARM"), flag("RCTL_BENCH_LPM"));
    let rounds: usize = std::env::var("RCTL_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let env_bits = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let cfg = DirConfig {
        v4_root_bits: env_bits("RCTL_DIR_ROOT4"),
        v4_filter_bits: env_bits("RCTL_DIR_FILTER4"),
        v6_root_bits: env_bits("RCTL_DIR_ROOT6"),
        v6_filter_bits: env_bits("RCTL_DIR_FILTER6"),
        ..DirConfig::default()
    };
    let bpffs_dir = std::env::temp_dir().join(format!("rctl-bench-bpffs-{}", std::process::id()));
    let bpffs = Mount::try_bpffs(&bpffs_dir);
    let mounted = bpffs.is_some();
    let mut warm = String::new();
    let mut cold = String::new();
    let mut tables_out = String::new();
    for &n in &sizes {
        for limit in &limits {
            let clock = match limit.as_str() {
                "tick" => Some(ClockMode::Tick),
                "exact" => Some(ClockMode::Exact),
                _ => None,
            };
            let limited = clock.is_some();
            let mut r = Rng(0x8765_4321);
            let (src, v4s, v6s) = bench_ruleset(n, limited);
            let c = rctl_compiler::compile_str("bench.rctl", &src, &Default::default());
            let rs = c.ruleset.expect("bench ruleset compiles");
            let t = std::time::Instant::now();
            let tables = Tables::with_config(&rs, None, &cfg).unwrap();
            let build = t.elapsed();
            let t = std::time::Instant::now();
            let mut prog =
                XdpProgram::load(&obj, &tables, rs.rules.len(), false).expect("load (needs root)");
            let load = t.elapsed();
            let mut base = if lpm_on {
                Some(XdpProgram::load(&obj, &tables, rs.rules.len(), true).unwrap())
            } else {
                None
            };
            if let Some(c) = clock {
                prog.set_clock_mode(c).unwrap();
                if let Some(b) = &mut base {
                    b.set_clock_mode(c).unwrap();
                }
            }
            let limit = match clock {
                None => "no",
                Some(ClockMode::Tick) => "yes, tick clock",
                Some(ClockMode::Exact) => "yes, exact clock",
            };
            if !limited {
                let d = &tables.dir;
                let _ = writeln!(
                    tables_out,
                    "| {n} + {n} | {:.1} MiB | {} / {} | {} / {} | {:?} | {build:.2?} | {load:.2?} |",
                    d.memory() as f64 / f64::from(1 << 20),
                    d.v4_filter_bits,
                    d.v4_root_bits,
                    d.v6_filter_bits,
                    d.v6_root_bits,
                    d.kinds(),
                );
            }
            if warm_on {
                let row = warm_row(
                    &mut prog,
                    base.as_mut(),
                    &v4s,
                    &v6s,
                    limited,
                    mounted,
                    &bpffs_dir,
                );
                let _ = writeln!(warm, "| {n} + {n} | {limit} | {row} {load:.2?} |");
            }
            // Cold: fresh random sources for every program and round (a
            // source one program saw would find its bucket made and its
            // lines cached); the median of the rounds.
            let v6_in = |r: &mut Rng| {
                (0x2001_0db8_u128 << 96) | u128::from(r.next()) << 32 | u128::from(r.next() as u32)
            };
            for (family, make) in [
                (
                    "IPv4",
                    &(|r: &mut Rng| IpAddr::V4(Ipv4Addr::from(r.next() as u32 | 0x0100_0000)))
                        as &dyn Fn(&mut Rng) -> IpAddr,
                ),
                ("IPv6 in 2001:db8::/32", &|r: &mut Rng| {
                    IpAddr::V6(Ipv6Addr::from(v6_in(r)))
                }),
            ] {
                let mut m = [(); 4].map(|_| Vec::new());
                for _ in 0..rounds {
                    let mut fresh =
                        || -> Vec<Vec<u8>> { (0..COLD).map(|_| frame(make(&mut r))).collect() };
                    m[0].push(once(&mut prog, "rctl_pass", &fresh()));
                    m[1].push(once(&mut prog, "rctl_nolookup", &fresh()));
                    m[2].push(once(&mut prog, "rctl", &fresh()));
                    if let Some(b) = &mut base {
                        m[3].push(once(b, "rctl_lpm", &fresh()));
                    }
                }
                let [cf, cs, co, cl] = m.map(|v| if v.is_empty() { f64::NAN } else { median(v) });
                let _ = writeln!(
                    cold,
                    "| {n} + {n} | {limit} | {family} | {cf:.0} | {cs:.0} | {co:.0} | **+{:.0}** | {cl:.0} | {:.1}× |",
                    co - cf,
                    (cl - cf) / (co - cf).max(0.5),
                );
            }
        }
    }
    if warm_on {
        println!("ns per packet (BPF_PROG_TEST_RUN), each figure the best of 5 runs of 1,000,000 repeats of one packet; floor = the empty program; shared = the rules without the source lookup; same object, same run");
        println!();
        println!("| prefixes (v4 + v6) | rate limit | floor | shared | rctl v4 miss | LPM_TRIE v4 miss | LPM / rctl | rctl v4 hit | LPM_TRIE v4 hit | LPM / rctl | lookup alone (miss): LPM / rctl | rctl v6 | LPM_TRIE v6 | xdp-filter v4 (exact /32) | load |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        print!("{warm}");
        println!();
    }
    println!("ns per packet, {COLD} fresh random sources per program and round, one run each (no repeat: every run finds caches cold after the syscall; the kernel calls the program without its XDP dispatcher); median of {rounds} rounds");
    println!();
    println!("| prefixes (v4 + v6) | rate limit | sources | floor | shared | rctl | rctl above floor | LPM_TRIE | LPM / rctl above floor |");
    println!("|---|---|---|---|---|---|---|---|---|");
    print!("{cold}");
    println!();
    println!("The prefix tables (both families): map memory, filter / root bits, entries by kind [leaf, node, table, search, inline], build (user space) and load (maps filled, program verified)");
    println!();
    println!("| prefixes (v4 + v6) | memory | v4 filter / root | v6 filter / root | kinds | build | load |");
    println!("|---|---|---|---|---|---|---|");
    print!("{tables_out}");
    drop(bpffs);
    let _ = std::fs::remove_dir(&bpffs_dir);
}
