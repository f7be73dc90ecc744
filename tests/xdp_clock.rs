//! The program's clocks on the live kernel (no fixed test time): the tick
//! clock follows CLOCK_MONOTONIC, and under a flood both the tick clock and
//! the exact clock hold a packet limit at its configured rate.

use rctl_common::WAYS;
use rctl_compiler::ir::Proto;
use rctl_dataplane::xdp::{ClockMode, Tables};
use rctl_loader::{kernel_tick, XdpProgram};
use rctl_testkit::frame::frame;
use rctl_testkit::xdp::object_path;
use std::net::{IpAddr, Ipv4Addr};

/// CLOCK_MONOTONIC in ns, from /proc/timer_list (as root).
fn monotonic_ns() -> u64 {
    let t = std::fs::read_to_string("/proc/timer_list").expect("read /proc/timer_list");
    t.lines()
        .find_map(|l| l.strip_prefix("now at "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .expect("`now at` in /proc/timer_list")
}

fn load(src: &str) -> XdpProgram {
    let obj = std::fs::read(object_path().expect("checked by the caller")).unwrap();
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    let rs = c.ruleset.expect("compiles");
    let tables = Tables::new(&rs, None).unwrap();
    XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap()
}

/// A fresh bucket's theoretical arrival time is now + interval: on the
/// tick clock, "now" must be CLOCK_MONOTONIC to within a tick or two.
#[test]
fn tick_clock_follows_the_monotonic_clock() {
    if object_path().is_none() {
        return;
    }
    let (tick, _) = kernel_tick().unwrap();
    assert!(
        [1_000_000, 3_333_333, 4_000_000, 10_000_000].contains(&tick),
        "a kernel tick of {tick} ns (HZ 1000, 300, 250 or 100)"
    );
    let mut prog = load("rule t { when proto == tcp throttle 1 packets per 1s by ip }\n");
    let src = Ipv4Addr::new(203, 0, 113, 9);
    let before = monotonic_ns();
    assert_eq!(
        prog.run(&frame(IpAddr::V4(src), Proto::Tcp, 80, false, false))
            .unwrap(),
        2
    );
    let after = monotonic_ns();
    let hi = u64::from(u32::from(src)) << 32;
    let (set, tag) = prog.bucket_of(0, 4, hi, 0);
    let b = (set * WAYS..set * WAYS + WAYS)
        .map(|s| prog.bucket(s).unwrap())
        .find(|b| b.tag == tag)
        .expect("the source's bucket");
    let now = b.tat - 1_000_000_000;
    assert!(
        now + 2 * tick >= before && now <= after + tick,
        "tick clock {now} vs CLOCK_MONOTONIC {before}..{after} (tick {tick} ns)"
    );
}

/// One source floods at the program's full speed against 10,000 packets
/// a second, burst 10: the packets let through follow the elapsed time on
/// either clock. (Without the tick clock's one-tick widening of the burst
/// tolerance, at most 11 would pass per tick: a third of the rate at
/// HZ 250.)
#[test]
fn both_clocks_hold_a_high_rate() {
    if object_path().is_none() {
        return;
    }
    let (tick, _) = kernel_tick().unwrap();
    let rate = 10_000.0;
    for mode in [ClockMode::Tick, ClockMode::Exact] {
        let mut prog =
            load("rule t { when proto == udp throttle 10000 packets per 1s burst 10 by ip }\n");
        prog.set_clock_mode(mode).unwrap();
        let f = frame(
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 4)),
            Proto::Udp,
            53,
            false,
            false,
        );
        let n = 4_000_000u32;
        let t = std::time::Instant::now();
        let (_, ns) = prog.bench("rctl", &f, n).unwrap();
        let wall = t.elapsed().as_secs_f64();
        let dropped = prog.counts().unwrap()[0];
        let passed = f64::from(n) - dropped as f64;
        // The kernel's own time for the loop is a lower bound on the time
        // the clock saw; the wall time around the call an upper bound.
        let ran = ns * f64::from(n) / 1e9;
        let tick_s = tick as f64 / 1e9;
        let low = rate * (ran - 2.0 * tick_s);
        let high = 11.0 + rate * (wall + 2.0 * tick_s);
        eprintln!("{mode:?} clock: {passed} passed, expected {low:.0} to {high:.0}");
        assert!(
            passed >= low && passed <= high,
            "{mode:?}: {passed} of {n} passed in {ran:.3} s ({wall:.3} s wall): expected {low:.0} to {high:.0}"
        );
    }
}
