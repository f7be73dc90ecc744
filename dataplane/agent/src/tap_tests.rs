use super::*;

type Hdrs<'a> = &'a [(&'a [u8], &'a [u8])];

fn fields<'a>(ip: &str, method: &'a [u8], target: &'a [u8], headers: Hdrs<'a>) -> Fields<'a> {
    Fields {
        method,
        host: b"query.wikidata.org",
        target,
        headers,
        ip: ip.parse().unwrap(),
        dst: None,
        port: 443,
    }
}

/// A request as `rctl_logs` reads it back: time, address, method, host,
/// target, and its headers sorted by name.
type Read = (
    u64,
    IpAddr,
    Vec<u8>,
    Vec<u8>,
    Vec<u8>,
    Vec<(String, Vec<u8>)>,
);

fn read_back(lines: &[u8]) -> Vec<Read> {
    let dir = std::env::temp_dir().join(format!("rctl-tap-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.jsonl", lines.len()));
    std::fs::write(&path, lines).unwrap();
    let opts = rctl_logs::Options {
        format: Some("webrequest".into()),
        ..Default::default()
    };
    let mut got = Vec::new();
    let (summary, _) =
        rctl_logs::read_requests(std::slice::from_ref(&path), &opts, |_, _, r, _| {
            let mut h: Vec<(String, Vec<u8>)> = r
                .headers
                .iter()
                .map(|(k, v)| (String::from_utf8_lossy(k).to_lowercase(), v.to_vec()))
                .filter(|(k, _)| k != "host")
                .collect();
            h.sort();
            got.push((
                r.time_ns,
                r.ip,
                r.method.to_vec(),
                r.host.to_vec(),
                r.target.to_vec(),
                h,
            ));
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(summary.bad_lines(), 0, "{summary:?}");
    got
}

/// Every request, encoded and written as a line, reads back through the
/// webrequest reader as the request itself: address, method, host,
/// path and query, each header the request had (and no other), the time
/// to the millisecond; controls escaped, and still the same value.
#[test]
fn lines_read_back_as_the_requests_were() {
    let long = vec![b'a'; FIELD_MAX + 10];
    let py: Hdrs = &[
        (b"User-Agent", b"python-requests/2.31.0"),
        (b"x-unrelated", b"not in webrequest"),
    ];
    let browser: Hdrs = &[
        (
            b"user-agent",
            b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Firefox/128.0",
        ),
        (b"Accept-Language", b"de-DE,de;q=0.9"),
        (b"Referer", b"https://www.wikidata.org/wiki/Q42"),
        (b"accept", b"text/html"),
        (b"range", b"bytes=0-9"),
        (b"X-Analytics", b"https=1"),
    ];
    let hostile: Hdrs = &[(b"user-agent", "esc\x1b[31m\u{202e}\"\\ üñ".as_bytes())];
    let reqs = [
        fields("192.0.2.7", b"GET", b"/sparql?query=SELECT%201", py),
        fields("2001:db8::1", b"POST", b"/w/api.php", browser),
        fields("198.51.100.9", b"GET", b"/a?", hostile),
        fields("198.51.100.10", b"HEAD", b"/b?x=1?y=2", &[]),
    ];
    let t0 = 1_800_000_000_123;
    let mut buf = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        encode(&mut buf, t0 + i as u64 * 1001, r);
    }
    let mut out = Vec::new();
    let w = lines(&buf, &mut out);
    assert_eq!(
        w,
        Written {
            requests: 4,
            cut: 0
        }
    );
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(text.lines().all(|l| l.starts_with("{\"dt\":")), "{text}");
    assert!(text.contains("\\u001b[31m\\u202e"), "{text}");
    assert!(
        text.contains("\"dt\":\"2027-01-15T08:00:00.123Z\""),
        "{text}"
    );
    let got = read_back(&out);
    assert_eq!(got.len(), reqs.len());
    for (i, (r, g)) in reqs.iter().zip(&got).enumerate() {
        assert_eq!(g.0, (t0 + i as u64 * 1001) * 1_000_000, "time of {i}");
        assert_eq!(g.1, r.ip);
        assert_eq!((&g.2[..], &g.3[..], &g.4[..]), (r.method, r.host, r.target));
        let mut want: Vec<(String, Vec<u8>)> = r
            .headers
            .iter()
            .map(|(k, v)| (String::from_utf8_lossy(k).to_lowercase(), v.to_vec()))
            .filter(|(k, _)| HEADERS.iter().any(|(_, h)| h == k))
            .collect();
        want.sort();
        assert_eq!(g.5, want, "headers of {i}");
    }
    // A field over the bound is cut and said to be.
    let cut: Hdrs = &[(b"user-agent", &long)];
    let mut buf = Vec::new();
    encode(&mut buf, t0, &fields("192.0.2.1", b"GET", &long, cut));
    let mut out = Vec::new();
    assert_eq!(
        lines(&buf, &mut out),
        Written {
            requests: 1,
            cut: 1
        }
    );
    // A record cut short writes nothing, and nothing panics.
    for n in 0..buf.len() {
        assert_eq!(lines(&buf[..n], &mut Vec::new()).requests, 0);
    }
}

/// No tap open: nothing is kept. Open: every request. Closed: nothing
/// again, and the taps' state is empty.
#[test]
fn only_an_open_tap_keeps_requests() {
    let taps = Arc::new(Taps::default());
    let r = fields("192.0.2.7", b"GET", b"/", &[]);
    taps.record(&r);
    assert!(lock(&taps.slots).is_empty());
    assert_eq!(taps.active.load(Relaxed), 0);
    let tap = taps.open().unwrap();
    for _ in 0..3 {
        taps.record(&r);
    }
    let (mut spare, mut out) = (Vec::new(), Vec::new());
    assert_eq!(tap.take(&mut spare, &mut out).0.requests, 3);
    taps.record(&r);
    let (w, lost) = tap.close(&mut out);
    assert_eq!((w.requests, lost), (1, 0));
    assert_eq!(taps.active.load(Relaxed), 0);
    taps.record(&r);
    assert!(lock(&taps.slots).is_empty());
    assert_eq!(read_back(&out).len(), 4);
}

/// Past its bound a tap loses requests and counts each; memory stays
/// within the bound and one record; another tap is not affected; one tap
/// past the most open at once is refused.
#[test]
fn the_bound_loses_and_counts_and_taps_are_bounded() {
    let taps = Arc::new(Taps::with_bound(1000));
    let small = taps.open().unwrap();
    let py: Hdrs = &[(b"user-agent", b"python-requests/2.31.0")];
    let r = fields("192.0.2.7", b"GET", b"/sparql?query=1", py);
    let mut one = Vec::new();
    encode(&mut one, 0, &r);
    let per = one.len();
    for _ in 0..100 {
        taps.record(&r);
    }
    let kept = 1000usize.div_ceil(per) as u64;
    {
        let slots = lock(&taps.slots);
        assert!(slots[0].records.len() < 1000 + per, "bounded");
        assert_eq!(slots[0].lost, 100 - kept);
    }
    // A second tap opened now sees what comes next, though the first is
    // full.
    let other = taps.open().unwrap();
    taps.record(&r);
    let (mut spare, mut out) = (Vec::new(), Vec::new());
    assert_eq!(
        other.take(&mut spare, &mut out),
        (
            Written {
                requests: 1,
                cut: 0
            },
            0
        )
    );
    let (w, lost) = small.take(&mut spare, &mut out);
    assert_eq!((w.requests, lost), (kept, 101 - kept));
    // Taken, it has room again.
    taps.record(&r);
    assert_eq!(small.close(&mut out).0.requests, 1);
    let open: Vec<Tap> = (1..MAX_TAPS).map(|_| taps.open().unwrap()).collect();
    assert_eq!(taps.open().err(), Some(TapError::Busy));
    drop(open);
    drop(other);
    assert_eq!(taps.active.load(Relaxed), 0);
    assert!(taps.open().is_ok());
}
