//! The XDP program's rate limits under real concurrency: every CPU runs
//! the same program on the same maps at once (BPF_PROG_TEST_RUN from one
//! thread per CPU), as a multi-queue NIC does. The limits must hold
//! exactly: a bucket updated from two CPUs must not lose updates, and a
//! new bucket claimed from two CPUs must not be torn or doubled.
//!
//! The program's clock is fixed, so the expected admissions are exact
//! whatever the machine's speed: GCRA with burst `B` admits exactly `B`
//! packets of one key at one instant (`grammar/README.md`: "`burst` at
//! once").

use rctl_common::{overflow_slot, SETS, WAYS};
use rctl_compiler::ir::Proto;
use rctl_dataplane::xdp::Tables;
use rctl_loader::XdpProgram;
use rctl_testkit::frame::frame;
use rctl_testkit::xdp::object;
use rctl_testkit::Rng;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Barrier;

const DROP: u32 = 1;
const PASS: u32 = 2;

/// The CPUs to flood from: every one the test may run on. One CPU cannot
/// race with itself, so the tests need two (CI's machines have two).
fn cpus() -> Option<usize> {
    let n = std::thread::available_parallelism().map_or(1, usize::from);
    if n < 2 {
        assert!(
            !rctl_testkit::skip::in_ci(),
            "the XDP concurrency tests need two CPUs in CI"
        );
        rctl_testkit::skip::skipped(&format!("two CPUs, this machine has {n}"));
        return None;
    }
    Some(n)
}

fn load(src: &str) -> Option<XdpProgram> {
    let obj = object()?;
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    let rs = c.ruleset.expect("compiles");
    let tables = Tables::new(&rs, None).unwrap();
    Some(XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap())
}

/// Runs `work(thread)` on `n` threads that start together.
fn on_every_cpu(n: usize, work: impl Fn(usize) + Sync) {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        for t in 0..n {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                barrier.wait();
                work(t);
            });
        }
    });
}

/// One source flooded from every CPU at one instant: exactly `burst`
/// packets pass. A read-modify-write of the bucket that is not atomic
/// loses updates when two CPUs admit at once, and lets more through.
#[test]
fn one_source_from_every_cpu_gets_exactly_its_burst() {
    let Some(n) = cpus() else { return };
    const BURST: u64 = 20_000_000;
    let Some(mut prog) = load(&format!(
        "rule lim {{ when proto == tcp throttle 10000000 packets per 1s burst {BURST} by ip }}"
    )) else {
        return;
    };
    let t0 = 1_000_000_000_000u64;
    prog.set_clock(t0).unwrap();
    let f = frame(
        "198.51.100.9".parse().unwrap(),
        Proto::Tcp,
        443,
        false,
        false,
    );
    // Each CPU alone would see the whole burst through: the admissions
    // overlap for tens of milliseconds.
    let per_cpu = 15_000_000u32;
    on_every_cpu(n, |_| {
        for _ in 0..per_cpu / 100_000 {
            prog.run_repeat(&f, 100_000).unwrap();
        }
    });
    let sent = n as u64 * u64::from(per_cpu);
    let dropped = prog.counts().unwrap()[0];
    assert_eq!(
        sent - dropped,
        BURST,
        "{sent} packets from {n} CPUs at one instant, {dropped} dropped"
    );
    // The bucket agrees: its theoretical arrival time moved one interval
    // (100 ns) per admitted packet.
    let hi = u64::from(u32::from_be_bytes([198, 51, 100, 9])) << 32;
    let (set, tag) = prog.bucket_of(0, 4, hi, 0);
    let b = (0..WAYS)
        .map(|w| prog.bucket(set * WAYS + w).unwrap())
        .find(|b| b.tag == tag)
        .expect("the source has a bucket");
    assert_eq!(b.tat - t0, BURST * 100);
}

/// Claims from every CPU at once. In each of 40 rounds, sixteen fresh
/// IPv6 sources whose buckets fall in one set of four ways are flooded
/// from every CPU, each CPU starting from a different source: the CPUs
/// race to claim the same empty slots. Four sources get a bucket each;
/// the rest count in the limiter's one overflow bucket (spent in the
/// first round). So exactly 40 x 4 + 1 bursts pass. Every bucket holds
/// one whole source (a claim from two CPUs at once must not mix two
/// sources' halves), no source holds two, and each is spent exactly.
#[test]
fn sources_claiming_one_set_from_every_cpu_get_exact_bursts() {
    let Some(n) = cpus() else { return };
    const BURST: u64 = 50;
    // Each round is a few dozen BPF_PROG_TEST_RUN calls, which cost
    // milliseconds each when two CPUs make them at once.
    const ROUNDS: usize = 40;
    let Some(mut prog) = load(&format!(
        "rule lim {{ when proto == tcp throttle 1000 packets per 1s burst {BURST} by ip }}"
    )) else {
        return;
    };
    let t0 = 1_000_000_000_000u64;
    prog.set_clock(t0).unwrap();
    let set_of = |a: u128| prog.bucket_of(0, 6, (a >> 64) as u64, a as u64);
    // Random sources, filed by set, until ROUNDS sets hold sixteen.
    let mut r = Rng(0x5e7_c1a1);
    let mut by_set: Vec<Vec<u128>> = vec![Vec::new(); SETS as usize];
    let mut rounds: Vec<(u32, Vec<u128>)> = Vec::new();
    while rounds.len() < ROUNDS {
        let a = 0x2001_0db8_u128 << 96 | u128::from(r.next()) << 32 | u128::from(r.next() as u32);
        let (set, _) = set_of(a);
        let v = &mut by_set[set as usize];
        v.push(a);
        if v.len() == 16 {
            rounds.push((set, v.clone()));
        }
    }
    let frames: Vec<Vec<Vec<u8>>> = rounds
        .iter()
        .map(|(_, srcs)| {
            srcs.iter()
                .map(|&a| frame(IpAddr::V6(Ipv6Addr::from(a)), Proto::Tcp, 443, false, false))
                .collect()
        })
        .collect();
    let per_source = 120u32;
    let barrier = Barrier::new(n);
    on_every_cpu(n, |t| {
        for round in &frames {
            barrier.wait();
            for i in 0..round.len() {
                prog.run_repeat(&round[(i + t * 7) % round.len()], per_source)
                    .unwrap();
            }
        }
    });
    let sent = (n * ROUNDS * 16) as u64 * u64::from(per_source);
    let dropped = prog.counts().unwrap()[0];
    assert_eq!(
        sent - dropped,
        (ROUNDS as u64 * 4 + 1) * BURST,
        "{sent} packets from {n} CPUs, {dropped} dropped"
    );
    for (set, sources) in &rounds {
        let mut held = Vec::new();
        for w in 0..WAYS {
            let b = prog.bucket(set * WAYS + w).unwrap();
            let a = sources.iter().find(|&&a| set_of(a).1 == b.tag).copied();
            let Some(a) = a else {
                panic!("set {set} way {w} holds no source: {b:?}");
            };
            assert!(!held.contains(&a), "two buckets for {a:x}");
            assert_eq!(b.tat - t0, BURST * 1_000_000, "set {set} way {w}: {b:?}");
            held.push(a);
        }
    }
    let overflow = prog.bucket(overflow_slot(0)).unwrap();
    assert_eq!(overflow.tat - t0, BURST * 1_000_000, "{overflow:?}");
    // Nothing is left over: a later packet of any of them is dropped.
    for f in frames.iter().flatten().step_by(37) {
        assert_eq!(prog.run(f).unwrap(), DROP);
    }
    let other = frame("2001:db8::1".parse().unwrap(), Proto::Udp, 53, false, false);
    assert_eq!(prog.run(&other).unwrap(), PASS);
}
