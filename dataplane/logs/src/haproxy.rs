//! HAProxy's logs: `option httplog` and any `log-format` in HAProxy's
//! `%` syntax. Captured request headers (`%hr`, `%[capture.req.hdr(N)]`)
//! are named by the `capture request header` lines of the frontend,
//! given as a list or read from the configuration.

use crate::format::Format;
use crate::template::{Capture, Escape, Field, Template, Token};
use crate::time::TimeFormat;

/// `option httplog`'s format (HAProxy 2.6).
pub const HTTPLOG: &str = "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r";

/// `option httplog clf`'s format (HAProxy 2.6): `%{+Q}o` quotes every
/// variable after it that HAProxy quotes (see `quotable`), but the
/// client address; the request date, `%trg`, has whole seconds, and
/// `%ms` is the accept date's.
pub const CLF: &str = r#"%{+Q}o %{-Q}ci - - [%trg] %r %ST %B "" "" %cp %ms %ft %b %s %TR %Tw %Tc %Tr %Ta %tsc %ac %fc %bc %sc %rc %sq %bq %CC %CS %hrl %hsl"#;

/// Whether HAProxy writes variable `v` in quotes when its `Q` flag is
/// set (HAProxy 2.6's `sess_build_logline`): addresses, names, cookies,
/// captures and the request's parts, which it writes as text. Numbers,
/// ports, dates, timers and termination states it writes as they are,
/// whatever the flag. Sample expressions (`%[…]`) are text: quoted.
fn quotable(v: &str) -> bool {
    matches!(
        v,
        "ci" | "fi"
            | "bi"
            | "si"
            | "f"
            | "ft"
            | "b"
            | "s"
            | "CC"
            | "CS"
            | "H"
            | "ID"
            | "sslc"
            | "sslv"
            | "hr"
            | "hs"
            | "hrl"
            | "hsl"
            | "r"
            | "HM"
            | "HP"
            | "HPO"
            | "HQ"
            | "HU"
            | "HV"
    )
}

/// What a `%` variable is (`r`, `ci`, `tr`…); `captures` names `%hr`'s.
fn variable(v: &str, captures: &[Capture]) -> (Field, Escape) {
    let f = match v {
        "ci" => Field::ClientIp,
        "fi" => Field::ServerIp,
        "fp" => Field::ServerPort,
        "t" | "tr" | "tq" => Field::Time(TimeFormat::ClfMillis),
        "T" | "trg" | "Tl" | "trl" => Field::Time(TimeFormat::Clf),
        "Ts" | "tsq" => Field::Time(TimeFormat::EpochSeconds),
        "ms" => Field::Millis,
        "HM" => Field::Method,
        "HU" => Field::Target,
        "HP" | "HPO" => Field::Path,
        "HQ" => Field::Query,
        "r" => Field::RequestLine,
        "hr" => Field::Captures(captures.to_vec()),
        "hs" => Field::ResponseCaptures,
        _ => Field::Skip,
    };
    // HAProxy writes the request line and captures with `#HH` escapes.
    let esc = match v {
        "r" | "hr" | "HU" | "HP" | "HPO" | "HQ" => Escape::Hash,
        _ => Escape::None,
    };
    (f, esc)
}

/// A sample-fetch expression, `%[…]`.
fn sample(expr: &str, captures: &[Capture]) -> Field {
    // A converter changes the value: it is not the field any more.
    if expr.contains(',') {
        return Field::Skip;
    }
    let arg = |prefix: &str| expr.strip_prefix(prefix).and_then(|r| r.strip_suffix(')'));
    if let Some(n) = arg("capture.req.hdr(") {
        return match n.trim().parse::<usize>().ok().and_then(|n| captures.get(n)) {
            Some(c) if !c.name.is_empty() => Field::Captured(c.clone()),
            _ => Field::Skip,
        };
    }
    match expr {
        "src" => Field::ClientIp,
        "dst" => Field::ServerIp,
        "dst_port" => Field::ServerPort,
        "method" => Field::Method,
        "path" => Field::Path,
        "query" => Field::Query,
        "url" | "pathq" => Field::Target,
        "capture.req.method" => Field::Method,
        "capture.req.uri" => Field::Target,
        _ => Field::Skip,
    }
}

/// Takes a `log-format` argument as the configuration writes it: one
/// pair of double quotes around it, `\"`, `\\` and `\ ` inside.
fn unquote(s: &str) -> String {
    let t = s.trim();
    let t = t
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(t);
    let mut out = String::with_capacity(t.len());
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(d) = chars.next() {
                out.push(d);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Compiles a `log-format` string; `captures` are the captured request
/// headers' names in the frontend's order.
pub fn compile(name: &str, spec: &str, captures: &[Capture]) -> Result<Format, String> {
    let spec = unquote(spec);
    let captures: Vec<Capture> = captures
        .iter()
        .map(|c| Capture {
            name: c.name.to_ascii_lowercase(),
            len: c.len,
        })
        .collect();
    let mut tokens = Vec::new();
    let mut text = Text::default();
    let mut rest = spec.as_str();
    // Whether an accept date is written to the second (see below).
    let mut accept_seconds = false;
    // Whether a `%ms` is written in hexadecimal (refused if it is read).
    let mut hex_ms = false;
    // The flags `%o` sets for every variable after it: quoted, escaped,
    // hexadecimal.
    let mut defaults = (false, false, false);
    while let Some(i) = rest.find('%') {
        text.push(&rest.as_bytes()[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix('%') {
            text.push(b"%");
            rest = r;
            continue;
        }
        let (mut quoted, mut esc_flag, mut hex) = defaults;
        if let Some(r) = rest.strip_prefix('{') {
            let end = r.find('}').ok_or("an unclosed %{ in the log-format")?;
            for flag in r[..end].split(',') {
                match flag.trim() {
                    "+Q" => quoted = true,
                    "-Q" => quoted = false,
                    "+E" => esc_flag = true,
                    "-E" => esc_flag = false,
                    "+X" => hex = true,
                    "-X" => hex = false,
                    _ => {}
                }
            }
            rest = &r[end + 1..];
        }
        let (field, mut esc) = if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or("an unclosed %[ in the log-format")?;
            let f = sample(r[..end].trim(), &captures);
            rest = &r[end + 1..];
            (f, Escape::None)
        } else {
            let len = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            if len == 0 {
                return Err(format!(
                    "a % without a variable in the log-format, before {rest:?}"
                ));
            }
            let v = &rest[..len];
            rest = &rest[len..];
            // A variable HAProxy writes as it is, quoted or not.
            quoted &= v == "o" || quotable(v);
            // With `X`, HAProxy writes addresses, ports and numbers in
            // hexadecimal: not what these fields read.
            if hex && matches!(v, "ci" | "fi" | "fp" | "Ts") {
                return Err(hexadecimal(v));
            }
            hex_ms |= hex && v == "ms";
            match v {
                "o" => {
                    // Writes nothing: the flags hold for what follows.
                    defaults = (quoted, esc_flag, hex);
                    continue;
                }
                "hrl" => {
                    tokens.push(Token::Lit(text.take()));
                    rest = capture_list(&mut tokens, &mut text.lit, &captures, quoted, rest);
                    text.wrote();
                    continue;
                }
                "hsl" => {
                    // Never named: skipped whole, quotes and all.
                    tokens.push(Token::Lit(text.take()));
                    tokens.push(Token::Field(Field::Skip, Escape::None));
                    text.wrote();
                    continue;
                }
                "T" | "Tl" | "Ts" => {
                    accept_seconds = true;
                    variable(v, &captures)
                }
                _ => variable(v, &captures),
            }
        };
        if esc_flag {
            esc = Escape::Backslash;
        }
        // `%ci:%cp`: the address and its port together, as the last
        // colon splits an unbracketed IPv6 address from its port.
        if field == Field::ClientIp && !quoted && rest.starts_with(":%cp") {
            rest = &rest[4..];
            tokens.push(Token::Lit(text.take()));
            tokens.push(Token::Field(Field::ClientIpPort, esc));
            text.wrote();
            continue;
        }
        // `%hr` and `%hs` are read with or without their quotes (HAProxy
        // writes neither without captures).
        let quoted = quoted && !matches!(field, Field::Captures(_) | Field::ResponseCaptures);
        if quoted {
            text.push(b"\"");
        }
        tokens.push(Token::Lit(text.take()));
        tokens.push(Token::Field(field, esc));
        text.wrote();
        if quoted {
            text.push(b"\"");
        }
    }
    text.push(rest.as_bytes());
    tokens.push(Token::Lit(text.lit));
    // `%ms` is the accept date's milliseconds: it refines only an accept
    // date written to the second (`%T`, `%Tl`, `%Ts`), not the request's
    // (`%trg`), and is skipped without one.
    if accept_seconds && hex_ms {
        return Err(hexadecimal("ms"));
    }
    if !accept_seconds {
        for t in &mut tokens {
            if let Token::Field(f @ Field::Millis, _) = t {
                *f = Field::Skip;
            }
        }
    }
    Ok(Format::from_template(name, Template::new(tokens), true))
}

/// Why variable `v` with HAProxy's `X` flag cannot be read.
fn hexadecimal(v: &str) -> String {
    format!(
        "%{v} with the X flag is written in hexadecimal, which is not read: leave the flag out (%{{-X}}{v} after a %{{+X}}o)"
    )
}

/// A `log-format`'s literal text, as HAProxy writes it: a run of spaces
/// is one separator, written only after something that is not a space
/// (so none at the start of the line).
struct Text {
    lit: Vec<u8>,
    last_space: bool,
}

impl Default for Text {
    fn default() -> Self {
        Text {
            lit: Vec::new(),
            last_space: true,
        }
    }
}

impl Text {
    fn push(&mut self, s: &[u8]) {
        for &b in s {
            if b == b' ' {
                if self.last_space {
                    continue;
                }
                self.last_space = true;
            } else {
                self.last_space = false;
            }
            self.lit.push(b);
        }
    }

    /// The text before a variable.
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.lit)
    }

    /// A variable was written (not a space).
    fn wrote(&mut self) {
        self.last_space = false;
    }
}

/// HAProxy's `%hrl`, the captures as a list: each value in its own
/// quotes when `quoted` (or `-` when absent, unquoted), spaces between,
/// pushed as one field a slot. Without the slots' names, one field of
/// unnamed captures; with `%hsl` after it and nothing else, that field
/// takes the line's rest (HAProxy writes nothing for a frontend without
/// captures, and one space where the two fields would be). Returns the
/// format left to compile.
fn capture_list<'a>(
    tokens: &mut Vec<Token>,
    lit: &mut Vec<u8>,
    captures: &[Capture],
    quoted: bool,
    rest: &'a str,
) -> &'a str {
    if captures.is_empty() {
        tokens.push(Token::Field(Field::UnnamedCaptureList, Escape::None));
        // `%hsl`, with any flags.
        let hsl = rest
            .trim_start_matches(' ')
            .strip_prefix('%')
            .and_then(|t| {
                let t = match t.strip_prefix('{') {
                    Some(r) => &r[r.find('}')? + 1..],
                    None => t,
                };
                t.strip_prefix("hsl")
            });
        return hsl.filter(|a| a.trim().is_empty()).unwrap_or(rest);
    }
    for (k, c) in captures.iter().enumerate() {
        if k > 0 {
            lit.push(b' ');
        }
        if quoted {
            lit.push(b'"');
        }
        let f = if c.name.is_empty() {
            Field::Skip
        } else {
            Field::Captured(c.clone())
        };
        tokens.push(Token::Lit(std::mem::take(lit)));
        tokens.push(Token::Field(f, Escape::Hash));
        if quoted {
            lit.push(b'"');
        }
    }
    rest
}

/// The request capture slots of a HAProxy configuration, per frontend or
/// listen section, in the order `%hr` logs them: each `capture request
/// header NAME`, `http-request capture SAMPLE len N`, `tcp-request content
/// capture SAMPLE len N` and `declare capture request len N` takes the
/// next slot. A slot is named by the header it holds (`req.hdr(NAME)`,
/// `req.fhdr(NAME)`, `hdr(NAME)`), or is the empty name: a value that is
/// no header (a cookie, the path, a converted sample), skipped when read.
/// (`http-request capture SAMPLE id N` fills a declared slot, and takes
/// none.) Each slot has its `len`: HAProxy cuts values there.
pub fn captures_in_config(text: &str) -> Vec<(String, Vec<Capture>)> {
    let mut out: Vec<(String, Vec<Capture>)> = Vec::new();
    let len_of = |rest: &[&str]| {
        rest.iter()
            .position(|w| *w == "len")
            .and_then(|i| rest.get(i + 1))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n > 0)
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["frontend" | "listen", name, ..] => out.push((name.to_string(), Vec::new())),
            ["backend" | "defaults" | "global" | "resolvers" | "peers" | "userlist" | "program"
            | "cache" | "ring" | "mailers" | "http-errors", ..] => {
                out.push((String::new(), Vec::new()))
            }
            ["capture", "request", "header", name, rest @ ..] => {
                if let Some(last) = out.last_mut() {
                    last.1.push(Capture {
                        name: name.to_ascii_lowercase(),
                        len: len_of(rest),
                    });
                }
            }
            ["http-request", "capture", sample, rest @ ..]
            | ["tcp-request", "content", "capture", sample, rest @ ..]
                if rest.first() == Some(&"len") =>
            {
                if let Some(last) = out.last_mut() {
                    last.1.push(Capture {
                        name: captured_header(sample).unwrap_or_default(),
                        len: len_of(rest),
                    });
                }
            }
            ["declare", "capture", "request", rest @ ..] => {
                if let Some(last) = out.last_mut() {
                    last.1.push(Capture {
                        name: String::new(),
                        len: len_of(rest),
                    });
                }
            }
            _ => {}
        }
    }
    out.retain(|(n, _)| !n.is_empty());
    out
}

/// The header a capture's sample is, lowercased: `req.hdr(User-Agent)`,
/// `req.fhdr(X)`, `hdr(X)`, with no converter and no occurrence other
/// than the last.
fn captured_header(sample: &str) -> Option<String> {
    let inner = ["req.hdr(", "req.fhdr(", "hdr("]
        .iter()
        .find_map(|p| sample.strip_prefix(p))?
        .strip_suffix(')')?;
    let (name, occ) = inner.split_once(',').unwrap_or((inner, "-1"));
    (!name.is_empty() && !name.contains(['(', ')']) && occ.trim() == "-1")
        .then(|| name.trim().to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(spec: &str, captures: &[Capture]) -> Vec<Token> {
        match compile("t", spec, captures).unwrap().kind {
            crate::format::Kind::Template(t) => t.tokens,
            k => panic!("{k:?}"),
        }
    }

    /// `%o` sets the flags of what follows, which a variable's own flags
    /// change; only variables HAProxy writes as text are quoted; `%o`
    /// writes nothing, nor a space at the start or after another.
    #[test]
    fn flags_for_every_later_variable() {
        let caps = [Capture {
            name: "user-agent".into(),
            len: None,
        }];
        // HAProxy's `option httplog clf` string, and the same with the
        // flags written on each variable it quotes.
        let by_hand = r#"%ci - - [%trg] %{+Q}r %ST %B "" "" %cp %ms %{+Q}ft %{+Q}b %{+Q}s %TR %Tw %Tc %Tr %Ta %tsc %ac %fc %bc %sc %rc %sq %bq %{+Q}CC %{+Q}CS %{+Q}hrl %{+Q}hsl"#;
        assert_eq!(tokens(CLF, &caps), tokens(by_hand, &caps));
        assert_eq!(tokens(CLF, &[]), tokens(by_hand, &[]));
        for (with_o, by_hand) in [
            ("%{+Q}o %ST %HM %{-Q}HU %Ts", "%ST %{+Q}HM %HU %Ts"),
            ("%HM %{+Q}o %HU", r#"%HM "%HU""#),
            ("%HM %{+Q}o  %{-Q}o %HU", "%HM %HU"),
            ("%HM%{+Q}o %HU", r#"%HM "%HU""#),
            ("%{+Q}o %ci:%cp %[src]", "%{+Q}ci:%cp %{+Q}[src]"),
            ("%{+Q,+E}o %HU %{-E}HM", r#"%{+Q,+E}HU "%HM""#),
            // Runs of spaces are one; none at the start.
            ("  %HM   %HU  [%tr] ", "%HM %HU [%tr] "),
        ] {
            assert_eq!(tokens(with_o, &caps), tokens(by_hand, &caps), "{with_o}");
        }
        // Hexadecimal addresses and numbers are refused where read, and
        // the flag taken off again is not.
        for spec in [
            "%{+X}ci %HU",
            "%{+X}o %HM %fp",
            "%{+X,+Q}o %Ts",
            "%{+X}ms %{-X}Ts",
        ] {
            let e = compile("t", spec, &[]).unwrap_err();
            assert!(e.contains("hexadecimal"), "{spec}: {e}");
        }
        // A %ms that is skipped (no accept date to the second) may be.
        assert!(compile("t", "%ci [%trg] %{+X}ms %HU", &[]).is_ok());
        assert_eq!(
            tokens("%{+X}o %{-X}ci %HU %ST", &[]),
            tokens("%ci %HU %ST", &[])
        );
    }

    /// `%hr` and `%hs`, quoted by `%o` or not: read with their quotes, or
    /// absent (HAProxy writes nothing for them without captures, quotes
    /// included, and the space after them only if none came before).
    #[test]
    fn captures_quoted_or_absent() {
        let caps = [Capture {
            name: "user-agent".into(),
            len: None,
        }];
        let parse = |spec: &str, line: &str| {
            let f = compile("t", spec, &caps).unwrap();
            crate::record::parse_owned(&f, line.as_bytes()).map(|r| {
                (
                    String::from_utf8_lossy(&r.target).into_owned(),
                    r.header("user-agent"),
                )
            })
        };
        let ua = Some("ua/1".to_string());
        let spec = "%{+Q}o %{-Q}ci [%tr] %hr %hs %r";
        for (line, want) in [
            (
                r#"192.0.2.1 [13/May/2026:12:00:00.123] "{ua/1}" "{x}" "GET /a HTTP/1.1""#,
                ua.clone(),
            ),
            (
                r#"192.0.2.1 [13/May/2026:12:00:00.123] "{ua/1}" "GET /a HTTP/1.1""#,
                ua.clone(),
            ),
            (
                r#"192.0.2.1 [13/May/2026:12:00:00.123] "GET /a HTTP/1.1""#,
                None,
            ),
        ] {
            assert_eq!(parse(spec, line), Ok(("/a".into(), want)), "{line}");
        }
        // After something else than a space, the space after an absent
        // %hr is written.
        let spec = "%ci [%tr] %ST|%hr %{+Q}r";
        for (line, want) in [
            (
                r#"192.0.2.1 [13/May/2026:12:00:00.123] 200| "GET /a HTTP/1.1""#,
                None,
            ),
            (
                r#"192.0.2.1 [13/May/2026:12:00:00.123] 200|{ua/1} "GET /a HTTP/1.1""#,
                ua,
            ),
        ] {
            assert_eq!(parse(spec, line), Ok(("/a".into(), want)), "{line}");
        }
        // %hsl with any flags after an unnamed %hrl.
        for spec in [
            "%ci [%tr] %{+Q}r %{+Q}hrl %{-Q}hsl",
            "%ci [%tr] %{+Q}r %hrl %{+Q,+E}hsl",
        ] {
            let f = compile("t", spec, &[]).unwrap();
            let line = r#"192.0.2.1 [13/May/2026:12:00:00.123] "GET /a HTTP/1.1" "ua/1" "r""#;
            assert!(
                crate::record::parse_owned(&f, line.as_bytes()).is_ok(),
                "{spec}"
            );
        }
    }

    #[test]
    fn configuration_captures() {
        let c = "frontend a\n  capture request header User-Agent len 10\n  capture request header Host len 5\nbackend b\n  capture request header X len 1\nlisten c\n  capture request header Referer len 9\n";
        let slot = |n: &str, l| Capture {
            name: n.into(),
            len: Some(l),
        };
        assert_eq!(
            captures_in_config(c),
            vec![
                (
                    "a".to_string(),
                    vec![slot("user-agent", 10), slot("host", 5)]
                ),
                ("c".to_string(), vec![slot("referer", 9)])
            ]
        );
        assert_eq!(unquote(r#""%ci\ %HM \"x\"""#), r#"%ci %HM "x""#);
    }

    #[test]
    fn every_kind_of_request_capture_takes_its_slot_in_order() {
        let c = "frontend edge
  http-request capture req.hdr(User-Agent) len 100
  capture request header Host len 50
  declare capture request len 20
  http-request capture req.cook(session) len 10
  http-request capture req.hdr(Referer) id 2
  tcp-request content capture req.fhdr(X-Client-IP) len 40
  http-request capture req.hdr(Accept),lower len 40 if TRUE
  capture response header Server len 20
";
        let got = captures_in_config(c);
        let names: Vec<&str> = got[0].1.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["user-agent", "host", "", "", "x-client-ip", ""],
            "the declared slot, the cookie and the converted header are unnamed; `id 2` and the response capture take none"
        );
        let lens: Vec<Option<usize>> = got[0].1.iter().map(|c| c.len).collect();
        let l = Some;
        assert_eq!(lens, [l(100), l(50), l(20), l(10), l(40), l(40)]);
    }

    /// `%ms` refines an accept date written to the second, and nothing
    /// else: not the request's date, nor a `%%Ts` that is text, nor a
    /// `%T` inside a sample's argument.
    #[test]
    fn milliseconds_refine_only_an_accept_date_to_the_second() {
        let ms = |spec: &str, line: &str| {
            let f = compile("x", spec, &[]).unwrap();
            crate::record::parse_owned(&f, line.as_bytes())
                .unwrap()
                .time_ns
                % 1_000_000_000
        };
        assert_eq!(ms("%ci %Ts.%ms", "192.0.2.1 1778673600.250"), 250_000_000);
        let d = "192.0.2.1 [13/May/2026:12:00:00 +0000] 250";
        assert_eq!(ms("%ci [%trg] %ms", d), 0);
        assert_eq!(ms("%ci [%trg] %ms %%Ts", &format!("{d} %Ts")), 0);
        assert_eq!(ms("%ci [%trg] %ms %[date,ltime(%T)]", &format!("{d} x")), 0);
    }

    /// `option httplog clf` as HAProxy 2.6 writes it for a frontend
    /// without captures (nothing for `%hrl` and `%hsl`, one space left)
    /// and with one; unnamed, a captured value is noted, not read.
    #[test]
    fn clf_with_and_without_captures() {
        let head = r#"127.0.0.1 - - [07/Dec/2026:16:17:52 +0000] "GET /x HTTP/1.1" 200 73 "" "" 59376 727 "edge" "edge" "<NOSRV>" 0 -1 -1 -1 0 LR-- 1 1 0 0 0 0 0 "" "" "#;
        let (mut rec, mut arena) = (crate::record::Record::default(), Vec::new());
        let mut unnamed = |f: &Format, line: &str| {
            f.parse(line.as_bytes(), &mut rec, &mut arena).unwrap();
            rec.unnamed_captures
        };
        let none = compile("haproxy-clf", CLF, &[]).unwrap();
        assert!(!unnamed(&none, head));
        let one = format!("{head}\"curl/8.0\" ");
        assert!(unnamed(&none, &one));
        // An absent value, quoted empty: nothing unnamed.
        assert!(!unnamed(&none, &format!("{head}\"\" ")));
        let rec = crate::record::parse_owned(&none, head.as_bytes()).unwrap();
        assert_eq!(String::from_utf8_lossy(&rec.target), "/x");
        // `%ms` is the accept date's: the request's stays whole seconds.
        assert_eq!(rec.time_ns % 1_000_000_000, 0);
        assert!(rec.header("user-agent").is_none());
        let named = compile("haproxy-clf", CLF, &["User-Agent".into()]).unwrap();
        assert!(!unnamed(&named, &one));
        let rec = crate::record::parse_owned(&named, one.as_bytes()).unwrap();
        assert_eq!(rec.header("user-agent").as_deref(), Some("curl/8.0"));
    }
}
