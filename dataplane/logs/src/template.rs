//! Log formats as templates: literal text and fields, the way HAProxy,
//! nginx and varnishncsa write them. Every format of those servers
//! compiles into one [`Template`]; one matcher reads them all (nginx's
//! `combined`, the most common, also has a reader written for its shape,
//! which gives what this one gives and hands it every other line).
//!
//! A field's value runs to the literal text that follows it in the
//! format (the whole literal, so `" "` ends a quoted field, not a `"`
//! inside it); the last field runs to the end of the line, or to the
//! last occurrence of the literal that closes it. Values are lent from
//! the line; a value with escapes is decoded into a per-line arena.

use crate::bytes::find_byte;
use crate::time::TimeFormat;

/// What a field of a log line means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The client address.
    ClientIp,
    /// The client address and port, `ADDR:PORT` (IPv6 unbracketed, as
    /// HAProxy writes it: the last colon splits).
    ClientIpPort,
    /// The address the client reached.
    ServerIp,
    /// The port the client reached.
    ServerPort,
    /// The request's time.
    Time(TimeFormat),
    /// Milliseconds to add to a whole-second time (HAProxy's `%ms`).
    Millis,
    /// `METHOD TARGET PROTOCOL`; the target may be an absolute URL.
    RequestLine,
    /// The method.
    Method,
    /// The request target as sent: path and `?query`.
    Target,
    /// The path only.
    Path,
    /// The query string, with or without its `?`.
    Query,
    /// nginx's `$is_args`: `?` or nothing (folded with its neighbours).
    IsArgs,
    /// nginx's `$uri$is_args$args`: the normalised path and the query
    /// (nginx writes the empty `$args` as `-`).
    PathArgs,
    /// The Host header.
    Host,
    /// One request header (lower-case name).
    Header(String),
    /// HAProxy's `%hr`: `{v1|v2|…}`, the values of these capture slots
    /// in order.
    Captures(Vec<Capture>),
    /// HAProxy's `%[capture.req.hdr(N)]`: one capture slot's value.
    Captured(Capture),
    /// HAProxy's `%hs`: captured response headers, skipped (and left out
    /// when there are none).
    ResponseCaptures,
    /// HAProxy's `%hrl` whose slots were not named, and what follows it
    /// to the end of the line (`%hsl`): skipped, and noted when it holds
    /// a value.
    UnnamedCaptureList,
    /// Anything else (status, sizes, timers): skipped.
    Skip,
}

/// A HAProxy request capture slot: the header it holds, and the length
/// HAProxy cuts its values at (`capture request header User-Agent len
/// 64`), if known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capture {
    /// The header, lower-case; empty for a slot that holds no header (a
    /// cookie, a converted sample), whose value is skipped.
    pub name: String,
    /// Values are cut at this many bytes: one of this length may be the
    /// start of a longer one.
    pub len: Option<usize>,
}

impl Capture {
    /// `NAME` or `NAME:LEN`, as `--capture-request-header` takes it (and
    /// a test's `captured`: [`rctl_compiler::spec::capture_slot`]).
    pub fn parse(s: &str) -> Result<Capture, String> {
        let (name, len) =
            rctl_compiler::spec::capture_slot(s).map_err(|e| format!("{e} (NAME or NAME:LEN)"))?;
        Ok(Capture { name, len })
    }

    /// Whether a value of `n` bytes may have been cut.
    pub fn may_cut(&self, n: usize) -> bool {
        self.len.is_some_and(|l| n >= l)
    }
}

impl From<&str> for Capture {
    /// A slot holding this header, its length unknown.
    fn from(name: &str) -> Capture {
        Capture {
            name: name.to_ascii_lowercase(),
            len: None,
        }
    }
}

/// How a format escapes what it writes into a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// Nothing is escaped.
    None,
    /// nginx's default: `\xHH` for `"`, `\` and control or non-ASCII
    /// bytes.
    NginxHex,
    /// JSON string escapes (nginx's `escape=json`, webrequest).
    Json,
    /// HAProxy's `#HH`.
    Hash,
    /// varnishncsa's and HAProxy's `+E`: backslash escapes (`\"`, `\\`,
    /// `\xHH`, `\n`, …).
    Backslash,
}

impl Escape {
    /// Whether byte `b` never comes raw inside a value: nginx's default
    /// writes `"` and `\` as `\xHH`. (JSON and backslash escaping write
    /// `\"`, whose quote is a raw byte; HAProxy's `#HH` covers only what
    /// its map says.)
    pub fn never_raw(self, b: u8) -> bool {
        self == Escape::NginxHex && (b == b'"' || b == b'\\')
    }
}

/// One part of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// Literal text.
    Lit(Vec<u8>),
    /// A field, and how its value is escaped.
    Field(Field, Escape),
}

/// A compiled format.
#[derive(Debug, Clone)]
pub struct Template {
    /// The format's parts, literals merged, nginx's `$uri$is_args$args`
    /// folded into one target.
    pub tokens: Vec<Token>,
}

/// A value's place: in the line, or in the arena.
///
/// One word: the start in the low 32 bits, the length in the next 31,
/// and whether it is in the arena in the top bit. A span written and
/// read back soon after (as the parsers do with every value) is then one
/// store and one load; as two 32-bit halves written apart and read as
/// one word, the load waited for both stores to reach the cache (a
/// store-forwarding stall: nearly half of the webrequest parser's own
/// samples).
/// Lines and values are far shorter than the 2 GiB a length can say
/// (`--max-line` is at most 1 GiB).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Span(u64);

/// The top bit of a [`Span`]: in the arena.
const IN_ARENA: u64 = 1 << 63;

/// The most a [`Span`]'s length can be.
const MAX_SPAN_LEN: usize = (1 << 31) - 1;

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, n) = (self.start(), self.len());
        let at = if self.0 & IN_ARENA != 0 {
            "arena"
        } else {
            "line"
        };
        write!(f, "Span({at} {s}..{})", s + n)
    }
}

impl Span {
    fn new(start: usize, end: usize, arena: bool) -> Span {
        let len = end.saturating_sub(start).min(MAX_SPAN_LEN) as u64;
        Span(start as u32 as u64 | len << 32 | if arena { IN_ARENA } else { 0 })
    }

    fn start(&self) -> usize {
        self.0 as u32 as usize
    }

    /// A span of the line.
    pub fn line(start: usize, end: usize) -> Span {
        Span::new(start, end, false)
    }

    /// A span of the arena.
    pub fn arena(start: usize, end: usize) -> Span {
        Span::new(start, end, true)
    }

    /// Its range in the arena, if it is there.
    pub fn arena_range(&self) -> Option<std::ops::Range<usize>> {
        (self.0 & IN_ARENA != 0).then(|| self.start()..self.start() + self.len())
    }

    /// Its bytes.
    pub fn get<'a>(&self, line: &'a [u8], arena: &'a [u8]) -> &'a [u8] {
        let src = if self.0 & IN_ARENA != 0 { arena } else { line };
        let s = self.start();
        src.get(s..s + self.len()).unwrap_or(b"")
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        ((self.0 & !IN_ARENA) >> 32) as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a line does not fit its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Literal text of the format is not where it should be (byte offset
    /// in the line).
    Literal(usize),
    /// A field has no end (the literal after it never comes).
    Unterminated(usize),
    /// A value is not what its field holds (an address, a time, a
    /// request line).
    Value(usize, &'static str),
    /// The line has no client address or no time.
    Missing(&'static str),
}

/// Decodes `v` into `arena` if it holds escapes; the decoded span.
pub fn unescape(v: &[u8], at: usize, esc: Escape, arena: &mut Vec<u8>) -> Span {
    let marker = match esc {
        Escape::None => return Span::line(at, at + v.len()),
        Escape::NginxHex | Escape::Json | Escape::Backslash => b'\\',
        Escape::Hash => b'#',
    };
    if memchr::memchr(marker, v).is_none() {
        return Span::line(at, at + v.len());
    }
    let start = arena.len();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < v.len() {
        let b = v[i];
        if b != marker {
            arena.push(b);
            i += 1;
            continue;
        }
        match esc {
            Escape::Hash => {
                if let (Some(h), Some(l)) = (
                    v.get(i + 1).and_then(|&b| hex(b)),
                    v.get(i + 2).and_then(|&b| hex(b)),
                ) {
                    arena.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                arena.push(b);
                i += 1;
            }
            _ => {
                let Some(&c) = v.get(i + 1) else {
                    arena.push(b);
                    break;
                };
                let simple = match c {
                    b'"' | b'\\' | b'/' => Some(c),
                    // HAProxy's E flag escapes `]` too.
                    b']' if esc == Escape::Backslash => Some(c),
                    b'n' if esc != Escape::NginxHex => Some(b'\n'),
                    b'r' if esc != Escape::NginxHex => Some(b'\r'),
                    b't' if esc != Escape::NginxHex => Some(b'\t'),
                    b'b' if esc == Escape::Json => Some(8),
                    b'f' if esc == Escape::Json => Some(12),
                    _ => None,
                };
                if let Some(s) = simple {
                    arena.push(s);
                    i += 2;
                    continue;
                }
                if c == b'x' && esc != Escape::Json {
                    if let (Some(h), Some(l)) = (
                        v.get(i + 2).and_then(|&b| hex(b)),
                        v.get(i + 3).and_then(|&b| hex(b)),
                    ) {
                        arena.push(h << 4 | l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'u' && esc == Escape::Json {
                    let code = v
                        .get(i + 2..i + 6)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    if let Some(code) = code {
                        i += 6;
                        let mut cp = code;
                        // A surrogate pair.
                        if (0xd800..0xdc00).contains(&code) && v.get(i..i + 2) == Some(b"\\u") {
                            let low = v
                                .get(i + 2..i + 6)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok());
                            if let Some(low @ 0xdc00..=0xdfff) = low {
                                cp = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                                i += 6;
                            }
                        }
                        // nginx writes bytes below 0x20 as \u00XX, one
                        // byte each; JSON's meaning is the code point.
                        let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                        let mut tmp = [0u8; 4];
                        arena.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                        continue;
                    }
                }
                arena.push(b);
                i += 1;
            }
        }
    }
    Span::arena(start, arena.len())
}

impl Template {
    /// Builds a template from tokens: merges adjacent literals and folds
    /// `path`, `is_args`, `query` into one target.
    pub fn new(tokens: Vec<Token>) -> Template {
        let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
        for t in tokens {
            match (out.last_mut(), t) {
                (Some(Token::Lit(a)), Token::Lit(b)) => a.extend_from_slice(&b),
                (_, Token::Lit(b)) if b.is_empty() => {}
                (_, t) => out.push(t),
            }
        }
        // varnishncsa's %U%q, HAProxy's %HP%HQ: the target.
        let mut i = 0;
        while i + 1 < out.len() {
            if matches!(
                (&out[i], &out[i + 1]),
                (Token::Field(Field::Path, _), Token::Field(Field::Query, _))
            ) {
                let esc = match &out[i] {
                    Token::Field(_, e) => *e,
                    Token::Lit(_) => Escape::None,
                };
                out.splice(i..i + 2, [Token::Field(Field::Target, esc)]);
            }
            i += 1;
        }
        // $uri$is_args$args (or $uri?$args): path and query.
        let mut i = 0;
        while i + 2 < out.len() {
            let fold = matches!(
                (&out[i], &out[i + 1], &out[i + 2]),
                (
                    Token::Field(Field::Path, _),
                    Token::Field(Field::IsArgs, _),
                    Token::Field(Field::Query, _)
                )
            ) || matches!(
                (&out[i], &out[i + 1], &out[i + 2]),
                (Token::Field(Field::Path, _), Token::Lit(l), Token::Field(Field::Query, _)) if l == b"?"
            );
            if fold {
                let esc = match &out[i] {
                    Token::Field(_, e) => *e,
                    Token::Lit(_) => Escape::None,
                };
                out.splice(i..i + 3, [Token::Field(Field::PathArgs, esc)]);
            }
            i += 1;
        }
        Template { tokens: out }
    }

    /// Splits a line into its fields: calls `f` with each field, its raw
    /// value and the value's offset in the line.
    pub fn split<'l>(
        &self,
        line: &'l [u8],
        mut f: impl FnMut(&Field, Escape, &'l [u8], usize) -> Result<(), Mismatch>,
    ) -> Result<(), Mismatch> {
        let mut p = 0;
        let n = self.tokens.len();
        let mut i = 0;
        while i < n {
            match &self.tokens[i] {
                Token::Lit(l) => {
                    if !starts(&line[p..], l) {
                        return Err(Mismatch::Literal(p));
                    }
                    p += l.len();
                }
                Token::Field(field @ (Field::Captures(_) | Field::ResponseCaptures), esc) => {
                    // `{…|…}`, or `"{…|…}"` with HAProxy's Q flag.
                    let quoted = line[p..].starts_with(b"\"{");
                    if !quoted && line.get(p) != Some(&b'{') {
                        // HAProxy writes nothing, quotes included, for
                        // `%hr` and `%hs` without captures, nor the space
                        // after them if a space came before (it writes a
                        // space only after something else).
                        if let Some(Token::Lit(l)) = self.tokens.get(i + 1) {
                            let after_space = i == 0
                                || matches!(&self.tokens[i - 1], Token::Lit(b) if b.ends_with(b" "));
                            let l = match l.strip_prefix(b" ") {
                                Some(rest) if after_space => rest,
                                _ => l,
                            };
                            if !starts(&line[p..], l) {
                                return Err(Mismatch::Literal(p));
                            }
                            p += l.len();
                            i += 1;
                        }
                    } else {
                        let start = p + usize::from(quoted);
                        let end = match memchr::memchr(b'}', &line[start..]) {
                            Some(a) => start + a + 1,
                            None => return Err(Mismatch::Unterminated(p)),
                        };
                        f(field, *esc, &line[start..end], start)?;
                        p = end;
                        if quoted {
                            if line.get(p) != Some(&b'"') {
                                return Err(Mismatch::Literal(p));
                            }
                            p += 1;
                        }
                    }
                }
                Token::Field(field, esc) => {
                    let end = match self.tokens.get(i + 1) {
                        None => line.len(),
                        Some(Token::Lit(l)) => {
                            let last = i + 2 >= n;
                            let rest = &line[p..];
                            let at = if last && l.first().is_some_and(|&b| esc.never_raw(b)) {
                                // The closing literal's first byte never
                                // comes raw in the value (nginx writes `"`
                                // as `\x22`): its first occurrence ends the
                                // value, and must end the line. A line
                                // with more after it (nginx's `main`, which
                                // adds a field) is not this format.
                                match find(rest, l) {
                                    Some(a) if a + l.len() == rest.len() => Some(a),
                                    Some(a) => return Err(Mismatch::Literal(p + a + l.len())),
                                    None => None,
                                }
                            } else if last {
                                // The closing literal: its last occurrence,
                                // which must end the line.
                                if rest.len() >= l.len() && starts(&rest[rest.len() - l.len()..], l)
                                {
                                    Some(rest.len() - l.len())
                                } else {
                                    None
                                }
                            } else {
                                find(rest, l)
                            };
                            match at {
                                Some(a) => p + a,
                                None => return Err(Mismatch::Unterminated(p)),
                            }
                        }
                        // Two fields side by side: the first is one word.
                        Some(Token::Field(..)) => {
                            p + line[p..]
                                .iter()
                                .position(|&b| b == b' ')
                                .unwrap_or(line.len() - p)
                        }
                    };
                    let mut end = end;
                    // `13/May/2026:12:00:00 +0000`: the zone is the time's,
                    // though a space comes before it.
                    if let Field::Time(TimeFormat::Clf | TimeFormat::ClfMillis) = field {
                        let z = &line[end..];
                        if z.len() >= 6
                            && z[0] == b' '
                            && matches!(z[1], b'+' | b'-')
                            && z[2..6].iter().all(u8::is_ascii_digit)
                            && self.tokens.get(i + 1).is_some_and(|t| match t {
                                Token::Lit(l) => starts(&z[6..], l),
                                Token::Field(..) => false,
                            })
                        {
                            end += 6;
                        }
                    }
                    f(field, *esc, &line[p..end], p)?;
                    p = end;
                }
            }
            i += 1;
        }
        Ok(())
    }
}

/// `hay` starts with `lit`: a byte loop, as a template's literals are a
/// few bytes long (a call to `memcmp` costs more than the comparison).
#[inline]
fn starts(hay: &[u8], lit: &[u8]) -> bool {
    hay.len() >= lit.len() && hay.iter().zip(lit).all(|(a, b)| a == b)
}

/// The first occurrence of `needle` in `hay`: [`find_byte`] for its
/// first byte, then a comparison (separators are short; a memmem finder
/// built per field would cost more than the search).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    let mut from = 0;
    while let Some(i) = find_byte(&hay[from..], first) {
        let at = from + i;
        if starts(&hay[at + 1..], rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span keeps its start, length and place in one word.
    #[test]
    fn spans_keep_their_place() {
        let (line, arena) = (b"GET /wiki/X HTTP/1.1".as_slice(), b"decoded".as_slice());
        let s = Span::line(4, 11);
        assert_eq!(
            (s.get(line, arena), s.len(), s.arena_range()),
            (&b"/wiki/X"[..], 7, None)
        );
        let a = Span::arena(0, 7);
        assert_eq!(
            (a.get(line, arena), a.arena_range()),
            (&b"decoded"[..], Some(0..7))
        );
        assert_ne!(Span::line(0, 7), a);
        assert_eq!(format!("{a:?} {s:?}"), "Span(arena 0..7) Span(line 4..11)");
        assert!(Span::default().is_empty() && Span::default().get(line, arena).is_empty());
        // The largest start and length stay apart, and out of the line
        // is empty, not a panic.
        let far = Span::arena(u32::MAX as usize, u32::MAX as usize + (1 << 30));
        assert_eq!(
            (far.len(), far.arena_range().map(|r| r.start)),
            (1 << 30, Some(u32::MAX as usize))
        );
        assert!(far.get(line, arena).is_empty());
    }

    #[test]
    fn escapes_decode() {
        let mut a = Vec::new();
        let s = unescape(br#"a\x22b\x5C"#, 0, Escape::NginxHex, &mut a);
        assert_eq!(s.get(b"", &a), br#"a"b\"#);
        let s = unescape(br#"q\"\u00e9\ud83d\ude00\n"#, 0, Escape::Json, &mut a);
        assert_eq!(s.get(b"", &a), "q\"é😀\n".as_bytes());
        let s = unescape(b"x#22y#7c", 0, Escape::Hash, &mut a);
        assert_eq!(s.get(b"", &a), b"x\"y|");
        let s = unescape(b"plain", 5, Escape::Json, &mut a);
        assert_eq!(s, Span::line(5, 10));
        // Dangling escapes stay as they are.
        let s = unescape(br#"[a\]\"\\"#, 0, Escape::Backslash, &mut a);
        assert_eq!(s.get(b"", &a), br#"[a]"\"#);
        let s = unescape(b"end\\", 0, Escape::Backslash, &mut a);
        assert_eq!(s.get(b"", &a), b"end\\");
    }
}
