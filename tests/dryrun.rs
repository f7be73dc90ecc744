//! `rctl dry-run` on captures of real clients talking to a real nginx,
//! cross-checked against nginx's access log and tshark's HTTP dissector.

use crate::util::*;
use rctl_dataplane::dryrun::requests_in;

pub const FIXTURES: &[&str] = &[
    "curl",
    "python-requests",
    "ab-keepalive",
    "wrk-pipelined",
    "wget",
    "incidents",
];

fn fixture(name: &str) -> std::path::PathBuf {
    root().join("tests/fixtures/pcap").join(name)
}

/// A rule's entry in a JSON dry-run report.
pub fn rule_entry<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no rule `{name}` in the report"))
}

/// (method, uri, host, user agent) of every request rctl parses in a
/// capture, in the order they completed.
pub fn listed(pcap: &std::path::Path) -> Vec<String> {
    let (reqs, err) = requests_in(std::fs::File::open(pcap).unwrap());
    assert!(err.is_none(), "{}: {err:?}", pcap.display());
    let s = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or(b"")).into_owned();
    reqs.iter()
        .map(|r| {
            format!(
                "{}|{}|{}|{}",
                s(Some(r.method())),
                s(Some(r.target())),
                s(r.header("host")),
                s(r.header("user-agent"))
            )
        })
        .collect()
}

/// The same for a fixture, sorted.
fn ours(file: &str) -> Vec<String> {
    let mut v = listed(&fixture(file));
    v.sort();
    v
}

#[test]
fn every_request_matches_nginx_access_log() {
    for name in FIXTURES {
        let log = std::fs::read_to_string(fixture(&format!("{name}.access.log"))).unwrap();
        let mut want: Vec<String> = log
            .lines()
            .map(|l| l.split('|').skip(1).take(4).collect::<Vec<_>>().join("|"))
            .collect();
        want.sort();
        let got = ours(&format!("{name}.pcap"));
        assert_eq!(got.len(), want.len(), "{name}: request count");
        assert_eq!(got, want, "{name}");
    }
    // The pcapng conversion holds the same requests.
    assert_eq!(ours("curl.pcapng"), ours("curl.pcap"));
}

#[test]
fn every_request_matches_tshark() {
    if std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            !rctl_testkit::skip::in_ci(),
            "tshark must be installed in CI"
        );
        rctl_testkit::skip::skipped("tshark, for the cross-check (apt-get install tshark)");
        return;
    }
    for name in FIXTURES
        .iter()
        .map(|n| format!("{n}.pcap"))
        .chain(["curl.pcapng".to_string()])
    {
        let out = std::process::Command::new("tshark")
            .args([
                "-r",
                fixture(&name).to_str().unwrap(),
                "-o",
                "tcp.desegment_tcp_streams:TRUE",
                "-Y",
                "http.request",
                "-T",
                "fields",
                "-E",
                "separator=|",
            ])
            .args([
                "-e",
                "http.request.method",
                "-e",
                "http.request.uri",
                "-e",
                "http.host",
                "-e",
                "http.user_agent",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // tshark prints one line per frame; a frame with several pipelined
        // requests lists each field comma-separated.
        let mut want = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let cols: Vec<Vec<&str>> = line.split('|').map(|c| c.split(',').collect()).collect();
            for i in 0..cols[0].len() {
                want.push(
                    cols.iter()
                        .map(|c| c.get(i).copied().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join("|"),
                );
            }
        }
        want.sort();
        assert_eq!(ours(&name), want, "{name}");
    }
}

#[test]
fn dry_run_reports_the_incident_shapes() {
    let o = rctl(&[
        "dry-run",
        root().join("tests/fixtures/rules").to_str().unwrap(),
        "--pcap",
        fixture("incidents.pcap").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"]["requests"], 145);
    assert!(v["totals"]["packets"].as_u64().unwrap() > 145);
    let rule = |n: &str| rule_entry(&v, n).clone();
    // The updater is never throttled; each scraper address gets its 10.
    assert_eq!(rule("updater")["requests"]["allow"], 30);
    assert_eq!(rule("sparql_scrapers")["matches"], 90);
    assert_eq!(rule("sparql_scrapers")["requests"]["throttle"], 60);
    assert_eq!(
        rule("sparql_scrapers")["top_ips"].as_array().unwrap().len(),
        3
    );
    // The re-render loop: one bucket for the title; 5 pass, 20 are throttled.
    assert_eq!(rule("rerender")["requests"]["throttle"], 20);
    assert_eq!(
        rule("rerender")["top_paths"][0]["key"],
        "/api/rest_v1/page/html/%EA%9D%AE"
    );
    assert_eq!(v["unmatched"]["requests"], 0);
}

#[test]
fn text_report_and_whole_directories() {
    let o = rctl(&[
        "dry-run",
        root().join("tests/fixtures/rules").to_str().unwrap(),
        "--pcap",
        root().join("tests/fixtures/pcap").to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(out.contains("7 input(s)"), "{out}");
    assert!(out.contains("90 requests matched no rule"), "{out}");
    assert!(
        out.contains("user agents: ApacheBench/2.3 fixture (50), wrk fixture (40)"),
        "{out}"
    );
}

#[test]
fn corrupt_captures_give_the_offset_and_a_partial_report() {
    let dir = tempdir("corrupt");
    let good = std::fs::read(fixture("curl.pcap")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "magic.pcap",
            b"NOTAPCAPFILE".to_vec(),
            "at byte offset 0: not a pcap or pcapng file",
        ),
        ("empty.pcap", Vec::new(), "at byte offset 0: empty file"),
        (
            "truncated.pcap",
            good[..good.len() - 7].to_vec(),
            "truncated packet data",
        ),
        (
            "length.pcap",
            {
                let mut b = good.clone();
                b[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            },
            "at byte offset 32: corrupt record length",
        ),
        (
            "linktype.pcap",
            {
                let mut b = good.clone();
                b[20..24].copy_from_slice(&147u32.to_le_bytes());
                b
            },
            "at byte offset 20: link type 147 is not supported",
        ),
    ];
    let rules = root().join("tests/fixtures/rules");
    for (name, bytes, msg) in cases {
        // Every stderr contains "": each case names its error.
        assert!(!msg.is_empty(), "{name}: no expected message");
        let p = dir.join(name);
        std::fs::write(&p, &bytes).unwrap();
        let o = rctl(&[
            "dry-run",
            rules.to_str().unwrap(),
            "--pcap",
            p.to_str().unwrap(),
            "--format",
            "json",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| panic!("{name}: no report: {err}"));
        assert_eq!(o.status.code(), Some(1), "{name}");
        assert!(err.contains(msg), "{name}: {err}");
        assert!(err.contains(name), "{name}: {err}");
        if name == "truncated.pcap" {
            // Everything before the damage is reported.
            assert_eq!(v["totals"]["requests"], 5, "{name}");
        }
    }
}

#[test]
fn against_an_older_ruleset_shows_what_changes_and_for_whom() {
    let o = rctl(&[
        "dry-run",
        root().join("tests/fixtures/rules").to_str().unwrap(),
        "--against",
        root().join("tests/fixtures/rules-old").to_str().unwrap(),
        "--pcap",
        fixture("incidents.pcap").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let changes = v["changes"].as_array().unwrap();
    let find = |from: &str, to: &str| {
        changes
            .iter()
            .find(|c| c["from"] == from && c["to"] == to)
            .unwrap_or_else(|| panic!("{from} -> {to}: {changes:?}"))
            .clone()
    };
    // Before the exemption the updater's writes were throttled with the scrapers.
    let c = find("throttle by sparql_scrapers", "allow by updater");
    assert_eq!(c["requests"], 20);
    assert_eq!(c["top_ips"][0]["key"], "127.0.0.9");
    assert_eq!(find("pass", "allow by updater")["requests"], 10);
    // Nothing else changes.
    assert_eq!(
        changes
            .iter()
            .map(|c| c["requests"].as_u64().unwrap())
            .sum::<u64>(),
        30
    );
}

#[test]
fn captures_can_come_from_stdin() {
    let bytes = std::fs::read(fixture("wget.pcap")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args([
            "dry-run",
            root().join("tests/fixtures/rules").to_str().unwrap(),
            "--pcap",
            "-",
            "--format",
            "json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let o = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"]["requests"], 2);
    assert_eq!(v["inputs"][0]["path"], "-");
}

/// `dst_ip` in a dry-run reads the server address of each request's flow:
/// every request of the curl capture went to nginx on 127.0.0.1.
#[test]
fn dry_run_sees_the_destination_address() {
    let dir = tempdir("dst-ip");
    std::fs::write(
        dir.join("r.rctl"),
        "rule to_nginx { when dst_ip == 127.0.0.1 log }\n\
         rule elsewhere { when dst_ip not in { 127.0.0.0/8 } log }\n",
    )
    .unwrap();
    let o = rctl(&[
        "dry-run",
        dir.join("r.rctl").to_str().unwrap(),
        "--pcap",
        fixture("curl.pcap").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let requests = v["totals"]["requests"].as_u64().unwrap();
    let matches = |n: &str| rule_entry(&v, n)["matches"].as_u64();
    assert!(requests > 0);
    assert_eq!(matches("to_nginx"), Some(requests));
    assert_eq!(matches("elsewhere"), Some(0));
}

/// A dry-run of `rules` over a capture written by `f`.
fn dry_run_of(
    rules: &str,
    f: impl FnOnce(&mut rctl_testkit::capgen::Pcap<Vec<u8>>) -> std::io::Result<()>,
) -> rctl_dataplane::dryrun::Report {
    let mut p = rctl_testkit::capgen::Pcap::new(Vec::new()).unwrap();
    f(&mut p).unwrap();
    let pcap = p.finish().unwrap();
    let rs = compile(rules).ruleset.expect("rules compile");
    let mut run = rctl_dataplane::dryrun::DryRun::new(rs, None).unwrap();
    run.replay("generated", &pcap[..]).unwrap();
    run.finish()
}

const CLIENT: ([u8; 4], u16) = ([203, 0, 113, 9], 41000);
const OTHER: ([u8; 4], u16) = ([203, 0, 113, 10], 41001);
const SERVER: ([u8; 4], u16) = ([198, 51, 100, 10], 80);

/// `series` starts at the capture's first second (`totals.first_ns`), not
/// at the first matched request: rules, and runs of other rulesets over
/// the same capture, share one time axis.
#[test]
fn series_start_at_the_capture_start() {
    let s = 1_000_000u64; // µs
    let report = dry_run_of(
        "rule everything { when true log }\nrule late { when path == \"/late\" deny }",
        |p| {
            // A connection at 100.3 s that sends no request, then requests
            // at 103.8 s and 105.1 s.
            p.tcp(100 * s + 300_000, OTHER, SERVER, 0, 0x02, b"")?;
            p.tcp(103 * s + 800_000, CLIENT, SERVER, 0, 0x02, b"")?;
            let a = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n";
            p.tcp(103 * s + 800_000, CLIENT, SERVER, 1, 0x18, a)?;
            let b = b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n";
            p.tcp(
                105 * s + 100_000,
                CLIENT,
                SERVER,
                1 + a.len() as u32,
                0x18,
                b,
            )
        },
    );
    assert_eq!(report.totals.first_ns, Some(100_300_000_000));
    let z = (0, 0);
    // Entry 0 is second 100: the requests fall in entries 3 and 5.
    assert_eq!(report.series[0], [z, z, z, (1, 0), z, (1, 0)]);
    assert_eq!(report.series[1], [z, z, z, z, z, (1, 1)]);
}

/// A request's time is that of the packet that completed its head.
#[test]
fn a_request_is_timed_by_the_packet_that_completes_its_head() {
    let s = 1_000_000u64; // µs
    let report = dry_run_of("rule r { when true log }", |p| {
        let head = b"GET /split HTTP/1.1\r\nHost: x\r\n\r\n";
        let (a, b) = head.split_at(12);
        p.tcp(10 * s, CLIENT, SERVER, 0, 0x02, b"")?;
        p.tcp(10 * s, CLIENT, SERVER, 1, 0x18, a)?;
        p.tcp(20 * s, CLIENT, SERVER, 1 + a.len() as u32, 0x18, b)
    });
    let r = &report.rules[0];
    assert_eq!(r.matches, 1);
    assert_eq!(r.first_seen_ns, Some(20_000_000_000));
    assert_eq!(r.last_seen_ns, Some(20_000_000_000));
}

/// How many HTTP requests tshark's dissector finds in a capture (`None`
/// without tshark, outside CI).
fn tshark_request_count(pcap: &std::path::Path) -> Option<usize> {
    let out = std::process::Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap()])
        .args(["-o", "tcp.desegment_tcp_streams:TRUE", "-Y", "http.request"])
        .args(["-T", "fields", "-e", "http.request.method"])
        .output();
    let Ok(out) = out else {
        assert!(
            !rctl_testkit::skip::in_ci(),
            "tshark must be installed in CI"
        );
        return None;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One line per frame; pipelined requests in one frame are listed
    // comma-separated.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Some(text.lines().map(|l| l.split(',').count()).sum())
}

#[test]
fn requests_in_packets_xdp_stops_are_counted_and_attributed() {
    // The shipped rules drop 127/8 at the packet level (drop_bogons), and
    // every fixture is loopback traffic: no request reaches the HTTP
    // plane, and the report says how many the dropped packets carried.
    for name in FIXTURES.iter().map(|n| format!("{n}.pcap")) {
        let Some(want) = tshark_request_count(&fixture(&name)) else {
            return;
        };
        assert!(want > 0, "{name}");
        let o = rctl(&[
            "dry-run",
            root().join("rules").to_str().unwrap(),
            "--pcap",
            fixture(&name).to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let t = &r["totals"];
        assert_eq!(
            t["captured_requests"], want,
            "{name}: requests the capture held"
        );
        assert_eq!(t["requests"], 0, "{name}: none reached the HTTP plane");
        assert_eq!(t["stopped_requests"], want, "{name}");
        let bogons = rule_entry(&r, "drop_bogons");
        assert_eq!(bogons["stopped_requests"], want, "{name}");
        assert_eq!(
            bogons["stopped_packets"], bogons["packets"]["drop"],
            "{name}"
        );
        let top = bogons["stopped_top_ips"].as_array().unwrap();
        assert!(
            top[0]["key"].as_str().unwrap().starts_with("127."),
            "{name}: {top:?}"
        );
        let sum: u64 = top.iter().map(|h| h["count"].as_u64().unwrap()).sum();
        assert_eq!(
            sum, want as u64,
            "{name}: every stopped request has its address"
        );
    }
    // The text report says it in words.
    let o = rctl(&[
        "dry-run",
        root().join("rules").to_str().unwrap(),
        "--pcap",
        fixture("curl.pcap").to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("HTTP plane: 0 of the"), "{text}");
    assert!(text.contains("would have stopped"), "{text}");
}
