//! `rctl suggest` on real traffic: python-requests clients, browsers and
//! the WDQS updater through HAProxy or nginx (asking `rctl serve` with
//! the rules in force before the incident), captured by tcpdump on the
//! edge's port and, behind nginx, logged by it too. The swarm the sample
//! missed is found from the capture, and from nginx's access log the
//! same, with no collateral; the updater is never limited, and the
//! suggestion's effect equals `rctl dry-run` of the written file on the
//! same capture or log.

use super::rctl_ok;
use super::stack::{Front, Stack};
use crate::suggest::{rule_in, CHROME, EXISTING, FIREFOX};
use crate::util::{tempdir, TempDir};
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

/// The WDQS shape through `front`, captured by tcpdump on the edge's
/// port: the swarm, the readers and the updater, asking `rctl serve`
/// with the rules in force before the incident.
struct Run {
    dir: TempDir,
    rules: std::path::PathBuf,
    pcap: std::path::PathBuf,
    /// What the load generator sent, per group.
    got: Value,
    /// The front proxy's full log (nginx only).
    log: Option<std::path::PathBuf>,
}

/// Runs it; None (SKIPPED printed) when the edge or tcpdump is missing.
fn wdqs_through(front: Front) -> Option<Run> {
    // Twelve addresses in twelve networks: none heavy alone.
    let swarm: Vec<String> = (1..=12).map(|i| format!("185.{}.101.7", 100 + i)).collect();
    let mut addrs: Vec<&str> = swarm.iter().map(String::as_str).collect();
    addrs.extend(READERS);
    addrs.push(UPDATER);
    let browser = FIREFOX;
    let groups = json!([
        {"name": "readers", "sources": READERS, "threads": 6, "rate": 6,
         "paths": ["/sparql?query=SELECT%201", "/wiki/Q42", "/wiki/Q64"],
         "headers": {"User-Agent": browser, "Accept-Language": "de-DE,de;q=0.9"}},
        {"name": "swarm", "sources": swarm, "threads": 12, "rate": 60,
         "path": "/sparql?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D"},
        {"name": "updater", "sources": [UPDATER], "threads": 1, "rate": 40,
         "path": "/sparql?update=1",
         "headers": {"User-Agent": "wmf-streaming-updater-consumer/0.3"}},
    ]);
    through(front, "wdqs", &addrs, groups)
}

/// `groups` of clients from `addrs` through `front` for 8 s, captured by
/// tcpdump on the edge's port (and logged by nginx); None (SKIPPED
/// printed) when the edge or tcpdump is missing.
fn through(front: Front, tag: &str, addrs: &[&str], groups: Value) -> Option<Run> {
    let tcpdump_found = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    if !super::stack::available()
        || !skip_unless(tcpdump_found, "tcpdump (apt-get install tcpdump)")
    {
        return None;
    }
    let dir = tempdir(&format!("suggest-live-{tag}-{front:?}"));
    let rules = dir.join("existing.rctl");
    std::fs::write(&rules, EXISTING).unwrap();
    let art = dir.join("existing.rctlc");
    rctl_ok(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        art.to_str().unwrap(),
    ]);
    let s = Stack::start(front, &art, addrs, &[]);
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
    let plan = json!({"duration": 8, "groups": groups.clone()});
    let got = s.load(plan);
    for g in groups.as_array().unwrap() {
        let g = g["name"].as_str().unwrap();
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

    let log = (front == Front::Nginx).then(|| {
        let p = dir.join("front-full.log");
        std::fs::copy(s.dir.join("front-full.log"), &p).unwrap();
        p
    });
    Some(Run {
        dir,
        rules,
        pcap,
        got,
        log,
    })
}

/// `rctl suggest` of the existing rules on `input` (`--pcap FILE` or
/// `--log FILE …`); the JSON summary, its written suggestions, the file.
fn suggest(r: &Run, name: &str, input: &[&str]) -> (Value, Vec<Value>, std::path::PathBuf) {
    let out = r.dir.join(name);
    let mut args = vec![
        "suggest",
        r.rules.to_str().unwrap(),
        "--trusted",
        "ipblock@wdqs/updater",
        "--budget",
        "0",
        "-o",
        out.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(input);
    let (summary, err) = rctl_ok(&args);
    let v: Value = serde_json::from_str(&summary).unwrap_or_else(|e| panic!("{e}: {err}"));
    let written: Vec<Value> = v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["written"] == true)
        .cloned()
        .collect();
    (v, written, out)
}

/// The one suggestion the WDQS shape must give: the python-requests
/// swarm by User-Agent, its twelve addresses, no collateral.
fn is_the_swarm(written: &[Value], file: &std::path::Path) {
    let text = std::fs::read_to_string(file).unwrap();
    assert_eq!(written.len(), 1, "{written:#?}\n{text}");
    let w = &written[0];
    assert_eq!(w["key"], "user-agent", "{w}");
    assert!(
        w["what"].as_str().unwrap().contains("python-requests/"),
        "{w}"
    );
    assert_eq!(w["effect"]["clients_limited"], 12, "{w}");
    assert_eq!(w["effect"]["collateral_requests"], 0, "{w}");
}

#[test]
fn a_swarm_through_haproxy_is_found_in_its_capture_and_the_updater_is_not() {
    let Some(r) = wdqs_through(Front::Haproxy) else {
        return;
    };
    let (rules, pcap, got) = (&r.rules, &r.pcap, &r.got);
    let (v, written, out) = suggest(&r, "suggested.rctl", &["--pcap", pcap.to_str().unwrap()]);
    let sent: u64 = ["readers", "swarm", "updater"]
        .iter()
        .map(|g| got[g]["sent"].as_u64().unwrap())
        .sum();
    // Every request sent is in the capture (the probes besides).
    assert!(v["requests"].as_u64().unwrap() >= sent, "{v} {got}");
    is_the_swarm(&written, &out);
    let w = &written[0];
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
    let r = rule_in(&d, w["rule"].as_str().unwrap());
    assert_eq!(
        r["would"]["throttle"], w["effect"]["requests_limited"],
        "{r}\n{w}"
    );
    let exempt = rule_in(&d, "wdqs_updater_exempt");
    assert_eq!(
        exempt["requests"]["allow"], got["updater"]["sent"],
        "{exempt}"
    );
    rctl_ok(&["test", rules.to_str().unwrap(), out.to_str().unwrap()]);
}

#[test]
fn a_swarm_through_nginx_is_found_in_its_access_log_as_in_its_capture() {
    let Some(r) = wdqs_through(Front::Nginx) else {
        return;
    };
    let log = r.log.clone().unwrap();
    let format = format!("nginx:{}", super::FULL_LOG);
    let log_input = ["--log", log.to_str().unwrap(), "--log-format", &format];
    let (pv, from_pcap, pfile) =
        suggest(&r, "from-pcap.rctl", &["--pcap", r.pcap.to_str().unwrap()]);
    let (lv, from_log, lfile) = suggest(&r, "from-log.rctl", &log_input);
    // The log holds every request sent (nginx logs each, and the probes
    // of the stack's start); a capture on a loaded machine can lose a
    // few packets, so the two totals are not compared.
    let sent: u64 = ["readers", "swarm", "updater"]
        .iter()
        .map(|g| r.got[g]["sent"].as_u64().unwrap())
        .sum();
    assert!(lv["requests"].as_u64().unwrap() >= sent, "{lv}");
    assert!(pv["requests"].as_u64().unwrap() > 0, "{pv}");
    is_the_swarm(&from_pcap, &pfile);
    is_the_swarm(&from_log, &lfile);
    // The same suggestion: the same rule on the same clients. (The
    // log's time is when nginx wrote the line, a few ms after the
    // capture saw the request: the traffic's span, and so the limit
    // scaled to the period and what it limits, can differ by the log's
    // late second; each is checked against its own dry run.)
    let (p, l) = (&from_pcap[0], &from_log[0]);
    for k in ["key", "period_s"] {
        assert_eq!(p[k], l[k], "{k}: {p}\n{l}");
    }
    // Who: the User-Agent and its addresses.
    let who = |w: &Value| {
        w["what"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(who(p), who(l), "{p}\n{l}");
    assert!(l["effect"]["requests_limited"].as_u64().unwrap() > 0, "{l}");
    // The file from the log is checked and tested as it is, and the dry
    // run of it on the same log counts what the suggester measured.
    let rules = r.rules.to_str().unwrap();
    rctl_ok(&["check", rules, lfile.to_str().unwrap()]);
    rctl_ok(&["test", rules, lfile.to_str().unwrap()]);
    rctl_ok(&["test", lfile.to_str().unwrap()]);
    let mut args = vec![
        "dry-run",
        rules,
        lfile.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(log_input);
    let (d, _) = rctl_ok(&args);
    let d: Value = serde_json::from_str(&d).unwrap();
    let rule = rule_in(&d, l["rule"].as_str().unwrap());
    assert_eq!(
        rule["would"]["throttle"], l["effect"]["requests_limited"],
        "{rule}\n{l}"
    );
    let exempt = rule_in(&d, "wdqs_updater_exempt");
    assert_eq!(
        exempt["requests"]["allow"], r.got["updater"]["sent"],
        "{exempt}"
    );
}

/// The re-render loop and a browser-UA scraper through nginx, among
/// readers: six service hosts re-requesting one page past the caches,
/// one address with a browser's User-Agent (and no language) walking
/// entity ids. Then the same readers alone, a quiet day.
fn loop_and_scraper(quiet: bool) -> Option<Run> {
    const SERVICES: [&str; 6] = [
        "208.80.153.41",
        "208.80.153.42",
        "208.80.153.43",
        "208.80.153.44",
        "208.80.153.45",
        "208.80.153.46",
    ];
    const SCRAPER: &str = "45.83.64.7";
    let titles: Vec<String> = ["Paris", "Lyon", "Marseille", "Lille", "Nantes", "Rennes"]
        .iter()
        .map(|t| format!("/api/rest_v1/page/html/{t}"))
        .collect();
    let ids: Vec<String> = (1..=150)
        .map(|n| format!("/wiki/Special:EntityData/Q{n}.json"))
        .collect();
    let mut groups = vec![
        json!({"name": "readers-fr", "sources": READERS, "threads": 6, "rate": 12,
               "paths": titles,
               "headers": {"Host": "fr.wikipedia.org", "User-Agent": FIREFOX,
                           "Accept-Language": "fr-FR,fr;q=0.9"}}),
        json!({"name": "readers-wd", "sources": READERS, "threads": 6, "rate": 12,
               "paths": ids[..12],
               "headers": {"Host": "www.wikidata.org", "User-Agent": FIREFOX,
                           "Accept-Language": "de-DE,de;q=0.9"}}),
    ];
    let mut addrs: Vec<&str> = READERS.to_vec();
    if !quiet {
        groups.push(
            json!({"name": "loop", "sources": SERVICES, "threads": 6, "rate": 36,
               "path": "/api/rest_v1/page/html/Toulouse",
               "headers": {"Host": "fr.wikipedia.org", "User-Agent": "ChangePropagation/WMF",
                           "Cache-Control": "no-cache"}}),
        );
        groups.push(
            json!({"name": "scraper", "sources": [SCRAPER], "threads": 1, "rate": 40,
               "paths": ids,
               "headers": {"Host": "www.wikidata.org", "User-Agent": CHROME}}),
        );
        addrs.extend(SERVICES);
        addrs.push(SCRAPER);
    }
    through(
        Front::Nginx,
        if quiet { "quiet" } else { "loop" },
        &addrs,
        Value::Array(groups),
    )
}

/// Each of `written` has an effect equal to `rctl dry-run` of `file`
/// beside the existing rules on `input`, and `file` passes `rctl test`.
fn effects_as_dry_run(r: &Run, written: &[Value], file: &std::path::Path, input: &[&str]) {
    let rules = r.rules.to_str().unwrap();
    let mut args = vec!["dry-run", rules, file.to_str().unwrap(), "--format", "json"];
    args.extend(input);
    let (d, _) = rctl_ok(&args);
    let d: Value = serde_json::from_str(&d).unwrap();
    for w in written {
        let rule = rule_in(&d, w["rule"].as_str().unwrap());
        assert_eq!(
            rule["would"]["throttle"], w["effect"]["requests_limited"],
            "{rule}\n{w}"
        );
    }
    rctl_ok(&["test", rules, file.to_str().unwrap()]);
}

#[test]
fn a_loop_and_a_scraper_through_nginx_are_found_by_what_they_ask_and_a_quiet_day_gets_nothing() {
    let Some(r) = loop_and_scraper(false) else {
        return;
    };
    let log = r.log.clone().unwrap();
    let format = format!("nginx:{}", super::FULL_LOG);
    let log_input = ["--log", log.to_str().unwrap(), "--log-format", &format];
    let pcap_input = ["--pcap", r.pcap.to_str().unwrap()];
    for (name, input) in [
        ("from-log.rctl", &log_input[..]),
        ("from-pcap.rctl", &pcap_input[..]),
    ] {
        let (v, written, file) = suggest(&r, name, input);
        let text = std::fs::read_to_string(&file).unwrap();
        let mut keys: Vec<&str> = written.iter().map(|w| w["key"].as_str().unwrap()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["host, path", "ip"], "{name}: {v:#}\n{text}");
        for w in &written {
            assert_eq!(w["effect"]["collateral_requests"], 0, "{name}: {w}");
            let what = w["what"].as_str().unwrap();
            if w["key"] == "ip" {
                assert!(
                    what.contains("45.83.64.7") && what.contains("EntityData/*"),
                    "{what}"
                );
            } else {
                // Keyed by the page, past the caches only.
                assert!(what.contains("Toulouse"), "{what}");
                assert_eq!(w["effect"]["clients_limited"], 6, "{name}: {w}");
            }
        }
        assert!(text.contains("contains \"no-cache\""), "{name}: {text}");
        effects_as_dry_run(&r, &written, &file, input);
    }
    // The same readers alone: nothing stands out.
    let Some(q) = loop_and_scraper(true) else {
        return;
    };
    let log = q.log.clone().unwrap();
    for input in [
        vec!["--log", log.to_str().unwrap(), "--log-format", &format],
        vec!["--pcap", q.pcap.to_str().unwrap()],
    ] {
        let (v, _, file) = suggest(&q, "quiet.rctl", &input);
        assert_eq!(v["suggestions"], json!([]), "{v:#}");
        assert!(v["requests"].as_u64().unwrap() > 100, "{v}");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("Nothing to suggest"), "{text}");
    }
}
