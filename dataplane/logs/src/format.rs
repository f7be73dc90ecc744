//! A log format: how its lines are read, and which request fields they
//! carry. Fields a format lacks are never guessed: [`Format::known`] says
//! what it carries, and the dry run treats everything else as unknown.

use crate::address::{client_hop, parse_port};
use crate::combined::Combined;
use crate::record::{HeaderValue, Record};
use crate::template::{unescape, Escape, Field, Mismatch, Span, Template, Token};
use crate::webrequest;
use rctl_dataplane::partial::{Known, KnownHeaders};
use std::net::IpAddr;

pub use crate::address::parse_ip;

/// How lines are read.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A text template (HAProxy, nginx, varnishncsa).
    Template(Template),
    /// Wikimedia's webrequest, one JSON object a line.
    WebrequestJson,
    /// Wikimedia's refined webrequest, Parquet: rows, not lines (read
    /// by [`crate::parquet`]; a line never fits it).
    WebrequestParquet,
}

/// A compiled log format.
#[derive(Debug, Clone)]
pub struct Format {
    /// Its name, as `--log-format` takes it (`nginx-combined`, `haproxy:…`).
    pub name: String,
    /// How its lines are read.
    pub kind: Kind,
    /// Lines may start with a syslog header (RFC 3164 or 5424), which is
    /// skipped.
    pub syslog: bool,
    /// Request headers it carries, lower-case; records name them by index.
    pub header_names: Vec<String>,
    /// What it carries.
    pub known: Known,
    /// The resolution of its times, in nanoseconds.
    pub resolution_ns: u64,
    /// Where the client address comes from, if not the connection.
    pub client_ip: Option<ClientIpField>,
    /// The request line's absolute URL carries the Host (varnishncsa).
    pub host_in_url: bool,
    /// The reader written for nginx's `combined`, if this is that format.
    pub(crate) combined: Option<Combined>,
}

/// `--client-ip-field`: the client address from a header.
#[derive(Debug, Clone)]
pub struct ClientIpField {
    /// Index of the header in the format's header names.
    pub header: u16,
    /// Addresses of proxies that may have appended to it: the client is
    /// the last address that is not one of them.
    pub trusted: Vec<(IpAddr, u8)>,
}

/// A captured header's value, named `name` in the record: HAProxy keeps
/// `len` bytes of a value, so one that long may be the start of a longer
/// one.
fn captured(rec: &mut Record, c: &crate::template::Capture, name: u16, value: Span) {
    if c.name == "host" {
        rec.host = value;
    }
    if c.may_cut(value.len()) {
        rec.cut.push(name);
    }
    rec.headers.push(HeaderValue { name, value });
}

impl Format {
    /// A format read through a template; what it carries is what its
    /// fields are.
    pub fn from_template(name: &str, t: Template, syslog: bool) -> Format {
        let mut known = Known::none();
        let mut names: Vec<String> = Vec::new();
        let add = |n: &str, names: &mut Vec<String>| {
            let n = n.to_ascii_lowercase();
            if !names.contains(&n) {
                names.push(n);
            }
        };
        let (mut path, mut query, mut raw, mut resolution) = (false, false, false, u64::MAX);
        for tok in &t.tokens {
            let Token::Field(f, _) = tok else { continue };
            match f {
                Field::ServerIp => known.dst_ip = true,
                Field::ServerPort => known.port = true,
                Field::Time(tf) => resolution = resolution.min(tf.resolution_ns()),
                Field::Millis => resolution = resolution.min(1_000_000),
                Field::RequestLine => {
                    known.method = true;
                    (path, query, raw) = (true, true, true);
                }
                Field::Method => known.method = true,
                Field::Target => (path, query, raw) = (true, true, true),
                Field::Path => path = true,
                Field::PathArgs => (path, query) = (true, true),
                Field::Query => query = true,
                Field::Host => {
                    known.host = true;
                    add("host", &mut names);
                }
                Field::Header(h) => {
                    if h == "host" {
                        known.host = true;
                    }
                    add(h, &mut names);
                }
                Field::Captures(hs) => {
                    for c in hs.iter().filter(|c| !c.name.is_empty()) {
                        if c.name == "host" {
                            known.host = true;
                        }
                        add(&c.name, &mut names);
                        if c.len.is_some() && !known.capped.contains(&c.name) {
                            known.capped.push(c.name.clone());
                        }
                    }
                }
                Field::Captured(c) => {
                    if c.name == "host" {
                        known.host = true;
                    }
                    add(&c.name, &mut names);
                    if c.len.is_some() && !known.capped.contains(&c.name) {
                        known.capped.push(c.name.clone());
                    }
                }
                Field::ClientIp
                | Field::ClientIpPort
                | Field::IsArgs
                | Field::Skip
                | Field::UnnamedCaptureList
                | Field::ResponseCaptures => {}
            }
        }
        known.path = path;
        known.query = query;
        known.url = raw || (path && query);
        known.headers = KnownHeaders::Only(names.clone());
        let combined = Combined::new(&t.tokens, &names);
        Format {
            name: name.to_string(),
            syslog,
            header_names: names,
            known,
            resolution_ns: if resolution == u64::MAX {
                1_000_000_000
            } else {
                resolution
            },
            client_ip: None,
            host_in_url: false,
            combined,
            kind: Kind::Template(t),
        }
    }

    /// The same format read by its template alone, without a reader
    /// written for it (nginx's `combined` has one): the reference such a
    /// reader is checked against.
    pub fn template_only(&self) -> Format {
        Format {
            combined: None,
            ..self.clone()
        }
    }

    /// Takes the Host from the request line's absolute URL (varnishncsa
    /// writes the Host header there).
    pub fn host_from_request_line(&mut self) {
        self.host_in_url = true;
        self.known.host = true;
        if !self.header_names.iter().any(|h| h == "host") {
            self.header_names.push("host".into());
        }
        self.known.headers = KnownHeaders::Only(self.header_names.clone());
    }

    /// Takes the client address from header `name` (which the format must
    /// carry), skipping `trusted` proxies from the right.
    pub fn set_client_ip_field(
        &mut self,
        name: &str,
        trusted: Vec<(IpAddr, u8)>,
    ) -> Result<(), String> {
        let lower = name.to_ascii_lowercase();
        match self.header_names.iter().position(|h| *h == lower) {
            Some(i) => {
                self.client_ip = Some(ClientIpField {
                    header: i as u16,
                    trusted,
                });
                Ok(())
            }
            None => Err(format!(
                "--client-ip-field {name}: the format {} does not carry that header (it carries: {})",
                self.name,
                if self.header_names.is_empty() { "none".to_string() } else { self.header_names.join(", ") }
            )),
        }
    }

    /// Parses one line into `rec`, decoding escapes into `arena` (both
    /// cleared first).
    pub fn parse(
        &self,
        line: &[u8],
        rec: &mut Record,
        arena: &mut Vec<u8>,
    ) -> Result<(), Mismatch> {
        rec.clear();
        arena.clear();
        let (body, at) = if self.syslog {
            strip_syslog(line)
        } else {
            (line, 0)
        };
        match &self.kind {
            Kind::Template(t) => self.parse_template(t, line, at, body, rec, arena)?,
            Kind::WebrequestJson => webrequest::parse(self, line, rec, arena)?,
            Kind::WebrequestParquet => return Err(Mismatch::Literal(0)),
        }
        if let Some(m) = rec.millis {
            rec.time_ns = rec
                .time_ns
                .checked_add(m * 1_000_000)
                .ok_or(Mismatch::Value(0, "time"))?;
        }
        if let Some(c) = &self.client_ip {
            let v = rec
                .headers
                .iter()
                .find(|h| h.name == c.header)
                .map(|h| h.value.get(line, arena));
            rec.ip = v.and_then(|v| client_hop(v, &c.trusted));
        }
        if rec.ip.is_none() {
            return Err(Mismatch::Missing("client address"));
        }
        if rec.resolution_ns == 0 {
            return Err(Mismatch::Missing("time"));
        }
        Ok(())
    }

    fn parse_template(
        &self,
        t: &Template,
        line: &[u8],
        at: usize,
        body: &[u8],
        rec: &mut Record,
        arena: &mut Vec<u8>,
    ) -> Result<(), Mismatch> {
        if let Some(c) = self.combined.filter(|_| !self.host_in_url) {
            if c.parse(body, at, rec, arena).is_some() {
                return Ok(());
            }
            // Another shape, or a bad line: the template reads it, and
            // says what is wrong.
            rec.clear();
            arena.clear();
        }
        let names = &self.header_names;
        let header = |n: &str| names.iter().position(|h| h == n).unwrap_or(0) as u16;
        t.split(body, |field, esc, v, p| {
            let p = p + at;
            // Every format writes an absent value as `-` or as nothing.
            let absent = v.is_empty() || v == b"-";
            match field {
                Field::ClientIp => rec.ip = parse_ip(v),
                Field::ClientIpPort => {
                    let i = v
                        .iter()
                        .rposition(|&b| b == b':')
                        .ok_or(Mismatch::Value(p, "address:port"))?;
                    rec.ip = parse_ip(&v[..i]);
                }
                Field::ServerIp => {
                    if let Some(i) = v.iter().rposition(|&b| b == b':').filter(|_| {
                        v.first() == Some(&b'[') || v.iter().filter(|&&b| b == b':').count() == 1
                    }) {
                        rec.dst = parse_ip(&v[..i]);
                    } else {
                        rec.dst = parse_ip(v);
                    }
                }
                Field::ServerPort => rec.port = parse_port(v),
                Field::Time(tf) => {
                    let (ns, res) = rec
                        .last_time
                        .parse(*tf, v)
                        .ok_or(Mismatch::Value(p, "time"))?;
                    rec.time_ns = ns;
                    rec.resolution_ns = res;
                }
                Field::Millis => {
                    let ms = parse_port(v)
                        .filter(|&m| m < 1000)
                        .ok_or(Mismatch::Value(p, "milliseconds"))?;
                    rec.millis = Some(u64::from(ms));
                    rec.resolution_ns = rec.resolution_ns.clamp(1, 1_000_000);
                }
                Field::RequestLine => {
                    request_line(v, p, esc, rec, arena)?;
                    if self.host_in_url {
                        if let Some(h) = authority(v, p) {
                            rec.host = h;
                            rec.headers.push(HeaderValue {
                                name: header("host"),
                                value: h,
                            });
                        }
                    }
                }
                Field::Method => rec.method = unescape(v, p, esc, arena),
                Field::Target => {
                    let (v, p) = origin_form(v, p);
                    rec.target = unescape(v, p, esc, arena);
                }
                Field::Path => {
                    let (v, p) = origin_form(v, p);
                    rec.path = Some(unescape(v, p, esc, arena));
                }
                Field::PathArgs => {
                    let (path, query) = match memchr::memchr(b'?', v) {
                        Some(i) => (&v[..i], Some((&v[i + 1..], p + i + 1))),
                        // No `?`: the `-` at the end is the empty $args.
                        None => (v.strip_suffix(b"-").unwrap_or(v), None),
                    };
                    rec.path = Some(unescape(path, p, esc, arena));
                    rec.query = Some(match query {
                        Some((q, at)) => unescape(q, at, esc, arena),
                        None => Span::default(),
                    });
                }
                Field::Query if absent => rec.query = Some(Span::default()),
                Field::Query => {
                    let (v, p) = match v.strip_prefix(b"?") {
                        Some(q) => (q, p + 1),
                        None => (v, p),
                    };
                    rec.query = Some(unescape(v, p, esc, arena));
                }
                Field::Host if absent => {}
                Field::Host => {
                    rec.host = unescape(v, p, esc, arena);
                    rec.headers.push(HeaderValue {
                        name: header("host"),
                        value: rec.host,
                    });
                }
                Field::Header(_) if absent => {}
                Field::Header(h) => {
                    let value = unescape(v, p, esc, arena);
                    if h == "host" {
                        rec.host = value;
                    }
                    rec.headers.push(HeaderValue {
                        name: header(h),
                        value,
                    });
                }
                Field::Captured(_) if absent => {}
                Field::Captured(c) => {
                    captured(rec, c, header(&c.name), unescape(v, p, esc, arena));
                }
                Field::Captures(hs) => {
                    let inner = v
                        .strip_prefix(b"{")
                        .and_then(|v| v.strip_suffix(b"}"))
                        .ok_or(Mismatch::Value(p, "captured headers {…}"))?;
                    // HAProxy escapes `|` in a captured value: one value
                    // per slot, or the names given are not the slots'.
                    // (Without names the format carries no header, and
                    // the values are not read.)
                    let values = memchr::memchr_iter(b'|', inner).count() + 1;
                    if hs.is_empty() && inner.iter().any(|&b| b != b'|') {
                        rec.unnamed_captures = true;
                    }
                    if !hs.is_empty() && values != hs.len() {
                        return Err(Mismatch::Value(
                            p,
                            "set of captured headers (the capture names given are not one per value)",
                        ));
                    }
                    let (mut q, mut rest) = (p + 1, inner);
                    for h in hs {
                        // One value per slot (counted above).
                        let (val, next) = match memchr::memchr(b'|', rest) {
                            Some(i) => (&rest[..i], &rest[i + 1..]),
                            None => (rest, &rest[rest.len()..]),
                        };
                        rest = next;
                        let value = unescape(val, q, esc, arena);
                        q += val.len() + 1;
                        // HAProxy writes an absent header as nothing; an
                        // unnamed slot holds no header.
                        if val.is_empty() || h.name.is_empty() {
                            continue;
                        }
                        captured(rec, h, header(&h.name), value);
                    }
                }
                Field::UnnamedCaptureList => {
                    // `"" "-"`: every slot empty; anything else a value.
                    if v.iter().any(|b| !matches!(b, b'"' | b' ' | b'-')) {
                        rec.unnamed_captures = true;
                    }
                }
                Field::IsArgs | Field::Skip | Field::ResponseCaptures => {}
            }
            Ok(())
        })?;
        // A target from its path and query, when written apart.
        if rec.target.is_empty() {
            if let Some(path) = rec.path {
                rec.target = match rec.query.filter(|q| !q.is_empty()) {
                    None => path,
                    Some(q) => {
                        let start = arena.len();
                        push_span(arena, line, path);
                        arena.push(b'?');
                        push_span(arena, line, q);
                        Span::arena(start, arena.len())
                    }
                };
            }
        }
        Ok(())
    }
}

fn push_span(arena: &mut Vec<u8>, line: &[u8], s: Span) {
    match s.arena_range() {
        Some(r) => arena.extend_from_within(r),
        None => arena.extend_from_slice(s.get(line, &[])),
    }
}

/// The path and query of an absolute URL (HTTP/2 in HAProxy,
/// varnishncsa's `%r`), and its offset; other targets as they are.
fn origin_form(v: &[u8], p: usize) -> (&[u8], usize) {
    for scheme in [&b"http://"[..], b"https://"] {
        if v.len() > scheme.len() && v[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let auth = &v[scheme.len()..];
            let slash = auth
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(auth.len());
            return (&auth[slash..], p + scheme.len() + slash);
        }
    }
    (v, p)
}

/// The authority of the request line's absolute URL.
fn authority(v: &[u8], p: usize) -> Option<Span> {
    let sp = memchr::memchr(b' ', v)?;
    let t = &v[sp + 1..];
    for scheme in [&b"http://"[..], b"https://"] {
        if t.len() > scheme.len() && t[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let auth = &t[scheme.len()..];
            let end = auth
                .iter()
                .position(|&b| b == b'/' || b == b'?' || b == b' ')
                .unwrap_or(auth.len());
            let at = p + sp + 1 + scheme.len();
            return (end > 0).then(|| Span::line(at, at + end));
        }
    }
    None
}

/// `METHOD TARGET [PROTOCOL]`; an absolute URL's authority is not taken
/// as the Host (only a format that writes the Host carries it).
pub(crate) fn request_line(
    v: &[u8],
    p: usize,
    esc: Escape,
    rec: &mut Record,
    arena: &mut Vec<u8>,
) -> Result<(), Mismatch> {
    let sp = crate::bytes::find_byte(v, b' ').ok_or(Mismatch::Value(p, "request line"))?;
    let method = &v[..sp];
    if method.is_empty() || !method.iter().all(|b| b.is_ascii_graphic()) {
        return Err(Mismatch::Value(p, "request line"));
    }
    rec.method = Span::line(p, p + sp);
    let rest = &v[sp + 1..];
    let end = memchr::memrchr(b' ', rest)
        .filter(|&i| rest[i + 1..].starts_with(b"HTTP/"))
        .unwrap_or(rest.len());
    let (target, at) = origin_form(&rest[..end], p + sp + 1);
    if target.is_empty() {
        rec.target = Span::arena(arena.len(), arena.len() + 1);
        arena.push(b'/');
        return Ok(());
    }
    rec.target = unescape(target, at, esc, arena);
    Ok(())
}

/// Skips a syslog header: `<PRI>` then RFC 5424 (`1 TIMESTAMP HOST APP
/// PROCID MSGID SD `) or RFC 3164 (`Mmm dd hh:mm:ss HOST TAG: `); also a
/// syslog file's line without `<PRI>` (rsyslog's traditional or
/// high-precision timestamp). Returns the message and its offset.
pub fn strip_syslog(line: &[u8]) -> (&[u8], usize) {
    let mut p = 0;
    if line.first() == Some(&b'<') {
        if let Some(i) = line.iter().take(5).position(|&b| b == b'>') {
            p = i + 1;
        }
    }
    let rest = &line[p..];
    if p > 0 && rest.starts_with(b"1 ") {
        // RFC 5424: five fields, then structured data.
        let mut q = p + 2;
        for _ in 0..5 {
            match memchr::memchr(b' ', &line[q..]) {
                Some(i) => q += i + 1,
                None => return (line, 0),
            }
        }
        if line.get(q) == Some(&b'[') {
            // Structured data: up to the `]` before a space.
            match memchr::memmem::find(&line[q..], b"] ") {
                Some(i) => q += i + 2,
                None => return (line, 0),
            }
        } else if line[q..].starts_with(b"- ") {
            q += 2;
        }
        return (&line[q..], q);
    }
    // RFC 3164, or a file's line: a timestamp, a host, `tag[pid]: `.
    let ts_len = if rest.len() > 16 && rest[3] == b' ' && rest[6] == b' ' && rest[9] == b':' {
        15
    } else if rest.len() > 20 && rest[4] == b'-' && rest[10] == b'T' {
        memchr::memchr(b' ', rest).unwrap_or(0)
    } else {
        return (&line[p..], p);
    };
    let q = p + ts_len + 1;
    match memchr::memmem::find(&line[q..], b": ") {
        Some(i) if i < 256 => (&line[q + i + 2..], q + i + 2),
        _ => (&line[p..], p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_headers_are_skipped() {
        let m = b"127.0.0.1:1 [x]";
        for prefix in [
            &b""[..],
            b"<134>May 13 12:00:00 edge1 haproxy[1234]: ",
            b"<134>May  3 12:00:00 edge1 haproxy[1234]: ",
            b"May 13 12:00:00 edge1 haproxy[1234]: ",
            b"2026-05-13T12:00:00.123456+00:00 edge1 haproxy[1234]: ",
            b"<134>1 2026-05-13T12:00:00.123Z edge1 haproxy 1234 - - ",
            b"<134>1 2026-05-13T12:00:00.123Z edge1 haproxy 1234 - [meta x=\"1\"] ",
        ] {
            let line = [prefix, &m[..]].concat();
            let (body, at) = strip_syslog(&line);
            assert_eq!(body, m, "{}", String::from_utf8_lossy(prefix));
            assert_eq!(at, prefix.len());
        }
    }
}
