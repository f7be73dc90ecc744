//! The incidents, replayed by real clients through a real proxy in front
//! of a real origin, with the shipped rules: a scraper swarm on `/sparql`
//! throttled while the index updater's POSTs are all served, and a
//! re-render loop throttled by host and path while other titles pass.
//! Outcomes are counted from the proxy's log and the origin's, and from
//! what the clients received.

use super::shipped;
use super::stack::{compile, count, Front, Line, Stack};
use crate::util::tempdir;
use serde_json::{json, Value};

const UPDATER: [&str; 2] = ["208.80.154.230", "208.80.154.231"];
/// A scraper with a browser-like User-Agent: the per-address limit.
const SCRAPER: &str = "45.83.64.7";
const READERS: [&str; 2] = ["93.184.216.34", "151.101.1.1"];
const GENERIC_REASON: &str =
    "Please set a descriptive User-Agent: https://meta.wikimedia.org/wiki/User-Agent_policy";

/// 20 addresses of one /24: the swarm shares the /24's bucket.
pub fn swarm(n: u32) -> Vec<String> {
    (1..=n).map(|i| format!("185.220.101.{i}")).collect()
}

/// Status counts of a client group.
fn statuses(g: &Value) -> Vec<(String, u64)> {
    g["status"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

fn sent(g: &Value) -> usize {
    g["sent"].as_u64().unwrap() as usize
}

fn of(lines: &[Line], ips: &[&str]) -> Vec<Line> {
    lines
        .iter()
        .filter(|l| ips.contains(&l.ip.as_str()))
        .cloned()
        .collect()
}

fn served_from(s: &Stack, ips: &[&str]) -> usize {
    s.served()
        .iter()
        .filter(|r| ips.contains(&r.0.as_str()))
        .count()
}

/// Every Retry-After value in `g` is a whole number of seconds in `range`.
fn retry_after_within(g: &Value, range: std::ops::RangeInclusive<u64>) {
    let v = g["retry_after"].as_array().unwrap();
    assert!(!v.is_empty(), "no Retry-After: {g}");
    for r in v {
        let secs: u64 = r.as_str().unwrap().parse().unwrap();
        assert!(
            range.contains(&secs),
            "Retry-After {secs} not in {range:?}: {g}"
        );
    }
}

fn wdqs(front: Front) {
    if !super::stack::available()
        || (front == Front::NginxModule && !super::stack::module_available())
    {
        return;
    }
    let dir = tempdir("wdqs");
    let art = compile(&dir, "shipped", &[shipped()]);
    let swarm = swarm(20);
    let swarm: Vec<&str> = swarm.iter().map(String::as_str).collect();
    let mut addrs = swarm.clone();
    addrs.extend(UPDATER);
    addrs.push(SCRAPER);
    addrs.extend(READERS);
    let s = Stack::start(front, &art, &addrs, &["--timeout-ms", "500"]);
    let got = s.load(json!({
        "duration": 8,
        "groups": [
            {"name": "updater", "sources": UPDATER, "method": "POST", "path": "/sparql",
             "headers": {"User-Agent": "wmf-streaming-updater-consumer/0.3.140 (query-service)",
                         "Content-Type": "application/sparql-update"},
             "body": "INSERT DATA { wd:Q42 wdt:P31 wd:Q5 }", "rate": 20, "threads": 2},
            {"name": "swarm", "sources": swarm, "path": "/sparql?query=SELECT%20%3Fitem%20WHERE%20%7B%7D",
             "rate": 40, "threads": 10},
            {"name": "scraper", "sources": [SCRAPER], "path": "/sparql?query=SELECT%201",
             "headers": {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Scraper/1.0"}, "rate": 10, "threads": 2},
            {"name": "readers", "sources": READERS, "paths": ["/wiki/Main_Page", "/sparql?query=ASK%7B%7D"],
             "headers": {"User-Agent": "WDQS-reader/1.0 (https://example.org/bot; ops@example.org)"},
             "rate": 2, "threads": 2},
        ]
    }));
    let log = s.log();
    let ctx = || format!("client: {got}\n{}", s.logs());
    assert_eq!(
        count(&log, |l| l.unchecked),
        0,
        "unchecked requests\n{}",
        ctx()
    );

    // The updater: every POST served, by its exemption, during the flood.
    let g = &got["updater"];
    assert!(sent(g) >= 100, "{}", ctx());
    assert_eq!(
        statuses(g),
        [("200".to_string(), sent(g) as u64)],
        "{}",
        ctx()
    );
    let u = of(&log, &UPDATER);
    assert_eq!(u.len(), sent(g), "{}", ctx());
    assert!(
        u.iter().all(|l| l.method == "POST"
            && l.status == 200
            && l.action == "allow"
            && l.rule == "wdqs_updater_exempt"),
        "{u:?}"
    );
    assert_eq!(
        served_from(&s, &UPDATER),
        sent(g),
        "the origin served every POST"
    );

    // The swarm: one /24, one bucket of 10, then a 10-minute ban; 429
    // with the rule's reason and a Retry-After of about 600 s.
    let g = &got["swarm"];
    let w = of(&log, &swarm);
    assert_eq!(w.len(), sent(g), "{}", ctx());
    assert_eq!(
        count(&w, |l| l.status == 200 && l.action == "pass"),
        10,
        "{}",
        ctx()
    );
    assert_eq!(
        count(&w, |l| l.status == 429
            && l.action == "throttle"
            && l.rule == "wdqs_generic_clients"),
        sent(g) - 10,
        "{}",
        ctx()
    );
    assert_eq!(served_from(&s, &swarm), 10, "{}", ctx());
    assert_eq!(g["status"]["429"].as_u64().unwrap() as usize, sent(g) - 10);
    assert_eq!(g["body"]["429"], format!("{GENERIC_REASON}\n"));
    retry_after_within(g, 580..=600);

    // The browser-UA scraper: its own address's 30 (plus what refills
    // while they go), then a 5-minute ban.
    let g = &got["scraper"];
    let c = of(&log, &[SCRAPER]);
    let ok = count(&c, |l| l.status == 200);
    assert!((30..=36).contains(&ok), "{ok} served\n{}", ctx());
    assert_eq!(
        count(&c, |l| l.status == 429 && l.rule == "wdqs_sparql_per_ip"),
        sent(g) - ok
    );
    assert_eq!(served_from(&s, &[SCRAPER]), ok);
    retry_after_within(g, 280..=300);

    // Readers: untouched.
    let g = &got["readers"];
    assert_eq!(
        statuses(g),
        [("200".to_string(), sent(g) as u64)],
        "{}",
        ctx()
    );
    let r = of(&log, &READERS);
    assert!(
        r.len() == sent(g) && r.iter().all(|l| l.status == 200 && l.action == "pass"),
        "{r:?}"
    );
    assert_eq!(served_from(&s, &READERS), sent(g));
}

fn rerender(front: Front) {
    if !super::stack::available()
        || (front == Front::NginxModule && !super::stack::module_available())
    {
        return;
    }
    let dir = tempdir("rerender");
    let art = compile(&dir, "shipped", &[shipped()]);
    let hosts = ["208.80.154.21", "208.80.153.42"];
    let s = Stack::start(front, &art, &hosts, &["--timeout-ms", "500"]);
    let title = "/api/rest_v1/page/html/%EA%9D%AE";
    let loop_headers = json!({"Host": "fr.wikipedia.org", "Cache-Control": "no-cache",
                              "User-Agent": "ChangePropagation/WMF"});
    let others: Vec<String> = (0..25)
        .map(|i| format!("/api/rest_v1/page/html/Title_{i}"))
        .collect();
    let got = s.load(json!({
        "duration": 5,
        "groups": [
            {"name": "loop_a", "sources": [hosts[0]], "path": title, "headers": loop_headers, "rate": 10},
            // The same title, percent-encoded in lower case: the same bucket.
            {"name": "loop_b", "sources": [hosts[1]], "path": "/api/rest_v1/page/html/%ea%9d%ae",
             "headers": loop_headers, "rate": 10},
            {"name": "other_titles", "sources": hosts, "paths": others, "headers": loop_headers,
             "rate": 5, "threads": 2},
            {"name": "cached", "sources": [hosts[0]], "path": title,
             "headers": {"Host": "fr.wikipedia.org", "User-Agent": "Mozilla/5.0 reader"}, "rate": 5},
        ]
    }));
    let log = s.log();
    let ctx = || format!("client: {got}\n{}", s.logs());
    assert_eq!(count(&log, |l| l.unchecked), 0, "{}", ctx());
    // The loop, from both hosts: one bucket for the title, 10 at once,
    // then a 10-minute ban.
    let sent_loop = sent(&got["loop_a"]) + sent(&got["loop_b"]);
    let throttled = count(&log, |l| {
        l.status == 429 && l.rule == "restbase_rerender_loop"
    });
    assert_eq!(throttled, sent_loop - 10, "{}", ctx());
    for g in ["loop_a", "loop_b"] {
        retry_after_within(&got[g], 590..=600);
    }
    let ok_loop = got["loop_a"]["status"]["200"].as_u64().unwrap_or(0)
        + got["loop_b"]["status"]["200"].as_u64().unwrap_or(0);
    assert_eq!(ok_loop, 10, "{}", ctx());
    // Other titles, even with no-cache from the same hosts, and the title
    // without no-cache: all served.
    for g in ["other_titles", "cached"] {
        assert_eq!(
            statuses(&got[g]),
            [("200".to_string(), sent(&got[g]) as u64)],
            "{g}: {}",
            ctx()
        );
    }
    let origin = s.served();
    let title_served = origin
        .iter()
        .filter(|r| r.2.eq_ignore_ascii_case(title))
        .count();
    assert_eq!(title_served, 10 + sent(&got["cached"]), "{}", ctx());
}

#[test]
fn wdqs_scrapers_throttled_updater_served_through_haproxy() {
    wdqs(Front::Haproxy);
}

#[test]
fn wdqs_scrapers_throttled_updater_served_through_nginx() {
    wdqs(Front::Nginx);
}

#[test]
fn rerender_loop_throttled_by_host_and_path_through_haproxy() {
    rerender(Front::Haproxy);
}

#[test]
fn rerender_loop_throttled_by_host_and_path_through_nginx() {
    rerender(Front::Nginx);
}

#[test]
fn wdqs_scrapers_throttled_updater_served_through_the_nginx_module() {
    wdqs(Front::NginxModule);
}

#[test]
fn rerender_loop_throttled_by_host_and_path_through_the_nginx_module() {
    rerender(Front::NginxModule);
}
