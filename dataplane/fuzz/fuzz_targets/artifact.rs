//! Decode arbitrary bytes as an artifact: errors, never panics. Whatever the
//! decoder accepts is canonical (it re-encodes to the same bytes) and is a
//! ruleset every evaluator can load: the compiled engine, the reference and
//! the XDP tables (for every site), which may refuse it only for the
//! program's capacity. The engine and the reference then agree on a
//! request and a packet.
//!
//! The input is tried twice: as a whole file, and as a payload behind a
//! valid header (magic, version, length, hash), so that the structural
//! checks are fuzzed too and not only the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_compiler::artifact;
use rctl_compiler::ir::{Proto, Ruleset};
use rctl_dataplane::xdp::{Tables, TablesError};
use rctl_dataplane::{Engine, EngineConfig, NaiveEngine, Packet, Request};

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut file = Vec::with_capacity(56 + data.len());
    file.extend_from_slice(&artifact::MAGIC);
    file.extend_from_slice(&artifact::FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&0u16.to_le_bytes());
    file.extend_from_slice(&0x0102_0304u32.to_le_bytes());
    file.extend_from_slice(&(data.len() as u64).to_le_bytes());
    file.extend_from_slice(&artifact::sha256(data));
    file.extend_from_slice(data);
    check(&file);
});

fn check(file: &[u8]) {
    let Ok(rs) = artifact::decode(file) else { return };
    assert_eq!(artifact::encode(&rs), file, "accepted artifacts are canonical");
    load(&rs);
}

fn load(rs: &Ruleset) {
    let config = EngineConfig::default();
    let engine = Engine::new(rs.clone(), &config).expect("the engine loads what the decoder accepts");
    let naive = NaiveEngine::new(rs.clone(), &config).expect("the reference loads what the decoder accepts");
    let mut sites: Vec<Option<&str>> = vec![None];
    sites.extend(rs.rules.iter().flat_map(|r| r.sites.iter().map(|s| Some(s.as_str()))));
    for site in sites {
        match Tables::new(rs, site) {
            Ok(_) | Err(TablesError::Capacity(_)) => {}
            Err(e) => panic!("the XDP tables refuse what the decoder accepts: {e}"),
        }
    }
    let headers: [(&[u8], &[u8]); 2] = [(b"User-Agent", b"python-requests/2.31"), (b"X-Token", b"secret")];
    let req = Request {
        method: b"GET",
        host: b"example.org",
        target: b"/sparql?format=json&title=A",
        headers: &headers,
        ip: "192.0.2.7".parse().unwrap(),
        dst: Some("10.0.0.1".parse().unwrap()),
        port: 443,
        time_ns: 1_000_000_000,
    };
    assert_eq!(engine.decide_request(&req), naive.decide_request(&req), "request decisions differ");
    let packet = Packet {
        src: req.ip,
        dst: req.dst,
        proto: Proto::Tcp,
        dst_port: 443,
        syn: true,
        time_ns: req.time_ns,
    };
    assert_eq!(engine.decide_packet(&packet), naive.decide_packet(&packet), "packet decisions differ");
}
