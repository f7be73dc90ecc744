//! One observed request, owned: what the suggester counts and replays.

use rctl_dataplane::capture::stream::HttpRequest;
use rctl_dataplane::Request;
use std::net::IpAddr;

/// A request of the traffic, with what is needed to decide it again.
#[derive(Debug, Clone)]
pub struct Obs {
    /// The input it came from: an index into the fields each input
    /// carries (see [`crate::Recorded`]); [`crate::CAPTURE`] for a capture, which carries every field.
    pub input: u32,
    /// Arrival time, nanoseconds (the capture's or the log's clock).
    pub time_ns: u64,
    /// Client address.
    pub ip: IpAddr,
    /// The address the client reached, when known.
    pub dst: Option<IpAddr>,
    /// Destination port.
    pub port: u16,
    /// Method.
    pub method: Vec<u8>,
    /// Host header.
    pub host: Vec<u8>,
    /// Target as sent: path and `?query`.
    pub target: Vec<u8>,
    /// Headers in order (names as sent).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The headers whose logged values may have been cut at their
    /// capture's length (see [`crate::Origin`]).
    pub cut: Vec<Vec<u8>>,
}

impl Obs {
    /// From a request of a log (input `input`), with the fields its
    /// format carries: a field the log lacks is empty here, and the
    /// decisions on it are three-valued ([`crate::Judge`]).
    pub fn from_request(o: crate::Origin<'_>, r: &Request<'_>, keep: Option<&[String]>) -> Obs {
        Obs {
            input: o.input,
            time_ns: r.time_ns,
            ip: r.ip,
            dst: r.dst,
            port: r.port,
            method: r.method.to_vec(),
            host: r.host.to_vec(),
            target: r.target.to_vec(),
            headers: r
                .headers
                .iter()
                .filter(|(n, _)| kept(keep, n))
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            cut: o.cut.iter().map(|n| n.to_vec()).collect(),
        }
    }

    /// Whether the request looks like a person's browser (see
    /// [`looks_legitimate`]).
    pub fn looks_legitimate(&self) -> bool {
        self.with_request(|r, _| looks_legitimate(r))
    }

    /// Calls `f` with the engine's view of this request, and the headers
    /// that may have been cut.
    pub fn with_request<R>(&self, f: impl FnOnce(&Request<'_>, &[&[u8]]) -> R) -> R {
        let headers: Vec<(&[u8], &[u8])> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .collect();
        let cut: Vec<&[u8]> = self.cut.iter().map(Vec::as_slice).collect();
        f(
            &Request {
                method: &self.method,
                host: &self.host,
                target: &self.target,
                headers: &headers,
                ip: self.ip,
                dst: self.dst,
                port: self.port,
                time_ns: self.time_ns,
            },
            &cut,
        )
    }
}

/// The first header of `r` called `name` (any case).
pub fn header<'a>(r: &Request<'a>, name: &str) -> Option<&'a [u8]> {
    r.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|&(_, v)| v)
}

/// The path of `r`: its target up to the `?`.
pub fn path<'a>(r: &Request<'a>) -> &'a [u8] {
    let t = r.target;
    t.split(|&b| b == b'?').next().unwrap_or(t)
}

/// Whether `r` looks like a person's browser: a browser's User-Agent and
/// an Accept-Language header. Requests that look so and are limited are
/// the collateral a suggestion is judged by.
pub fn looks_legitimate(r: &Request<'_>) -> bool {
    let ua = header(r, "user-agent").unwrap_or_default();
    let browser = ua.starts_with(b"Mozilla/5.0")
        && [&b"Firefox/"[..], b"Chrome/", b"Safari/", b"Edg/"]
            .iter()
            .any(|b| contains(ua, b));
    browser && header(r, "accept-language").is_some_and(|v| !v.is_empty())
}

/// Whether every request of a loop asks past the caches: `no-cache` in
/// Cache-Control, or Pragma `no-cache`.
pub fn no_cache(r: &Request<'_>) -> bool {
    header(r, "cache-control").is_some_and(|v| contains(v, b"no-cache"))
        || header(r, "pragma") == Some(b"no-cache")
}

/// Calls `f` with the engine's view of a request of a capture, its
/// headers listed in `buf` (reused from request to request).
pub fn with_http<'b, R>(
    r: &'b HttpRequest,
    buf: &mut Vec<(&'b [u8], &'b [u8])>,
    f: impl FnOnce(&Request<'_>) -> R,
) -> R {
    buf.clear();
    buf.extend(r.headers());
    f(&Request {
        method: r.method(),
        host: r.header("host").unwrap_or_default(),
        target: r.target(),
        headers: buf,
        ip: r.client.0,
        dst: Some(r.server.0),
        port: r.server.1,
        time_ns: r.time_ns,
    })
}

/// Whether a header called `name` is kept.
fn kept(keep: Option<&[String]>, name: &[u8]) -> bool {
    keep.is_none_or(|k| k.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(name)))
}

/// Whether `needle` occurs in `hay` (an empty needle does).
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(headers: &[(&str, &str)]) -> Obs {
        Obs {
            input: 0,
            time_ns: 0,
            ip: "192.0.2.1".parse().unwrap(),
            dst: None,
            port: 443,
            method: b"GET".to_vec(),
            host: b"example.org".to_vec(),
            target: b"/w/index.php?title=X&action=raw".to_vec(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            cut: Vec::new(),
        }
    }

    #[test]
    fn a_browser_needs_its_user_agent_and_a_language() {
        let ff = (
            "User-Agent",
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        );
        assert!(obs(&[ff, ("Accept-Language", "fr")]).looks_legitimate());
        assert!(!obs(&[ff]).looks_legitimate());
        assert!(!obs(&[
            ("User-Agent", "python-requests/2.31"),
            ("Accept-Language", "en")
        ])
        .looks_legitimate());
        assert_eq!(
            obs(&[]).with_request(|r, _| path(r).to_vec()),
            b"/w/index.php"
        );
    }
}
