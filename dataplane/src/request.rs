//! The inputs the engine decides on: HTTP requests and packets, and the
//! field extraction shared by every caller.

use rctl_compiler::ir::{Proto, StrField};
use rctl_compiler::value::normalize_path;
use std::borrow::Cow;
use std::net::IpAddr;

/// An HTTP request as the engine sees it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Method, as sent.
    pub method: &'a str,
    /// Host header (or authority), any case, port allowed.
    pub host: &'a str,
    /// Request target: path with an optional `?query`.
    pub target: &'a str,
    /// Headers in order, names in any case.
    pub headers: &'a [(&'a str, &'a str)],
    /// Client address.
    pub ip: IpAddr,
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
    /// Protocol.
    pub proto: Proto,
    /// Destination port (0 for ICMP).
    pub dst_port: u16,
    /// TCP SYN without ACK.
    pub syn: bool,
    /// Arrival time, nanoseconds.
    pub time_ns: u64,
}

/// Request fields extracted once per request.
pub(crate) struct Fields<'a> {
    pub method: &'a str,
    pub host: String,
    pub path: String,
    pub query: Option<&'a str>,
    req: &'a Request<'a>,
}

impl<'a> Fields<'a> {
    pub fn new(req: &'a Request<'a>) -> Self {
        let (path, query) = match req.target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (req.target, None),
        };
        let host = strip_port(req.host).to_ascii_lowercase();
        Fields {
            method: req.method,
            host,
            path: normalize_path(path),
            query,
            req,
        }
    }

    /// The value of a string field, or `None` when absent.
    pub fn get(&self, f: &StrField) -> Option<Cow<'a, str>> {
        match f {
            StrField::Method => Some(Cow::Borrowed(self.method)),
            StrField::Host => Some(Cow::Owned(self.host.clone())),
            StrField::Path => Some(Cow::Owned(self.path.clone())),
            StrField::Query => Some(Cow::Borrowed(self.query.unwrap_or(""))),
            StrField::QueryParam(p) => query_param(self.query?, p).map(Cow::Owned),
            StrField::Header(h) => self
                .req
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(h))
                .map(|(_, v)| Cow::Borrowed(*v)),
        }
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..h.len() + 1]);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Decodes `+` and `%XX` in a query component.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match (
                    char::from(b[i + 1]).to_digit(16),
                    char::from(b[i + 2]).to_digit(16),
                ) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The decoded value of the first parameter called `name` (`a&b` has
/// parameter `a` with value "").
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_decoded() {
        assert_eq!(
            query_param("a=1&query=SELECT+%3Fx&a=2", "query").as_deref(),
            Some("SELECT ?x")
        );
        assert_eq!(query_param("a=1&a=2", "a").as_deref(), Some("1"));
        assert_eq!(query_param("flag&x=1", "flag").as_deref(), Some(""));
        assert_eq!(query_param("x=%zz%", "x").as_deref(), Some("%zz%"));
        assert_eq!(query_param("x=1", "y"), None);
    }

    #[test]
    fn host_port_is_stripped() {
        assert_eq!(strip_port("Example.org:8080"), "Example.org");
        assert_eq!(strip_port("[2001:db8::1]:443"), "[2001:db8::1]");
        assert_eq!(strip_port("2001:db8::1"), "2001:db8::1");
    }
}
