//! Wikimedia's `webrequest`, raw: one flat JSON object a line
//! (`dt`, `ip`, `uri_host`, `uri_path`, `uri_query`, `http_method`,
//! `user_agent`, `accept_language`, `referer`, `x_analytics`, …). Read
//! by a scanner that lends string values from the line and decodes only
//! those with escapes.

use crate::format::{parse_ip, Format, Kind};
use crate::record::{HeaderValue, Record};
use crate::template::{unescape, Escape, Mismatch, Span};
use crate::time::TimeFormat;
use rctl_dataplane::partial::{Known, KnownHeaders};

/// The request headers webrequest carries, by column.
pub use rctl_dataplane::partial::WEBREQUEST_HEADERS as HEADERS;

/// The webrequest JSON format.
pub fn format() -> Format {
    let mut names: Vec<String> = HEADERS.iter().map(|(_, h)| h.to_string()).collect();
    names.push("host".into());
    let known = Known {
        method: true,
        host: true,
        path: true,
        query: true,
        url: true,
        headers: KnownHeaders::Only(names.clone()),
        dst_ip: false,
        port: false,
        complete: true,
        capped: Vec::new(),
    };
    Format {
        name: "webrequest".into(),
        kind: Kind::WebrequestJson,
        syslog: false,
        header_names: names,
        known,
        resolution_ns: 1_000_000,
        client_ip: None,
        host_in_url: false,
        combined: None,
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The end of the string whose opening quote is at `i - 1`: the index of
/// its closing quote.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    escaped_string_end(b, i).map(|(e, _)| e)
}

/// [`string_end`], and whether the string holds an escape (one without
/// is lent from the line as it is, not scanned again).
fn escaped_string_end(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        let j = quote_or_backslash(b, i)?;
        if b[j] == b'"' {
            return Some((j, escaped));
        }
        escaped = true;
        i = j + 2;
        if i > b.len() {
            return None;
        }
    }
}

/// The first `"` or `\` at or after `i` (an index into `b`).
fn quote_or_backslash(b: &[u8], i: usize) -> Option<usize> {
    crate::bytes::find_either(b.get(i..)?, b'"', b'\\').map(|k| i + k)
}

/// The end of a value that is not a string (number, literal, or a nested
/// object or array, skipped with its strings).
fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' => i = string_end(b, i + 1)?,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return Some(i),
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => return Some(i),
            _ => {}
        }
        i += 1;
    }
    (depth == 0).then_some(i)
}

/// The place in [`HEADERS`] of the header column `key` names: a `match`
/// on the keys as constants, which the compiler turns into a length test
/// and word compares (a search of the list called `memcmp` for each
/// column, for every key of every line).
fn header_column(key: &[u8]) -> Option<usize> {
    match key {
        b"user_agent" => Some(0),
        b"referer" => Some(1),
        b"accept_language" => Some(2),
        b"x_analytics" => Some(3),
        b"accept" => Some(4),
        b"range" => Some(5),
        _ => None,
    }
}

/// Parses one line into `rec`.
pub fn parse(
    f: &Format,
    line: &[u8],
    rec: &mut Record,
    arena: &mut Vec<u8>,
) -> Result<(), Mismatch> {
    let b = line;
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err(Mismatch::Literal(i));
    }
    i += 1;
    let (mut path, mut query) = (None, None);
    loop {
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b'}') => break,
            Some(b'"') => {}
            _ => return Err(Mismatch::Literal(i)),
        }
        let ks = i + 1;
        let ke = string_end(b, ks).ok_or(Mismatch::Unterminated(ks))?;
        let key = &b[ks..ke];
        i = skip_ws(b, ke + 1);
        if b.get(i) != Some(&b':') {
            return Err(Mismatch::Literal(i));
        }
        i = skip_ws(b, i + 1);
        let (val, vs) = if b.get(i) == Some(&b'"') {
            let (e, escaped) = escaped_string_end(b, i + 1).ok_or(Mismatch::Unterminated(i))?;
            let v = (
                Some(if escaped {
                    unescape(&b[i + 1..e], i + 1, Escape::Json, arena)
                } else {
                    Span::line(i + 1, e)
                }),
                i + 1,
            );
            i = e + 1;
            v
        } else {
            let e = value_end(b, i).ok_or(Mismatch::Unterminated(i))?;
            let raw = b[i..e].trim_ascii_end();
            let v = ((raw != b"null").then(|| Span::line(i, i + raw.len())), i);
            i = e;
            v
        };
        if let Some(v) = val {
            let get = |s: Span| s.get(line, arena);
            match key {
                b"dt" => {
                    let (ns, res) = rec
                        .last_time
                        .parse(TimeFormat::Iso8601, get(v))
                        .ok_or(Mismatch::Value(vs, "time"))?;
                    rec.time_ns = ns;
                    rec.resolution_ns = res;
                }
                b"ip" => rec.ip = parse_ip(get(v)),
                b"uri_host" => {
                    rec.host = v;
                    push(f, rec, "host", v, get(v));
                }
                b"uri_path" => path = Some(v),
                b"uri_query" => query = Some(v),
                b"http_method" => rec.method = v,
                k => {
                    if let Some(at) = header_column(k) {
                        push_at(f, rec, at, HEADERS[at].1, v, get(v));
                    }
                }
            }
        }
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => break,
            _ => return Err(Mismatch::Literal(i)),
        }
    }
    // uri_query holds its `?` (or is empty).
    let path = path.unwrap_or_default();
    rec.target = match query.filter(|q| !q.is_empty()) {
        None => path,
        Some(q) => {
            let start = arena.len();
            for s in [path, q] {
                match s.arena_range() {
                    Some(r) => arena.extend_from_within(r),
                    None => arena.extend_from_slice(s.get(line, &[])),
                }
            }
            if arena.get(start + path.get(line, arena).len()) != Some(&b'?') {
                let at = start + path.get(line, arena).len();
                arena.insert(at, b'?');
            }
            Span::arena(start, arena.len())
        }
    };
    Ok(())
}

fn push(f: &Format, rec: &mut Record, name: &str, v: Span, bytes: &[u8]) {
    push_at(f, rec, HEADERS.len(), name, v, bytes);
}

/// [`push`], where the header is likely the format's header `at` (as in
/// [`format`], whose names are the columns' in order, then `host`).
fn push_at(f: &Format, rec: &mut Record, at: usize, name: &str, v: Span, bytes: &[u8]) {
    if bytes.is_empty() || bytes == b"-" {
        return;
    }
    let i = if f.header_names.get(at).is_some_and(|h| h == name) {
        Some(at)
    } else {
        f.header_names.iter().position(|h| h == name)
    };
    if let Some(i) = i {
        rec.headers.push(HeaderValue {
            name: i as u16,
            value: v,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{header_column, quote_or_backslash, HEADERS};

    /// Every header column is found at its place in the header list;
    /// other keys, and keys one byte off, are not header columns.
    #[test]
    fn header_keys_name_their_place() {
        for (i, (k, _)) in HEADERS.iter().enumerate() {
            assert_eq!(header_column(k.as_bytes()), Some(i), "{k}");
            let mut off = k.as_bytes().to_vec();
            *off.last_mut().unwrap() ^= 1;
            assert_eq!(header_column(&off), None, "{k} one byte off");
            assert_eq!(header_column(&k.as_bytes()[1..]), None, "{k} cut");
        }
        for k in ["", "dt", "ip", "uri_host", "http_status", "USER_AGENT"] {
            assert_eq!(header_column(k.as_bytes()), None, "{k}");
        }
    }

    /// The word-at-a-time search finds the first quote or backslash, as
    /// a byte-by-byte scan does, from every start: with none, one, or
    /// one of each in either order at every pair of positions, among
    /// bytes one away from them (`!` `#` `[` `]`) and the same bytes
    /// with the high bit set, so that a borrow or a sign cannot pass.
    #[test]
    fn the_short_search_finds_the_first_quote_or_backslash() {
        let fill = [b'a', b'!', b'#', b'[', b']', 0x80, 0xa2, 0xdc, 0x00, 0xff];
        let naive = |v: &[u8], start: usize| {
            v.get(start..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\')
                .map(|i| start + i)
        };
        for len in 0..48 {
            for k in 0..fill.len() {
                let base: Vec<u8> = (0..len).map(|n| fill[(n + k) % fill.len()]).collect();
                let mut cases = vec![base.clone()];
                for a in 0..len {
                    for b in a..len {
                        for (x, y) in [(b'"', b'\\'), (b'\\', b'"'), (b'"', b'"')] {
                            let mut v = base.clone();
                            v[b] = y;
                            v[a] = x;
                            cases.push(v);
                        }
                    }
                }
                for v in &cases {
                    for start in 0..=len + 1 {
                        assert_eq!(
                            quote_or_backslash(v, start),
                            naive(v, start),
                            "{v:?} from {start}"
                        );
                    }
                }
            }
        }
    }
}
