//! Packets per second on a real interface: rctl attached in native mode to
//! one end of a veth pair, traffic generated into the other end by the
//! kernel itself, against the empty program on the same interface in the
//! same run. Needs root and the built object (RCTL_XDP_OBJECT, or the
//! default build path); run with `sudo cargo bench -p rctl-dataplane
//! --bench xdp_live`.
//!
//! # Setup (what an operator repeats on their own NIC)
//! - Two network namespaces made for the run (`rctl-gen-PID`,
//!   `rctl-rx-PID`), a veth pair between them (`vgen` in the first, `vrx`
//!   in the second); both ends up, no addresses, nothing routed: the
//!   traffic never leaves the pair, and the namespaces are deleted at the
//!   end.
//! - The receiver: rctl (or the empty `rctl_pass`, which shares its maps)
//!   attached to `vrx` in native (driver) mode, as `rctl apply --mode
//!   native` would.
//! - The generator: the object's `rctl_gen`, run by BPF_PROG_RUN in
//!   live-frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`, what xdp-trafficgen
//!   does; aya's `TestRunAttrs::xdp_live_frames`) on `vgen`: the kernel
//!   runs it on each of `repeat` copies of a 64-byte TCP frame to port
//!   443, it writes a source address into the frame (random, or the next
//!   of a list) and returns XDP_TX, which sends the frame out of `vgen`
//!   into `vrx`, where the program under test runs in its driver hook.
//!   The frames' destination MAC is not `vrx`'s, so what the program
//!   passes is dropped by the stack at once (as a NIC drops other hosts'
//!   frames), the same for both programs.
//! - The generator's thread is pinned to one CPU, and veth runs the
//!   receiver's NAPI poll on the CPU that sent the frames: one core does
//!   both, so the rates are per core, generator included, and rctl's own
//!   cost per packet is the difference of the two programs' times per
//!   packet.
//! - Counted on the receiving side by the kernel (`vrx`'s rx packets,
//!   from `ip -s -j link`), over the generator's wall time.
//!
//! On a NIC: attach rctl with `rctl apply --mode native`, send from
//! another host with any generator (xdp-trafficgen, pktgen, TRex) at a
//! rate above what one core handles, with RSS steering the flood to one
//! queue (or `ethtool -L combined 1`), and read the interface's rx
//! counters (`ip -s link`, `ethtool -S`) over a fixed time; then the same
//! with an empty XDP program.

use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp, XdpMode};
use rctl_dataplane::xdp::{ClockMode, Tables};
use rctl_loader::XdpProgram;
use rctl_testkit::lab::{Link, NetNs};
use rctl_testkit::median;
use rctl_testkit::proc::thread_cpu;
use rctl_testkit::xdp::{bench_object, bench_ruleset};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// Frames per measurement.
const FRAMES: u32 = 4_000_000;

/// The two namespaces and the veth pair; deleted on drop.
struct Lab {
    gen: NetNs,
    rx: NetNs,
    _pair: Link,
}

impl Lab {
    fn new() -> Lab {
        let pid = std::process::id();
        let gen = NetNs::new(&format!("rctl-gen-{pid}"));
        let rx = NetNs::new(&format!("rctl-rx-{pid}"));
        let pair = Link::veth("vgen", Some(&gen), "vrx", Some(&rx));
        Lab {
            gen,
            rx,
            _pair: pair,
        }
    }

    /// `vrx`'s received packets, as the kernel counts them.
    fn received(&self) -> u64 {
        let out = self.rx.ip(&["-s", "-j", "link", "show", "vrx"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .expect("rx packets")
    }
}

/// Runs `f` on a thread in network namespace `ns` (pinned to `cpu`).
fn in_netns<T: Send>(ns: &NetNs, cpu: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let _inside = ns.enter();
            if let Some(cpu) = cpu {
                // SAFETY: a zeroed cpu_set_t, then one CPU set in it.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                }
            }
            f()
        })
        .join()
        .expect("netns thread")
    })
}

/// The generator: the object's `rctl_gen`, with `sources` (empty:
/// random).
struct Generator {
    ebpf: aya::Ebpf,
    ifindex: u32,
}

impl Generator {
    fn new(obj: &[u8], lab: &Lab, sources: &[Ipv4Addr]) -> Generator {
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(rctl_common::maps::GEN_SOURCES, sources.len() as u32 + 1)
            .load(obj)
            .expect("load the generator");
        {
            let mut list: aya::maps::Array<_, u32> =
                aya::maps::Array::try_from(ebpf.map_mut(rctl_common::maps::GEN_SOURCES).unwrap())
                    .unwrap();
            list.set(0, sources.len() as u32, 0).unwrap();
            for (i, a) in sources.iter().enumerate() {
                list.set(i as u32 + 1, u32::from(*a), 0).unwrap();
            }
        }
        let prog: &mut Xdp = ebpf.program_mut("rctl_gen").unwrap().try_into().unwrap();
        prog.load().expect("the kernel takes rctl_gen");
        let out = lab.gen.ip(&["-j", "link", "show", "vgen"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ifindex = v[0]["ifindex"].as_u64().unwrap() as u32;
        Generator { ebpf, ifindex }
    }

    /// Sends `FRAMES` frames out of `vgen`; returns the wall time and the
    /// sending thread's CPU time (which the receiver's NAPI poll, run on
    /// the same CPU as the thread enables bottom halves, is part of).
    fn send(&mut self, lab: &Lab) -> (Duration, Duration) {
        let frame = rctl_testkit::frame::frame(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            rctl_compiler::ir::Proto::Tcp,
            443,
            false,
            false,
        );
        // struct xdp_md: data, data_end (the frame's length: the kernel
        // checks), data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex.
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&self.ifindex.to_ne_bytes());
        let prog: &mut Xdp = self
            .ebpf
            .program_mut("rctl_gen")
            .unwrap()
            .try_into()
            .unwrap();
        let prog = &*prog;
        in_netns(&lab.gen, Some(0), || {
            let (t, cpu) = (Instant::now(), thread_cpu());
            prog.test_run(TestRunOptions {
                data_in: Some(&frame),
                ctx_in: Some(&ctx),
                repeat: FRAMES,
                attrs: TestRunAttrs::new().xdp_live_frames(64),
                ..TestRunOptions::new()
            })
            .expect("BPF_PROG_RUN in live-frames mode");
            (t.elapsed(), thread_cpu() - cpu)
        })
    }
}

/// One run with `program` of `rx` attached to `vrx` in native mode: Mpps
/// received over the generator's wall time and over its CPU time, and
/// (with the kernel's BPF statistics on) the program's own mean ns per
/// packet.
fn measure(
    lab: &Lab,
    rx: &mut XdpProgram,
    program: &str,
    gen: &mut Generator,
    stats: bool,
) -> [f64; 3] {
    let prog = rx.program_mut(program).unwrap();
    let link = in_netns(&lab.rx, None, || prog.attach("vrx", XdpMode::Driver))
        .expect("attach in native mode");
    let on = stats.then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF stats"));
    let info = |rx: &mut XdpProgram| {
        let i = rx.program_mut(program).unwrap().info().unwrap();
        (i.run_time().as_nanos() as f64, i.run_count() as f64)
    };
    let (t0, n0) = info(rx);
    let before = lab.received();
    let (wall, cpu) = gen.send(lab);
    let got = lab.received() - before;
    let (t1, n1) = info(rx);
    drop(on);
    if std::env::var_os("RCTL_BENCH_VERBOSE").is_some() {
        eprintln!("{program}: {got} of {FRAMES} received in {wall:.2?} (CPU {cpu:.2?})");
    }
    rx.program_mut(program).unwrap().detach(link).unwrap();
    let per = |d: Duration| got as f64 / d.as_secs_f64() / 1e6;
    [per(wall), per(cpu), (t1 - t0) / (n1 - n0).max(1.0)]
}

fn main() {
    let Some(obj) = bench_object() else {
        return;
    };
    let n: usize = std::env::var("RCTL_BENCH_PREFIXES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rounds: usize = std::env::var("RCTL_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let lab = Lab::new();
    println!("Mpps received by vrx per core (generator and receiver on one CPU), {FRAMES} 64-byte frames per run, median of {rounds} alternating runs, over the generator's wall time and its CPU time (which leaves out time other work took the CPU); rctl's own cost = 1/rctl - 1/empty; in the program: the kernel's BPF statistics (run time / runs) in a further run of each");
    println!();
    println!("| prefixes (v4 + v6) | rate limit | sources | empty program Mpps (wall / CPU) | rctl Mpps (wall / CPU) | rctl / empty (CPU) | rctl's ns per packet (CPU) | in the program: empty / rctl ns |");
    println!("|---|---|---|---|---|---|---|---|");
    for limited in [false, true] {
        let (src, v4s, _) = bench_ruleset(n, limited);
        let c = rctl_compiler::compile_str("bench.rctl", &src, &Default::default());
        let rs = c.ruleset.expect("bench ruleset compiles");
        let tables = Tables::new(&rs, None).unwrap();
        let mut rx = XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap();
        if limited {
            rx.set_clock_mode(ClockMode::Tick).unwrap();
        }
        let listed: Vec<Ipv4Addr> = v4s.iter().copied().step_by(2).take(65_536).collect();
        for (what, sources) in [("random", Vec::new()), ("listed (dropped)", listed)] {
            let mut gen = Generator::new(&obj, &lab, &sources);
            let (mut empty, mut ours) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                empty.push(measure(&lab, &mut rx, "rctl_pass", &mut gen, false));
                ours.push(measure(&lab, &mut rx, "rctl", &mut gen, false));
            }
            let col = |v: &[[f64; 3]], i: usize| median(v.iter().map(|x| x[i]).collect());
            let (ew, ec, ow, oc) = (col(&empty, 0), col(&empty, 1), col(&ours, 0), col(&ours, 1));
            let e_ns = measure(&lab, &mut rx, "rctl_pass", &mut gen, true)[2];
            let o_ns = measure(&lab, &mut rx, "rctl", &mut gen, true)[2];
            println!(
                "| {n} + {n} | {} | {what} | {ew:.2} / {ec:.2} | **{ow:.2} / {oc:.2}** | {:.2} | {:.0} | {e_ns:.0} / {o_ns:.0} |",
                if limited { "yes, tick clock" } else { "no" },
                oc / ec,
                1e3 / oc - 1e3 / ec,
            );
        }
    }
}
