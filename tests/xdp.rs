//! The XDP program against the engine's packet decision, through
//! BPF_PROG_TEST_RUN: the shared corpus and random rulesets and packets.
//! Needs root and the built object (`.ci/test.sh` builds it); under CI
//! these tests never skip.

use crate::util::*;
use rctl_compiler::ir::Proto;
use rctl_compiler::spec::SampleKind;
use rctl_dataplane::xdp::Tables;
use rctl_dataplane::{Engine, EngineConfig, Packet, Verdict};
use rctl_loader::XdpProgram;
use rctl_testkit::frame::{default_dst, frame, frame_to};
use rctl_testkit::xdp::object;
use rctl_testkit::Rng;
use std::net::IpAddr;

fn expect(engine: &Engine, p: &Packet) -> (u32, Option<usize>) {
    match engine.decide_packet(p).verdict {
        Verdict::Drop { rule } | Verdict::Throttle { rule, .. } => (1, Some(rule)),
        Verdict::Allow { rule } => (2, Some(rule)),
        Verdict::Pass => (2, None),
        v => panic!("unexpected packet verdict {v:?}"),
    }
}

/// The same ruleset in three deciders: the program, the LPM-trie baseline
/// (with maps of its own, so limiters count each packet once per
/// decider) and the engine's packet decision.
struct Three {
    prog: XdpProgram,
    lpm: XdpProgram,
    engine: Engine,
}

impl Three {
    fn new(obj: &[u8], rs: &rctl_compiler::ir::Ruleset) -> (Three, Tables) {
        let tables = Tables::new(rs, None).unwrap();
        let prog = XdpProgram::load(obj, &tables, rs.rules.len(), false).unwrap();
        let mut lpm = XdpProgram::load(obj, &tables, rs.rules.len(), true).unwrap();
        lpm.select("rctl_lpm").unwrap();
        let engine = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        (Three { prog, lpm, engine }, tables)
    }

    /// Runs one packet through all three; they must agree on the action
    /// and the deciding rule. `vlan` puts the frame behind a VLAN tag.
    /// Without a destination, the packet goes to [`default_dst`].
    fn agree(&mut self, p: &Packet, vlan: bool, context: &dyn std::fmt::Display) {
        let dst = p.dst.unwrap_or_else(|| default_dst(p.src));
        let p = &Packet {
            dst: Some(dst),
            ..*p
        };
        let f = frame_to(p.src, dst, p.proto, p.dst_port, p.syn, vlan);
        let got = self.prog.test(&f, p.time_ns).unwrap();
        let lpm = self.lpm.test(&f, p.time_ns).unwrap();
        assert_eq!(got, lpm, "rctl and rctl_lpm differ: {context}: {p:?}");
        let want = expect(&self.engine, p);
        assert_eq!((got.action, got.rule), want, "{context}: {p:?}");
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
            let mut prog = XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap();
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
                let dst = s.dst.unwrap_or_else(|| default_dst(s.ip));
                let got = prog
                    .test(&frame_to(s.ip, dst, proto, s.port, syn, n % 2 == 1), now)
                    .unwrap();
                let want = expect(
                    &engine,
                    &Packet {
                        src: s.ip,
                        dst: Some(dst),
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
            let cond = match r.next() % 8 {
                0 => format!("ip in {{ {}, {} }}", r.pick(&nets), r.pick(&nets)),
                6 => format!(
                    "dst_ip in {{ {} }} and proto == {}",
                    r.pick(&nets),
                    r.pick(&["tcp", "udp"])
                ),
                7 => format!(
                    "ip in {{ {} }} and not dst_ip in {{ {}, {} }}",
                    r.pick(&nets),
                    r.pick(&nets),
                    r.pick(&nets)
                ),
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
        let (mut three, _) = Three::new(&obj, &rs);
        for k in 0..2_600u64 {
            let ip = ips[(r.next() % ips.len() as u64) as usize];
            let proto = [Proto::Tcp, Proto::Udp, Proto::Icmp][(r.next() % 3) as usize];
            let port = if proto == Proto::Icmp {
                0
            } else {
                [22, 53, 80, 443, 1500, 8080][(r.next() % 6) as usize]
            };
            // A destination of the source's family (the frame's).
            let dsts: &[&str] = if ip.is_ipv4() {
                &["198.51.100.10", "10.1.2.3", "203.0.113.7", "0.0.0.1"]
            } else {
                &[
                    "2001:db8::a",
                    "2001:db8:1::80",
                    "2001:db9::1",
                    "::ffff:10.9.1.1",
                ]
            };
            let p = Packet {
                src: ip,
                dst: Some(r.pick(dsts).parse().unwrap()),
                proto,
                dst_port: port,
                syn: k % 2 == 0,
                time_ns: 1_000_000_000_000 + k * 150_000_000,
            };
            three.agree(&p, k % 5 == 0, &format_args!("ruleset:\n{src}\n"));
            packets += 1;
        }
    }
    assert!(packets >= 100_000, "{packets}");
}

/// Rulesets in which every XDP term tests the destination address: the
/// program looks the destination up only when the configuration says some
/// term reads it, so here a wrong flag would let every packet through.
#[test]
fn rulesets_that_test_only_the_destination_are_enforced() {
    let Some(obj) = object() else { return };
    for src in [
        "rule d { when dst_ip in { 192.0.2.0/24, 2001:db8::/32 } and proto == udp drop }",
        "rule d { when not dst_ip in { 192.0.2.0/24, 2001:db8::/32 } and proto == udp drop }",
    ] {
        let rs = compile(src).ruleset.expect("compiles");
        let (mut three, _) = Three::new(&obj, &rs);
        let mut dropped = 0;
        for (k, (from, to)) in [
            ("198.51.100.1", "192.0.2.5"),
            ("198.51.100.1", "203.0.113.5"),
            ("2001:db9::1", "2001:db8::9"),
            ("2001:db9::1", "2001:db7::9"),
        ]
        .into_iter()
        .enumerate()
        {
            let p = Packet {
                src: from.parse().unwrap(),
                dst: Some(to.parse().unwrap()),
                proto: Proto::Udp,
                dst_port: 53,
                syn: false,
                time_ns: 1_000_000_000_000 + k as u64,
            };
            three.agree(&p, false, &src);
            let f = frame_to(p.src, p.dst.unwrap(), p.proto, 53, false, false);
            dropped += usize::from(three.prog.test(&f, p.time_ns).unwrap().action == 1);
        }
        assert_eq!(dropped, 2, "{src}");
    }
}

/// The interval table against the engine's prefix table (and the LPM-trie
/// baseline): thousands of prefixes of every length, crowded into a few
/// /16s so that the binary search runs deep, probed at every edge.
#[test]
fn interval_table_agrees_at_every_edge() {
    let Some(obj) = object() else { return };
    let mut r = Rng(0x1e55_ed9e);
    let mut src = String::from("ipblock big/x {\n");
    let mut edges: Vec<u32> = Vec::new();
    for i in 0..24_000u32 {
        // 3,000 prefixes in two crowded /16s, the rest anywhere (enough
        // intervals for the largest, 16-bit index).
        let crowded = i < 6_000 && i % 4 < 2;
        let base = match i % 4 {
            0 if crowded => 0x0a01_0000 | (r.next() as u32 & 0xffff),
            1 if crowded => 0xc633_0000 | (r.next() as u32 & 0xffff),
            _ => r.next() as u32,
        };
        // Long prefixes in the crowded /16s; elsewhere any length.
        let len = if crowded {
            [26u32, 27, 28, 29, 30, 31, 32][(r.next() % 7) as usize]
        } else if i % 997 == 2 {
            [8u32, 12][(r.next() % 2) as usize]
        } else {
            [16u32, 20, 23, 24, 27, 30, 31, 32][(r.next() % 8) as usize]
        };
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let net = base & mask;
        let last = net | !mask;
        src += &format!("  {}/{len}\n", std::net::Ipv4Addr::from(net));
        edges.extend([
            net.wrapping_sub(1),
            net,
            net.wrapping_add(1),
            last,
            last.wrapping_add(1),
        ]);
    }
    src += "}\nipblock small/y { 10.1.0.0/16 }\n";
    src += "rule d { when ipblock@big/x and not ipblock@small/y drop }\n";
    src += "rule a { when ipblock@small/y and port == 443 allow }\n";
    let c = rctl_compiler::compile_str("t.rctl", &src, &Default::default());
    let rs = c.ruleset.expect("compiles");
    let (mut three, tables) = Three::new(&obj, &rs);
    // Every kind of entry: leaves, inline intervals, nodes, and child
    // tables for the crowded /16s.
    let [leaves, nodes, children, _, inline] = tables.dir.kinds();
    assert!(
        leaves > 1_000 && inline > 1_000 && nodes > 100 && children >= 2,
        "{:?}",
        tables.dir.kinds()
    );
    edges.extend((0..5_000).map(|_| r.next() as u32));
    edges.extend([0, u32::MAX, 0x0a01_0000, 0x0a01_ffff]);
    for (k, a) in edges.into_iter().enumerate() {
        let p = Packet {
            src: IpAddr::V4(std::net::Ipv4Addr::from(a)),
            dst: None,
            proto: Proto::Tcp,
            dst_port: if k % 2 == 0 { 443 } else { 80 },
            syn: false,
            time_ns: 1_000_000_000 + k as u64,
        };
        three.agree(&p, k % 3 == 0, &"IPv4 edge");
    }
}

/// A spoofed flood of a million sources through a packet limit: it fills
/// the bucket table, but neither lifts a ban nor pushes out a client's
/// standing, and an exempted source passes throughout.
#[test]
fn spoofed_flood_keeps_bans_standing_and_exemptions() {
    let Some(obj) = object() else { return };
    let src = "rule exempt { priority 1 when ip in { 192.0.2.7 } allow }\n\
               rule lim { when proto == tcp throttle 5 packets per 1s burst 5 by ip ban 10m }\n";
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    let rs = c.ruleset.expect("compiles");
    let tables = Tables::new(&rs, None).unwrap();
    let mut prog = XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap();
    let v4 = |a: u32| IpAddr::V4(std::net::Ipv4Addr::from(a));
    let pkt = |a: u32| frame(v4(a), Proto::Tcp, 443, false, false);
    const DROP: u32 = 1;
    const PASS: u32 = 2;
    let t0 = 1_000_000_000_000u64;
    prog.set_clock(t0).unwrap();
    // An abuser gets banned; a client spends one of its five.
    let abuser = 0xcb00_7109;
    let client = 0xc633_6405;
    let got: Vec<u32> = (0..8).map(|_| prog.run(&pkt(abuser)).unwrap()).collect();
    assert_eq!(got, [PASS, PASS, PASS, PASS, PASS, DROP, DROP, DROP]);
    assert_eq!(prog.run(&pkt(client)).unwrap(), PASS);
    // The flood: a million sources, one packet each, within a millisecond.
    prog.set_clock(t0 + 1_000_000).unwrap();
    let mut r = Rng(0xf100d);
    let mut passed = 0u32;
    for _ in 0..1_000_000 {
        let a = (r.next() as u32) | 0x0100_0000;
        if prog.run(&pkt(a)).unwrap() == PASS {
            passed += 1;
        }
    }
    // The table holds 2^18 sources; the rest share one overflow bucket.
    assert!(
        (200_000..=270_000).contains(&passed),
        "{passed} spoofed packets passed"
    );
    prog.set_clock(t0 + 2_000_000).unwrap();
    assert_eq!(prog.run(&pkt(abuser)).unwrap(), DROP, "the ban holds");
    assert_eq!(
        prog.run(&pkt(client)).unwrap(),
        PASS,
        "the client keeps its bucket"
    );
    for _ in 0..100 {
        assert_eq!(prog.run(&pkt(0xc000_0207)).unwrap(), PASS, "exempt");
    }
}

/// The IPv6 interval table at every edge: prefixes of every length from
/// /32 to /128, most inside 2001:db8::/32 (one /16 of the index, so the
/// search runs deep), probed one below, at, and one above each edge.
#[test]
fn ipv6_interval_table_agrees_at_every_edge() {
    let Some(obj) = object() else { return };
    let mut r = Rng(0x6e55_ed9e);
    let mut src = String::from("ipblock big/x {\n");
    let mut edges: Vec<u128> = Vec::new();
    for i in 0..4_000u32 {
        let base = if i % 8 == 0 {
            u128::from(r.next()) << 64 | u128::from(r.next())
        } else {
            0x2001_0db8_u128 << 96 | u128::from(r.next() as u32) << 64 | u128::from(r.next())
        };
        let len = [32u32, 48, 56, 64, 96, 120, 127, 128][(r.next() % 8) as usize];
        let len = if i % 8 != 0 && len == 32 { 64 } else { len };
        let mask = u128::MAX << (128 - len);
        let net = base & mask;
        let last = net | !mask;
        src += &format!("  {}/{len}\n", std::net::Ipv6Addr::from(net));
        edges.extend([
            net.wrapping_sub(1),
            net,
            net.wrapping_add(1),
            last,
            last.wrapping_add(1),
        ]);
    }
    src += "}\nrule d { when ipblock@big/x and port == 443 drop }\n";
    let c = rctl_compiler::compile_str("t.rctl", &src, &Default::default());
    let rs = c.ruleset.expect("compiles");
    let (mut three, tables) = Three::new(&obj, &rs);
    // Every kind of entry: the crowded /32 zoomed into with child tables,
    // /64s inline and in nodes, and searches over scattered long prefixes.
    let [leaves, nodes, children, searches, inline] = tables.dir.kinds();
    assert!(
        leaves > 100 && inline > 100 && nodes > 5 && children > 3 && searches > 0,
        "{:?}",
        tables.dir.kinds()
    );
    edges.extend((0..3_000).map(|_| u128::from(r.next()) << 64 | u128::from(r.next())));
    edges.extend([0, u128::MAX, 0x2001_0db8_u128 << 96]);
    for (k, a) in edges.into_iter().enumerate() {
        let p = Packet {
            src: IpAddr::V6(std::net::Ipv6Addr::from(a)),
            dst: None,
            proto: Proto::Tcp,
            dst_port: 443,
            syn: false,
            time_ns: 1_000_000_000 + k as u64,
        };
        three.agree(&p, k % 3 == 0, &"IPv6 edge");
    }
}

/// The verifier walks every path of the program (the terms loop runs up to
/// 64 times; the rate limiter is a global function it checks once, on its
/// own) and refuses it past a million instructions. Keep the walk well
/// under that, so that a change which makes it explode (a branch that
/// splits the state before the loop doubles it; the limiter inlined into
/// the loop again, as it was before: 550,000) fails here, with the
/// figure, rather than at a user's apply. It is about 82,000 now.
#[test]
fn the_verifier_walk_keeps_headroom() {
    let Some(obj) = object() else { return };
    let c = rctl_compiler::compile_str(
        "t.rctl",
        "rule t { when proto == tcp throttle 5 packets per 1s by ip }\n",
        &Default::default(),
    );
    let rs = c.ruleset.expect("compiles");
    let tables = Tables::new(&rs, None).unwrap();
    let mut prog = XdpProgram::load(&obj, &tables, rs.rules.len(), false).unwrap();
    let walked = prog
        .xdp_mut()
        .unwrap()
        .info()
        .unwrap()
        .verified_instruction_count()
        .expect("the kernel reports verified instructions (5.16+)");
    eprintln!("the verifier walked {walked} instructions");
    assert!(walked < 300_000, "{walked} of the 1,000,000 limit");
}
