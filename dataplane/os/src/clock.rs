//! The wall clock, said for people: RFC 3339 UTC times and "3 min ago".

/// Seconds since the epoch, now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `unix` as an RFC 3339 UTC time: `2026-12-01T10:34:31Z`.
pub fn rfc3339(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Howard Hinnant's days-to-civil, from 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

/// How long ago `then` was at `now`, roughly: `12 s ago`, `3 min ago`,
/// `5 h ago`, `2 days ago`; `in the future` for a later time.
pub fn ago(then: u64, now: u64) -> String {
    if then > now {
        return "in the future".into();
    }
    let d = now - then;
    match d {
        0..=119 => format!("{d} s ago"),
        120..=7_199 => format!("{} min ago", d / 60),
        7_200..=172_799 => format!("{} h ago", d / 3_600),
        _ => format!("{} days ago", d / 86_400),
    }
}

/// `unix` as `2026-12-01T10:34:31Z (3 min ago)`; `never` for 0.
pub fn when(unix: u64, now: u64) -> String {
    if unix == 0 {
        return "never".into();
    }
    format!("{} ({})", rfc3339(unix), ago(unix, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_121_271), "2026-12-01T10:34:31Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(ago(100, 112), "12 s ago");
        assert_eq!(ago(0, 200), "3 min ago");
        assert_eq!(ago(0, 18_000), "5 h ago");
        assert_eq!(ago(0, 200_000), "2 days ago");
        assert_eq!(ago(5, 4), "in the future");
        assert_eq!(when(0, 10), "never");
        assert_eq!(
            when(1_796_121_271, 1_796_121_451),
            "2026-12-01T10:34:31Z (3 min ago)"
        );
    }
}
