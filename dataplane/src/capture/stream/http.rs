//! HTTP/1.x request heads from one client stream: parsing, bodies skipped,
//! resynchronisation, and what a stream holds while a head is incomplete.

use super::{Ctx, Limits, StreamStats};
use std::net::IpAddr;

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
    /// Capture time of the packet that completed the head (as the
    /// `capture::stream` module documents: with an out-of-order head, the
    /// packet that filled the gap).
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

    /// Hands `f` the request as the engine reads it (its Host from the
    /// Host header, its destination the server).
    pub fn with_request<T>(&self, f: impl FnOnce(&crate::Request<'_>) -> T) -> T {
        let headers: Vec<(&[u8], &[u8])> = self.headers().collect();
        f(&crate::Request {
            method: self.method(),
            host: self.header("host").unwrap_or(b""),
            target: self.target(),
            headers: &headers,
            ip: self.client.0,
            dst: Some(self.server.0),
            port: self.server.1,
            time_ns: self.time_ns,
        })
    }
}

/// Parsed requests. A batch keeps its requests' buffers when cleared, so
/// that refilling it allocates nothing, except those over [`KEPT_HEAD`]
/// bytes: what an idle batch keeps stays under 256 such buffers however
/// large the heads it once held.
#[derive(Debug, Default)]
pub struct Batch {
    items: Vec<HttpRequest>,
    len: usize,
    /// Bytes of the heads held.
    bytes: usize,
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

    /// Bytes of the requests' heads.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes of memory the batch's buffers take (heads, and header
    /// spans), held requests or not.
    pub fn capacity_bytes(&self) -> usize {
        let span = std::mem::size_of::<((u32, u32), (u32, u32))>();
        self.items
            .iter()
            .map(|r| r.head.capacity() + r.headers.capacity() * span)
            .sum()
    }

    /// Forgets the requests, keeping their buffers (but those over
    /// [`KEPT_HEAD`]).
    pub fn clear(&mut self) {
        for r in &mut self.items[..self.len] {
            if r.head.capacity() > KEPT_HEAD {
                r.head = Vec::new();
            }
        }
        self.len = 0;
        self.bytes = 0;
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

    /// The next request to fill in with a head of `len` bytes, reused if
    /// one is spare.
    fn slot(&mut self, len: usize) -> &mut HttpRequest {
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
        self.bytes += len;
        &mut self.items[self.len - 1]
    }
}

/// Largest head buffer a batch keeps for reuse.
pub const KEPT_HEAD: usize = 4 << 10;

/// The (start, end) of `part` inside `whole`, which it borrows from.
fn span_in(whole: &[u8], part: &[u8]) -> (u32, u32) {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    if start <= whole.len() && start + part.len() <= whole.len() {
        (start as u32, (start + part.len()) as u32)
    } else {
        (0, 0)
    }
}

#[derive(Debug, Default)]
enum Body {
    #[default]
    None,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkCrlf,
    Trailers,
}

/// Longest chunk-size, chunk-end or trailer line.
const MAX_LINE: usize = 4096;

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

#[cfg(test)]
thread_local! {
    /// Bytes looked at by httparse and by the scans for a head's or a
    /// line's end, on this thread: what the tests hold to linear.
    pub(super) static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts bytes looked at (in tests).
fn work(_bytes: usize) {
    #[cfg(test)]
    WORK.with(|w| w.set(w.get() + _bytes as u64));
}

/// Whether `buf[from..]` holds the end of a head as httparse finds it: a
/// line feed followed by an empty line (`\n\n` or `\n\r\n`).
fn has_head_end(buf: &[u8], from: usize) -> bool {
    work(buf.len().saturating_sub(from));
    let mut i = from;
    while let Some(p) = buf
        .get(i..)
        .and_then(|b| b.iter().position(|&c| c == b'\n'))
    {
        let nl = i + p;
        match buf.get(nl + 1) {
            Some(b'\n') => return true,
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return true,
            _ => i = nl + 1,
        }
    }
    false
}

/// One client stream's parsing state.
#[derive(Debug, Default)]
pub(super) struct Parser {
    /// Unconsumed bytes: an incomplete head or body line (empty, and
    /// unallocated, between requests).
    buf: Vec<u8>,
    body: Body,
    synced: bool,
    tls: Option<bool>,
    /// How many bytes at the start of `buf` are known not to complete
    /// what the parser waits for (a head, or a body line), so that each
    /// byte of a head arriving in small segments is scanned about once.
    scanned: usize,
}

impl Parser {
    /// Bytes of memory the stream holds.
    pub(super) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Stream bytes held, not yet parsed.
    pub(super) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Forgets what is held; the stream resynchronises at the next line
    /// starting with a method.
    pub(super) fn reset(&mut self) {
        self.buf = Vec::new();
        self.body = Body::None;
        self.synced = false;
        self.scanned = 0;
    }

    /// Starts a stream at its first byte (after a SYN).
    pub(super) fn start(&mut self) {
        self.synced = true;
    }

    /// Parses the stream's next bytes, in order; completed requests are
    /// appended to `out`.
    pub(super) fn feed(
        &mut self,
        limits: &Limits,
        stats: &mut StreamStats,
        bytes: &[u8],
        ctx: &Ctx,
        out: &mut Batch,
    ) {
        if self.tls.is_none() {
            let tls = bytes.len() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 && bytes[2] <= 0x04;
            self.tls = Some(tls);
            if tls {
                stats.tls_flows += 1;
            }
        }
        if self.tls == Some(true) {
            return;
        }
        if self.buf.is_empty() {
            // Parse in place; keep only an unfinished tail, with room for
            // what usually completes it.
            let used = self.parse(limits, stats, ctx, bytes, out);
            let tail = &bytes[used..];
            if !tail.is_empty() {
                self.buf.reserve(tail.len().max(512) * 2);
                self.buf.extend_from_slice(tail);
            }
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let from = self.scanned.saturating_sub(2);
        // When the new bytes outnumber the held ones, parsing everything
        // costs at most twice the new bytes: no need to look first.
        let small = bytes.len() < buf.len();
        buf.extend_from_slice(bytes);
        if small && !self.complete(limits, &buf, from) {
            self.scanned = buf.len();
            self.buf = buf;
            return;
        }
        let used = self.parse(limits, stats, ctx, &buf, out);
        let tail = &buf[used..];
        if tail.is_empty() {
            // Nothing held between requests.
        } else if buf.capacity() > MAX_LINE && tail.len() < buf.capacity() / 4 {
            self.buf = tail.to_vec();
        } else {
            buf.drain(..used);
            self.buf = buf;
        }
    }

    /// Whether `buf`, whose bytes before `from` were already looked at,
    /// may now let the parser move on: a held head or body line has ended,
    /// or grown past its bound.
    fn complete(&self, limits: &Limits, buf: &[u8], from: usize) -> bool {
        match self.body {
            Body::None if self.synced => buf.len() > limits.max_head || has_head_end(buf, from),
            Body::ChunkSize | Body::ChunkCrlf | Body::Trailers => {
                work(buf.len().saturating_sub(from));
                buf.len() > MAX_LINE || buf.get(from..).is_some_and(|b| b.contains(&b'\n'))
            }
            _ => true,
        }
    }

    /// Parses what `data` holds (the stream's unconsumed bytes); returns
    /// how many bytes were consumed, and sets how much of the rest is
    /// known not to complete a head or line.
    fn parse(
        &mut self,
        limits: &Limits,
        stats: &mut StreamStats,
        ctx: &Ctx,
        data: &[u8],
        out: &mut Batch,
    ) -> usize {
        let mut at = 0usize;
        self.scanned = 0;
        loop {
            let buf = &data[at..];
            if buf.is_empty() {
                break;
            }
            match self.body {
                Body::Length(n) | Body::ChunkData(n) => {
                    // Body bytes: skipped.
                    let k = n.min(buf.len() as u64);
                    at += k as usize;
                    self.body = match (&self.body, n - k) {
                        (Body::Length(_), 0) => Body::None,
                        (Body::Length(_), left) => Body::Length(left),
                        (_, 0) => Body::ChunkCrlf,
                        (_, left) => Body::ChunkData(left),
                    };
                    continue;
                }
                Body::ChunkCrlf | Body::ChunkSize | Body::Trailers => {
                    let nl = buf.iter().position(|&b| b == b'\n');
                    work(nl.map_or(buf.len(), |n| n + 1));
                    let Some(nl) = nl else {
                        if buf.len() > MAX_LINE {
                            self.body = Body::None;
                            self.synced = false;
                            stats.resyncs += 1;
                        } else {
                            self.scanned = buf.len();
                        }
                        break;
                    };
                    let line = &buf[..nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    at += nl + 1;
                    self.body = match self.body {
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
                                    self.synced = false;
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
            if !self.synced {
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
                        self.synced = true;
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
            let parsed = req.parse_with_uninit_headers(buf, &mut headers);
            work(match parsed {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => buf.len(),
                Err(_) => 0,
            });
            match parsed {
                Ok(httparse::Status::Complete(n)) if n <= limits.max_head => {
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
                    self.body = if chunked {
                        Body::ChunkSize
                    } else {
                        len.filter(|&l| l > 0).map_or(Body::None, Body::Length)
                    };
                    let r = out.slot(head.len());
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
                Ok(httparse::Status::Partial) if buf.len() <= limits.max_head => {
                    // httparse read all of `buf`: the head's end, when it
                    // comes, is in bytes not yet received.
                    self.scanned = buf.len();
                    break;
                }
                // Too long (whether or not it is complete), or not HTTP.
                _ => {
                    stats.unparsable_bytes += 1;
                    stats.resyncs += 1;
                    at += 1;
                    self.synced = false;
                }
            }
        }
        at.min(data.len())
    }
}
