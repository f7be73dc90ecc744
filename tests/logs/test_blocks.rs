//! `rctl test` on real traffic: `replay` lines in test blocks, judged as
//! `rctl dry-run` judges the same files, on a real capture (with the
//! nginx log written beside it as the independent count) and on logs.

use crate::util::{rctl, root, tempdir};
use serde_json::Value;
use std::path::Path;

fn run_test(rules: &Path) -> (bool, String, String) {
    let o = rctl(&["test", rules.to_str().unwrap()]);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_test_replays_a_capture_as_the_dry_run_judges_it() {
    let dir = tempdir("test-replay-capture");
    // A replay reads below the ruleset's folder, as `include` does.
    let pcap = dir.join("incidents.pcap");
    std::fs::copy(root().join("tests/fixtures/pcap/incidents.pcap"), &pcap).unwrap();
    let fixture =
        std::fs::read_to_string(root().join("tests/fixtures/rules/fixture.rctl")).unwrap();
    // nginx's own log of the same traffic: requests per client.
    let nginx =
        std::fs::read_to_string(root().join("tests/fixtures/pcap/incidents.access.log")).unwrap();
    let from = |ip: &str| {
        nginx
            .lines()
            .filter(|l| l.starts_with(&format!("{ip}|")))
            .count()
    };
    let (updater, scraper) = (from("127.0.0.9"), from("127.0.0.21"));
    assert!(updater > 0 && scraper > 0);
    // The dry run's count of the scraper's limited requests.
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, &fixture).unwrap();
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let limited = super::limited(super::rule(&v, "sparql_scrapers"), "127.0.0.21");
    assert!(limited > 0 && limited < scraper as u64);
    let test = format!(
        "\ntest \"the incidents capture\" {{\n  replay updater \"incidents.pcap\" ip 127.0.0.9\n  replay scraper \"incidents.pcap\" ip 127.0.0.21\n  expect for updater all allow by updater\n  expect for updater {updater} allow\n  expect for scraper {limited} throttle by sparql_scrapers\n  expect for scraper first pass\n}}\n",
    );
    std::fs::write(&rules, fixture.clone() + &test).unwrap();
    let (ok, out, err) = run_test(&rules);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!(
            "ok   the incidents capture ({} sent)",
            updater + scraper
        )),
        "{out}"
    );
    // One more throttled request than the dry run counted fails, saying what came.
    let wrong = test.replace(
        &format!("{limited} throttle"),
        &format!("{} throttle", limited + 1),
    );
    std::fs::write(&rules, fixture + &wrong).unwrap();
    let (ok, out, _) = run_test(&rules);
    assert!(!ok);
    assert!(
        out.contains(&format!(
            "expected {} throttle by sparql_scrapers of {scraper} replayed, matched {limited}",
            limited + 1
        )),
        "{out}"
    );
}

const RULES: &str = "rule scrapers {
  priority 1
  when header(\"user-agent\") starts_with \"sqlmap\"
  deny 403 \"no\"
}
rule per_ip {
  priority 2
  when path starts_with \"/sparql\"
  throttle 10 requests per 1m burst 5 by ip status 429 reason \"slow down\"
}
";

/// nginx combined lines, one every `s` seconds from noon.
fn day(n: u32) -> String {
    (0..n)
        .map(|s| {
            let (ip, ua) = match s % 3 {
                0 => ("45.83.64.7", "sqlmap/1.7"),
                1 => ("208.80.154.230", "updater/1.0"),
                _ => ("93.184.216.34", "Mozilla/5.0"),
            };
            format!(
                "{ip} - - [13/May/2026:12:{:02}:{:02} +0000] \"GET /sparql?query=x HTTP/1.1\" 200 1 \"-\" \"{ua}\"\n",
                s / 60,
                s % 60
            )
        })
        .collect()
}

#[test]
fn a_test_replays_a_log_and_never_passes_what_it_cannot_judge() {
    let dir = tempdir("test-replay-log");
    std::fs::write(dir.join("day.log"), day(120)).unwrap();
    let rules = dir.join("r.rctl");
    let test = "
test \"a real day\" {
  replay scraper \"day.log\" format \"nginx-combined\" ip 45.83.64.0/24
  replay updater \"day.log\" ip 208.80.154.230
  expect for scraper all deny by scrapers
  expect for updater 16 throttle by per_ip
}
";
    std::fs::write(&rules, RULES.to_string() + test).unwrap();
    let (ok, out, err) = run_test(&rules);
    assert!(ok, "{out}{err}");
    // The same count from the dry run of the same log.
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        dir.join("day.log").to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        super::limited(super::rule(&v, "per_ip"), "208.80.154.230"),
        16,
        "{v}"
    );
    // nginx's combined format has no Host: a rule on it cannot be judged,
    // and an expectation on the requests it leaves unknown fails.
    let on_host = RULES.replace(
        "when path starts_with \"/sparql\"",
        "when host == \"query.wikidata.org\"",
    );
    std::fs::write(&rules, on_host + test).unwrap();
    let (ok, out, _) = run_test(&rules);
    assert!(!ok);
    assert!(out.contains("40 of them could not be judged"), "{out}");
    // A bad line fails the run with its position: it was not judged.
    let mut log = day(120);
    log.insert_str(0, "garbage\n");
    std::fs::write(dir.join("day.log"), log).unwrap();
    std::fs::write(&rules, RULES.to_string() + test).unwrap();
    let (ok, _, err) = run_test(&rules);
    assert!(!ok);
    assert!(
        err.contains("1 bad lines, which are not judged, the first at line 1"),
        "{err}"
    );
    // One file, one format.
    std::fs::write(dir.join("day.log"), day(120)).unwrap();
    let two = test.replace(
        "replay updater \"day.log\"",
        "replay updater \"day.log\" format \"nginx-main\"",
    );
    std::fs::write(&rules, RULES.to_string() + &two).unwrap();
    let (ok, _, err) = run_test(&rules);
    assert!(!ok);
    assert!(err.contains("a file has one format"), "{err}");
    // A missing file is named.
    std::fs::remove_file(dir.join("day.log")).unwrap();
    std::fs::write(&rules, RULES.to_string() + test).unwrap();
    let (ok, _, err) = run_test(&rules);
    assert!(!ok && err.contains("day.log"), "{err}");
}

/// varnishncsa's default lines (the Host in the request line's URL).
fn varnish(n: u32) -> String {
    (0..n)
        .map(|s| {
            format!(
                "198.51.100.9 - - [13/May/2026:12:{:02}:{:02} +0000] \"GET http://query.wikidata.org/sparql?query=x HTTP/1.1\" 200 1 \"-\" \"curl/8\"\n",
                s / 60,
                s % 60
            )
        })
        .collect()
}

#[test]
fn a_folder_is_its_files_each_read_once_in_its_own_format_with_all_its_traffic() {
    let dir = tempdir("test-replay-folder");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // nginx combined has no Host; varnishncsa's has it.
    std::fs::write(logs.join("a.log"), day(120)).unwrap();
    std::fs::write(logs.join("b.log"), varnish(30)).unwrap();
    let rules = dir.join("r.rctl");
    let on_host = "rule on_host {
  priority 1
  when host == \"query.wikidata.org\" and header(\"user-agent\") starts_with \"curl\"
  deny 403 \"no\"
}
rule per_path {
  priority 2
  when path starts_with \"/sparql\"
  throttle 30 requests per 1m by path
}
";
    // The folder and one of its files named again: each line is judged
    // once (150 requests, not 270), each file through its own format.
    let test = "
test \"a folder\" {
  replay \"logs\"
  replay nginx \"logs/a.log\"
  replay varnish \"logs\" ip 198.51.100.9
  replay updater \"logs\" ip 208.80.154.230
  expect for varnish all deny by on_host
  expect for nginx none deny
}
";
    std::fs::write(&rules, on_host.to_string() + test).unwrap();
    let (ok, out, err) = run_test(&rules);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok   a folder (150 sent)"), "{out}");
    // The updater alone sends 20 requests a minute, under the path's 30;
    // with everyone's requests on the same path, the bucket fills, and
    // the updater's requests are limited too: a replay selects whose
    // requests are counted, not which traffic the limiters see.
    let shared = test.replace(
        "  expect for nginx none deny\n",
        "  expect for updater none throttle by per_path\n",
    );
    std::fs::write(&rules, on_host.to_string() + &shared).unwrap();
    let (ok, out, _) = run_test(&rules);
    assert!(!ok, "{out}");
    assert!(
        out.contains("expected none throttle by per_path of 40 replayed"),
        "{out}"
    );
}
