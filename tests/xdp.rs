//! The XDP program against the engine's packet decision, through
//! BPF_PROG_TEST_RUN: the shared corpus and random rulesets and packets.
//! Needs root and the built object (`.ci/test.sh` builds it); under CI
//! these tests never skip.

use crate::util::*;
use rctl_compiler::ir::Proto;
use rctl_compiler::spec::SampleKind;
use rctl_dataplane::xdp::{Tables, XdpProgram};
use rctl_dataplane::{Engine, EngineConfig, Packet, Verdict};
use std::net::IpAddr;

#[path = "xdp_frame.rs"]
mod xdp_frame;
use xdp_frame::frame;

/// The built XDP object's path, if this process can load it (root); under
/// CI both are required.
pub(crate) fn object_path() -> Option<std::path::PathBuf> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(String::from))
        });
    let root = uid.as_deref() == Some("0");
    let path = std::env::var("RCTL_XDP_OBJECT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            root_dir().join("ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp")
        });
    let built = path.is_file();
    if std::env::var_os("CI").is_some() {
        assert!(root, "XDP tests must run as root in CI");
        assert!(
            built,
            "the XDP object must be built in CI: {}",
            path.display()
        );
    }
    if !root || !built {
        eprintln!("skipping XDP tests: root {root}, object {}", path.display());
        return None;
    }
    Some(path)
}

fn object() -> Option<Vec<u8>> {
    object_path().map(|p| std::fs::read(p).expect("read the XDP object"))
}

fn root_dir() -> std::path::PathBuf {
    root()
}

fn expect(engine: &Engine, p: &Packet) -> (u32, Option<usize>) {
    match engine.decide_packet(p).verdict {
        Verdict::Drop { rule } | Verdict::Throttle { rule, .. } => (1, Some(rule)),
        Verdict::Allow { rule } => (2, Some(rule)),
        Verdict::Pass => (2, None),
        v => panic!("unexpected packet verdict {v:?}"),
    }
}

#[test]
fn corpus_packets_agree_with_the_engine() {
    let Some(obj) = object() else { return };
    let files = corpus_files();
    let mut checked = 0;
    for f in files {
        let c = rctl_compiler::compile_paths(std::slice::from_ref(&f), &Default::default());
        let rs = c.ruleset.unwrap();
        for t in &c.tests {
            let tables = Tables::new(&rs, t.site.as_deref()).unwrap();
            let mut prog = XdpProgram::load(&obj, &tables, rs.rules.len()).unwrap();
            let engine = Engine::new(
                rs.clone(),
                &EngineConfig {
                    site: t.site.clone(),
                    ..Default::default()
                },
            )
            .unwrap();
            // Every copy of every sample, in time order, as `rctl test` sends them.
            let mut events: Vec<(u64, u32, usize)> = Vec::new();
            for (si, s) in t.samples.iter().enumerate() {
                for i in 0..s.count {
                    events.push((s.time_of(i), i, si));
                }
            }
            events.sort();
            for (n, &(ms, _, si)) in events.iter().enumerate() {
                let s = &t.samples[si];
                let (proto, syn) = match &s.kind {
                    SampleKind::Packet { proto, syn } => (*proto, *syn),
                    SampleKind::Request { .. } => (Proto::Tcp, true),
                };
                let now = 1_000_000_000_000 + ms * 1_000_000;
                let got = prog
                    .test(&frame(s.ip, proto, s.port, syn, n % 2 == 1), now)
                    .unwrap();
                let want = expect(
                    &engine,
                    &Packet {
                        src: s.ip,
                        proto,
                        dst_port: s.port,
                        syn,
                        time_ns: now,
                    },
                );
                assert_eq!(
                    (got.action, got.rule),
                    want,
                    "{}: {}: packet {n} of {s:?}",
                    f.display(),
                    t.name
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn random_rulesets_and_packets_agree_with_the_engine() {
    let Some(obj) = object() else { return };
    let mut r = Rng(0xfeed_5eed);
    let nets = [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "192.0.2.0/24",
        "198.51.100.0/25",
        "203.0.113.7",
        "2001:db8::/32",
        "2001:db8:1::/48",
        "::ffff:10.9.0.0/112",
        "0.0.0.0/1",
    ];
    let ips: Vec<IpAddr> = [
        "10.1.2.3",
        "10.200.0.1",
        "192.0.2.9",
        "198.51.100.100",
        "198.51.100.200",
        "203.0.113.7",
        "8.8.8.8",
        "2001:db8::5",
        "2001:db8:1::5",
        "2001:db9::1",
        "::ffff:10.9.1.1",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let mut packets = 0;
    for round in 0..40 {
        let mut src = String::new();
        for i in 0..(2 + round % 7) {
            let cond = match r.next() % 6 {
                0 => format!("ip in {{ {}, {} }}", r.pick(&nets), r.pick(&nets)),
                1 => format!(
                    "ip in {{ {} }} and port in {{ {} }}",
                    r.pick(&nets),
                    r.pick(&["80", "443", "53", "1000-2000"])
                ),
                2 => format!(
                    "not ip in {{ {} }} and proto == {}",
                    r.pick(&nets),
                    r.pick(&["tcp", "udp", "icmp"])
                ),
                3 => format!(
                    "(ip in {{ {} }} or port == {}) and proto != udp",
                    r.pick(&nets),
                    r.pick(&["22", "443"])
                ),
                4 => format!(
                    "ip in {{ {} }} and header(\"user-agent\") == \"x\"",
                    r.pick(&nets)
                ),
                _ => format!(
                    "port != {} and ip in {{ {} }}",
                    r.pick(&["80", "443"]),
                    r.pick(&nets)
                ),
            };
            let action = if cond.contains("header") || r.next() % 4 == 0 {
                "allow".to_string()
            } else if r.next() % 2 == 0 {
                let unit = r.pick(&["packets", "connections"]);
                let key = r.pick(&["ip", "prefix(24, 64)"]);
                format!(
                    "throttle {} {unit} per 1s burst {} by {key}",
                    1 + r.next() % 3,
                    1 + r.next() % 3
                )
            } else {
                "drop".to_string()
            };
            let prio = if action == "allow" { 1 } else { 10 };
            src += &format!("rule r{i} {{ priority {prio} when {cond} {action} }}\n");
        }
        let c = compile(&src);
        let Some(rs) = c.ruleset else { continue };
        let tables = Tables::new(&rs, None).unwrap();
        let mut prog = XdpProgram::load(&obj, &tables, rs.rules.len()).unwrap();
        let engine = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        for k in 0..2_600u64 {
            let ip = ips[(r.next() % ips.len() as u64) as usize];
            let proto = [Proto::Tcp, Proto::Udp, Proto::Icmp][(r.next() % 3) as usize];
            let port = if proto == Proto::Icmp {
                0
            } else {
                [22, 53, 80, 443, 1500, 8080][(r.next() % 6) as usize]
            };
            let syn = k % 2 == 0;
            let now = 1_000_000_000_000 + k * 150_000_000;
            let got = prog
                .test(&frame(ip, proto, port, syn, k % 5 == 0), now)
                .unwrap();
            let want = expect(
                &engine,
                &Packet {
                    src: ip,
                    proto,
                    dst_port: port,
                    syn,
                    time_ns: now,
                },
            );
            assert_eq!(
                (got.action, got.rule),
                want,
                "ruleset:\n{src}\npacket: {ip} {proto:?} {port}"
            );
            packets += 1;
        }
    }
    assert!(packets >= 100_000, "{packets}");
}
