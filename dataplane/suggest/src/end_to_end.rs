//! The suggester end to end on generated traffic: bounded counts find
//! what exact ones find, and the measured pass counts the offenders'
//! requests exactly.

use crate::{count, find::find, measure, Bounds, Key, Obs, Options, Recorded};
use std::net::{IpAddr, Ipv4Addr};

fn obs(t_ms: u64, ip: IpAddr, host: &str, target: &str, ua: &str, lang: &str) -> Obs {
    let mut headers = vec![(b"User-Agent".to_vec(), ua.as_bytes().to_vec())];
    if !lang.is_empty() {
        headers.push((b"Accept-Language".to_vec(), lang.as_bytes().to_vec()));
    }
    Obs {
        input: crate::CAPTURE,
        time_ns: t_ms * 1_000_000,
        ip,
        dst: None,
        port: 443,
        method: b"GET".to_vec(),
        host: host.as_bytes().to_vec(),
        target: target.as_bytes().to_vec(),
        headers,
        cut: Vec::new(),
    }
}

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// 20,000 readers of as many titles, 300 readers of /sparql (ten
/// versions of a browser), and a
/// python-requests swarm of twelve addresses on /sparql, 40 requests
/// each, over ten minutes (with `versions`, half of it says another
/// version).
fn traffic(versions: bool) -> Vec<Obs> {
    let mut out = Vec::new();
    for i in 0..20_000u64 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x5d00_0000 + i as u32 * 7));
        out.push(obs(
            i * 30,
            ip,
            "www.wikidata.org",
            &format!("/wiki/Title_{i}"),
            FIREFOX,
            "en",
        ));
    }
    for i in 0..300u64 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x6d00_0000 + i as u32 * 256));
        for k in 0..2 {
            out.push(obs(
                i * 1_000 + k * 17,
                ip,
                "query.wikidata.org",
                &format!("/sparql?query={i}"),
                &FIREFOX.replace("128.0", &format!("{}.0", 120 + i % 10)),
                "de",
            ));
        }
    }
    for i in 0..480u64 {
        let ip = IpAddr::V4(Ipv4Addr::new(185, 100 + (i % 12) as u8, 101, 7));
        out.push(obs(
            i * 1_250,
            ip,
            "query.wikidata.org",
            &format!("/sparql?query=SELECT%20{i}"),
            if versions && i % 2 == 1 {
                "python-requests/2.28.2"
            } else {
                "python-requests/2.31.0"
            },
            "",
        ));
    }
    out.sort_by_key(|r| r.time_ns);
    out
}

/// The findings' keys, endpoints and limits, and the offenders'
/// requests as measured.
fn suggest(traffic: &[Obs], bounds: Bounds) -> (bool, Vec<(Key, String, u64, u64)>) {
    let no = |_| false;
    let mut rec = Recorded {
        traffic,
        inputs: &[],
    };
    let o = Options::default();
    let counts = count(&mut rec, None, &no, &o, bounds).unwrap();
    assert!(counts.clients.len() <= bounds.clients && counts.agents.len() <= bounds.keys);
    assert!(counts.endpoints.len() <= bounds.keys && counts.paths.len() <= bounds.keys);
    let findings = find(&counts, &o);
    let mut text = String::new();
    let names: Vec<String> = (0..findings.len()).map(|i| format!("s_{i}")).collect();
    for (f, n) in findings.iter().zip(&names) {
        text.push_str(&crate::write::rule(f, n, 1000, "", crate::write::Bucket::Default).unwrap());
    }
    let merged = rctl_compiler::compile_str("s.rctl", &text, &Default::default());
    let measured = measure(
        &mut rec,
        merged.ruleset.unwrap(),
        findings,
        names,
        &counts,
        crate::headers_read(None),
        &no,
    )
    .unwrap();
    let out = measured
        .iter()
        .map(|m| {
            let f = &m.finding;
            assert!(f.offender.is_some() && f.requests > 0, "{f:?}");
            let query = if f.query.is_empty() {
                String::new()
            } else {
                format!("?{}", f.query.join("&"))
            };
            (
                f.key.clone(),
                format!("{}{}{query}", f.host, f.path),
                f.limit,
                f.requests,
            )
        })
        .collect();
    (counts.exact(), out)
}

#[test]
fn bounded_counts_find_the_swarm_exact_ones_find_and_its_requests_are_counted_exactly() {
    let t = traffic(false);
    let (exact, found) = suggest(&t, Bounds::default());
    assert!(exact);
    assert_eq!(found.len(), 1, "{found:?}");
    let (key, endpoint, _, requests) = &found[0];
    assert_eq!(
        (key, endpoint.as_str(), *requests),
        (&Key::UserAgent, "query.wikidata.org/sparql", 480)
    );
    // Five times fewer addresses and ten times fewer endpoints held than
    // the traffic has: light readers are dropped, the swarm is not.
    let small = Bounds {
        clients: 4_096,
        keys: 2_048,
        ips_per_agent: 64,
    };
    let (exact, bounded) = suggest(&t, small);
    assert!(!exact);
    assert_eq!(bounded.len(), 1, "{bounded:?}");
    assert_eq!(
        (&bounded[0].0, &bounded[0].1, bounded[0].3),
        (key, endpoint, 480)
    );
}

#[test]
fn a_swarm_is_one_family_whatever_its_versions() {
    // Each version alone sends 240 requests, no more than twice the
    // limit; the family sends 480.
    let (_, found) = suggest(&traffic(true), Bounds::default());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((&found[0].0, found[0].3), (&Key::UserAgent, 480));
}

#[test]
fn a_scraper_of_many_titles_is_found_under_their_parent() {
    let mut t = Vec::new();
    for i in 0..150u64 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x5e00_0000 + i as u32 * 9));
        t.push(obs(
            i * 300,
            ip,
            "en.wikipedia.org",
            &format!("/wiki/Page_{i}"),
            FIREFOX,
            "en",
        ));
    }
    // One address, a browser's User-Agent without a language, 400 titles:
    // no one title is heavy, the titles together are.
    browser_scraper(&mut t, [45, 83, 64, 7], 400, 110, |k| {
        format!("/wiki/Article_{k}")
    });
    assert_eq!(
        one_finding(&mut t),
        (Key::Ip, "en.wikipedia.org/wiki/*".to_string(), 400)
    );
}

/// `n` requests from `ip` on en.wikipedia.org, one every `step_ms`, with
/// a browser's User-Agent and no language.
fn browser_scraper(
    t: &mut Vec<Obs>,
    ip: [u8; 4],
    n: u64,
    step_ms: u64,
    target: impl Fn(u64) -> String,
) {
    let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36";
    for k in 0..n {
        t.push(obs(
            k * step_ms,
            IpAddr::V4(ip.into()),
            "en.wikipedia.org",
            &target(k),
            chrome,
            "",
        ));
    }
}

/// The one finding in `t` (put in time order): its key, endpoint and
/// the offender's requests as measured.
fn one_finding(t: &mut [Obs]) -> (Key, String, u64) {
    t.sort_by_key(|r| r.time_ns);
    let (_, found) = suggest(t, Bounds::default());
    assert_eq!(found.len(), 1, "{found:?}");
    let (key, endpoint, _, requests) = found[0].clone();
    (key, endpoint, requests)
}

#[test]
fn an_api_scraper_is_found_by_its_query_shape_where_its_endpoint_hides_it() {
    let mut t = Vec::new();
    // 200 readers querying the API, 30 requests each; five of them also
    // parse a page twice.
    for i in 0..200u64 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x5f00_0000 + i as u32 * 11));
        for k in 0..30 {
            t.push(obs(
                i * 1_000 + k * 19_000,
                ip,
                "en.wikipedia.org",
                &format!("/w/api.php?action=query&format=json&titles=T_{i}_{k}"),
                FIREFOX,
                "en",
            ));
        }
        if i < 5 {
            for k in 0..2 {
                t.push(obs(
                    i * 1_000 + k * 7_000 + 3,
                    ip,
                    "en.wikipedia.org",
                    &format!("/w/api.php?action=parse&format=json&page=P_{i}_{k}"),
                    FIREFOX,
                    "en",
                ));
            }
        }
    }
    // One address parsing 150 pages: 2.4% of the API's requests, under
    // the share worth a rule there; nearly all of the parses.
    browser_scraper(&mut t, [45, 83, 64, 9], 150, 3_000, |k| {
        format!("/w/api.php?page=P{k}&action=parse&format=json")
    });
    assert_eq!(
        one_finding(&mut t),
        (
            Key::Ip,
            "en.wikipedia.org/w/api.php?action&format&page".to_string(),
            150
        )
    );
    // The rule tests the shape's parameters: the readers' queries pass.
    let f = &findings(&t)[0];
    let rule = crate::write::rule(f, "s", 1000, "", crate::write::Bucket::Default).unwrap();
    assert!(
        rule.contains(r#"path == "/w/api.php" and query("action") present and query("format") present and query("page") present"#),
        "{rule}"
    );
}

/// The findings on `t`, with the default options and bounds.
fn findings(t: &[Obs]) -> Vec<crate::Finding> {
    let mut rec = Recorded {
        traffic: t,
        inputs: &[],
    };
    let o = Options::default();
    let counts = count(&mut rec, None, &|_| false, &o, Bounds::default()).unwrap();
    find(&counts, &o)
}

#[test]
fn a_family_without_a_version_is_its_own_and_takes_no_other_requests() {
    let mut t = traffic(false);
    // "curl" (no `/`) is not the family of "curl/8.0" nor of the swarm.
    for i in 0..480u64 {
        let ip = IpAddr::V4(Ipv4Addr::new(198, 18, (i % 12) as u8, 9));
        let target = format!("/sparql?query=ASK%20{i}");
        t.push(obs(
            i * 1_250 + 3,
            ip,
            "query.wikidata.org",
            &target,
            "curl",
            "",
        ));
    }
    t.sort_by_key(|r| r.time_ns);
    let (_, found) = suggest(&t, Bounds::default());
    let mut got: Vec<(Key, u64)> = found.iter().map(|f| (f.0.clone(), f.3)).collect();
    got.sort_by_key(|g| g.1);
    assert_eq!(
        got,
        [(Key::UserAgent, 480), (Key::UserAgent, 480)],
        "{found:?}"
    );
    let rule = crate::write::rule(
        &crate::Finding {
            ua_prefix: Some("curl".into()),
            ..dummy()
        },
        "r",
        1000,
        "",
        crate::write::Bucket::Default,
    )
    .unwrap();
    assert!(
        rule.contains("header(\"user-agent\") == \"curl\""),
        "{rule}"
    );
}

/// A finding to write a rule from.
fn dummy() -> crate::Finding {
    crate::Finding {
        what: String::new(),
        host: "query.wikidata.org".into(),
        host_cut: false,
        path: "/sparql".into(),
        path_prefix: false,
        query: Vec::new(),
        ua_prefix: None,
        ua_cut: false,
        no_cache: false,
        key: Key::UserAgent,
        limit: 10,
        period_s: 60,
        basis: String::new(),
        counted: 0,
        members: crate::Members::Ips(0, Default::default()),
        normal_key: None,
        requests: 0,
        offender: None,
        normal: None,
    }
}

/// The traffic of [`traffic`] without its swarm, and a swarm whose
/// User-Agent and host are logged as `ua` and `query.wikid`, both as
/// long as their capture slots (HAProxy's `capture request header … len`),
/// so that they may be the starts of longer values.
fn cut_swarm(ua: &str) -> Vec<Obs> {
    let mut t = traffic(false);
    t.retain(|o| !o.headers[0].1.starts_with(b"python-requests"));
    for i in 0..480u64 {
        let ip = IpAddr::V4(Ipv4Addr::new(185, 100 + (i % 12) as u8, 101, 7));
        let target = format!("/sparql?query=SELECT%20{i}");
        let mut o = obs(i * 1_250, ip, "query.wikid", &target, ua, "");
        o.cut = vec![b"User-Agent".to_vec(), b"Host".to_vec()];
        t.push(o);
    }
    t.sort_by_key(|r| r.time_ns);
    t
}

#[test]
fn a_user_agent_or_host_that_may_be_cut_is_suggested_as_a_prefix() {
    let found = findings(&cut_swarm("ScraperBot-Pro (crawler "));
    let f = found
        .iter()
        .find(|f| f.key == Key::UserAgent)
        .expect("the swarm is found by its User-Agent");
    assert!(f.ua_cut && f.host_cut, "{f:?}");
    let rule = crate::write::rule(f, "s", 1000, "", crate::write::Bucket::Default).unwrap();
    assert!(
        rule.contains(r#"host starts_with "query.wikid""#)
            && rule.contains(r#"header("user-agent") starts_with "ScraperBot-Pro (crawler ""#),
        "{rule}"
    );
    // Live, the whole values arrive, and the rule matches them.
    let rs = rctl_compiler::compile_str("s.rctl", &rule, &Default::default())
        .ruleset
        .unwrap();
    let engine = rctl_dataplane::Engine::new(rs, &Default::default()).unwrap();
    let ua = b"ScraperBot-Pro (crawler 2.1; +https://scraper.example)";
    let headers: Vec<(&[u8], &[u8])> = vec![(b"User-Agent", ua), (b"Host", b"query.wikidata.org")];
    let req = rctl_dataplane::Request {
        method: b"GET",
        host: b"query.wikidata.org",
        target: b"/sparql?query=SELECT%201",
        headers: &headers,
        ip: "185.100.101.7".parse().unwrap(),
        dst: None,
        port: 443,
        time_ns: 0,
    };
    let mut scratch = engine.scratch();
    let d = engine.decide_request_with(&req, &mut scratch, None);
    assert_eq!(d.logged.first().map(|l| l.0), Some(0), "{d:?}");
}

#[test]
fn a_cut_user_agent_that_may_be_a_browsers_is_never_a_swarm() {
    // `Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KH`:
    // a Chrome User-Agent cut at 64 bytes holds no `Chrome/`, and its
    // start is every such browser's.
    let cut = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KH";
    let found = findings(&cut_swarm(cut));
    assert!(found.iter().all(|f| f.key != Key::UserAgent), "{found:?}");
    // The same User-Agent logged whole is a swarm's.
    let mut whole = cut_swarm(cut);
    for o in &mut whole {
        o.cut.clear();
    }
    assert!(findings(&whole).iter().any(|f| f.key == Key::UserAgent));
}
