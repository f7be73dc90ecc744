//! The check endpoint's verdicts for the incidents' shapes, with the
//! shipped rules (expected values from the rules' text: WDQS generic
//! clients get 30 a minute with a burst of 10 per /24, then a 10-minute
//! ban; the updater is exempt; a RESTBase title re-rendered with no-cache
//! gets 10 a minute per host and path, then a 10-minute ban).

use super::*;

fn sparql(c: &mut Conn, ip: &str, ua: &str) -> Resp {
    c.send("GET", "/check/sparql?query=SELECT%201", &client(ip, ua))
        .expect("answer")
}

#[test]
fn agent_wdqs_scrapers_are_throttled_after_their_burst_and_the_updater_is_always_served() {
    let dir = tempdir("agent-wdqs");
    let a = Agent::start(&compile(&dir, "r", ""), &[]);
    let mut c = a.conn();
    let mut updater = a.conn();
    let mut reader = a.conn();
    let (mut served, mut throttled) = (0, 0);
    for i in 0..40 {
        let r = sparql(&mut c, "185.220.101.7", SCRAPER_UA);
        match r.status {
            200 => {
                assert_eq!(throttled, 0, "served after a throttle at {i}");
                served += 1;
            }
            429 => {
                throttled += 1;
                let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!(
                    (590..=600).contains(&retry),
                    "Retry-After {retry}: the 10 minute ban"
                );
                assert_eq!(r.header("x-rctl-rule"), Some("wdqs_generic_clients"));
                assert_eq!(r.header("x-rctl-action"), Some("throttle"));
                assert!(r.header("x-rctl-reason").unwrap().contains("User-Agent"));
                assert!(String::from_utf8_lossy(&r.body).contains("User-Agent_policy"));
            }
            s => panic!("status {s}"),
        }
        // Between scraper requests, the updater posts and a reader reads.
        for _ in 0..5 {
            let u = updater
                .send("POST", "/check/sparql", &client(UPDATER_IP, UPDATER_UA))
                .unwrap();
            assert_eq!(u.status, 200, "the updater is always served");
            assert_eq!(u.header("x-rctl-action"), Some("allow"));
            assert_eq!(u.header("x-rctl-rule"), Some("wdqs_updater_exempt"));
        }
        let r = reader
            .send(
                "GET",
                "/check/wiki/Special:Search",
                &client("93.184.216.20", READER_UA),
            )
            .unwrap();
        assert_eq!((r.status, r.header("x-rctl-action")), (200, Some("pass")));
    }
    assert_eq!(
        (served, throttled),
        (10, 30),
        "the burst of 10, then the ban"
    );
    // The bucket is per /24: a neighbour shares the ban, another /24 not.
    assert_eq!(sparql(&mut c, "185.220.101.200", SCRAPER_UA).status, 429);
    assert_eq!(sparql(&mut c, "185.220.102.1", SCRAPER_UA).status, 200);
    // The updater's address without its User-Agent is not exempt.
    let mut n = 0;
    while sparql(&mut c, UPDATER_IP, SCRAPER_UA).status == 200 {
        n += 1;
        assert!(n <= 10, "not throttled");
    }
    assert_eq!(n, 10);
    // nginx auth_request: the block is a 403 with the status in a header.
    let mut h = client("185.220.101.7", SCRAPER_UA);
    h.push(("X-Rctl-Target", b"/sparql?query=x"));
    let r = c.send("GET", "/check/nginx", &h).unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-rctl-status"), Some("429"));
    assert!(r.header("retry-after").is_some());
}

#[test]
fn agent_a_re_rendered_title_is_throttled_by_host_and_path_while_others_pass() {
    let dir = tempdir("agent-restbase");
    let a = Agent::start(&compile(&dir, "r", ""), &[]);
    let mut c = a.conn();
    let page = |c: &mut Conn, ip: &str, title: &str, no_cache: bool| {
        let mut h: Vec<(&str, &[u8])> = vec![
            ("X-Rctl-Client-Ip", ip.as_bytes()),
            ("X-Rctl-Host", b"fr.wikipedia.org"),
            ("User-Agent", b"ChangePropagation/WMF"),
        ];
        if no_cache {
            h.push(("Cache-Control", b"no-cache"));
        }
        let target = format!("/check/api/rest_v1/page/html/{title}");
        c.send("GET", &target, &h).unwrap().status
    };
    let statuses: Vec<u16> = (0..15)
        .map(|i| {
            let ip = if i % 2 == 0 {
                "208.80.154.21"
            } else {
                "208.80.153.42"
            };
            page(&mut c, ip, "%EA%9D%AE", true)
        })
        .collect();
    assert_eq!(statuses[..10], [200; 10], "{statuses:?}");
    assert_eq!(
        statuses[10..],
        [429; 5],
        "keyed by host and path, not address"
    );
    assert_eq!(page(&mut c, "208.80.154.21", "Paris", true), 200);
    assert_eq!(
        page(&mut c, "208.80.154.21", "%EA%9D%AE", false),
        200,
        "cached reads pass"
    );
}

#[test]
fn agent_shadow_mode_serves_everything_and_says_what_it_would_have_done() {
    let dir = tempdir("agent-shadow");
    let a = Agent::start(&compile(&dir, "r", ""), &["--shadow"]);
    let mut c = a.conn();
    let would: Vec<Option<String>> = (0..12)
        .map(|_| {
            let r = sparql(&mut c, "185.220.101.7", SCRAPER_UA);
            assert_eq!(r.status, 200);
            r.header("x-rctl-shadow").map(str::to_string)
        })
        .collect();
    assert_eq!(would[..10], vec![None; 10][..]);
    assert_eq!(
        would[10..],
        [Some("throttle".into()), Some("throttle".into())]
    );
    let st = a.status();
    assert_eq!(st["shadow"], true);
    assert_eq!(st["counts"]["shadowed"]["throttle"], 2);
}

#[test]
fn agent_hostile_requests_get_clear_refusals_are_counted_and_others_are_served() {
    let dir = tempdir("agent-hostile");
    let a = Agent::start(&compile(&dir, "r", ""), &[]);
    let refused = |req: Vec<u8>| {
        let mut c = a.conn();
        c.write(&req).unwrap();
        c.read()
            .map(|r| (r.status, r.header("x-rctl-error").map(str::to_string)))
    };
    let req = |headers: &str| {
        format!("GET /check/sparql HTTP/1.1\r\nHost: x\r\n{headers}\r\n").into_bytes()
    };
    // Huge header: hyper's 431.
    let big = format!(
        "X-Big: {}\r\nX-Rctl-Client-Ip: 192.0.2.1\r\n",
        "a".repeat(64 * 1024)
    );
    assert_eq!(refused(req(&big)).unwrap().0, 431);
    // More headers than the default limit, in fewer bytes than its head.
    let many = "a:\r\n".repeat(13_000);
    assert!(many.len() < 64 * 1024);
    assert_eq!(refused(req(&many)).unwrap().0, 431);
    // Invalid UTF-8 and garbage in the client address, and none at all.
    let mut bad =
        b"GET /check/sparql HTTP/1.1\r\nHost: x\r\nX-Rctl-Client-Ip: \xff\xfe\r\n\r\n".to_vec();
    let (s, e) = refused(std::mem::take(&mut bad)).unwrap();
    assert_eq!(s, 400);
    assert!(e.unwrap().contains("X-Rctl-Client-Ip: not an IP address"));
    let (s, e) = refused(req("")).unwrap();
    assert_eq!(s, 400);
    assert!(e.unwrap().starts_with("no client address"));
    // Not HTTP at all.
    assert_eq!(
        refused(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n".to_vec())
            .unwrap()
            .0,
        400
    );
    // Invalid UTF-8 in ordinary headers is decided on, as bytes.
    let mut c = a.conn();
    let r = c
        .send(
            "GET",
            "/check/sparql",
            &client("185.220.101.9", "python-requests/\u{0}"),
        )
        .map(|r| r.status);
    assert!(
        r.is_err() || r.unwrap() == 400,
        "a NUL is not a header byte"
    );
    let mut c = a.conn();
    let h = [
        ("X-Rctl-Client-Ip", b"93.184.216.9" as &[u8]),
        ("User-Agent", b"Mozilla/\xff\xfe"),
    ];
    assert_eq!(c.send("GET", "/check/wiki", &h).unwrap().status, 200);
    // The agent kept serving; each refusal was counted, by kind.
    let m = a.metrics();
    let kind = |k: &str| {
        m.get(&format!("rctl_listener_errors_total{{kind={k:?}}}"))
            .copied()
    };
    assert_eq!(kind("http-too-large"), Some(2.0), "{m:?}");
    assert_eq!(kind("http-request"), Some(2.0));
    assert!(kind("http-parse").unwrap_or(0.0) >= 1.0, "{m:?}");
    let st = a.status();
    assert_eq!(st["counts"]["errors"]["http-request"], 2);
}
