//! TCP reassembly and HTTP/1.x request parsing, per flow, streaming.
//!
//! - **Direction.** The client is the side that sent the SYN; for flows
//!   that began before the capture, the side whose port is not the
//!   service's (the lower, or a well-known, port is the server).
//! - **Reassembly.** In-order bytes go straight to the parser;
//!   retransmitted bytes are trimmed; out-of-order segments wait, up to
//!   [`Limits::pending_bytes`] per flow, after which the gap is skipped and
//!   the parser resynchronises.
//! - **Parsing.** httparse parses each request head; bodies are skipped by
//!   Content-Length or chunked encoding; pipelined requests in one segment
//!   all come out. A stream that starts mid-request, or holds garbage, is
//!   resynchronised at the next line starting with a method; the skipped
//!   bytes are counted as unparsable.
//! - **Bounds.** At most [`Limits::max_flows`] flows; when full, the flows
//!   idle longest are evicted (an eighth of the table at a time). A head
//!   larger than [`Limits::max_head`] is unparsable.
//! - **TLS** (a client stream starting with a TLS record) is counted and
//!   not parsed.

use crate::matcher::{FastHash, FastMap};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Bounds of the reassembler.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most flows tracked at once.
    pub max_flows: usize,
    /// Most out-of-order bytes held per flow.
    pub pending_bytes: usize,
    /// Largest request head.
    pub max_head: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_flows: 200_000,
            pending_bytes: 256 << 10,
            max_head: 64 << 10,
        }
    }
}

/// One TCP segment's fields.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// Sequence number.
    pub seq: u32,
    /// TCP flags.
    pub flags: u8,
    /// Payload.
    pub payload: &'a [u8],
    /// Capture time.
    pub time_ns: u64,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The request head as received; the other fields index into it.
    head: Vec<u8>,
    method: (u32, u32),
    target: (u32, u32),
    headers: Vec<((u32, u32), (u32, u32))>,
    /// Client address and port.
    pub client: (IpAddr, u16),
    /// Server address and port.
    pub server: (IpAddr, u16),
    /// Time of the segment that completed the head.
    pub time_ns: u64,
}

impl HttpRequest {
    fn at(&self, (a, b): (u32, u32)) -> &[u8] {
        self.head.get(a as usize..b as usize).unwrap_or(b"")
    }

    /// The method.
    pub fn method(&self) -> &[u8] {
        self.at(self.method)
    }

    /// The request target.
    pub fn target(&self) -> &[u8] {
        self.at(self.target)
    }

    /// The headers, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.iter().map(|&(n, v)| (self.at(n), self.at(v)))
    }

    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }
}

/// Parsed requests. A batch keeps its requests' buffers when cleared, so
/// that refilling it allocates nothing.
#[derive(Debug, Default)]
pub struct Batch {
    items: Vec<HttpRequest>,
    len: usize,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Requests held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the requests, keeping their buffers.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The requests, in the order they completed.
    pub fn iter(&self) -> impl Iterator<Item = &HttpRequest> {
        self.items[..self.len].iter()
    }

    /// The requests.
    pub fn into_vec(mut self) -> Vec<HttpRequest> {
        self.items.truncate(self.len);
        self.items
    }

    /// The next request to fill in, reused if one is spare.
    fn slot(&mut self) -> &mut HttpRequest {
        if self.len == self.items.len() {
            let none = (IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);
            self.items.push(HttpRequest {
                head: Vec::new(),
                method: (0, 0),
                target: (0, 0),
                headers: Vec::new(),
                client: none,
                server: none,
                time_ns: 0,
            });
        }
        self.len += 1;
        &mut self.items[self.len - 1]
    }
}

/// The (start, end) of `part` inside `whole`, which it borrows from.
fn span_in(whole: &[u8], part: &[u8]) -> (u32, u32) {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    if start <= whole.len() && start + part.len() <= whole.len() {
        (start as u32, (start + part.len()) as u32)
    } else {
        (0, 0)
    }
}

/// Counters of what the reassembler saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Flows seen.
    pub flows: u64,
    /// Flows carrying TLS.
    pub tls_flows: u64,
    /// Bytes skipped as unparsable.
    pub unparsable_bytes: u64,
    /// Times the parser lost sync (garbage, bad heads, gaps).
    pub resyncs: u64,
    /// Gaps skipped because out-of-order data exceeded the bound.
    pub gaps: u64,
    /// Retransmitted bytes trimmed.
    pub retransmitted_bytes: u64,
    /// Flows evicted to stay within the bound.
    pub evicted_flows: u64,
}

#[derive(Debug)]
enum Body {
    None,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkCrlf,
    Trailers,
}

#[derive(Debug)]
struct Flow {
    next_seq: Option<u32>,
    pending: BTreeMap<u32, Vec<u8>>,
    pending_len: usize,
    buf: Vec<u8>,
    body: Body,
    synced: bool,
    tls: Option<bool>,
    last_seen: u64,
    /// Whether the client is the key's low endpoint.
    client_low: bool,
}

/// A connection's two endpoints, in a fixed order (the lower address and
/// port first) so that one lookup finds it from either direction, packed
/// so that hashing it costs five word mixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    low: u128,
    high: u128,
    /// Low port, high port, and the address family in bit 32.
    ports: u64,
}

impl Key {
    /// The key of the connection between `a` and `b`, and whether `a` is
    /// its low endpoint.
    fn of(a: (IpAddr, u16), b: (IpAddr, u16)) -> (Key, bool) {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let (x, y) = ((bits(a.0), a.1), (bits(b.0), b.1));
        let a_low = x <= y;
        let (l, h) = if a_low { (x, y) } else { (y, x) };
        let key = Key {
            low: l.0,
            high: h.0,
            ports: u64::from(l.1) << 16 | u64::from(h.1) | u64::from(a.0.is_ipv6()) << 32,
        };
        (key, a_low)
    }
}

/// Who talks to whom, and when: what every parsed request carries.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    client: (IpAddr, u16),
    server: (IpAddr, u16),
    time_ns: u64,
}

/// The reassembler and parser for all flows of a capture.
#[derive(Debug)]
pub struct Streams {
    flows: FastMap<Key, Flow>,
    limits: Limits,
    /// What was seen.
    pub stats: StreamStats,
}

const METHODS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
    b"PURGE ",
];

fn well_known(port: u16) -> bool {
    matches!(port, 80 | 443 | 8080 | 8000 | 8443 | 3128 | 9080)
}

impl Streams {
    /// A reassembler with these bounds.
    pub fn new(limits: Limits) -> Self {
        Streams {
            flows: FastMap::with_hasher(FastHash::random()),
            limits,
            stats: StreamStats::default(),
        }
    }

    /// Whether a segment from `src` to `dst` goes from client to server:
    /// the flow's known direction, else the SYN's, else the service port's.
    pub fn from_client(&self, src: (IpAddr, u16), dst: (IpAddr, u16), flags: u8) -> bool {
        use super::decode::tcp::{ACK, SYN};
        let (key, src_low) = Key::of(src, dst);
        if let Some(flow) = self.flows.get(&key) {
            flow.client_low == src_low
        } else if flags & SYN != 0 {
            flags & ACK == 0
        } else {
            well_known(dst.1) && !well_known(src.1)
                || (well_known(dst.1) == well_known(src.1) && dst.1 < src.1)
        }
    }

    /// Feeds one TCP segment (`src` and `dst` are address and port);
    /// parsed requests are appended to `out`.
    pub fn segment(
        &mut self,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        seg: Segment<'_>,
        out: &mut Batch,
    ) {
        let from_client = self.from_client(src, dst, seg.flags);
        self.segment_from(src, dst, from_client, seg, out);
    }

    /// Like [`Streams::segment`], with the direction already known (from
    /// [`Streams::from_client`]).
    pub fn segment_from(
        &mut self,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        from_client: bool,
        seg: Segment<'_>,
        out: &mut Batch,
    ) {
        let Segment {
            seq,
            flags,
            payload,
            time_ns,
        } = seg;
        use super::decode::tcp::{FIN, RST, SYN};
        let syn = flags & SYN != 0;
        let (client, server) = if from_client { (src, dst) } else { (dst, src) };
        let (key, client_low) = Key::of(client, server);
        if self.flows.len() >= self.limits.max_flows && !self.flows.contains_key(&key) {
            self.evict();
        }
        let flow = match self.flows.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                if flags & (RST | FIN) != 0 && payload.is_empty() {
                    return;
                }
                self.stats.flows += 1;
                v.insert(Flow {
                    next_seq: None,
                    pending: BTreeMap::new(),
                    pending_len: 0,
                    buf: Vec::new(),
                    body: Body::None,
                    synced: false,
                    tls: None,
                    last_seen: time_ns,
                    client_low,
                })
            }
        };
        flow.last_seen = time_ns;
        // The flow's own orientation wins over the caller's guess.
        let from_client = from_client == (flow.client_low == client_low);
        let (client, server) = if from_client { (src, dst) } else { (dst, src) };
        if from_client {
            if syn {
                flow.next_seq = Some(seq.wrapping_add(1));
                flow.synced = true;
            } else if !payload.is_empty() {
                let limits = self.limits.clone();
                let ctx = Ctx {
                    client,
                    server,
                    time_ns,
                };
                Self::data(flow, &limits, &mut self.stats, &ctx, seq, payload, out);
            }
        }
        if flags & (RST | FIN) != 0 && (from_client || flags & RST != 0) {
            self.flows.remove(&key);
        }
    }

    fn evict(&mut self) {
        let mut ages: Vec<(u64, Key)> = self.flows.iter().map(|(k, f)| (f.last_seen, *k)).collect();
        ages.sort_unstable_by_key(|a| a.0);
        let n = (ages.len() / 8).max(1);
        for (_, k) in ages.into_iter().take(n) {
            self.flows.remove(&k);
            self.stats.evicted_flows += 1;
        }
    }

    fn data(
        flow: &mut Flow,
        limits: &Limits,
        stats: &mut StreamStats,
        ctx: &Ctx,
        seq: u32,
        payload: &[u8],
        out: &mut Batch,
    ) {
        let next = *flow.next_seq.get_or_insert(seq);
        let diff = seq.wrapping_sub(next) as i32;
        if diff > 0 {
            if flow.pending_len + payload.len() > limits.pending_bytes {
                // Give up on the gap: continue from the earliest held data.
                stats.gaps += 1;
                let Some((&first, _)) = flow.pending.iter().next() else {
                    flow.next_seq = Some(seq.wrapping_add(payload.len() as u32));
                    flow.buf.clear();
                    flow.synced = false;
                    flow.body = Body::None;
                    stats.resyncs += 1;
                    return;
                };
                flow.next_seq = Some(first);
                flow.buf.clear();
                flow.synced = false;
                flow.body = Body::None;
                stats.resyncs += 1;
            } else {
                flow.pending_len += payload.len();
                if let Some(old) = flow.pending.insert(seq, payload.to_vec()) {
                    flow.pending_len -= old.len();
                }
                return;
            }
        } else {
            let skip = diff.unsigned_abs() as usize;
            if skip >= payload.len() {
                stats.retransmitted_bytes += payload.len() as u64;
                return;
            }
            stats.retransmitted_bytes += skip as u64;
            Self::append(flow, limits, stats, &payload[skip..], ctx, out);
        }
        // Drain held segments that are now in order.
        while let Some(next) = flow.next_seq {
            let Some((&s, _)) = flow.pending.iter().next() else {
                break;
            };
            let d = s.wrapping_sub(next) as i32;
            if d > 0 {
                break;
            }
            let Some(seg) = flow.pending.remove(&s) else {
                break;
            };
            flow.pending_len -= seg.len();
            let skip = d.unsigned_abs() as usize;
            if skip < seg.len() {
                stats.retransmitted_bytes += skip as u64;
                Self::append(flow, limits, stats, &seg[skip..], ctx, out);
            } else {
                stats.retransmitted_bytes += seg.len() as u64;
            }
        }
    }

    fn append(
        flow: &mut Flow,
        limits: &Limits,
        stats: &mut StreamStats,
        bytes: &[u8],
        ctx: &Ctx,
        out: &mut Batch,
    ) {
        flow.next_seq = flow.next_seq.map(|n| n.wrapping_add(bytes.len() as u32));
        if flow.tls.is_none() {
            let tls = bytes.len() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 && bytes[2] <= 0x04;
            flow.tls = Some(tls);
            if tls {
                stats.tls_flows += 1;
            }
        }
        if flow.tls == Some(true) {
            return;
        }
        if flow.buf.is_empty() {
            // Parse in place; keep only an unfinished tail.
            let used = Self::parse(flow, limits, stats, ctx, bytes, out);
            flow.buf.extend_from_slice(&bytes[used..]);
        } else {
            let mut buf = std::mem::take(&mut flow.buf);
            buf.extend_from_slice(bytes);
            let used = Self::parse(flow, limits, stats, ctx, &buf, out);
            buf.drain(..used);
            flow.buf = buf;
        }
    }

    /// Parses what `data` holds (the flow's unconsumed bytes); returns how
    /// many bytes were consumed.
    fn parse(
        flow: &mut Flow,
        limits: &Limits,
        stats: &mut StreamStats,
        ctx: &Ctx,
        data: &[u8],
        out: &mut Batch,
    ) -> usize {
        let mut at = 0usize;
        loop {
            let buf = &data[at..];
            if buf.is_empty() {
                break;
            }
            match flow.body {
                Body::Length(n) => {
                    let k = (n as usize).min(buf.len());
                    at += k;
                    flow.body = if n as usize > k {
                        Body::Length(n - k as u64)
                    } else {
                        Body::None
                    };
                    continue;
                }
                Body::ChunkData(n) => {
                    let k = (n as usize).min(buf.len());
                    at += k;
                    flow.body = if n as usize > k {
                        Body::ChunkData(n - k as u64)
                    } else {
                        Body::ChunkCrlf
                    };
                    continue;
                }
                Body::ChunkCrlf | Body::ChunkSize | Body::Trailers => {
                    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
                        if buf.len() > 4096 {
                            flow.body = Body::None;
                            flow.synced = false;
                            stats.resyncs += 1;
                        }
                        break;
                    };
                    let line = &buf[..nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    at += nl + 1;
                    flow.body = match flow.body {
                        Body::ChunkCrlf => Body::ChunkSize,
                        Body::ChunkSize => {
                            let hex: Vec<u8> = line
                                .iter()
                                .copied()
                                .take_while(|b| b.is_ascii_hexdigit())
                                .collect();
                            match std::str::from_utf8(&hex)
                                .ok()
                                .and_then(|h| u64::from_str_radix(h, 16).ok())
                            {
                                Some(0) => Body::Trailers,
                                Some(n) => Body::ChunkData(n),
                                None => {
                                    flow.synced = false;
                                    stats.resyncs += 1;
                                    Body::None
                                }
                            }
                        }
                        _ if line.is_empty() => Body::None,
                        _ => Body::Trailers,
                    };
                    continue;
                }
                Body::None => {}
            }
            if !flow.synced {
                // Find a line that starts with a method.
                let found = (0..buf.len()).find(|&i| {
                    (i == 0 || buf[i - 1] == b'\n')
                        && METHODS.iter().any(|m| {
                            buf[i..].starts_with(m)
                                || (buf.len() - i < m.len() && m.starts_with(&buf[i..]))
                        })
                });
                match found {
                    Some(i) => {
                        stats.unparsable_bytes += i as u64;
                        at += i;
                        flow.synced = true;
                        if data.len() - at < 8 {
                            break;
                        }
                        continue;
                    }
                    None => {
                        stats.unparsable_bytes += buf.len() as u64;
                        at += buf.len();
                        break;
                    }
                }
            }
            let mut headers = [const { std::mem::MaybeUninit::uninit() }; 128];
            let mut req = httparse::Request::new(&mut []);
            match req.parse_with_uninit_headers(buf, &mut headers) {
                Ok(httparse::Status::Complete(n)) => {
                    let head = &buf[..n];
                    let find = |name: &str| {
                        req.headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| h.value)
                    };
                    let chunked = find("transfer-encoding").is_some_and(|v| {
                        v.to_ascii_lowercase().windows(7).any(|w| w == b"chunked")
                    });
                    let len = find("content-length")
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.trim().parse::<u64>().ok());
                    flow.body = if chunked {
                        Body::ChunkSize
                    } else {
                        len.filter(|&l| l > 0).map_or(Body::None, Body::Length)
                    };
                    let r = out.slot();
                    r.head.clear();
                    r.head.extend_from_slice(head);
                    r.headers.clear();
                    r.headers.extend(
                        req.headers
                            .iter()
                            .map(|h| (span_in(head, h.name.as_bytes()), span_in(head, h.value))),
                    );
                    r.method = span_in(head, req.method.unwrap_or("").as_bytes());
                    r.target = span_in(head, req.path.unwrap_or("").as_bytes());
                    (r.client, r.server, r.time_ns) = (ctx.client, ctx.server, ctx.time_ns);
                    at += n;
                }
                Ok(httparse::Status::Partial) => {
                    if buf.len() > limits.max_head {
                        stats.unparsable_bytes += 1;
                        stats.resyncs += 1;
                        at += 1;
                        flow.synced = false;
                        continue;
                    }
                    break;
                }
                Err(_) => {
                    stats.unparsable_bytes += 1;
                    stats.resyncs += 1;
                    at += 1;
                    flow.synced = false;
                }
            }
        }
        at.min(data.len())
    }
}

#[cfg(test)]
mod tests {
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
        let a =
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel";
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
}

#[cfg(test)]
mod regressions {
    use super::*;

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
}
