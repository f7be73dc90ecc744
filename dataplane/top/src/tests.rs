use super::*;
use std::net::IpAddr;

fn req<'a>(
    ip: &str,
    target: &'a [u8],
    headers: &'a [(&'a [u8], &'a [u8])],
    f: impl FnOnce(&Request<'_>),
) {
    let r = Request {
        method: b"GET",
        host: b"Query.Wikidata.org",
        target,
        headers,
        ip: ip.parse::<IpAddr>().unwrap(),
        dst: None,
        port: 80,
        time_ns: 0,
    };
    f(&r);
}

const PY: &[(&[u8], &[u8])] = &[(b"User-Agent", b"python-requests/2.31.0")];
const FF: &[(&[u8], &[u8])] = &[(
    b"User-Agent",
    b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
)];

#[test]
fn the_heavy_client_and_path_come_with_their_verdicts_among_many_light_ones() {
    let mut w = Window::new(60, 64);
    // 5,000 light readers, one request each, over ten seconds; the
    // heavy client 600 requests, one in three throttled.
    for i in 0..5000u32 {
        let ip = format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256);
        let t = format!("/wiki/Q{i}");
        req(&ip, t.as_bytes(), FF, |r| {
            w.add(1000 + u64::from(i % 10), r, "pass")
        });
    }
    for i in 0..600u64 {
        let v = if i % 3 == 0 { "throttle" } else { "pass" };
        req("185.15.59.7", b"/sparql?query=1", PY, |r| {
            w.add(1000 + i % 10, r, v)
        });
    }
    let top = w.top(1009, 3);
    assert_eq!(top.requests, 5600);
    let ip = &top.keys[&KeyKind::Ip][0];
    assert_eq!(ip.key, "185.15.59.7");
    // Space-Saving: the true count is within `error` under the count,
    // for the key and for each of its verdicts.
    let within = |got: u64, truth: u64, e: &Entry| got >= truth && got - e.error <= truth;
    assert!(within(ip.requests, 600, ip), "{ip:?}");
    assert!(within(ip.verdicts["throttle"], 200, ip), "{ip:?}");
    assert!(within(ip.verdicts["pass"], 400, ip), "{ip:?}");
    // Few templates: exact. The readers' ids are one template.
    let paths = &top.keys[&KeyKind::PathTemplate];
    assert_eq!(paths[0].key, "query.wikidata.org/wiki/*");
    assert_eq!((paths[0].requests, paths[0].verdicts["pass"]), (5000, 5000));
    assert_eq!(paths[1].key, "query.wikidata.org/sparql");
    assert_eq!(
        (paths[1].requests, paths[1].verdicts["throttle"]),
        (600, 200)
    );
    let fam = &top.keys[&KeyKind::UaFamily];
    assert_eq!(fam[0].key, "browser:firefox");
    assert_eq!(fam[1].key, "python-requests");
    assert_eq!(fam[1].verdicts["throttle"], 200, "two families: exact");
    assert_eq!(top.keys[&KeyKind::Prefix][0].key, "185.15.59.0/24");
    // Bounded: no slot holds more than its capacity of keys per kind.
    for s in &w.slots {
        assert!(s.counters.iter().all(|c| c.top(usize::MAX).len() <= 64));
    }
}

#[test]
fn seconds_older_than_the_window_are_not_counted() {
    let mut w = Window::new(10, 16);
    req("192.0.2.1", b"/a", PY, |r| w.add(100, r, "deny"));
    req("192.0.2.2", b"/b", PY, |r| w.add(105, r, "pass"));
    let top = w.top(105, 5);
    assert_eq!(top.requests, 2);
    // The last second alone.
    assert_eq!(w.top_over(105, 1, 5).requests, 1);
    // At 110, second 100 is out; at 115, 105 is too.
    let top = w.top(110, 5);
    assert_eq!(top.requests, 1);
    assert_eq!(top.keys[&KeyKind::Ip][0].key, "192.0.2.2");
    assert_eq!(w.top(115, 5).requests, 0);
    // Second 110 reuses 100's slot, emptied first; a late request of a
    // second already gone round is dropped.
    req("192.0.2.3", b"/c", &[], |r| w.add(110, r, "pass"));
    req("192.0.2.4", b"/c", &[], |r| w.add(100, r, "pass"));
    let top = w.top(110, 5);
    assert_eq!(top.requests, 2);
    assert_eq!(top.keys[&KeyKind::UserAgent][0].key, "-");
    let json = serde_json::to_value(&top).unwrap();
    assert_eq!(json["keys"]["ip"][0]["key"], "192.0.2.2");
    assert_eq!(json["window_s"], 10);
}

#[test]
fn long_keys_are_cut_and_a_copy_reads_as_the_window() {
    let mut w = Window::new(60, 16);
    let ua = vec![b'a'; 10_000];
    let path = format!("/{}", "p".repeat(10_000));
    let headers: &[(&[u8], &[u8])] = &[(b"User-Agent", &ua)];
    for s in 0..5u64 {
        req("192.0.2.1", path.as_bytes(), headers, |r| {
            w.add(100 + s, r, "pass")
        });
    }
    let top = w.top(104, 5);
    let copy = w.recent(104, 60).top(104, 5);
    assert_eq!(copy, top);
    for kind in [KeyKind::UserAgent, KeyKind::PathTemplate] {
        let e = &top.keys[&kind][0];
        assert_eq!(e.requests, 5, "{kind:?}");
        assert!(e.key.len() <= MAX_KEY, "{kind:?}: {}", e.key.len());
    }
    // The copy holds only what the asked-for seconds read.
    assert_eq!(w.recent(104, 2).top_over(104, 2, 5).requests, 2);
}
