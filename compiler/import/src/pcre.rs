//! requestctl's regexes (PCRE, as Varnish and HAProxy run them: without
//! UTF, so on bytes) rewritten in rctl's syntax with the same meaning.
//!
//! - Byte semantics: the result starts with `(?-u)` when it needs it
//!   (`.`, classes, `\w`, `\d`, `\s`, `\b`, case-insensitive matching), so
//!   that `.` is one byte and `\w` is ASCII, as in PCRE without UTF.
//! - Bytes above 0x7f (a non-ASCII character in the pattern) become `\xHH`
//!   escapes, one per byte, so a quantifier after one applies to its last
//!   byte, as in PCRE.
//! - PCRE escapes rctl spells differently are rewritten: `\h`, `\v` (PCRE's
//!   whitespace classes), `\a`, `\e`, `\cX`, `\Q…\E`, `\xH`, `\Z`, `\<` and
//!   `\>` (literal in PCRE, word boundaries in rctl), and inside classes
//!   `\b` (backspace), `[`, `&`, `~` (set operators in rctl).
//! - What rctl's engine cannot do is refused with its position:
//!   lookaround, backreferences, atomic groups, possessive quantifiers,
//!   recursion, conditionals, verbs, `\G`, `\K`, `\R`, `\X`, `\p`, octal
//!   escapes, `(?x)` and other PCRE-only flags.
//!
//! `$` stays `$`: PCRE's also matches before a final newline, which no URL
//! or header value that reaches Varnish or HAProxy contains.

/// A construct with no rctl equivalent, at a byte offset of the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// Byte offset in the PCRE pattern.
    pub at: usize,
    /// What it is.
    pub what: String,
}

fn fail<T>(at: usize, what: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported {
        at,
        what: what.into(),
    })
}

struct Out {
    s: String,
    bytes: bool,
}

impl Out {
    /// A byte that stands for itself, spelled so that it means itself in
    /// and out of classes.
    fn byte(&mut self, b: u8) {
        if b >= 0x80 {
            self.bytes = true;
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'<' || b == b'>' {
            self.s.push(b as char);
        } else if b.is_ascii_punctuation() {
            self.s.push('\\');
            self.s.push(b as char);
        } else {
            self.s.push_str(&format!("\\x{b:02X}"));
        }
    }

    fn lit(&mut self, c: char) {
        let mut buf = [0u8; 4];
        for &b in c.encode_utf8(&mut buf).as_bytes() {
            self.byte(b);
        }
    }
}

/// Rewrites a PCRE pattern; `ci` says it will be matched case-insensitively
/// (HAProxy's `-i`), which also needs byte semantics.
pub fn translate(p: &str, ci: bool) -> Result<String, Unsupported> {
    let b = p.as_bytes();
    let mut o = Out {
        s: String::with_capacity(p.len() + 8),
        bytes: ci,
    };
    let mut i = 0;
    let mut class: Option<usize> = None; // offset of the class's first member
    while i < b.len() {
        let c = b[i];
        if let Some(first) = class {
            match c {
                b']' if i > first => {
                    o.s.push(']');
                    class = None;
                    i += 1;
                }
                b'[' if b[i..].starts_with(b"[:") => {
                    let Some(end) = p[i + 2..].find(":]").map(|e| i + 2 + e) else {
                        o.s.push_str("\\[");
                        i += 1;
                        continue;
                    };
                    let name = p[i + 2..end].trim_start_matches('^');
                    const POSIX: &[&str] = &[
                        "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower",
                        "print", "punct", "space", "upper", "word", "xdigit",
                    ];
                    if !POSIX.contains(&name) {
                        return fail(i, format!("unknown POSIX class [:{name}:]"));
                    }
                    o.s.push_str(&p[i..end + 2]);
                    i = end + 2;
                }
                b'\\' => i = escape(p, i, &mut o, true)?,
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    return fail(i, "`--` inside a class (a set difference in rctl)")
                }
                b'[' | b'&' | b'~' => {
                    o.s.push('\\');
                    o.s.push(c as char);
                    i += 1;
                }
                _ if c >= 0x80 => {
                    let ch = p[i..].chars().next().unwrap_or('\u{fffd}');
                    if b.get(i + ch.len_utf8()) == Some(&b'-') || (i > first && b[i - 1] == b'-') {
                        return fail(i, "a range with a non-ASCII end (PCRE ranges bytes)");
                    }
                    o.lit(ch);
                    i += ch.len_utf8();
                }
                _ => {
                    o.s.push(c as char);
                    i += 1;
                }
            }
            continue;
        }
        match c {
            b'\\' => i = escape(p, i, &mut o, false)?,
            b'[' => {
                o.bytes = true;
                o.s.push('[');
                i += 1;
                if b.get(i) == Some(&b'^') {
                    o.s.push('^');
                    i += 1;
                }
                // A `]` first is a member, in PCRE and in rctl.
                class = Some(i);
                if b.get(i) == Some(&b']') {
                    o.s.push_str("\\]");
                    i += 1;
                }
            }
            b'(' => i = group(p, i, &mut o)?,
            b'.' => {
                o.bytes = true;
                o.s.push('.');
                i += 1;
            }
            b'*' | b'+' | b'?' => {
                o.s.push(c as char);
                i += 1;
                if b.get(i) == Some(&b'+') {
                    return fail(i - 1, "a possessive quantifier");
                }
                if b.get(i) == Some(&b'?') {
                    o.s.push('?');
                    i += 1;
                }
            }
            b'{' => match repetition(&p[i..]) {
                Some(n) => {
                    o.s.push_str(&p[i..i + n]);
                    i += n;
                    if b.get(i) == Some(&b'+') {
                        return fail(i, "a possessive quantifier");
                    }
                }
                None => {
                    o.s.push_str("\\{");
                    i += 1;
                }
            },
            b'^' | b'$' | b'|' | b')' => {
                o.s.push(c as char);
                i += 1;
            }
            _ if c >= 0x80 => {
                let ch = p[i..].chars().next().unwrap_or('\u{fffd}');
                o.lit(ch);
                i += ch.len_utf8();
            }
            b']' | b'}' => {
                o.s.push('\\');
                o.s.push(c as char);
                i += 1;
            }
            _ if c.is_ascii_graphic() || c == b' ' => {
                o.s.push(c as char);
                i += 1;
            }
            _ => {
                o.byte(c);
                i += 1;
            }
        }
    }
    if class.is_some() {
        return fail(p.len(), "a class `[` is never closed");
    }
    Ok(if o.bytes {
        format!("(?-u){}", o.s)
    } else {
        o.s
    })
}

/// The length of a valid PCRE repetition `{n}`, `{n,}` or `{n,m}` at the
/// start of `s` (PCRE reads anything else as a literal `{`).
fn repetition(s: &str) -> Option<usize> {
    let end = s.find('}')?;
    let inner = &s[1..end];
    let (a, rest) = match inner.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (inner, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
    (digits(a) && rest.is_none_or(|r| r.is_empty() || digits(r))).then_some(end + 1)
}

fn group(p: &str, i: usize, o: &mut Out) -> Result<usize, Unsupported> {
    let b = p.as_bytes();
    if b.get(i + 1) == Some(&b'*') {
        return fail(i, "a PCRE verb `(*…)`");
    }
    if b.get(i + 1) != Some(&b'?') {
        o.s.push('(');
        return Ok(i + 1);
    }
    let rest = &p[i + 2..];
    if rest.starts_with(':') {
        o.s.push_str("(?:");
        return Ok(i + 3);
    }
    if rest.starts_with('#') {
        // A comment group: dropped.
        return match rest.find(')') {
            Some(e) => Ok(i + 2 + e + 1),
            None => fail(i, "an unclosed (?# comment"),
        };
    }
    for (pfx, what) in [
        ("=", "a lookahead"),
        ("!", "a negative lookahead"),
        ("<=", "a lookbehind"),
        ("<!", "a negative lookbehind"),
        (">", "an atomic group"),
        ("|", "a branch-reset group"),
        ("(", "a conditional group"),
        ("R", "recursion"),
        ("&", "a subroutine call"),
        ("P=", "a backreference"),
        ("P>", "a subroutine call"),
        ("+", "a subroutine call"),
    ] {
        if rest.starts_with(pfx) {
            return fail(i, what);
        }
    }
    if rest.starts_with(|c: char| {
        c.is_ascii_digit() || c == '-' && rest[1..].starts_with(|d: char| d.is_ascii_digit())
    }) {
        return fail(i, "a subroutine call");
    }
    if let Some(name) = rest
        .strip_prefix("P<")
        .or_else(|| rest.strip_prefix('<'))
        .or_else(|| rest.strip_prefix('\''))
    {
        let close = if rest.starts_with('\'') { '\'' } else { '>' };
        let Some(e) = name.find(close) else {
            return fail(i, "an unclosed group name");
        };
        let n = &name[..e];
        if n.is_empty() || !n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            return fail(i, "a group name rctl does not accept");
        }
        o.s.push_str(&format!("(?P<{n}>"));
        return Ok(i + 2 + (rest.len() - name.len()) + e + 1);
    }
    // Flags: (?imsx-imsx) or (?imsx-imsx: …).
    let Some(e) = rest.find([')', ':']) else {
        return fail(i, "an unclosed group");
    };
    let flags = &rest[..e];
    for (k, f) in flags.char_indices() {
        match f {
            'i' | 'm' | 's' | '-' => {}
            _ => return fail(i + 2 + k, format!("the PCRE flag `{f}`")),
        }
    }
    if flags.contains('i') {
        o.bytes = true;
    }
    o.s.push_str("(?");
    o.s.push_str(flags);
    o.s.push(rest.as_bytes()[e] as char);
    Ok(i + 2 + e + 1)
}

/// One escape at `i` (`p[i]` is `\`); returns the offset after it.
fn escape(p: &str, i: usize, o: &mut Out, in_class: bool) -> Result<usize, Unsupported> {
    let b = p.as_bytes();
    let Some(&c) = b.get(i + 1) else {
        return fail(i, "a `\\` at the end of the pattern");
    };
    let mut next = i + 2;
    match c {
        b'd' | b'D' | b'w' | b'W' | b's' | b'S' => {
            o.bytes = true;
            o.s.push('\\');
            o.s.push(c as char);
        }
        b'b' if in_class => o.s.push_str("\\x08"),
        b'b' | b'B' => {
            o.bytes = true;
            o.s.push('\\');
            o.s.push(c as char);
        }
        b'A' | b'z' | b'n' | b'r' | b't' | b'f' => {
            o.s.push('\\');
            o.s.push(c as char);
        }
        b'Z' if !in_class => o.s.push_str("\\z"),
        b'a' => o.s.push_str("\\x07"),
        b'e' => o.s.push_str("\\x1B"),
        b'h' | b'H' | b'v' | b'V' => {
            o.bytes = true;
            let set = if matches!(c, b'h' | b'H') {
                "\\t\\x20\\xA0"
            } else {
                "\\n\\x0B\\f\\r\\x85"
            };
            let neg = c.is_ascii_uppercase();
            match (in_class, neg) {
                (true, false) => o.s.push_str(set),
                (true, true) => return fail(i, format!("`\\{}` inside a class", c as char)),
                (false, false) => o.s.push_str(&format!("[{set}]")),
                (false, true) => o.s.push_str(&format!("[^{set}]")),
            }
        }
        b'c' => {
            let Some(&x) = b.get(i + 2).filter(|x| x.is_ascii_graphic()) else {
                return fail(i, "`\\c` without a character");
            };
            o.byte(x.to_ascii_uppercase() ^ 0x40);
            next = i + 3;
        }
        b'x' => {
            if b.get(i + 2) == Some(&b'{') {
                let Some(e) = p[i + 3..].find('}') else {
                    return fail(i, "an unclosed `\\x{`");
                };
                let v = u32::from_str_radix(&p[i + 3..i + 3 + e], 16)
                    .ok()
                    .filter(|&v| v <= 0xff);
                let Some(v) = v else {
                    return fail(i, "a `\\x{…}` above \\xFF (PCRE without UTF has bytes)");
                };
                o.byte(v as u8);
                next = i + 3 + e + 1;
            } else {
                let n = b[i + 2..]
                    .iter()
                    .take(2)
                    .take_while(|x| x.is_ascii_hexdigit())
                    .count();
                let v = u8::from_str_radix(&p[i + 2..i + 2 + n], 16).unwrap_or(0);
                o.byte(v);
                next = i + 2 + n;
            }
        }
        b'Q' => {
            let end = p[i + 2..].find("\\E").map_or(p.len(), |e| i + 2 + e);
            for ch in p[i + 2..end].chars() {
                o.lit(ch);
            }
            next = (end + 2).min(p.len());
        }
        b'E' => {}
        b'0'..=b'9' => {
            return fail(
                i,
                if c == b'0' {
                    "an octal escape"
                } else {
                    "a backreference"
                },
            )
        }
        b'G' => return fail(i, "`\\G`"),
        b'K' => return fail(i, "`\\K` (reset the match start)"),
        b'R' => return fail(i, "`\\R` (any newline sequence)"),
        b'X' => return fail(i, "`\\X` (an extended grapheme)"),
        b'p' | b'P' => return fail(i, "a Unicode property (PCRE without UTF has bytes)"),
        b'g' | b'k' => return fail(i, "a backreference or subroutine call"),
        b'o' | b'N' | b'C' => return fail(i, format!("`\\{}`", c as char)),
        _ if c.is_ascii_alphanumeric() => {
            return fail(i, format!("`\\{}` (PCRE refuses it too)", c as char))
        }
        _ if c >= 0x80 => {
            let ch = p[i + 1..].chars().next().unwrap_or('\u{fffd}');
            o.lit(ch);
            next = i + 1 + ch.len_utf8();
        }
        // Any other escaped character stands for itself.
        _ => o.byte(c),
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_patterns_stay_readable() {
        assert_eq!(
            translate("^/api/rest_v1/", false).unwrap(),
            "^/api/rest_v1/"
        );
        assert_eq!(
            translate("en.wikipedia.org", false).unwrap(),
            "(?-u)en.wikipedia.org"
        );
        assert_eq!(
            translate("^python-requests", false).unwrap(),
            "^python-requests"
        );
        assert_eq!(translate("/w/api\\.php", false).unwrap(), "/w/api\\.php");
    }

    #[test]
    fn pcre_spellings_are_rewritten() {
        assert_eq!(
            translate("[?&]q=\\w{12}", false).unwrap(),
            "(?-u)[?\\&]q=\\w{12}"
        );
        assert_eq!(translate("^/[\\?$]", false).unwrap(), "(?-u)^/[\\?$]");
        assert_eq!(translate("a\\<b\\>", false).unwrap(), "a<b>");
        assert_eq!(translate("é+", false).unwrap(), "(?-u)\\xC3\\xA9+");
        assert_eq!(translate("\\Qa.b\\E.", false).unwrap(), "(?-u)a\\.b.");
        assert_eq!(translate("x{,3}", false).unwrap(), "x\\{,3\\}");
        assert_eq!(translate("\\h", false).unwrap(), "(?-u)[\\t\\x20\\xA0]");
        assert_eq!(translate("[]a]", false).unwrap(), "(?-u)[\\]a]");
        assert_eq!(translate("[[]", false).unwrap(), "(?-u)[\\[]");
        assert_eq!(
            translate("(?'n'a)(?i)b", false).unwrap(),
            "(?-u)(?P<n>a)(?i)b"
        );
        assert_eq!(translate("abc", true).unwrap(), "(?-u)abc");
    }

    #[test]
    fn pcre_only_constructs_are_refused_where_they_are() {
        for (p, at) in [
            ("a(?=b)", 1),
            ("(a)\\1", 3),
            ("a*+", 1),
            ("(?>a)", 0),
            ("\\p{L}", 0),
            ("(?x) a", 2),
            ("(*UTF)a", 0),
            ("[a", 2),
            ("\\012", 0),
        ] {
            assert_eq!(translate(p, false).unwrap_err().at, at, "{p}");
        }
    }
}
