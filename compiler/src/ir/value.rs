//! Scalar values of the language: durations, counts, statuses, ports, and
//! the path normalisation shared by the compiler and every data plane.

use std::borrow::Cow;

/// The longest duration the language takes: 366 days, in milliseconds.
pub const MAX_DURATION_MS: u64 = 366 * 86_400_000;

/// Parses `500ms`, `30s`, `5m`, `1h`, `1d` into milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, &'static str> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err("a duration is a number and a unit, like 30s or 5m");
    }
    let n: u64 = num.parse().map_err(|_| "number too large")?;
    let mult = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err("missing unit: use ms, s, m, h or d"),
        _ => return Err("unknown unit: use ms, s, m, h or d"),
    };
    let ms = n.checked_mul(mult).ok_or("duration too long")?;
    if ms > MAX_DURATION_MS {
        return Err("duration longer than a year");
    }
    Ok(ms)
}

/// Formats milliseconds back into the largest exact unit.
pub fn fmt_duration(ms: u64) -> String {
    for (unit, m) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= m && ms.is_multiple_of(m) {
            return format!("{}{unit}", ms / m);
        }
    }
    format!("{ms}ms")
}

/// Parses a non-negative decimal integer that fits in `max`.
pub fn parse_count(s: &str, max: u64) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a whole number".into());
    }
    match s.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("must be at most {max}")),
    }
}

/// Whether a byte is unreserved in RFC 3986 (never needs escaping).
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Normalises a path the way every plane compares it: percent-escapes of
/// unreserved characters are decoded (`/%73parql` is `/sparql`), other
/// escapes get upper-case hex (`%ea%9d%ae` is `%EA%9D%AE`). Nothing else
/// changes, so the incident title `/page/html/%EA%9D%AE` matches as written.
pub fn normalize_path(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                let v = (h * 16 + l) as u8;
                if unreserved(v) {
                    out.push(v);
                } else {
                    out.push(b'%');
                    out.push(b[i + 1].to_ascii_uppercase());
                    out.push(b[i + 2].to_ascii_uppercase());
                }
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    // Only ASCII bytes were replaced by ASCII bytes, so this is still UTF-8
    // whenever the input was.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The value of one hex digit.
fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Decodes `+` and `%XX` in a query component, borrowing when there is
/// nothing to decode.
pub fn decode_component(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.iter().any(|&b| b == b'+' || b == b'%') {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex_digit(s[i + 1]), hex_digit(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// The decoded value of the first parameter called `name` (`a&b` has
/// parameter `a` with value "").
pub fn query_param(query: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    query.split(|&b| b == b'&').find_map(|kv| {
        let (k, v) = match kv.iter().position(|&b| b == b'=') {
            Some(i) => (&kv[..i], &kv[i + 1..]),
            None => (kv, &b""[..]),
        };
        (decode_component(k).as_ref() == name).then(|| decode_component(v).into_owned())
    })
}

/// A header name as usually written: each `-`-separated word capitalised
/// (`user-agent` is `User-Agent`, `x-rctl-client-ip` is `X-Rctl-Client-Ip`).
pub fn header_case(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
        assert!(parse_duration("400d").is_err());
        assert_eq!(fmt_duration(90_000), "90s");
        assert_eq!(fmt_duration(3_600_000), "1h");
        assert_eq!(fmt_duration(1_500), "1500ms");
    }

    #[test]
    fn path_normalisation() {
        assert_eq!(normalize_path("/%73parql"), "/sparql");
        assert_eq!(
            normalize_path("/page/html/%ea%9d%ae"),
            "/page/html/%EA%9D%AE"
        );
        assert_eq!(normalize_path("/a%2Fb"), "/a%2Fb");
        assert_eq!(normalize_path("/bad%zz%"), "/bad%zz%");
        assert_eq!(normalize_path("/x%4"), "/x%4");
        assert_eq!(normalize_path("/\u{e9}"), "/\u{e9}");
    }
}
