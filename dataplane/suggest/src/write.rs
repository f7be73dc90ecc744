//! Findings written as rules of the language: each `shadow` first, with
//! a comment giving its figures and a `test` block built from real
//! requests of the offender and of normal clients.

use crate::find::{Finding, Key};
use crate::obs::Obs;
use std::fmt::Write as _;

/// A rule's text and its test's, for one finding.
#[derive(Debug, Clone)]
pub struct Written {
    /// The rule's name.
    pub name: String,
    /// The rule, then its test block.
    pub text: String,
}

/// A string literal of the language.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A period in the language's units.
fn period(s: u64) -> String {
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The path condition: `path == P`, `path starts_with P`, or a regex
/// with one segment per `*` (None when a literal segment holds regex
/// syntax other than `.`).
fn path_condition(f: &Finding) -> Option<String> {
    if f.path_prefix {
        return Some(format!("path starts_with {}", quote(&f.path)));
    }
    if !f.path.split('/').any(|s| s == "*") {
        return Some(format!("path == {}", quote(&f.path)));
    }
    let mut re = String::from("^");
    for (i, seg) in f.path.split('/').enumerate() {
        if i > 0 {
            re.push('/');
        }
        if seg == "*" {
            re.push_str("[^/]+");
            continue;
        }
        for c in seg.chars() {
            match c {
                '.' => re.push_str("[.]"),
                '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' | '\\' => {
                    return None
                }
                c => re.push(c),
            }
        }
    }
    re.push('$');
    Some(format!("path ~ {}", quote(&re)))
}

fn key_text(k: &Key) -> &'static str {
    match k {
        Key::Ip => "ip",
        Key::Prefix => "prefix(24, 48)",
        Key::UserAgent => "header(\"user-agent\")",
        Key::HostPath => "host, path",
    }
}

/// The bucket a suggested throttle is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// rctl's default (GCRA), bursting to the limit.
    Default,
    /// vmod_vsthrottle's (`bucket vsthrottle`): requestctl's, which
    /// `rctl emit requestctl` writes exactly.
    Vsthrottle,
}

/// The rule for `f`, called `name`, at `priority`, with `comment`, its
/// throttle in `bucket`; None when its endpoint cannot be written as a
/// condition.
pub fn rule(
    f: &Finding,
    name: &str,
    priority: i64,
    comment: &str,
    bucket: Bucket,
) -> Option<String> {
    let mut when = Vec::new();
    if !f.host.is_empty() {
        // A host logged as long as its capture's length may be the start
        // of a longer one: only a prefix test matches what was sent.
        let op = if f.host_cut { "starts_with" } else { "==" };
        when.push(format!("host {op} {}", quote(&f.host)));
    }
    when.push(path_condition(f)?);
    for name in &f.query {
        when.push(format!("query({}) present", quote(name)));
    }
    if let Some(ua) = &f.ua_prefix {
        // A family is its product token and `/` (any version), or a
        // whole User-Agent (see `keys::family_prefix`); one that may
        // have been cut is a prefix of what was sent.
        let op = if f.ua_cut || (ua.ends_with('/') && !ua.starts_with("Mozilla/")) {
            "starts_with"
        } else {
            "=="
        };
        when.push(format!("header(\"user-agent\") {op} {}", quote(ua)));
    }
    if f.no_cache {
        when.push(
            "(header(\"cache-control\") contains \"no-cache\" or header(\"pragma\") == \"no-cache\")"
                .to_string(),
        );
    }
    let (burst, bucket) = match bucket {
        Bucket::Default => (format!(" burst {}", f.limit), ""),
        Bucket::Vsthrottle => (String::new(), " bucket vsthrottle"),
    };
    Some(format!(
        "rule {name} {{\n  comment {}\n  priority {priority}\n  shadow\n  when {}\n  throttle {} requests per {}{burst} by {} status 429 reason {}{bucket}\n}}\n",
        quote(comment),
        when.join(" and "),
        f.limit,
        period(f.period_s),
        key_text(&f.key),
        quote("Too many requests (rctl suggest)"),
    ))
}

/// One test sample: a real request, sent `repeat` times over the period.
fn sample(out: &mut String, label: &str, r: &Obs, repeat: u64, period_s: u64) {
    let _ = writeln!(out, "  request {label} {{");
    let _ = writeln!(
        out,
        "    method {}",
        quote(&String::from_utf8_lossy(&r.method))
    );
    if !r.host.is_empty() {
        let _ = writeln!(out, "    host {}", quote(&String::from_utf8_lossy(&r.host)));
    }
    let _ = writeln!(
        out,
        "    path {}",
        quote(&String::from_utf8_lossy(&r.target))
    );
    for (n, v) in &r.headers {
        let n = String::from_utf8_lossy(n);
        if n.eq_ignore_ascii_case("host") {
            continue;
        }
        let _ = writeln!(
            out,
            "    header {} {}",
            quote(&n),
            quote(&String::from_utf8_lossy(v))
        );
    }
    let _ = writeln!(out, "    ip {}", r.ip);
    let _ = writeln!(out, "    repeat {repeat} over {}", period(period_s));
    let _ = writeln!(out, "  }}");
}

/// The test block for rule `name`: the offender's first request sent past
/// the limit must be matched (the rule is in shadow, so it logs what it
/// would limit), a normal client's request must pass, and must not even
/// match where the rule's conditions set normal clients apart. None
/// without an offender's request (a finding not measured).
pub fn test_block(f: &Finding, name: &str) -> Option<String> {
    let offender = f.offender.as_ref()?;
    let mut out = format!(
        "test {} {{\n",
        quote(&format!(
            "{name}: the offender is matched, a normal client passes"
        ))
    );
    sample(&mut out, "offender", offender, 2 * f.limit + 1, f.period_s);
    let normal = f.normal.as_ref();
    if let Some(n) = normal {
        sample(&mut out, "normal", n, 3, f.period_s);
    }
    let _ = writeln!(out, "  expect for offender all logged by {name}");
    if normal.is_some() {
        let _ = writeln!(out, "  expect for normal all pass");
        if matches!(f.key, Key::UserAgent | Key::HostPath) {
            let _ = writeln!(out, "  expect for normal none logged by {name}");
        }
    }
    out.push_str("}\n");
    Some(out)
}
