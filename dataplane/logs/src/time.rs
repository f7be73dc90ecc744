//! Timestamps as log formats write them, to nanoseconds since the epoch
//! (UTC), without allocating and without a calendar library.

/// A timestamp's written form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// `13/May/2026:12:00:00 +0000` (nginx `$time_local`, varnishncsa
    /// `%t`, HAProxy `%T`, `%trg`, `%trl`): whole seconds.
    Clf,
    /// `13/May/2026:12:00:00.123` (HAProxy `%t`, `%tr`): milliseconds,
    /// in the proxy's local time, taken as UTC.
    ClfMillis,
    /// ISO 8601 / RFC 3339, `2026-05-13T12:00:00Z`, with any fraction
    /// and offset (nginx `$time_iso8601`, webrequest `dt`).
    Iso8601,
    /// Seconds since the epoch, with an optional fraction (`%Ts`,
    /// `%{sec}t`).
    EpochSeconds,
    /// Seconds since the epoch with a millisecond fraction (nginx's
    /// `$msec`).
    EpochSecondsMillis,
    /// Milliseconds since the epoch (`%{msec}t`).
    EpochMillis,
    /// Microseconds since the epoch (`%{usec}t`).
    EpochMicros,
}

const NS: u64 = 1_000_000_000;

impl TimeFormat {
    /// The resolution it guarantees, in nanoseconds (for fractions, what
    /// the line writes is seen line by line).
    pub fn resolution_ns(self) -> u64 {
        match self {
            TimeFormat::Clf => NS,
            TimeFormat::ClfMillis | TimeFormat::EpochMillis | TimeFormat::EpochSecondsMillis => {
                1_000_000
            }
            TimeFormat::EpochMicros => 1_000,
            TimeFormat::Iso8601 | TimeFormat::EpochSeconds => NS,
        }
    }

    /// Parses `v`: the time and the resolution it was written with.
    pub fn parse(self, v: &[u8]) -> Option<(u64, u64)> {
        match self {
            TimeFormat::Clf | TimeFormat::ClfMillis => clf(v),
            TimeFormat::Iso8601 => iso8601(v),
            TimeFormat::EpochSeconds | TimeFormat::EpochSecondsMillis => {
                let (s, frac) = match memchr::memchr(b'.', v) {
                    Some(i) => (&v[..i], &v[i + 1..]),
                    None => (v, &b""[..]),
                };
                let (f, res) = fraction(frac)?;
                Some((digits(s)?.checked_mul(NS)?.checked_add(f)?, res))
            }
            TimeFormat::EpochMillis => Some((digits(v)?.checked_mul(1_000_000)?, 1_000_000)),
            TimeFormat::EpochMicros => Some((digits(v)?.checked_mul(1_000)?, 1_000)),
        }
    }
}

/// A run of one to 19 decimal digits, as a number.
pub(crate) fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut n = 0u64;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

/// A decimal fraction's nanoseconds and the resolution it is written
/// with (whole seconds for an empty one).
fn fraction(f: &[u8]) -> Option<(u64, u64)> {
    if f.is_empty() {
        return Some((0, NS));
    }
    let mut ns = 0u64;
    let mut scale = NS;
    for &b in f.iter().take(9) {
        if !b.is_ascii_digit() {
            return None;
        }
        scale /= 10;
        ns += u64::from(b - b'0') * scale;
    }
    if !f.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some((ns, scale.max(1)))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(v: &[u8], at: usize, n: usize) -> Option<u32> {
    let s = v.get(at..at + n)?;
    digits(s).map(|x| x as u32)
}

fn month(m: &[u8]) -> Option<u32> {
    const M: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    M.iter().position(|x| x[..] == *m).map(|i| i as u32 + 1)
}

fn civil(y: u32, mo: u32, d: u32, h: u32, mi: u32, s: u32, offset_s: i64) -> Option<u64> {
    // A leap year is every fourth, but not every hundredth unless every
    // four hundredth.
    let leap = y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
    let month_days = match mo {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&mo) || !(1..=month_days).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days(i64::from(y), mo, d) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s)
        - offset_s;
    u64::try_from(secs).ok()?.checked_mul(NS)
}

/// `+0200`, `-05:30`, `Z`: seconds east of UTC.
fn offset(v: &[u8]) -> Option<i64> {
    match v {
        b"" | b"Z" | b"z" => Some(0),
        [sign @ (b'+' | b'-'), rest @ ..] => {
            // `hhmm` or `hh:mm`, read into a fixed buffer (no allocation
            // per line).
            let mut hhmm = [0u8; 4];
            let mut n = 0;
            for &b in rest.iter().filter(|&&b| b != b':') {
                *hhmm.get_mut(n)? = b;
                n += 1;
            }
            if n != 4 {
                return None;
            }
            let rest = hhmm;
            let h = i64::from(num(&rest, 0, 2)?);
            let m = i64::from(num(&rest, 2, 2)?);
            let o = h * 3600 + m * 60;
            Some(if *sign == b'-' { -o } else { o })
        }
        _ => None,
    }
}

/// `13/May/2026:12:00:00 +0000` or `13/May/2026:12:00:00.123`.
fn clf(v: &[u8]) -> Option<(u64, u64)> {
    // varnishncsa's `%t` brings its brackets.
    let v = v
        .strip_prefix(b"[")
        .and_then(|v| v.strip_suffix(b"]"))
        .unwrap_or(v);
    if v.len() < 20 || v[2] != b'/' || v[6] != b'/' || v[11] != b':' {
        return None;
    }
    let d = num(v, 0, 2)?;
    let mo = month(&v[3..6])?;
    let y = num(v, 7, 4)?;
    let (h, mi, s) = (num(v, 12, 2)?, num(v, 15, 2)?, num(v, 18, 2)?);
    let rest = &v[20..];
    let (frac, zone) = match rest.first() {
        Some(b'.') => {
            let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            (&rest[1..end], rest[end..].strip_prefix(b" ").unwrap_or(b""))
        }
        Some(b' ') => (&b""[..], &rest[1..]),
        None => (&b""[..], &b""[..]),
        Some(_) => return None,
    };
    let (f, res) = fraction(frac)?;
    Some((
        civil(y, mo, d, h, mi, s, offset(zone)?)?.checked_add(f)?,
        res,
    ))
}

/// `2026-05-13T12:00:00.123+02:00` (also with a space for the `T`).
fn iso8601(v: &[u8]) -> Option<(u64, u64)> {
    if v.len() < 19 || v[4] != b'-' || v[7] != b'-' || !matches!(v[10], b'T' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(v, 0, 4)?, num(v, 5, 2)?, num(v, 8, 2)?);
    let (h, mi, s) = (num(v, 11, 2)?, num(v, 14, 2)?, num(v, 17, 2)?);
    let rest = &v[19..];
    let (frac, zone) = match rest.first() {
        Some(b'.' | b',') => {
            let end = rest[1..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(rest.len(), |i| i + 1);
            (&rest[1..end], &rest[end..])
        }
        _ => (&b""[..], rest),
    };
    let (f, res) = fraction(frac)?;
    Some((
        civil(y, mo, d, h, mi, s, offset(zone)?)?.checked_add(f)?,
        res,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_offsets() {
        assert_eq!(offset(b"+05:30"), Some(19_800));
        assert_eq!(offset(b"-0200"), Some(-7_200));
        assert_eq!(offset(b"Z"), Some(0));
        for bad in [&b"+123"[..], b"+12345", b"+1:23", b"0200", b"+ab:cd", b"-"] {
            assert_eq!(offset(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn days_a_month_does_not_have_are_no_date() {
        let clf = |v: &str| TimeFormat::Clf.parse(v.as_bytes()).is_some();
        assert!(!clf("31/Feb/2026:12:00:00 +0000"));
        assert!(!clf("29/Feb/2026:12:00:00 +0000"));
        assert!(clf("29/Feb/2024:12:00:00 +0000"));
        assert!(clf("29/Feb/2000:12:00:00 +0000"));
        assert!(!clf("29/Feb/1900:12:00:00 +0000"));
        assert!(!clf("31/Apr/2026:12:00:00 +0000"));
        assert!(clf("31/Dec/2026:23:59:60 +0000"));
        assert_eq!(TimeFormat::Iso8601.parse(b"2026-06-31T00:00:00Z"), None);
        // Two ways to one instant agree across a month's end.
        assert_eq!(
            TimeFormat::Iso8601.parse(b"2024-02-29T23:00:00-01:00"),
            TimeFormat::Iso8601.parse(b"2024-03-01T00:00:00Z")
        );
    }

    #[test]
    fn formats() {
        let t = 1_778_673_600 * NS; // 2026-05-13T12:00:00Z
        assert_eq!(
            TimeFormat::Clf.parse(b"13/May/2026:12:00:00 +0000"),
            Some((t, NS))
        );
        assert_eq!(
            TimeFormat::Clf.parse(b"13/May/2026:14:00:00 +0200"),
            Some((t, NS))
        );
        assert_eq!(
            TimeFormat::ClfMillis.parse(b"13/May/2026:12:00:00.123"),
            Some((t + 123_000_000, 1_000_000))
        );
        assert_eq!(
            TimeFormat::Iso8601.parse(b"2026-05-13T12:00:00Z"),
            Some((t, NS))
        );
        assert_eq!(
            TimeFormat::Iso8601.parse(b"2026-05-13T07:00:00.5-05:00"),
            Some((t + 500_000_000, 100_000_000))
        );
        assert_eq!(
            TimeFormat::Iso8601.parse(b"2026-05-13T12:00:00+00:00"),
            Some((t, NS))
        );
        assert_eq!(
            TimeFormat::EpochSeconds.parse(b"1778673600.123"),
            Some((t + 123_000_000, 1_000_000))
        );
        assert_eq!(
            TimeFormat::EpochMillis.parse(b"1778673600123"),
            Some((t + 123_000_000, 1_000_000))
        );
        assert_eq!(
            TimeFormat::EpochMicros.parse(b"1778673600000001"),
            Some((t + 1_000, 1_000))
        );
        for bad in [
            &b""[..],
            b"13/Foo/2026:12:00:00 +0000",
            b"99/May/2026:12:00:00",
            b"2026-13-01T00:00:00Z",
            b"x",
        ] {
            assert_eq!(TimeFormat::Clf.parse(bad), None);
            assert_eq!(TimeFormat::Iso8601.parse(bad), None);
        }
        // Leap-year arithmetic against known days.
        assert_eq!(days(2000, 3, 1), 11_017);
        assert_eq!(days(1970, 1, 1), 0);
        assert_eq!(days(2024, 2, 29), 19_782);
    }
}
