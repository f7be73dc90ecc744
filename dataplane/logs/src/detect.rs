//! Naming and detecting formats. A format is detected only where that is
//! unambiguous: the first lines must all fit exactly one of the
//! predefined formats. Custom formats are always named.

use crate::format::Format;
use crate::record::Record;
use crate::{haproxy, nginx, varnish, webrequest};

/// The predefined formats, by name.
pub const NAMES: [&str; 7] = [
    "haproxy-httplog",
    "haproxy-clf",
    "nginx-combined",
    "nginx-main",
    "varnishncsa",
    "webrequest",
    "webrequest-parquet",
];

/// What `--log-format` takes, with what a format needs besides its name.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The request capture slots, in order (HAProxy).
    pub captures: Vec<crate::template::Capture>,
}

/// A format by name: one of [`NAMES`], or `haproxy:FORMAT`,
/// `nginx:FORMAT` (`nginx:escape=json FORMAT`), `varnishncsa:FORMAT`.
pub fn by_name(name: &str, spec: &Spec) -> Result<Format, String> {
    let (kind, custom) = match name.split_once(':') {
        Some((k, f)) => (k, Some(f)),
        None => (name, None),
    };
    match (kind, custom) {
        ("haproxy-httplog" | "haproxy", None) => haproxy::compile(name, haproxy::HTTPLOG, &spec.captures),
        ("haproxy-clf", None) => haproxy::compile(name, haproxy::CLF, &spec.captures),
        ("haproxy", Some(f)) => haproxy::compile(name, f, &spec.captures),
        ("nginx-combined" | "nginx" | "combined", None) => nginx::compile(name, nginx::COMBINED),
        ("nginx-main", None) => nginx::compile(name, nginx::MAIN),
        ("nginx", Some(f)) => nginx::compile(name, f),
        ("varnishncsa" | "varnish", None) => varnish::compile(name, varnish::DEFAULT),
        ("varnishncsa" | "varnish", Some(f)) => varnish::compile(name, f),
        ("webrequest" | "webrequest-json", None) => Ok(webrequest::format()),
        ("webrequest-parquet", None) => Err("webrequest-parquet is read from .parquet files".into()),
        _ => Err(format!(
            "unknown log format {name:?}: name one of {}, or give haproxy:FORMAT, nginx:FORMAT or varnishncsa:FORMAT",
            NAMES.join(", ")
        )),
    }
}

/// The format of an input with no bytes at all (a log just rotated, a
/// day's empty file among others): it has no line to read, and lacks
/// nothing, so it adds no field to what a run cannot judge.
pub fn empty() -> Format {
    Format {
        name: EMPTY.into(),
        known: rctl_dataplane::partial::Known::all(),
        ..webrequest::format()
    }
}

/// The name of [`empty`]'s format.
pub const EMPTY: &str = "empty";

/// The predefined format every one of `lines` fits, if exactly one
/// does (nginx's combined and varnishncsa's default differ in the
/// request line: varnishncsa writes an absolute URL).
pub fn detect(lines: &[&[u8]], spec: &Spec) -> Result<Format, String> {
    // A log with CRLF line ends (copied through Windows, or a syslog
    // relay that writes them) is read without the `\r`, as here.
    let lines: Vec<&[u8]> = lines
        .iter()
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    if lines.is_empty() {
        return Err("the input is empty, so its format cannot be detected".into());
    }
    // The format most lines fit, if more than half do (a bad line
    // or two among the first must not hide the format).
    let mut fits = Vec::new();
    let (mut rec, mut arena) = (Record::default(), Vec::new());
    let mut best = 0;
    for name in [
        "haproxy-httplog",
        "haproxy-clf",
        "nginx-combined",
        "nginx-main",
        "webrequest",
    ] {
        let Ok(f) = by_name(name, spec) else { continue };
        let n = lines
            .iter()
            .filter(|l| f.parse(l, &mut rec, &mut arena).is_ok())
            .count();
        if n * 2 <= lines.len() || n < best {
            continue;
        }
        if n > best {
            fits.clear();
            best = n;
        }
        fits.push(f);
    }
    let absolute = |l: &&[u8]| {
        let q = memchr::memchr(b'"', l).map_or(&l[..0], |i| &l[i..]);
        memchr::memmem::find(q, b" http://").is_some()
            || memchr::memmem::find(q, b" https://").is_some()
    };
    match fits.len() {
        1 if fits[0].name == "nginx-combined"
            && lines.iter().filter(|l| absolute(l)).count() * 2 > lines.len() =>
        {
            by_name("varnishncsa", spec)
        }
        1 => Ok(fits.remove(0)),
        0 => Err(format!(
            "the format of the first lines is none of {}: name it with --log-format (a custom format as haproxy:…, nginx:… or varnishncsa:…)",
            NAMES[..NAMES.len() - 1].join(", ")
        )),
        _ => Err("the first lines fit several formats: name one with --log-format".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines ending in CRLF are detected as the same lines ending in LF.
    #[test]
    fn crlf_lines_detect_as_lf_lines() {
        let nginx = b"198.51.100.7 - - [13/May/2026:12:00:01 +0000] \"GET /w/x HTTP/1.1\" 200 1 \"-\" \"ua/1\"";
        let haproxy = b"127.0.0.1:40000 [13/May/2026:12:00:01.123] edge origin/o 0/0/0/1/1 200 2 - - ---- 1/1/0/0/0 0/0 \"GET /x HTTP/1.1\"";
        for (line, name) in [
            (&nginx[..], "nginx-combined"),
            (&haproxy[..], "haproxy-httplog"),
        ] {
            let lf = detect(&[line, line], &Spec::default()).unwrap();
            assert_eq!(lf.name, name);
            let crlf = [line, b"\r"].concat();
            let f = detect(&[&crlf, &crlf, b"\r"], &Spec::default()).unwrap();
            assert_eq!(f.name, name);
        }
    }
}
