//! Throttles counted in a shared zone, as rctl's nginx module counts
//! them: arbitrary GCRA parameters and hits never panic, and while time
//! only moves forward the zone decides every hit as the in-process
//! limiter does; then arbitrary requests through an engine whose
//! throttles count in the zone, each made into the proxy-facing answer.
//!
//! Input framing: bytes 0-3 the limit, 4-11 the period (ms), 12-15 the
//! burst, 16-23 the ban (ms), 24 the mode (bit 0: time may step back,
//! no comparison; bit 1: start near the clock's end); then pairs of
//! (key, time step) bytes for the hits, and the same bytes split on '\n'
//! as request targets (the first byte of each picks the client, the
//! time step and shadow mode).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_dataplane::answer::Outcome;
use rctl_dataplane::limiter::zone::{Zone, ZoneHeader, ZoneSlot};
use rctl_dataplane::limiter::{Gcra, Limiter};
use rctl_dataplane::{Engine, EngineConfig, Request};
use std::sync::OnceLock;

static RULES: &[u8] = include_bytes!("../../../tests/data/artifact-v1.rctlc");
const SLOTS: usize = 4096;
const MS: u64 = 1_000_000;

fn ruleset() -> &'static rctl_compiler::ir::Ruleset {
    static R: OnceLock<rctl_compiler::ir::Ruleset> = OnceLock::new();
    R.get_or_init(|| rctl_compiler::artifact::decode(RULES).expect("fixture decodes"))
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 25 {
        return;
    }
    let (p, rest) = data.split_at(25);
    let header = Box::into_raw(Box::new(ZoneHeader::default()));
    let slots: Box<[ZoneSlot]> = (0..SLOTS).map(|_| ZoneSlot::default()).collect();
    let slots = Box::into_raw(slots);
    // SAFETY: both were just allocated and stay so until the end of this
    // input, after the last use of the zone (and of the engine holding
    // it, dropped inside `requests`).
    let zone = Zone::attach(unsafe { &*header }, unsafe { &*slots }).expect("zeroed memory");
    hits(zone, p, rest);
    requests(zone, rest);
    // SAFETY: from Box::into_raw above; nothing refers to them any more.
    unsafe {
        drop(Box::from_raw(slots));
        drop(Box::from_raw(header));
    }
});

fn hits(zone: Zone, p: &[u8], rest: &[u8]) {
    let (limit, period, burst, ban) = (u32_at(p, 0), u64_at(p, 4), u32_at(p, 12), u64_at(p, 16));
    let (jitter, late) = (p[24] & 1 != 0, p[24] & 2 != 0);
    let g = Gcra::new(limit, period, burst, ban);
    let l = Limiter::new(limit, period, burst, ban, 1 << 16);
    let mut now: u64 = if late {
        u64::MAX - 1_000_000 * MS
    } else {
        1_000 * MS
    };
    for pair in rest.chunks_exact(2) {
        let (k, step) = (pair[0], u64::from(pair[1]));
        now = now.saturating_add(step * MS / 4);
        if jitter {
            now = now.saturating_sub(u64::from(k >> 4) * MS);
        }
        let key = [b'k', k % 7];
        let a = zone.hit(42, &key, &g, now);
        if !jitter {
            assert_eq!(a, l.hit(&key, now), "{key:?} at {now}: {g:?}");
        }
    }
    let s = zone.stats(now);
    assert!(s.live <= s.slots && s.banned <= s.slots, "{s:?}");
}

fn requests(zone: Zone, rest: &[u8]) {
    let mut engine = Engine::new(ruleset().clone(), &EngineConfig::default()).expect("engine");
    engine.count_in_zone(zone);
    let ips = ["192.0.2.7", "2001:db8::1", "198.51.100.1", "203.0.113.9"];
    let mut now = 5_000 * MS;
    for line in rest.split(|&b| b == b'\n').take(64) {
        let first = line.first().copied().unwrap_or(0);
        now += u64::from(first) * MS;
        let headers: [(&[u8], &[u8]); 2] = [(b"user-agent", line), (b"x-client", line)];
        let req = Request {
            method: b"GET",
            host: b"example.org",
            target: line,
            headers: &headers,
            ip: ips[first as usize % ips.len()].parse().unwrap(),
            dst: None,
            port: 80,
            time_ns: now,
        };
        let d = engine.decide_request(&req);
        let o = Outcome::of(&d, &engine, 1, first & 1 != 0);
        let _ = o.block_status();
        assert!(!o.action.blocks() || o.rule.is_some(), "{o:?}");
    }
}
