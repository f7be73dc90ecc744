//! `rctl suggest` on real traffic: python-requests clients, browsers and
//! the WDQS updater through HAProxy (asking `rctl serve` with the rules in
//! force before the incident), captured by tcpdump on the edge's port.
//! The swarm the sample missed is found from the capture, with no
//! collateral, the updater is never limited, and the suggestion's effect
//! equals `rctl dry-run` of the written file on the same capture.

use super::rctl_ok;
use super::stack::{Front, Stack};
use crate::suggest::{EXISTING, FIREFOX};
use crate::util::tempdir;
use rctl_testkit::proc::Proc;
use rctl_testkit::skip::skip_unless;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const UPDATER: &str = "208.80.154.230";
const READERS: [&str; 6] = [
    "93.184.216.34",
    "151.101.1.1",
    "151.101.65.1",
    "104.16.1.1",
    "172.64.1.1",
    "192.0.78.9",
];

#[test]
fn a_swarm_through_haproxy_is_found_in_its_capture_and_the_updater_is_not() {
    let tcpdump_found = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    if !super::stack::available()
        || !skip_unless(tcpdump_found, "tcpdump (apt-get install tcpdump)")
    {
        return;
    }
    let dir = tempdir("suggest-live");
    let rules = dir.join("existing.rctl");
    std::fs::write(&rules, EXISTING).unwrap();
    let art = dir.join("existing.rctlc");
    rctl_ok(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        art.to_str().unwrap(),
    ]);
    // Twelve addresses in twelve networks: none heavy alone.
    let swarm: Vec<String> = (1..=12).map(|i| format!("185.{}.101.7", 100 + i)).collect();
    let mut addrs: Vec<&str> = swarm.iter().map(String::as_str).collect();
    addrs.extend(READERS);
    addrs.push(UPDATER);
    let s = Stack::start(Front::Haproxy, &art, &addrs, &[]);
    let pcap = dir.join("edge.pcap");
    let mut tcpdump = Command::new("tcpdump");
    tcpdump
        .args(["-i", "lo", "--immediate-mode", "-U", "-s", "0", "-w"])
        .arg(&pcap)
        .args(["tcp", "port", "80", "and", "host", super::stack::EDGE]);
    let mut dump = Proc::spawn("tcpdump", &dir, tcpdump);
    dump.wait_ready("listening", Duration::from_secs(10), |p| {
        p.stderr().contains("listening on")
    });
    let browser = FIREFOX;
    let plan = json!({"duration": 8, "groups": [
        {"name": "readers", "sources": READERS, "threads": 6, "rate": 6,
         "paths": ["/sparql?query=SELECT%201", "/wiki/Q42", "/wiki/Q64"],
         "headers": {"User-Agent": browser, "Accept-Language": "de-DE,de;q=0.9"}},
        {"name": "swarm", "sources": swarm, "threads": 12, "rate": 60,
         "path": "/sparql?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D"},
        {"name": "updater", "sources": [UPDATER], "threads": 1, "rate": 40,
         "path": "/sparql?update=1",
         "headers": {"User-Agent": "wmf-streaming-updater-consumer/0.3"}},
    ]});
    let got = s.load(plan);
    for g in ["readers", "swarm", "updater"] {
        assert!(got[g]["sent"].as_u64().unwrap() > 20, "{got}");
    }
    // Stopped once its file stops growing: nothing is left in flight.
    let size = || std::fs::metadata(&pcap).map_or(0, |m| m.len());
    let mut last = size();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = size();
        if now == last {
            break;
        }
        last = now;
    }
    dump.signal("INT");
    std::thread::sleep(Duration::from_millis(500));
    dump.stop();

    let out = dir.join("suggested.rctl");
    let (summary, err) = rctl_ok(&[
        "suggest",
        rules.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--trusted",
        "ipblock@wdqs/updater",
        "--budget",
        "0",
        "-o",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&summary).unwrap_or_else(|e| panic!("{e}: {err}"));
    let sent: u64 = ["readers", "swarm", "updater"]
        .iter()
        .map(|g| got[g]["sent"].as_u64().unwrap())
        .sum();
    // Every request sent is in the capture (the probes besides).
    assert!(v["requests"].as_u64().unwrap() >= sent, "{v} {got}");
    let written: Vec<&Value> = v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["written"] == true)
        .collect();
    let file = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.len(), 1, "{v:#}\n{file}");
    let w = written[0];
    assert_eq!(w["key"], "user-agent", "{w}");
    assert!(
        w["what"].as_str().unwrap().contains("python-requests/"),
        "{w}"
    );
    assert_eq!(w["effect"]["clients_limited"], 12, "{w}");
    assert_eq!(w["effect"]["collateral_requests"], 0, "{w}");
    // The written file beside the existing rules, on the same capture:
    // the dry run's count is the suggester's, the updater all allowed.
    let (d, _) = rctl_ok(&[
        "dry-run",
        rules.to_str().unwrap(),
        out.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let d: Value = serde_json::from_str(&d).unwrap();
    let rule = |name: &str| {
        d["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {d}"))
            .clone()
    };
    let r = rule(w["rule"].as_str().unwrap());
    assert_eq!(
        r["would"]["throttle"], w["effect"]["requests_limited"],
        "{r}\n{w}"
    );
    let exempt = rule("wdqs_updater_exempt");
    assert_eq!(
        exempt["requests"]["allow"], got["updater"]["sent"],
        "{exempt}"
    );
    rctl_ok(&["test", rules.to_str().unwrap(), out.to_str().unwrap()]);
}
