//! Arbitrary requests through the compiled engine and the reference: never
//! a panic, and always the same decision.
//!
//! Input framing: lines split on '\n'; line 1 is the method, line 2 the
//! host, line 3 the target, the rest `name:value` headers; the first byte
//! picks the client address and port.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_dataplane::{Engine, EngineConfig, NaiveEngine, Request};
use std::sync::OnceLock;

static RULES: &[u8] = include_bytes!("../../../tests/data/artifact-v1.rctlc");

fn engines() -> &'static (Engine, NaiveEngine) {
    static E: OnceLock<(Engine, NaiveEngine)> = OnceLock::new();
    E.get_or_init(|| {
        let rs = rctl_compiler::artifact::decode(RULES).expect("fixture decodes");
        (Engine::new(rs.clone(), &EngineConfig::default()).unwrap(), NaiveEngine::new(rs, &EngineConfig::default()).unwrap())
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let mut lines = rest.split(|&b| b == b'\n');
    let method = lines.next().unwrap_or(b"");
    let host = lines.next().unwrap_or(b"");
    let target = lines.next().unwrap_or(b"/");
    let headers: Vec<(&[u8], &[u8])> = lines
        .map(|l| match l.iter().position(|&b| b == b':') {
            Some(i) => (&l[..i], &l[i + 1..]),
            None => (l, &b""[..]),
        })
        .collect();
    let ips = ["192.0.2.7", "10.9.8.7", "2001:db8::1", "::ffff:10.0.0.1", "198.51.100.1", "::"];
    let req = Request {
        method,
        host,
        target,
        headers: &headers,
        ip: ips[first as usize % ips.len()].parse().unwrap(),
        dst: (first % 3 != 0).then(|| ips[(first / 3) as usize % ips.len()].parse().unwrap()),
        port: [80, 443, 8080][(first / 8) as usize % 3],
        time_ns: u64::from(first) * 1_000_000,
    };
    let (fast, naive) = engines();
    let a = fast.decide_request(&req);
    let b = naive.decide_request(&req);
    // Limiter state is per engine and both see the same sequence, so even
    // throttle decisions must agree.
    assert_eq!(a, b);
});
