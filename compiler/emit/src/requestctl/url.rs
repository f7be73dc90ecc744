//! rctl's `host` and `path` tests written as PCRE on what requestctl's VCL
//! sees: the raw `Host` header and the raw request target (`req.url`).
//!
//! rctl's host is the Host header without its port, in lower case; its
//! path is the target before `?`, percent-normalised (each escape of an
//! unreserved character decoded, other escapes' hex in upper case).
//! requestctl has neither, so each test is rewritten to match exactly the
//! raw values whose normalised form the test matches, or refused:
//!
//! - a literal unreserved character `c` of a path matches `c` or any
//!   spelling of its escape (`(?:a|%61)`); `/` and other reserved
//!   characters match themselves only (their escapes are not decoded); a
//!   literal `%` is refused (its raw spellings differ in case);
//! - a path regex must start with `^` (otherwise the raw match could
//!   start inside an escape, or in the query); `$` is the end of the
//!   path (`?` or the end of the target); a class matches its characters
//!   or their escapes, and may not hold `%`; the one class that may,
//!   "anything but `/`" (`[^/]`), only as `*` or `+` followed by `/`, `$`
//!   or nothing, where its run ends on a whole escape;
//! - a host is compared equal only, case-insensitively, with an optional
//!   `:PORT` (as rctl strips it), and never holds `:` unless bracketed.

use crate::pcre::{byte, print, quantifier, Unprintable};
use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, ClassUnicode, Hir, HirKind, Look};
use std::fmt::Write as _;

/// What matches the end of the path in the raw target.
const PATH_END: &str = "(?:\\?|\\z)";

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// One hex digit, in either case when it is a letter.
fn hex_digit(d: u8, out: &mut String) {
    let c = char::from_digit(u32::from(d), 16).unwrap_or('0');
    if c.is_ascii_digit() {
        out.push(c);
    } else {
        let _ = write!(out, "[{c}{}]", c.to_ascii_uppercase());
    }
}

/// `%HH` for `b`, the hex in either case.
fn escape(b: u8, out: &mut String) {
    out.push('%');
    hex_digit(b >> 4, out);
    hex_digit(b & 15, out);
}

/// A literal byte of the normalised path, as raw bytes.
fn path_byte(b: u8, out: &mut String) -> Result<(), String> {
    match b {
        b'%' => Err("a literal `%` in a path: rctl compares escapes normalised, requestctl's VCL the raw URL".into()),
        b'?' => Err("a `?` in a path, which never holds one".into()),
        b if unreserved(b) => {
            out.push_str("(?:");
            byte(b, out);
            out.push('|');
            escape(b, out);
            out.push(')');
            Ok(())
        }
        b => {
            byte(b, out);
            Ok(())
        }
    }
}

fn literal_path(s: &[u8], out: &mut String) -> Result<(), String> {
    s.iter().try_for_each(|&b| path_byte(b, out))
}

/// `path == v` (`eq`) or `path starts_with v` on the raw target.
pub fn path_literal(v: &str, eq: bool) -> Result<String, String> {
    let mut out = String::from("\\A");
    literal_path(v.as_bytes(), &mut out)?;
    if eq {
        out.push_str(PATH_END);
    }
    Ok(out)
}

/// The class as bytes-or-chars ranges, for membership tests.
fn contains(c: &Class, b: u8) -> bool {
    match c {
        Class::Bytes(c) => c
            .ranges()
            .iter()
            .any(|r| (r.start()..=r.end()).contains(&b)),
        Class::Unicode(c) => c
            .ranges()
            .iter()
            .any(|r| (r.start()..=r.end()).contains(&char::from(b))),
    }
}

/// Whether the class holds every visible ASCII character but `/` and `?`
/// (so both an escape's raw bytes and what it decodes to).
fn is_wide(c: &Class) -> bool {
    (0x21..0x7f).all(|b| b == b'/' || b == b'?' || contains(c, b)) && !contains(c, b'/')
}

/// The class without `?` (which no path holds), printed.
fn without_question_mark(c: &Class, out: &mut String) -> Result<(), String> {
    let h = match c {
        Class::Bytes(c) => {
            let mut c = c.clone();
            c.difference(&ClassBytes::new([ClassBytesRange::new(b'?', b'?')]));
            Hir::class(Class::Bytes(c))
        }
        Class::Unicode(c) => {
            let mut c = c.clone();
            c.difference(&ClassUnicode::new([
                regex_syntax::hir::ClassUnicodeRange::new('?', '?'),
            ]));
            Hir::class(Class::Unicode(c))
        }
    };
    print(&h, out).map_err(|Unprintable(e)| e)
}

/// A piece of the regex whose every item matches whole raw tokens (bytes
/// or escapes).
fn tokens(h: &Hir, out: &mut String) -> Result<(), String> {
    match h.kind() {
        HirKind::Empty => Ok(()),
        HirKind::Literal(l) => literal_path(&l.0, out),
        HirKind::Class(c) => {
            if contains(c, b'%') {
                return Err("a class that holds `%` in a path: an escape is three characters to rctl's class but one to what it decodes to".into());
            }
            let esc: Vec<u8> = (0..0x80u8).filter(|&b| unreserved(b) && contains(c, b)).collect();
            out.push_str("(?:");
            without_question_mark(c, out)?;
            for b in esc {
                out.push('|');
                escape(b, out);
            }
            out.push(')');
            Ok(())
        }
        HirKind::Look(_) => Err("`^`, `$` or a boundary inside a path regex's groups: write `^` first and `$` last only".into()),
        HirKind::Repetition(r) => {
            out.push_str("(?:");
            tokens(&r.sub, out)?;
            out.push(')');
            quantifier(r, out).map_err(Into::into)
        }
        HirKind::Capture(c) => {
            out.push_str("(?:");
            tokens(&c.sub, out)?;
            out.push(')');
            Ok(())
        }
        HirKind::Concat(v) => v.iter().try_for_each(|x| tokens(x, out)),
        HirKind::Alternation(v) => {
            out.push_str("(?:");
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                tokens(x, out)?;
            }
            out.push(')');
            Ok(())
        }
    }
}

/// Whether `h` begins on a raw token boundary that a run of `[^/]` may
/// end at: a `/`, the end of the path, or nothing.
fn ends_run(next: Option<&Hir>) -> bool {
    match next.map(Hir::kind) {
        None => true,
        Some(HirKind::Look(Look::End)) => true,
        Some(HirKind::Literal(l)) => l.0.first() == Some(&b'/'),
        _ => false,
    }
}

/// `path ~ pattern` (`ci`: `~*`) on the raw target.
pub fn path_regex(pattern: &str, ci: bool) -> Result<String, String> {
    if ci {
        return Err("a case-insensitive path regex: rctl folds the decoded path, requestctl's VCL would see escapes".into());
    }
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(pattern)
        .map_err(|e| format!("regex {pattern:?} does not parse: {e}"))?;
    let items: Vec<Hir> = match hir.kind() {
        HirKind::Concat(v) => v.clone(),
        _ => vec![hir.clone()],
    };
    if !matches!(
        items.first().map(Hir::kind),
        Some(HirKind::Look(Look::Start))
    ) {
        return Err(format!(
            "path regex {pattern:?} is not anchored with `^`: requestctl's VCL matches the raw URL, where an unanchored match could begin inside an escape or in the query"
        ));
    }
    let mut out = String::from("\\A");
    for (i, h) in items.iter().enumerate().skip(1) {
        match h.kind() {
            HirKind::Look(Look::End) => out.push_str(PATH_END),
            HirKind::Repetition(r) if matches!(r.sub.kind(), HirKind::Class(c) if contains(c, b'%')) =>
            {
                let HirKind::Class(c) = r.sub.kind() else {
                    continue;
                };
                if !(is_wide(c) && r.min <= 1 && r.max.is_none() && ends_run(items.get(i + 1))) {
                    return Err(format!(
                        "path regex {pattern:?}: a class holding `%` is written only as `[^/]*` or `[^/]+` before `/`, `$` or the end (where its run ends on a whole escape)"
                    ));
                }
                out.push_str("(?:");
                without_question_mark(c, &mut out)?;
                out.push_str(if r.min == 0 { ")*" } else { ")+" });
            }
            _ => tokens(h, &mut out).map_err(|e| format!("path regex {pattern:?}: {e}"))?,
        }
    }
    Ok(out)
}

/// `host == v` on the raw Host header.
pub fn host_eq(v: &str) -> Result<String, String> {
    let bracketed = v.starts_with('[');
    if v.is_empty()
        || (bracketed && !(v.ends_with(']') && v.matches(']').count() == 1))
        || (!bracketed && v.contains([':', '[', ']']))
    {
        return Err(format!(
            "host == {v:?}: only a name or a bracketed address is compared on the raw Host header"
        ));
    }
    let mut out = String::from("\\A");
    for b in v.bytes() {
        if b.is_ascii_alphabetic() {
            let _ = write!(
                out,
                "[{}{}]",
                b.to_ascii_lowercase() as char,
                b.to_ascii_uppercase() as char
            );
        } else {
            byte(b, &mut out);
        }
    }
    // rctl drops all after a bracketed address's `]`, and a `:PORT` after
    // a name.
    if !bracketed {
        out.push_str("(?::[0-9]*)?\\z");
    }
    Ok(out)
}
