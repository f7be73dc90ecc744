//! rctl's regexes written for PCRE without UTF, as Varnish and HAProxy run
//! them: on bytes.
//!
//! The regex is parsed by regex-syntax (the engine's own parser) into its
//! HIR, which already has the exact meaning rctl gives it: case folding
//! expanded into classes, Unicode classes as sets of characters. The HIR is
//! then printed byte for byte: a class of characters becomes the
//! alternation of their UTF-8 byte sequences, so that PCRE matching bytes
//! matches exactly the valid UTF-8 rctl matches and nothing else; literals
//! are `\xHH` escapes; `^`/`$` become `\A`/`\z` (PCRE's `$` would also
//! match before a final newline). Word boundaries are ASCII's or refused
//! (PCRE without UCP has no Unicode `\b`), as are CRLF-mode anchors.

use regex_syntax::hir::{Class, Hir, HirKind, Look, Repetition};
use regex_syntax::utf8::Utf8Sequences;
use std::fmt::Write as _;

/// Why a regex cannot be written for PCRE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unprintable(pub String);

/// The PCRE pattern (no UTF) that matches exactly the byte strings rctl's
/// `pattern` matches (`ci`: as `~*`).
pub fn to_pcre(pattern: &str, ci: bool) -> Result<String, Unprintable> {
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .case_insensitive(ci)
        .build()
        .parse(pattern)
        .map_err(|e| Unprintable(format!("does not parse: {e}")))?;
    let mut out = String::new();
    print(&hir, &mut out)?;
    Ok(out)
}

/// A PCRE pattern matching the literal bytes `s`.
pub fn literal(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for &b in s {
        byte(b, &mut out);
    }
    out
}

pub(crate) fn byte(b: u8, out: &mut String) {
    if b.is_ascii_alphanumeric() || b == b'_' || b == b'/' {
        out.push(b as char);
    } else {
        let _ = write!(out, "\\x{b:02X}");
    }
}

fn class_byte(b: u8, out: &mut String) {
    if b.is_ascii_alphanumeric() {
        out.push(b as char);
    } else {
        let _ = write!(out, "\\x{b:02X}");
    }
}

fn byte_class(ranges: &[(u8, u8)], out: &mut String) {
    if ranges.is_empty() {
        out.push_str("(?!)");
        return;
    }
    if let [(a, b)] = ranges {
        if a == b {
            byte(*a, out);
            return;
        }
    }
    out.push('[');
    for &(a, b) in ranges {
        class_byte(a, out);
        if b != a {
            out.push('-');
            class_byte(b, out);
        }
    }
    out.push(']');
}

pub(crate) fn print(h: &Hir, out: &mut String) -> Result<(), Unprintable> {
    match h.kind() {
        HirKind::Empty => {}
        HirKind::Literal(l) => {
            for &b in l.0.iter() {
                byte(b, out);
            }
        }
        HirKind::Class(Class::Bytes(c)) => {
            let r: Vec<(u8, u8)> = c.ranges().iter().map(|r| (r.start(), r.end())).collect();
            byte_class(&r, out);
        }
        HirKind::Class(Class::Unicode(c)) => {
            // ASCII ranges as one byte class; the rest as UTF-8 sequences.
            let mut ascii = Vec::new();
            let mut seqs = Vec::new();
            for r in c.ranges() {
                for s in Utf8Sequences::new(r.start(), r.end()) {
                    let rs: Vec<(u8, u8)> = s.as_slice().iter().map(|x| (x.start, x.end)).collect();
                    if let [one] = rs.as_slice() {
                        if one.1 < 0x80 {
                            ascii.push(*one);
                            continue;
                        }
                    }
                    seqs.push(rs);
                }
            }
            if seqs.is_empty() {
                byte_class(&ascii, out);
            } else {
                out.push_str("(?:");
                let mut first = true;
                if !ascii.is_empty() {
                    byte_class(&ascii, out);
                    first = false;
                }
                for s in seqs {
                    if !first {
                        out.push('|');
                    }
                    first = false;
                    for r in s {
                        byte_class(&[r], out);
                    }
                }
                out.push(')');
            }
        }
        HirKind::Look(l) => out.push_str(match l {
            Look::Start => "\\A",
            Look::End => "\\z",
            Look::StartLF => "(?m:^)",
            Look::EndLF => "(?m:$)",
            Look::WordAscii => "\\b",
            Look::WordAsciiNegate => "\\B",
            Look::WordStartAscii => "\\b(?=\\w)",
            Look::WordEndAscii => "\\b(?<=\\w)",
            Look::WordStartHalfAscii => "(?<!\\w)",
            Look::WordEndHalfAscii => "(?!\\w)",
            other => {
                return Err(Unprintable(format!(
                    "{other:?} has no PCRE equivalent without UCP (use (?-u) for ASCII word boundaries)"
                )))
            }
        }),
        HirKind::Repetition(r) => {
            out.push_str("(?:");
            print(&r.sub, out)?;
            out.push(')');
            quantifier(r, out).map_err(|e| Unprintable(e.into()))?;
        }
        HirKind::Capture(c) => {
            out.push_str("(?:");
            print(&c.sub, out)?;
            out.push(')');
        }
        HirKind::Concat(v) => {
            for x in v {
                print(x, out)?;
            }
        }
        HirKind::Alternation(v) => {
            out.push_str("(?:");
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                print(x, out)?;
            }
            out.push(')');
        }
    }
    Ok(())
}

/// `r`'s quantifier in PCRE's syntax (`*`, `+`, `?`, `{a,b}`, and `?`
/// after it when lazy), appended to `out`; an error past PCRE's bound.
pub(crate) fn quantifier(r: &Repetition, out: &mut String) -> Result<(), &'static str> {
    if r.max.is_some_and(|m| m > 65_535) || r.min > 65_535 {
        return Err("a repetition above PCRE's 65535");
    }
    match (r.min, r.max) {
        (0, None) => out.push('*'),
        (1, None) => out.push('+'),
        (0, Some(1)) => out.push('?'),
        (a, None) => {
            let _ = write!(out, "{{{a},}}");
        }
        (a, Some(b)) if a == b => {
            let _ = write!(out, "{{{a}}}");
        }
        (a, Some(b)) => {
            let _ = write!(out, "{{{a},{b}}}");
        }
    }
    if !r.greedy {
        out.push('?');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_patterns_print_as_bytes() {
        assert_eq!(
            to_pcre("(?-u)^/w/api\\.php", false).unwrap(),
            "\\A/w/api\\x2Ephp"
        );
        assert_eq!(
            to_pcre("(?-u)[?&]q=\\w{12}", false).unwrap(),
            "[\\x26\\x3F]q\\x3D(?:[0-9A-Z\\x5Fa-z]){12}"
        );
        assert_eq!(
            to_pcre("(?-u).", false).unwrap(),
            "[\\x00-\\x09\\x0B-\\xFF]"
        );
    }

    #[test]
    fn unicode_classes_become_utf8_sequences() {
        // `.` in Unicode mode: any valid UTF-8 character but \n.
        let p = to_pcre("^.$", false).unwrap();
        assert!(p.starts_with("\\A(?:[\\x00-\\x09\\x0B-\\x7F]|"), "{p}");
        assert!(
            p.contains("|\\xF0[\\x90-\\xBF][\\x80-\\xBF][\\x80-\\xBF]|"),
            "{p}"
        );
        // Case folding is already in the class: k also matches KELVIN SIGN.
        let k = to_pcre("k", true).unwrap();
        assert!(k.contains("\\xE2\\x84\\xAA"), "{k}");
    }

    #[test]
    fn unicode_word_boundaries_are_refused() {
        assert!(to_pcre("\\bx", false).is_err());
        assert_eq!(to_pcre("(?-u)\\bx", false).unwrap(), "\\bx");
    }
}
