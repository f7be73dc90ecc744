//! One parsed line: where each request field is, borrowed from the line
//! or from a per-line arena, and the request the engine decides.

use crate::template::Span;
use crate::time::TimeFormat;
use rctl_dataplane::Request;
use std::net::IpAddr;

/// A request header's value: the name is an index into the format's
/// header names.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeaderValue {
    /// Index into [`crate::Format::header_names`].
    pub name: u16,
    /// Where its value is.
    pub value: Span,
}

/// A parsed line, as positions; reused from line to line.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Nanoseconds since the epoch.
    pub time_ns: u64,
    /// The resolution this line's time was written with.
    pub resolution_ns: u64,
    /// The client address.
    pub ip: Option<IpAddr>,
    /// The address the client reached.
    pub dst: Option<IpAddr>,
    /// The port the client reached.
    pub port: Option<u16>,
    /// The method.
    pub method: Span,
    /// The Host.
    pub host: Span,
    /// The target (path and `?query`).
    pub target: Span,
    /// The path, when the format writes it apart from the query.
    pub path: Option<Span>,
    /// The query, when the format writes it apart from the path.
    pub query: Option<Span>,
    /// Headers present on this line.
    pub headers: Vec<HeaderValue>,
    /// Headers (names, as in `headers`) whose values may have been cut at
    /// their logged length.
    pub cut: Vec<u16>,
    /// Milliseconds to add (HAProxy's `%Ts.%ms`).
    pub millis: Option<u64>,
    /// The line holds captured request headers (HAProxy's `{…}`) whose
    /// names were not given, so their values were not read.
    pub unnamed_captures: bool,
    /// The last time field parsed and what it gave, kept across lines
    /// (not cleared): a log writes the same second on many lines in a
    /// row, which then cost a comparison instead of a parse.
    pub(crate) last_time: LastTime,
}

/// A time field's form and bytes, and what they parsed to
/// (nanoseconds, resolution).
#[derive(Debug, Clone, Default)]
pub(crate) struct LastTime {
    form: Option<TimeFormat>,
    bytes: Vec<u8>,
    parsed: Option<(u64, u64)>,
}

impl LastTime {
    /// What `v` parses to in `form`: the last line's result if both are
    /// the same (parsing is a function of the two alone).
    #[inline]
    pub(crate) fn parse(&mut self, form: TimeFormat, v: &[u8]) -> Option<(u64, u64)> {
        if self.form != Some(form) || self.parsed.is_none() || self.bytes != v {
            self.parsed = form.parse(v);
            self.form = Some(form);
            self.bytes.clear();
            self.bytes.extend_from_slice(v);
        }
        self.parsed
    }
}

impl Record {
    /// Empties it for the next line (keeping its allocation).
    pub fn clear(&mut self) {
        self.time_ns = 0;
        self.resolution_ns = 0;
        self.ip = None;
        self.dst = None;
        self.port = None;
        self.method = Span::default();
        self.host = Span::default();
        self.target = Span::default();
        self.path = None;
        self.query = None;
        self.headers.clear();
        self.cut.clear();
        self.millis = None;
        self.unnamed_captures = false;
    }
}

/// The header list of a request, its buffer kept from one request to the
/// next (no allocation per line).
#[derive(Default)]
pub struct HeaderBuf {
    buf: Vec<(&'static [u8], &'static [u8])>,
    cut: Vec<&'static [u8]>,
}

/// An empty vector with `v`'s allocation, for items of another lifetime
/// (the in-place collect reuses the buffer; no item is ever converted).
#[expect(
    clippy::unnecessary_filter_map,
    reason = "the map is what changes the items' lifetime"
)]
fn reuse<'b>(mut v: Vec<(&[u8], &[u8])>) -> Vec<(&'b [u8], &'b [u8])> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// [`reuse`] for a list of names.
#[expect(
    clippy::unnecessary_filter_map,
    reason = "the map is what changes the items' lifetime"
)]
fn reuse_names<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

impl HeaderBuf {
    /// Builds the request of `rec` and hands it to `f`, with the names of
    /// its headers whose values may have been cut (see [`Record::cut`]).
    pub fn with_request<T>(
        &mut self,
        rec: &Record,
        line: &[u8],
        arena: &[u8],
        names: &[String],
        f: impl FnOnce(&Request<'_>, &[&[u8]]) -> T,
    ) -> Option<T> {
        let ip = rec.ip?;
        let mut headers = reuse(std::mem::take(&mut self.buf));
        for h in &rec.headers {
            if let Some(n) = names.get(h.name as usize) {
                headers.push((n.as_bytes(), h.value.get(line, arena)));
            }
        }
        let req = Request {
            method: rec.method.get(line, arena),
            host: rec.host.get(line, arena),
            target: rec.target.get(line, arena),
            headers: &headers,
            ip,
            dst: rec.dst,
            port: rec.port.unwrap_or(0),
            time_ns: rec.time_ns,
        };
        let mut cut = reuse_names(std::mem::take(&mut self.cut));
        for &c in &rec.cut {
            if let Some(n) = names.get(c as usize) {
                cut.push(n.as_bytes());
            }
        }
        let out = f(&req, &cut);
        self.buf = reuse(headers);
        self.cut = reuse_names(cut);
        Some(out)
    }
}

/// A parsed line as owned values, for tests, tools and fuzzing (the
/// dry run never makes one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    /// Nanoseconds since the epoch.
    pub time_ns: u64,
    /// The client address.
    pub ip: IpAddr,
    /// The address the client reached.
    pub dst: Option<IpAddr>,
    /// The port.
    pub port: Option<u16>,
    /// The method.
    pub method: Vec<u8>,
    /// The Host.
    pub host: Vec<u8>,
    /// The target.
    pub target: Vec<u8>,
    /// The headers present, lower-case names.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Owned {
    /// The first header with this (lower-case) name, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Parses one line of `format` into owned values.
pub fn parse_owned(
    format: &crate::Format,
    line: &[u8],
) -> Result<Owned, crate::template::Mismatch> {
    let (mut rec, mut arena) = (Record::default(), Vec::new());
    format.parse(line, &mut rec, &mut arena)?;
    let g = |s: crate::template::Span| s.get(line, &arena).to_vec();
    Ok(Owned {
        time_ns: rec.time_ns,
        ip: rec
            .ip
            .ok_or(crate::template::Mismatch::Missing("client address"))?,
        dst: rec.dst,
        port: rec.port,
        method: g(rec.method),
        host: g(rec.host),
        target: g(rec.target),
        headers: rec
            .headers
            .iter()
            .map(|h| {
                (
                    format
                        .header_names
                        .get(h.name as usize)
                        .cloned()
                        .unwrap_or_default(),
                    g(h.value),
                )
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_time_is_reused_only_for_the_same_form_and_bytes() {
        let mut last = LastTime::default();
        let clf = |v: &str| TimeFormat::Clf.parse(v.as_bytes());
        for v in [
            "13/May/2026:12:00:00 +0000",
            "13/May/2026:12:00:00 +0000",
            "13/May/2026:12:00:01 +0000",
            "13/May/2026:12:00:01 +0200",
            "garbage",
            "garbage",
            "13/May/2026:12:00:01 +0200",
        ] {
            assert_eq!(last.parse(TimeFormat::Clf, v.as_bytes()), clf(v), "{v}");
        }
        // The same bytes in another form are parsed again.
        let s = last.parse(TimeFormat::EpochSeconds, b"1700000000");
        let ms = last.parse(TimeFormat::EpochMillis, b"1700000000");
        assert_eq!(s.map(|t| t.0), Some(1_700_000_000 * 1_000_000_000));
        assert_eq!(ms.map(|t| t.0), Some(1_700_000_000 * 1_000_000));
    }
}
