//! The reassembler and parser on hand-made segments.

use super::*;

const C: (IpAddr, u16) = (IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)), 40000);
const S: (IpAddr, u16) = (IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)), 80);

fn run(segs: &[(u32, u8, &[u8])]) -> (Vec<String>, StreamStats) {
    let mut s = Streams::new(Limits::default());
    let mut out = Batch::new();
    for (i, &(seq, flags, p)) in segs.iter().enumerate() {
        s.segment(
            C,
            S,
            Segment {
                seq,
                flags,
                payload: p,
                time_ns: i as u64,
            },
            &mut out,
        );
    }
    (
        out.iter()
            .map(|r| {
                format!(
                    "{} {}",
                    String::from_utf8_lossy(r.method()),
                    String::from_utf8_lossy(r.target())
                )
            })
            .collect(),
        s.stats,
    )
}

const SYN: u8 = 0x02;

#[test]
fn pipelined_split_and_bodies() {
    let a = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel";
    let b = b"loGET /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHEAD /d HTTP/1.0\r\n\r\n";
    let (reqs, st) = run(&[
        (100, SYN, b""),
        (101, 0x18, a),
        (101 + a.len() as u32, 0x18, b),
    ]);
    assert_eq!(reqs, ["GET /a", "POST /b", "GET /c", "HEAD /d"]);
    assert_eq!(st.unparsable_bytes, 0);
}

#[test]
fn out_of_order_and_retransmitted_segments() {
    let r = b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n";
    let (h1, h2) = r.split_at(10);
    let (reqs, st) = run(&[
        (1, SYN, b""),
        (12, 0x18, h2),
        (2, 0x18, h1),
        (2, 0x18, h1),
        (12, 0x18, h2),
    ]);
    assert_eq!(reqs, ["GET /one"]);
    assert_eq!(st.retransmitted_bytes, r.len() as u64);
}

#[test]
fn flows_started_before_the_capture_resynchronise() {
    let p = b"ding: gzip\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n";
    let (reqs, st) = run(&[(5000, 0x18, p)]);
    assert_eq!(reqs, ["GET /next"]);
    assert_eq!(st.unparsable_bytes, 14);
}

#[test]
fn garbage_and_tls_are_counted() {
    let (reqs, st) = run(&[
        (1, SYN, b""),
        (2, 0x18, b"\x00\x01garbage\r\nGET /ok HTTP/1.1\r\n\r\n"),
    ]);
    assert_eq!(reqs, ["GET /ok"]);
    assert!(st.unparsable_bytes > 0 && st.resyncs > 0);
    let (reqs, st) = run(&[
        (1, SYN, b""),
        (2, 0x18, b"\x16\x03\x01\x02\x00GET / HTTP/1.1\r\n\r\n"),
    ]);
    assert!(reqs.is_empty());
    assert_eq!(st.tls_flows, 1);
}

/// Found by the capture fuzzer: a segment exactly 2^31 bytes from the
/// expected sequence number overflowed the negation of the difference.
#[test]
fn sequence_half_a_ring_away() {
    let c = (IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5000);
    let s = (IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 80);
    let mut st = Streams::new(Limits::default());
    let mut out = Batch::new();
    st.segment(
        c,
        s,
        Segment {
            seq: 10,
            flags: 0x18,
            payload: b"GET / HTTP/1.1\r\n\r\n",
            time_ns: 0,
        },
        &mut out,
    );
    st.segment(
        c,
        s,
        Segment {
            seq: 28u32.wrapping_add(0x8000_0000),
            flags: 0x18,
            payload: b"x",
            time_ns: 1,
        },
        &mut out,
    );
    st.segment(
        c,
        s,
        Segment {
            seq: 28u32.wrapping_add(0x8000_0000),
            flags: 0x18,
            payload: b"yz",
            time_ns: 2,
        },
        &mut out,
    );
    assert_eq!(out.len(), 1);
}

/// A client stream after a SYN at sequence 1, cut into `n`-byte segments.
fn cut(stream: &[u8], n: usize) -> Vec<(u32, u8, &[u8])> {
    let mut segs = vec![(1, SYN, &b""[..])];
    let mut seq = 2u32;
    for part in stream.chunks(n) {
        segs.push((seq, 0x18, part));
        seq += part.len() as u32;
    }
    segs
}

/// Pipelined requests, a body, a chunked body with an extension and a
/// trailer, a long head, and a head over the limit followed by one more.
fn varied_stream() -> Vec<u8> {
    let mut s =
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
            .to_vec();
    s.extend_from_slice(b"GET /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n");
    s.extend_from_slice(b"HEAD /d HTTP/1.0\n\n");
    s.extend_from_slice(
        format!(
            "GET /long HTTP/1.1\r\nCookie: {}\r\n\r\n",
            "c".repeat(20_000)
        )
        .as_bytes(),
    );
    s.extend_from_slice(
        format!(
            "GET /huge HTTP/1.1\r\nCookie: {}\r\n\r\n",
            "c".repeat(70_000)
        )
        .as_bytes(),
    );
    s.extend_from_slice(b"GET /after HTTP/1.1\r\n\r\n");
    s
}

#[test]
fn any_segmentation_gives_the_same_requests() {
    let stream = varied_stream();
    let (whole, st) = run(&cut(&stream, stream.len()));
    assert_eq!(
        whole,
        [
            "GET /a",
            "POST /b",
            "GET /c",
            "HEAD /d",
            "GET /long",
            "GET /after"
        ]
    );
    // The head over 64 KiB is unparsable, even when it arrives whole.
    assert!(st.unparsable_bytes > 70_000, "{st:?}");
    for n in [1, 2, 3, 7, 1460] {
        let (reqs, st_n) = run(&cut(&stream, n));
        assert_eq!(reqs, whole, "{n}-byte segments");
        assert_eq!(
            st_n.unparsable_bytes, st.unparsable_bytes,
            "{n}-byte segments"
        );
    }
}

#[test]
fn a_head_in_one_byte_segments_is_looked_at_a_few_times() {
    let mut stream =
        format!("GET /x HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(60_000)).into_bytes();
    stream.extend_from_slice(b"POST /y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.extend_from_slice(format!("1;{}\r\nz\r\n0\r\n\r\n", "e".repeat(4_000)).as_bytes());
    let segs = cut(&stream, 1);
    http::WORK.with(|w| w.set(0));
    let (reqs, _) = run(&segs);
    let work = http::WORK.with(|w| w.get());
    assert_eq!(reqs, ["GET /x", "POST /y"]);
    // A few looks a byte (each scan overlaps the last by two bytes, and
    // httparse reads the head once it is whole); re-parsing the held head
    // on every segment would be 1.8e9 bytes.
    assert!(
        work <= 5 * stream.len() as u64,
        "{work} bytes looked at for a {}-byte stream",
        stream.len()
    );
}

#[test]
fn a_request_has_the_time_of_the_packet_that_completes_its_head() {
    let mut s = Streams::new(Limits::default());
    let mut out = Batch::new();
    let mut send = |seq: u32, flags: u8, payload: &[u8], time_ns: u64| {
        let seg = Segment {
            seq,
            flags,
            payload,
            time_ns,
        };
        s.segment(C, S, seg, &mut out);
    };
    let head = b"GET /t HTTP/1.1\r\nHost: x\r\n\r\n";
    let (a, b) = head.split_at(9);
    send(1, SYN, b"", 1);
    send(2, 0x18, a, 10);
    send(2 + a.len() as u32, 0x18, b, 20);
    // Out of order: the end comes first, the gap is filled at 40.
    let next = 2 + head.len() as u32;
    send(next + 9, 0x18, b, 30);
    send(next, 0x18, a, 40);
    let times: Vec<u64> = out.iter().map(|r| r.time_ns).collect();
    assert_eq!(times, [20, 40]);
}

/// A client at 10.0.x.y:40000 on flow `i`.
fn client(i: u32) -> (IpAddr, u16) {
    (IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)), 40000)
}

#[test]
fn what_flows_hold_is_bounded_in_total_and_the_largest_are_shed() {
    let limits = Limits {
        max_buffered: 1 << 20,
        ..Limits::default()
    };
    let mut s = Streams::new(limits);
    let mut out = Batch::new();
    let head = format!("GET /slow HTTP/1.1\r\nCookie: {}", "c".repeat(60_000));
    let ordinary = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
    let (o1, o2) = ordinary.split_at(10);
    let mut t = 0;
    let mut send = |s: &mut Streams, c: (IpAddr, u16), seq: u32, flags: u8, p: &[u8]| {
        t += 1;
        let seg = Segment {
            seq,
            flags,
            payload: p,
            time_ns: t,
        };
        s.segment(c, S, seg, &mut out);
        assert!(s.buffered() <= limits.max_buffered);
        assert_eq!(
            s.buffered(),
            s.flows.values().map(Flow::held).sum::<usize>(),
            "the running total is the flows' sum"
        );
    };
    // 100 flows each send a 60 KB head that never ends, in 1,460-byte
    // segments, 3 at a time; between them, ordinary requests in two
    // segments; and 20 flows hold 200 KB of out-of-order data each.
    for i in 0..100u32 {
        send(&mut s, client(i), 0, SYN, b"");
        let mut seq = 1;
        for part in head.as_bytes().chunks(1460) {
            send(&mut s, client(i), seq, 0x18, part);
            seq += part.len() as u32;
        }
        let c = client(1000 + i);
        send(&mut s, c, 0, SYN, b"");
        send(&mut s, c, 1, 0x18, o1);
        send(&mut s, c, 1 + o1.len() as u32, 0x18, o2);
    }
    for i in 0..20u32 {
        let c = client(2000 + i);
        send(&mut s, c, 0, SYN, b"");
        for k in 1..138u32 {
            send(&mut s, c, 1 + k * 1460, 0x18, &[b'x'; 1460]);
        }
    }
    let st = &s.stats;
    assert!(st.buffered_peak <= limits.max_buffered as u64, "{st:?}");
    assert!(
        st.buffered_peak > (limits.max_buffered as u64) / 2,
        "{st:?}"
    );
    // Held: 6 MB of heads and 4 MB out of order; at most 1 MiB kept.
    let sent = 100 * head.len() as u64 + 20 * 137 * 1460;
    assert!(st.shed_bytes >= sent - (1 << 20), "{st:?}");
    assert!(st.shed_bytes <= sent, "{st:?}");
    assert!(st.shed_flows >= 90, "{st:?}");
    // Ordinary flows hold a few bytes for a moment: never the largest.
    assert_eq!(out.iter().filter(|r| r.target() == b"/ok").count(), 100);
}

#[test]
fn out_of_order_segments_are_charged_their_bookkeeping() {
    // 1-byte segments with holes between them: the per-flow bound counts
    // each one's cost, not just its byte.
    let mut s = Streams::new(Limits::default());
    let mut out = Batch::new();
    let c = client(1);
    let seg = |seq: u32, flags: u8, payload: &'static [u8]| Segment {
        seq,
        flags,
        payload,
        time_ns: 0,
    };
    s.segment(c, S, seg(0, SYN, b""), &mut out);
    for k in 1..100_000u32 {
        s.segment(c, S, seg(1 + 2 * k, 0x18, b"x"), &mut out);
    }
    let f = s.flows.values().next().unwrap();
    assert!(f.pending.len() <= Limits::default().pending_bytes / (1 + SEGMENT_COST));
    assert!(s.stats.gaps > 0);
    assert_eq!(s.buffered(), f.held());
}

#[test]
fn a_batch_keeps_no_large_buffers_once_cleared() {
    let head = format!(
        "GET /big HTTP/1.1\r\nCookie: {}\r\n\r\n",
        "c".repeat(60_000)
    );
    let small = b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut stream = Vec::new();
    for _ in 0..20 {
        stream.extend_from_slice(head.as_bytes());
        stream.extend_from_slice(small);
    }
    let mut s = Streams::new(Limits::default());
    let mut out = Batch::new();
    for (seq, flags, p) in cut(&stream, 1460) {
        let seg = Segment {
            seq,
            flags,
            payload: p,
            time_ns: 0,
        };
        s.segment(C, S, seg, &mut out);
    }
    assert_eq!(out.len(), 40);
    assert_eq!(out.bytes(), 20 * (head.len() + small.len()));
    assert!(out.capacity_bytes() >= out.bytes());
    out.clear();
    // 40 requests' buffers, none over 4 KiB, and their header spans.
    assert!(
        out.capacity_bytes() <= 40 * (KEPT_HEAD + 128 * 16),
        "{} bytes kept",
        out.capacity_bytes()
    );
}
