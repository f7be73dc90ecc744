//! The inputs the engine decides on: HTTP requests and packets, and the
//! field extraction shared by every evaluator. Everything is bytes: a
//! request with invalid UTF-8 is still decided.

use rctl_compiler::ir::{Proto, StrField};
use std::borrow::Cow;
use std::net::IpAddr;

/// An HTTP request as the engine sees it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Method, as sent.
    pub method: &'a [u8],
    /// Host header (or authority), any case, port allowed.
    pub host: &'a [u8],
    /// Request target: path with an optional `?query`.
    pub target: &'a [u8],
    /// Headers in order, names in any case.
    pub headers: &'a [(&'a [u8], &'a [u8])],
    /// Client address.
    pub ip: IpAddr,
    /// The address the client reached, if known (`dst_ip` atoms are false
    /// without it).
    pub dst: Option<IpAddr>,
    /// Destination port.
    pub port: u16,
    /// Arrival time, nanoseconds on the caller's clock.
    pub time_ns: u64,
}

/// A packet as the engine (and the XDP program) sees it.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address, if known (`dst_ip` atoms are false without
    /// it).
    pub dst: Option<IpAddr>,
    /// Protocol.
    pub proto: Proto,
    /// Destination port (0 for ICMP).
    pub dst_port: u16,
    /// TCP SYN without ACK.
    pub syn: bool,
    /// Arrival time, nanoseconds.
    pub time_ns: u64,
}

/// Request fields, normalised once per request.
pub struct Fields<'a> {
    /// The method.
    pub method: &'a [u8],
    /// Lower-case host without port.
    pub host: Cow<'a, [u8]>,
    /// Percent-normalised path.
    pub path: Cow<'a, [u8]>,
    /// The raw query, if the target has `?`.
    pub query: Option<&'a [u8]>,
    req: &'a Request<'a>,
}

#[cfg(test)]
impl<'a> Request<'a> {
    /// A GET of `target` on example.org, port 443, from `ip` at `time_ns`
    /// (tests' requests).
    pub(crate) fn get(target: &'a str, ip: &str, time_ns: u64) -> Request<'a> {
        Request {
            method: b"GET",
            host: b"example.org",
            target: target.as_bytes(),
            headers: &[],
            ip: ip.parse().unwrap(),
            dst: None,
            port: 443,
            time_ns,
        }
    }
}

impl<'a> Fields<'a> {
    /// Extracts and normalises.
    pub fn new(req: &'a Request<'a>) -> Self {
        let (path, query) = match memchr::memchr(b'?', req.target) {
            Some(i) => (&req.target[..i], Some(&req.target[i + 1..])),
            None => (req.target, None),
        };
        let host = strip_port(req.host);
        let host = if host.iter().any(u8::is_ascii_uppercase) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        Fields {
            method: req.method,
            host,
            path: normalize_path(path),
            query,
            req,
        }
    }

    /// The value of a string field, or `None` when absent.
    pub fn get(&self, f: &StrField) -> Option<Cow<'a, [u8]>> {
        match f {
            StrField::Method => Some(Cow::Borrowed(self.method)),
            StrField::Host => Some(self.host.clone()),
            StrField::Path => Some(self.path.clone()),
            StrField::Query => Some(Cow::Borrowed(self.query.unwrap_or(b""))),
            StrField::Url => Some(Cow::Borrowed(self.req.target)),
            StrField::QueryParam(p) => query_param(self.query?, p.as_bytes()).map(Cow::Owned),
            StrField::Header(h) => self.header(h.as_bytes()).map(Cow::Borrowed),
        }
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, lower: &[u8]) -> Option<&'a [u8]> {
        self.req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(lower))
            .map(|(_, v)| *v)
    }

    /// The request.
    pub fn request(&self) -> &'a Request<'a> {
        self.req
    }
}

fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host[..i].contains(&b':') && host[i + 1..].iter().all(u8::is_ascii_digit) => {
            &host[..i]
        }
        _ => host,
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Normalises a path exactly as the compiler normalises path literals
/// ([`rctl_compiler::value::normalize_path`]), on bytes.
pub fn normalize_path(p: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memchr(b'%', p).is_none() {
        return Cow::Borrowed(p);
    }
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        if p[i] == b'%' && i + 2 < p.len() {
            if let (Some(h), Some(l)) = (hex(p[i + 1]), hex(p[i + 2])) {
                let v = h * 16 + l;
                if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                    out.push(v);
                } else {
                    out.extend_from_slice(&[
                        b'%',
                        p[i + 1].to_ascii_uppercase(),
                        p[i + 2].to_ascii_uppercase(),
                    ]);
                }
                i += 3;
                continue;
            }
        }
        out.push(p[i]);
        i += 1;
    }
    Cow::Owned(out)
}

pub use rctl_compiler::value::{decode_component, query_param};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_decoded() {
        let q = |s: &str, n: &str| {
            query_param(s.as_bytes(), n.as_bytes()).map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            q("a=1&query=SELECT+%3Fx&a=2", "query").as_deref(),
            Some("SELECT ?x")
        );
        assert_eq!(q("a=1&a=2", "a").as_deref(), Some("1"));
        assert_eq!(q("flag&x=1", "flag").as_deref(), Some(""));
        assert_eq!(q("x=%zz%", "x").as_deref(), Some("%zz%"));
        assert_eq!(q("x=1", "y"), None);
    }

    #[test]
    fn host_port_is_stripped() {
        assert_eq!(strip_port(b"Example.org:8080"), b"Example.org");
        assert_eq!(strip_port(b"[2001:db8::1]:443"), b"[2001:db8::1]");
        assert_eq!(strip_port(b"2001:db8::1"), b"2001:db8::1");
    }

    #[test]
    fn path_normalisation_matches_the_compiler() {
        for p in [
            "/%73parql",
            "/page/html/%ea%9d%ae",
            "/a%2Fb",
            "/bad%zz%",
            "/x%4",
            "/\u{e9}",
            "/%",
        ] {
            assert_eq!(
                normalize_path(p.as_bytes()).as_ref(),
                rctl_compiler::value::normalize_path(p).as_bytes(),
                "{p}"
            );
        }
        assert_eq!(normalize_path(b"/\xff%41").as_ref(), b"/\xffA");
    }
}
