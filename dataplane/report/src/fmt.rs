//! Numbers, times and text as the page shows them.

/// HTML-escaped, with controls and bidi overrides shown as `\u{…}` escapes
/// (a bidi override in a User-Agent would reorder the page's text).
pub fn esc(s: &str) -> String {
    rctl_compiler::diag::escape(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `n` grouped by thousands: `1,234,567`.
pub fn group(n: u64) -> String {
    let d = n.to_string();
    let mut o = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

/// A figure of the report: the number, grouped, marked with the JSON
/// pointer it comes from (`data-f`) and the label or unit shown beside it
/// (`data-l`), so that a reader's tool, and the tests, can check it
/// against `rctl dry-run --format json`.
pub fn fig(pointer: &str, n: u64, label: &str) -> String {
    format!(
        "<data value=\"{n}\" data-f=\"{}\" data-l=\"{}\">{}</data>",
        esc(pointer),
        esc(label),
        group(n)
    )
}

/// `one` for 1, `many` otherwise.
pub fn noun<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// The UTC date of `secs` since the epoch: `2026-12-01`.
pub fn date(secs: u64) -> String {
    rctl_os::clock::rfc3339(secs)[..10].to_string()
}

/// The UTC clock time of `secs`: `17:05:09`, or `17:05` without seconds.
pub fn clock(secs: u64, with_seconds: bool) -> String {
    let s = secs % 86_400;
    if with_seconds {
        format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 3600, s / 60 % 60)
    }
}

/// A capture time in ns as `2026-12-01 17:05:09.123 UTC`.
pub fn stamp(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!(
        "{} {}.{:03} UTC",
        date(s),
        clock(s, true),
        ns / 1_000_000 % 1000
    )
}

/// A duration in seconds, as a reader says it: `2.4 s`, `3 min 20 s`,
/// `26 h 5 min`.
pub fn duration(secs: f64) -> String {
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let s = secs.round() as u64;
    let (big, small) = if s < 3600 {
        ((s / 60, "min"), (s % 60, "s"))
    } else {
        ((s / 3600, "h"), (s / 60 % 60, "min"))
    };
    if small.0 == 0 {
        format!("{} {}", big.0, big.1)
    } else {
        format!("{} {} {} {}", big.0, big.1, small.0, small.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_dates_and_clocks() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
        assert_eq!(group(u64::MAX), "18,446,744,073,709,551,615");
        // 2026-12-01 17:05:09 UTC.
        let t = 1_796_144_709;
        assert_eq!(date(t), "2026-12-01");
        assert_eq!(clock(t, true), "17:05:09");
        assert_eq!(clock(t, false), "17:05");
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(
            stamp(t * 1_000_000_000 + 42_000_000),
            "2026-12-01 17:05:09.042 UTC"
        );
        assert_eq!(duration(2.44), "2.4 s");
        assert_eq!(duration(200.0), "3 min 20 s");
        assert_eq!(duration(93_900.0), "26 h 5 min");
        assert_eq!(duration(600.0), "10 min");
        assert_eq!(duration(3_600.0), "1 h");
    }

    #[test]
    fn figures_carry_their_pointer_and_label_escaped() {
        assert_eq!(
            fig("/rules/0/matches", 1234, "matched"),
            "<data value=\"1234\" data-f=\"/rules/0/matches\" data-l=\"matched\">1,234</data>"
        );
        assert!(fig("/a", 1, "<b>").contains("data-l=\"&lt;b&gt;\""));
    }
}
