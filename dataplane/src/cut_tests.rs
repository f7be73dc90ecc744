//! Cut values against the whole ones: random rulesets on the User-Agent
//! and the Host, random values cut at random lengths. A verdict decided on
//! the cut value must be the verdict of the whole value, whatever it was;
//! and the refinement must decide most requests a cut does not touch.

use crate::partial::{Judged, Known, PartialTrace};
use crate::partial_tests::{cond_of, Rng};
use crate::request::Request;
use crate::{Engine, EngineConfig};
use rctl_compiler::ir::Ruleset;

const AGENTS: [&str; 6] = [
    "curl/8.4.0",
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0",
    "python-requests/2.31.0",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    "sqlmap/1.7.2#stable (https://sqlmap.org)",
    "Mozilla/5.0 zgrab/0.x",
];

fn atom(r: &mut Rng) -> String {
    let ua = "header(\"user-agent\")";
    match r.next() % 9 {
        0 => format!(
            "{ua} == \"{}\"",
            r.pick(&["curl/8.4.0", "curl/8", "python-requests/2.31.0"])
        ),
        1 => format!(
            "{ua} starts_with \"{}\"",
            r.pick(&["curl/", "Mozilla/5.0 (X11", "sqlmap"])
        ),
        2 => format!("{ua} ends_with \"{}\"", r.pick(&[".html)", "0", "stable"])),
        3 => format!("{ua} contains \"{}\"", r.pick(&["bot", "zgrab", "Linux"])),
        4 => format!(
            "{ua} ~ \"{}\"",
            r.pick(&[
                "^curl/[0-9]",
                "^Mozilla.*Firefox",
                r"bot\b",
                "requests/2$",
                "sqlmap"
            ])
        ),
        5 => format!("{ua} {}", r.pick(&["present", "absent"])),
        6 => format!(
            "host == \"{}\"",
            r.pick(&["query.example.org", "example.org"])
        ),
        7 => format!("host starts_with \"{}\"", r.pick(&["query.", "www."])),
        _ => format!("path starts_with \"{}\"", r.pick(&["/sparql", "/w/"])),
    }
}

fn ruleset(r: &mut Rng) -> Option<Ruleset> {
    let mut src = String::new();
    for i in 0..(2 + r.next() % 5) {
        let action = match r.next() % 4 {
            0 => "allow".to_string(),
            1 => "log".to_string(),
            _ => format!("deny {}", 400 + r.next() % 10),
        };
        src.push_str(&format!(
            "rule r{i} {{\npriority {}\nwhen {}\n{action}\n}}\n",
            r.next() % 4,
            cond_of(r, 0, atom)
        ));
    }
    rctl_compiler::compile_str("t.rctl", &src, &Default::default()).ruleset
}

fn request<'a>(
    ua: &'a [u8],
    host: &'a [u8],
    headers: &'a mut Vec<(&'a [u8], &'a [u8])>,
) -> Request<'a> {
    headers.push((b"user-agent", ua));
    headers.push((b"host", host));
    Request {
        method: b"GET",
        host,
        target: b"/sparql?query=x",
        headers,
        ip: "198.51.100.7".parse().unwrap(),
        dst: None,
        port: 443,
        time_ns: 0,
    }
}

/// Every cut of every value: the User-Agent alone, the Host alone, and
/// both at once.
fn cuts(ua: usize, host: usize) -> Vec<(usize, usize, Vec<&'static [u8]>)> {
    let mut v: Vec<(usize, usize, Vec<&'static [u8]>)> = Vec::new();
    for u in 1..=ua {
        v.push((u, host, vec![b"user-agent"]));
        v.push((u, 1 + u % host, vec![b"user-agent", b"host"]));
    }
    for h in 1..=host {
        v.push((ua, h, vec![b"host"]));
    }
    v
}

#[test]
fn a_verdict_on_a_cut_value_is_the_verdict_of_the_whole_value() {
    let mut r = Rng(0x51_7cc1_b727_220a);
    let (mut checked, mut decided, mut unknown) = (0, 0, 0);
    let mut known = Known::all();
    known.capped = vec!["user-agent".into(), "host".into()];
    for _ in 0..120 {
        let Some(rs) = ruleset(&mut r) else { continue };
        let engine = Engine::new(rs, &EngineConfig::default()).unwrap();
        let blind = engine.blind(&known);
        let whole = engine.blind(&Known::all());
        let mut s = engine.scratch();
        let mut trace = PartialTrace::default();
        for ua in AGENTS.map(str::as_bytes) {
            let host = r.pick(&["query.example.org", "www.example.org"]).as_bytes();
            let mut h1 = Vec::new();
            let full = request(ua, host, &mut h1);
            let want = engine.judge_request(&full, &whole, &mut s, &mut trace);
            // A value that was not cut, judged as whole, is the engine's.
            let got = engine.judge_request_cut(&full, &blind, &[], &mut s, &mut trace);
            assert_eq!(got, want);
            for (ua_len, host_len, cut) in cuts(ua.len(), host.len()) {
                let mut h2 = Vec::new();
                let part = request(&ua[..ua_len], &host[..host_len], &mut h2);
                let got = engine.judge_request_cut(&part, &blind, &cut, &mut s, &mut trace);
                checked += 1;
                match got {
                    Judged::Unknown { .. } => unknown += 1,
                    got => {
                        decided += 1;
                        let (Judged::Decided(g), Judged::Decided(w)) = (&got, &want) else {
                            panic!("{got:?} {want:?}");
                        };
                        assert_eq!(
                            g.verdict,
                            w.verdict,
                            "{:?} cut to {:?}, {:?} cut to {:?}",
                            String::from_utf8_lossy(ua),
                            String::from_utf8_lossy(&ua[..ua_len]),
                            String::from_utf8_lossy(host),
                            String::from_utf8_lossy(&host[..host_len]),
                        );
                    }
                }
            }
        }
    }
    assert!(checked > 30_000, "{checked}");
    assert!(decided > 15_000 && unknown > 8_000, "{decided} {unknown}");
}

/// A throttle keyed by a header that may be cut: the request whose value
/// may be cut cannot be counted in its bucket (which bucket is unknown),
/// so from then on the bucket counts fewer requests than live, and none
/// of the throttle's verdicts is known.
#[test]
fn a_throttle_that_missed_a_cut_key_decides_nothing_after() {
    let src = "rule per_agent {\n  when path starts_with \"/\"\n  throttle 1 requests per 1m by header(\"user-agent\")\n}\n";
    let rs = rctl_compiler::compile_str("t.rctl", src, &Default::default())
        .ruleset
        .unwrap();
    let engine = Engine::new(rs, &EngineConfig::default()).unwrap();
    let mut known = Known::all();
    known.capped = vec!["user-agent".into()];
    let blind = engine.blind(&known);
    let (mut s, mut trace) = (engine.scratch(), PartialTrace::default());
    let mut judge = |ua: &[u8], cut: &[&[u8]], t: u64| {
        let mut h = Vec::new();
        let mut req = request(ua, b"example.org", &mut h);
        req.time_ns = t;
        engine.judge_request_cut(&req, &blind, cut, &mut s, &mut trace)
    };
    // Before any cut, the bucket is run.
    assert!(matches!(judge(b"curl/8", &[], 1), Judged::Decided(_)));
    // A value at its capture length: which bucket is unknown.
    let first = judge(b"Mozilla/5.0 (X11", &[b"user-agent"], 2);
    assert!(matches!(first, Judged::Unknown { .. }), "{first:?}");
    // The same agent, whole: live, its bucket may hold the cut request.
    let later = judge(b"Mozilla/5.0 (X11", &[], 3);
    assert!(matches!(later, Judged::Unknown { .. }), "{later:?}");
}
